"""Per-system analyses: the data behind each system's figures and tables."""
