"""A package's names imported on first use (PEP 562), so that importing one light module
of a package (a type, a format, the CLI's options) does not run the package's whole stack:
pandas, pyarrow and scipy.stats take about 2 s to import, which every `knee` command, even
one that only refuses its input, paid before."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def attributes(package: str, where: dict[str, str]) -> Callable[[str], object]:
    """The package's `__getattr__`: each name of `where` from its module, on first use.

    A name may not be its module's own name (`knee.stats.distribution`): importing that
    module binds the package's attribute to the module, which would then hide the name."""
    clashes = [name for name, module in where.items() if module.rsplit(".", 1)[-1] == name]
    if clashes:
        raise ValueError(f"{package}: a lazy name is its module's name: {clashes}")

    def __getattr__(name: str) -> object:
        if name in where:
            return getattr(import_module(where[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
