"""Starting and stopping nodes, and running an experiment's points (local processes)."""

from knee.runner.local import run_experiment
from knee.runner.node import NodeFailed, node_binary

__all__ = ["NodeFailed", "node_binary", "run_experiment"]
