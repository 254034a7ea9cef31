"""Starting and stopping nodes, and running an experiment's points (local processes)."""

from typing import TYPE_CHECKING

from knee import lazy

if TYPE_CHECKING:
    from knee.runner.local import run_experiment
    from knee.runner.node import NodeFailed, node_binary

#: Where each name lives (imported on first use: knee.lazy), so that a module of this
#: package (the display every command's parser sets up) does not load the whole runner, its
#: statistics and scipy (about a second) before a spec is even read.
_LAZY = {
    "run_experiment": "knee.runner.local",
    "NodeFailed": "knee.runner.node",
    "node_binary": "knee.runner.node",
}

__getattr__ = lazy.attributes(__name__, _LAZY)

__all__ = ["NodeFailed", "node_binary", "run_experiment"]
