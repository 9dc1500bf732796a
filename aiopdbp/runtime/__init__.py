"""aiopdbp.runtime."""
