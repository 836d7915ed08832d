"""The command groups of ``ks``, one module each."""
