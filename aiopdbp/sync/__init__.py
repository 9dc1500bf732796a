"""aiopdbp.sync.barriers."""
