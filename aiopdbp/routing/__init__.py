"""aiopdbp.routing."""
