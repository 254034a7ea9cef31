"""Per-system analysis: the data of each system's figures and tables, computed from a run."""
