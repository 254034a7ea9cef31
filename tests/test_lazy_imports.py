"""A `knee` command that only parses its arguments or refuses its spec does not load the
analysis stack (pandas, pyarrow, scipy.stats: about 2 s to import; knee.lazy). The test
reads which modules a fresh interpreter loaded, not how long it took."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON = str(Path(__file__).resolve().parents[1] / "python")
HEAVY = ("pandas", "pyarrow", "scipy.stats", "plotly")


def _loaded(code: str) -> set[str]:
    """The heavy modules a fresh interpreter has after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": PYTHON, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    return {m for m in json.loads(out.stdout.splitlines()[-1]) if m in HEAVY}


@pytest.mark.parametrize(
    "code",
    [
        "import knee.cli",  # every command's parser, --help, --version
        "import knee.spec",  # reading a spec, and refusing it
        "import knee, knee.stats.slo, knee.runner.display, knee.live.options",
    ],
)
def test_parsing_and_refusing_do_not_load_the_analysis_stack(code: str) -> None:
    assert _loaded(code) == set()


def test_the_packages_names_still_import_on_first_use() -> None:
    """The lazy names resolve to the real objects (and then load what they need)."""
    code = (
        "import knee, knee.report, knee.runner, knee.stats, knee.live\n"
        "assert callable(knee.open_run) and knee.Run.__name__ == 'Run'\n"
        "assert callable(knee.report.build) and callable(knee.runner.run_experiment)\n"
        "assert callable(knee.stats.point_stats) and knee.live.Live.__name__ == 'Live'\n"
        "import knee.stats.distribution\n"  # a module's name is not a lazy name: unchanged
        "from knee.stats import QUANTILES, distribution\n"
        "assert QUANTILES and callable(distribution)\n"
        "try:\n"
        "    knee.nothing\n"
        "except AttributeError as e:\n"
        "    assert 'nothing' in str(e)\n"
        "else:\n"
        "    raise SystemExit('an unknown name resolved')\n"
    )
    assert {"pandas", "scipy.stats"} <= _loaded(code)
