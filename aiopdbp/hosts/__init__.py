"""aiopdbp.hosts."""
