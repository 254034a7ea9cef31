"""What each resource of a run was busy with: utilization, demand and the bottleneck (docs/explain.md)."""
