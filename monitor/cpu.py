"""The processor, and which of numpy's SIMD kernels the ``monitor`` command's processes use.

numpy picks its kernels once, at import, from the processor's features. On AMD Zen 4 (family
0x19 with AVX-512) its AVX-512 sort (x86-simd-sort) writes each partition with a memory-
destination ``vpcompress``, which Zen 4 runs in microcode (AMD's Zen 4 optimization guide,
2.11.2; numpy/x86-simd-sort#6). There ``np.sort`` of 1M float64 takes 52 ms, against 8.8 ms
with numpy's AVX2 kernels (numpy 2.4.6, an EPYC VM). OpenJDK turned its AVX-512 sort off on
Zen 4 for the same reason (JDK-8317976). The monitor sorts whole windows (exact KS, the
reference's quantile edges, grids, judged runs), so ``monitor.entry`` calls ``prefer_avx2``
before anything imports numpy. It sets ``NPY_DISABLE_CPU_FEATURES`` to numpy's AVX-512 groups
(``X86_V4 AVX512_ICL AVX512_SPR``) only when all of these hold:

- the variable is not set (set it yourself, even to an empty string, to choose);
- the processor is AMD family 0x19 with ``avx512f`` (Zen 4; Zen 3 has no AVX-512, and Zen 5,
  family 0x1a, compresses to memory at full speed);
- the installed numpy is 2.4 or later (the release that named those groups; older ones name
  them otherwise, so they are left as they are);
- numpy is not imported yet.

What else it changes: numpy's other AVX-512 loops (``log``, ``exp``, ``power`` among them)
run their AVX2 or scalar code, whose results can differ from the AVX-512 ones in the last bit,
as they already differ between an Intel and an AMD machine. Every process the command starts
(the daemon, ``check``, ``report``, ``backtest``, a Dask ``LocalCluster``'s workers, Spark's
Python workers) inherits the variable, so they agree with one another; the threshold cache is
keyed by it (``monitor.thresholds``).
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

__all__ = ["AVX512_GROUPS", "avx2_choice", "cpuinfo", "prefer_avx2", "processor", "zen4"]

AVX512_GROUPS = "X86_V4 AVX512_ICL AVX512_SPR"  # numpy >= 2.4's dispatched AVX-512 groups
VARIABLE = "NPY_DISABLE_CPU_FEATURES"
REASON = (
    "AMD Zen 4: numpy's AVX-512 sort runs about 6x slower there than its AVX2 one; set "
    "NPY_DISABLE_CPU_FEATURES (even to an empty string) to choose"
)

# what prefer_avx2 set in this process (None: nothing), for the daemon's start-up log
chosen: str | None = None


def cpuinfo(text: str | None = None) -> dict[str, str]:
    """The first processor's block of ``/proc/cpuinfo`` (or of ``text``) as key -> value;
    empty where there is no such file."""
    if text is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            return {}
    info = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    return info


def processor(info: dict[str, str]) -> tuple[str, str]:
    """The machine and model name, and the sorted feature flags (``flags``) of ``info``."""
    model = f"{platform.machine()} {info.get('model name', '')}"
    return model, " ".join(sorted(info.get("flags", "").split()))


def zen4(info: dict[str, str]) -> bool:
    """Whether ``info`` (``cpuinfo()``) is an AMD Zen 4 core: family 0x19 with AVX-512."""
    family = info.get("cpu family", "")
    return (
        info.get("vendor_id") == "AuthenticAMD"
        and family.isdigit()
        and int(family) == 0x19
        and "avx512f" in info.get("flags", "").split()
    )


def _numpy_at_least(version: str, major: int, minor: int) -> bool:
    parts = version.split(".")
    try:
        return (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)) >= (
            major,
            minor,
        )
    except (IndexError, ValueError):
        return False


def avx2_choice(environ: dict[str, str], info: dict[str, str], numpy_version: str) -> str | None:
    """The ``NPY_DISABLE_CPU_FEATURES`` value to set, or None to leave numpy as it is (the
    rules are in the module docstring)."""
    if VARIABLE in environ or not zen4(info) or not _numpy_at_least(numpy_version, 2, 4):
        return None
    return AVX512_GROUPS


def prefer_avx2() -> str | None:
    """Set ``NPY_DISABLE_CPU_FEATURES`` in this process's environment where ``avx2_choice``
    says so, before numpy is imported; returns the value set (None: nothing)."""
    global chosen
    if "numpy" in sys.modules or sys.platform != "linux":
        return None
    try:
        version = metadata.version("numpy")
    except metadata.PackageNotFoundError:
        return None
    value = avx2_choice(dict(os.environ), cpuinfo(), version)
    if value is not None:
        os.environ[VARIABLE] = value
        chosen = value
    return value
