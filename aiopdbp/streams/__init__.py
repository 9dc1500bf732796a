"""aiopdbp.streams.stream."""
