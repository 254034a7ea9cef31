"""The analysis and the report read only the run directory: nothing under knee.analysis or
knee.report imports knee.spec (which would expand the spec again) or knee.systems (which
would give today's defaults, not what ran). Constants come from knee.contract, what each
point ran with from knee.run_params."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PYTHON = Path(__file__).resolve().parents[1] / "python"
READERS = ("knee.analysis", "knee.report")
FORBIDDEN = ("knee.spec", "knee.systems")


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def _imports(path: Path) -> list[str]:
    """Every module a file imports, at any depth of its code (`from knee import systems`
    counts as knee.systems)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return out


def test_no_reader_source_imports_spec_or_systems() -> None:
    files = [p for r in READERS for p in (PYTHON / r.replace(".", "/")).rglob("*.py")]
    assert len(files) > 10, files
    bad = [(p.relative_to(PYTHON), m) for p in files for m in _imports(p) if _forbidden(m)]
    assert not bad, bad


def test_importing_every_reader_module_loads_neither() -> None:
    """Not even indirectly: a fresh interpreter imports every module under knee.analysis and
    knee.report, then lists the knee modules it has loaded."""
    code = (
        "import importlib, pkgutil, sys\n"
        f"for root in {READERS!r}:\n"
        "    pkg = importlib.import_module(root)\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, root + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('knee'))))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    loaded = res.stdout.split()
    assert "knee.analysis.stream" in loaded and "knee.report.writer" in loaded
    assert [m for m in loaded if _forbidden(m)] == []
