"""aiopdbp.wire."""
