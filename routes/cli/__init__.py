"""The `quarry` command line: the process entry point that starts every other edge."""
