"""A persistent cache of the alarm plan's thresholds, for one-shot ``monitor check`` processes.

A monitor's CUSUM threshold is a Markov-chain root search over its budget (0.1-1 s a plan, by the
schedule and the shared-reference terms; ``verdict.plan``), and a cron or Nagios caller starts a
fresh process for every check. The daemon (``monitor run``), which owns ``state_dir``, keeps the
thresholds it knows in ``<state_dir>/cache/thresholds.json`` (a directory, so the name can never
be a monitor's state file): ``{"format": 4, "versions": {...}, "thresholds": {key: hex}}``, keys
by ``verdict.plan.threshold_key`` (the exact inputs of the search, floats as ``float.hex``),
values exact. ``check`` and ``report`` only read it (they write nothing).

The file is used only when it was written by the same monitor, numpy and scipy versions (and the
same source of the modules the thresholds come from, ``code_digest``) on the
same processor (vendor, family, model and feature numbers from the kernel's CPU modalias, which
systemd's ``ProcSubset=pid`` leaves readable; else ``/proc/cpuinfo``) with the same BLAS thread
settings, CPU count and numpy kernel variables (``NPY_DISABLE_CPU_FEATURES``, which
``monitor.cpu`` may set): the linear solves' summation order and numpy's loops, and so a
search's last bits, depend on them (on the bench world ``OMP_NUM_THREADS=1`` moves h =
17.6909225875815 to 17.690922587601438, and valgrind's CPU to 17.690922587600923), so a
threshold from the cache is the one the search gives here. It is written atomically into an
existing ``state_dir``, and only when the process learned a threshold it did not read; a
missing, unreadable or foreign file is ignored (logged at debug), and a failed write is logged
at debug, leaves neither a temp file nor a new empty directory (a full ``state_dir`` holds what
it held) and never fails a run.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy

from monitor import __version__
from monitor.cpu import ENABLE, VARIABLE, processor_key
from monitor.files import atomic_write, read_regular
from monitor.store import SHAPE_ERRORS
from monitor.verdict.plan import known_thresholds, remember_thresholds

__all__ = ["load_thresholds", "save_thresholds"]

#: the largest threshold cache read (a few thousand entries are a few hundred KiB)
_MAX_BYTES = 8 << 20

FORMAT = 4  # 4: Shewhart in the upper tail (3: wrong below ~1e-11; 2: CUSUM up to 25 % low)
log = logging.getLogger("monitor")


def _path(state_dir: Path) -> Path:
    return state_dir / "cache" / "thresholds.json"


# OpenBLAS (and MKL) read these; the thread count changes the solver's last bits
_THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)


# numpy reads these at import: which of its SIMD loops run (``monitor.cpu``)
_NUMPY_VARIABLES = (VARIABLE, ENABLE)


#: the modules a threshold's value comes from (the searches and the budget's split)
_CODE = ("monitor.stats.sequential", "monitor.stats._dist", "monitor.verdict.plan")


def _code_digest() -> str:
    """SHA-256 over the source of the modules in ``_CODE`` (read through their loaders, so a
    zip import counts its code too): a change to how a threshold is computed, down to the order
    of a product (1 ulp: 475d88b), invalidates every cached value without anyone remembering
    to bump ``FORMAT`` (``__version__`` is not bumped per commit). A module without a file or
    a readable source counts as its name and ``__version__``."""
    digest = hashlib.sha256()
    for name in _CODE:
        module = importlib.import_module(name)
        origin = getattr(module, "__file__", None)
        get_data = getattr(getattr(module.__spec__, "loader", None), "get_data", None)
        try:
            if origin is None or get_data is None:
                raise OSError(f"{name}: no source to read")
            digest.update(get_data(origin))
        except OSError:
            digest.update(f"{name} {__version__}".encode())
        digest.update(b"\0")
    return digest.hexdigest()


#: at import, from the code this process runs: read later (at a daemon's first save, hours on),
#: an upgrade on disk meanwhile stamped the old code's thresholds with the new code's digest
_CODE_DIGEST = _code_digest()


def code_digest() -> str:
    """The digest of the code this process computes thresholds with (``_code_digest``)."""
    return _CODE_DIGEST


def _versions() -> dict[str, Any]:
    """What a threshold's last bits depend on: the code (``code_digest``), the processor (the
    BLAS kernels), the BLAS threads its linear solves run on (the thread variables and the CPUs
    this process may use) and numpy's SIMD loops (the variables that choose them)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "monitor": __version__,
        "code": code_digest(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "cpu": processor_key(),
        "blas_threads": {name: os.environ.get(name) for name in _THREAD_VARIABLES},
        # unset and empty choose the same kernels
        "numpy_kernels": {name: os.environ.get(name) or None for name in _NUMPY_VARIABLES},
        "cpus": cpus,
    }


def load_thresholds(state_dir: Path) -> int:
    """Hand the cached thresholds to the alarm plan; returns how many were read."""
    path = _path(state_dir)
    try:
        # a regular file of a bounded size (a FIFO there once hung start-up before the HTTP
        # server), parsed whole (a deep nesting is a RecursionError: ignored too)
        doc: Any = json.loads(read_regular(path, _MAX_BYTES).decode("utf-8"))
        if doc.get("format") != FORMAT or doc.get("versions") != _versions():
            log.debug("threshold cache of other versions ignored", extra={"path": str(path)})
            return 0
        entries = {str(k): float.fromhex(v) for k, v in doc["thresholds"].items()}
        # a threshold is finite and non-negative: NaN silenced every CUSUM alarm (S > nan is
        # never true), -inf raised one at every block; the file is recomputed, not trusted
        bad = next((k for k, v in entries.items() if not (math.isfinite(v) and v >= 0)), None)
        if bad is not None:
            raise ValueError(f"threshold {bad!r} is {entries[bad]!r}")
    except FileNotFoundError:
        return 0
    except (OSError, *SHAPE_ERRORS) as exc:
        log.debug("threshold cache ignored", extra={"path": str(path), "error": repr(exc)})
        return 0
    remember_thresholds(entries)
    return len(entries)


def save_thresholds(state_dir: Path, *, known: int) -> int:
    """Write every threshold this process knows when there are more than the ``known`` the file
    holds (``load_thresholds``' count, or this function's last answer); returns how many the
    file holds now (``known`` when it was not written)."""
    entries = known_thresholds()
    if len(entries) <= known or not state_dir.is_dir():
        return known
    doc = {
        "format": FORMAT,
        "versions": _versions(),
        "thresholds": {k: v.hex() for k, v in sorted(entries.items())},
    }
    path = _path(state_dir)
    created = not path.parent.exists()
    try:
        atomic_write(path.parent, path, json.dumps(doc, indent=1), stem="thresholds")
    except OSError as exc:
        if created:  # a full state_dir keeps no empty cache directory either
            with contextlib.suppress(OSError):
                path.parent.rmdir()
        log.debug("threshold cache not written", extra={"path": str(path), "error": repr(exc)})
        return known
    return len(entries)
