"""aiopdbp.launch.launcher."""
