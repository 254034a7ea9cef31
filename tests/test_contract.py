"""The contract between the planes, held together: what knee-node says it writes
(`knee-node describe`) is what the Python side reads."""

from __future__ import annotations

import json
import subprocess

from knee.results import SAMPLE_DTYPE, STATUS_NAMES
from knee.systems import SYSTEMS


def test_knee_node_and_knee_agree_on_the_contract(knee_node: str) -> None:
    out = subprocess.run([knee_node, "describe"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    described = json.loads(out.stdout)
    assert described["statuses"] == list(STATUS_NAMES)
    assert described["sample_bytes"] == SAMPLE_DTYPE.itemsize
    assert sorted(described["systems"]) == sorted(SYSTEMS)
