"""Analysis of runs: the data of each system's figures and tables."""
