"""Architecture: where the heavy libraries may be imported."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import monitor

PACKAGE = Path(monitor.__file__).resolve().parent

# Each heavy library is imported by exactly one module, or by the modules of one package (a path
# ending in "/"): pyarrow lives in the sources package, split along its seams.
OWNERS = {
    "pyarrow": "monitor/sources/",
    "prometheus_client": "monitor/exporter.py",
    "apscheduler": "monitor/daemon.py",
    "yaml": "monitor/webconfig.py",
    "bcrypt": "monitor/server.py",
    "dask": "monitor/engines/dask.py",
    "distributed": "monitor/engines/dask.py",
    "pyspark": "monitor/engines/spark.py",
    "deltalake": "monitor/sources/tables.py",
    "pyiceberg": "monitor/sources/tables.py",
}


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_stats_imports_no_io_library() -> None:
    code = (
        "import sys, monitor.stats\n"
        "heavy = ('pyarrow', 'prometheus_client', 'apscheduler', 'deltalake', 'pyiceberg')\n"
        "bad = sorted(m for m in heavy if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_table_libraries_load_only_when_a_table_is_read() -> None:
    """The optional extra .[tables]: importing the sources (or the CLI) never imports it."""
    code = (
        "import sys, monitor.sources, monitor.cli\n"
        "print(','.join(sorted(m for m in ('deltalake', 'pyiceberg') if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


@pytest.mark.parametrize("library", sorted(OWNERS))
def test_each_heavy_library_has_one_owner(library: str) -> None:
    importers = sorted(
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if library in _imported_roots(path)
    )
    owner = OWNERS[library]
    if owner.endswith("/"):
        assert all(path.startswith(owner) for path in importers), importers
    else:
        assert importers in ([], [owner])


PACKAGES = sorted(
    ".".join(init.parent.relative_to(PACKAGE.parent).parts) for init in PACKAGE.rglob("__init__.py")
)


@pytest.mark.parametrize("name", PACKAGES)
def test_package_all_lists_only_existing_names(name: str) -> None:
    """Every package hands its names on with an explicit ``__all__`` (no duplicates, each
    one defined): a split module's package keeps what callers import from it."""
    module = importlib.import_module(name)
    listed = getattr(module, "__all__", None)
    assert isinstance(listed, list), f"{name} has no __all__ list"
    assert len(set(listed)) == len(listed), f"{name}.__all__ repeats a name"
    for item in listed:
        assert hasattr(module, item), f"{name}.__all__ names missing {item!r}"
