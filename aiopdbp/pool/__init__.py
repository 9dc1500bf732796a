"""aiopdbp.pool.ddbp."""
