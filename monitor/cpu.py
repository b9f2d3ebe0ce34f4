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

- neither ``NPY_DISABLE_CPU_FEATURES`` is set (even to an empty string) nor
  ``NPY_ENABLE_CPU_FEATURES`` to a non-empty value: the operator has chosen (numpy refuses to
  load with both set);
- the processor is AMD family 0x19 with AVX-512 (Zen 4; Zen 3 has no AVX-512, and Zen 5,
  family 0x1a, compresses to memory at full speed), read from ``/proc/cpuinfo`` or, where that
  is hidden (systemd's ``ProcSubset=pid``), from the kernel's CPU modalias in ``/sys``;
- the installed numpy is 2.4 or later (the release that named those groups; older ones name
  them otherwise, so they are left as they are), on Linux;
- numpy is not imported yet.

What else it changes: numpy's other AVX-512 loops (``log``, ``exp``, ``power`` among them)
run their AVX2 or scalar code, whose results can differ from the AVX-512 ones in the last bit,
as they already differ between an Intel and an AMD machine. Each invocation of the command
makes the same choice on the same machine (a numpy whose baseline holds those groups refuses
the variable: the command then starts again without it, see ``_load_or_restart``), and what it
starts (a Dask ``LocalCluster``'s
workers, Spark's Python workers) inherits the variable; the threshold cache is keyed by it
(``monitor.thresholds``). Nothing here may stop the command from starting: a failure to
decide leaves numpy as it is and is kept in ``problem`` for the daemon's start-up log.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import sys
from importlib import metadata

__all__ = [
    "AVX512_GROUPS",
    "ENABLE",
    "REASON",
    "VARIABLE",
    "avx2_choice",
    "chosen",
    "cpuinfo",
    "prefer_avx2",
    "problem",
    "processor_key",
    "zen4",
]

AVX512_GROUPS = "X86_V4 AVX512_ICL AVX512_SPR"  # numpy >= 2.4's dispatched AVX-512 groups
VARIABLE = "NPY_DISABLE_CPU_FEATURES"
ENABLE = "NPY_ENABLE_CPU_FEATURES"
REASON = (
    "AMD Zen 4: numpy's AVX-512 sort runs about 6x slower there than its AVX2 one; set "
    "NPY_DISABLE_CPU_FEATURES (even to an empty string) to choose"
)
MODALIAS = "/sys/devices/system/cpu/modalias"
_AVX512F = 9 * 32 + 16  # X86_FEATURE_AVX512F, Linux's arch/x86/include/asm/cpufeatures.h
_VENDORS = {0: "GenuineIntel", 2: "AuthenticAMD", 9: "HygonGenuine"}  # X86_VENDOR_*
_MODALIAS = re.compile(
    r"cpu:type:x86,ven([0-9A-Fa-f]{4})fam([0-9A-Fa-f]{4})mod([0-9A-Fa-f]{4}):feature:(.*)"
)

# what prefer_avx2 set in this process (None: nothing), and why it could not decide (None:
# it could), for the daemon's start-up log
chosen: str | None = None
problem: str | None = None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _from_modalias(text: str) -> dict[str, str]:
    """``cpuinfo``'s keys from the kernel's CPU modalias (x86: vendor, family and model
    numbers, feature numbers); ``flags`` holds ``avx512f`` only, ``features`` the numbers."""
    m = _MODALIAS.match(text.strip())
    if m is None:
        return {}
    vendor, family, model = (int(m.group(i), 16) for i in (1, 2, 3))
    numbers = sorted({int(f, 16) for f in m.group(4).split(",") if f})
    return {
        "vendor_id": _VENDORS.get(vendor, f"x86 vendor {vendor}"),
        "cpu family": str(family),
        "model": str(model),
        "flags": "avx512f" if _AVX512F in numbers else "",
        "features": " ".join(f"{n:04X}" for n in numbers),
    }


def cpuinfo(text: str | None = None, *, modalias: str | None = None) -> dict[str, str]:
    """The first processor's block of ``/proc/cpuinfo`` (or of ``text``) as key -> value; where
    that is missing or hidden, what the CPU modalias (``modalias``, else the file) says; empty
    where neither says anything."""
    if text is None:
        text = _read("/proc/cpuinfo") or ""
    info = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    if "vendor_id" not in info:
        alias = modalias if modalias is not None else _read(MODALIAS)
        if alias:
            return _from_modalias(alias) or info
    return info


def processor_key() -> str:
    """The processor, for caches whose values depend on its SIMD kernels: the machine and a
    digest of the CPU modalias (vendor, family, model, feature numbers), which is readable
    where ``/proc/cpuinfo`` is hidden; else ``/proc/cpuinfo``'s model name and a digest of its
    flags; else the machine alone."""
    machine = platform.machine()
    alias = _read(MODALIAS)
    if alias and alias.strip():
        return f"{machine} {hashlib.sha256(alias.strip().encode()).hexdigest()[:16]}"
    info = cpuinfo(modalias="")
    if not info:
        return machine
    flags = " ".join(sorted(info.get("flags", "").split()))
    digest = hashlib.sha256(flags.encode()).hexdigest()[:16]
    return f"{machine} {info.get('model name', '')} {digest}"


def zen4(info: dict[str, str]) -> bool:
    """Whether ``info`` (``cpuinfo()``) is an AMD Zen 4 core: family 0x19 with AVX-512."""
    family = info.get("cpu family", "")
    return (
        info.get("vendor_id") == "AuthenticAMD"
        and family.isdigit()
        and int(family) == 0x19
        and "avx512f" in info.get("flags", "").split()
    )


def _release(version: object) -> tuple[int, int] | None:
    """(major, minor) of a version string ("2.4.0rc1" -> (2, 4)); None if it has none."""
    m = re.match(r"(\d+)\.(\d+)", version) if isinstance(version, str) else None
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def avx2_choice(environ: dict[str, str], info: dict[str, str], numpy_version: object) -> str | None:
    """The ``NPY_DISABLE_CPU_FEATURES`` value to set, or None to leave numpy as it is (the
    rules are in the module docstring)."""
    if VARIABLE in environ or environ.get(ENABLE) or not zen4(info):
        return None
    release = _release(numpy_version)
    if release is None or release < (2, 4):
        return None
    return AVX512_GROUPS


def prefer_avx2() -> str | None:
    """Set ``NPY_DISABLE_CPU_FEATURES`` in this process's environment where ``avx2_choice``
    says so, before numpy is imported; returns the value set (None: nothing). Never raises:
    a failure leaves numpy as it is, with the reason in ``problem``."""
    global chosen, problem
    if "numpy" in sys.modules or sys.platform != "linux":
        return None
    try:
        info = cpuinfo()
        if not zen4(info):
            return None
        value = avx2_choice(dict(os.environ), info, metadata.version("numpy"))
    except Exception as exc:  # a speed choice must never stop the command from starting
        problem = f"{type(exc).__name__}: {exc}"
        return None
    if value is not None:
        os.environ[VARIABLE] = value
        chosen = value
        _load_or_restart()
    return value


def _load_or_restart() -> None:
    """Import numpy's core now, with the variable set. A numpy built with the AVX-512 groups in
    its baseline (``-Dcpu-baseline=native`` on a Zen 4) refuses to load when told to disable
    them, and a failed import cannot be tried again in the same process: the command starts
    again as it was called, with the variable set to an empty string (numpy as it is, and the
    operator's choice by the rules above)."""
    try:
        import numpy  # noqa: F401  (the import is the check)
    except RuntimeError as exc:
        if "baseline" not in str(exc):
            raise
        os.environ[VARIABLE] = ""
        os.execv(sys.executable, sys.orig_argv)
