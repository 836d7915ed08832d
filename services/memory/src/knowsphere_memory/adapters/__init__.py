"""Memory's outbound side: the SQL store and the model used for handoff compaction."""
