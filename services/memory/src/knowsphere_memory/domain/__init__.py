"""What memory is for, with no I/O: explicit statements, the asker background, handoff compaction,
and the records and ports the stores implement."""
