"""The command line, one module per command; ``main`` holds the group."""
