"""The systemd unit's ``SystemCallFilter=`` as a seccomp filter, for a test to run a command
under it without systemd (tests/deploy/test_packaging.py).

``unit_filter`` expands the unit's allow and deny lists with ``systemd-analyze syscall-filter``
and maps the names to x86_64 numbers from the kernel headers (``asm/unistd_64.h``);
``python -m tests.deploy.seccomp ALLOWED ACTION CMD...`` sets no_new_privs (the unit's
``NoNewPrivileges=yes``), installs a classic BPF program that allows those numbers and answers
any other with ``ACTION`` (``kill``: systemd's when ``SystemCallErrorNumber=`` is unset; or an
errno name), then executes CMD."""

from __future__ import annotations

import ctypes
import errno
import os
import re
import struct
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

UNISTD = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
AUDIT_ARCH_X86_64 = 0xC000003E
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000


def numbers() -> dict[str, int]:
    """Syscall name -> x86_64 number, from the kernel headers."""
    found = re.findall(r"^#define __NR_(\w+)\s+(\d+)$", UNISTD.read_text(), re.M)
    return {name: int(nr) for name, nr in found}


def expand(items: Iterable[str], seen: set[str] | None = None) -> set[str]:
    """Syscall names of ``items`` (names and ``@group``s, groups expanded recursively)."""
    seen = set() if seen is None else seen
    names: set[str] = set()
    for item in items:
        if not item.startswith("@"):
            names.add(item)
            continue
        if item in seen:
            continue
        seen.add(item)
        out = subprocess.run(
            ["systemd-analyze", "syscall-filter", item], capture_output=True, text=True, check=True
        ).stdout
        members = [
            line.strip()
            for line in out.splitlines()[1:]
            if line.strip() and not line.strip().startswith("#")
        ]
        names |= expand(members, seen)
    return names


def unit_filter(values: list[str]) -> set[int]:
    """The syscall numbers ``SystemCallFilter=`` lines ``values`` allow (allow lists unioned,
    then ``~`` deny lists removed, as systemd applies them in order)."""
    allowed: set[str] = set()
    for value in values:
        if value.startswith("~"):
            allowed -= expand(value[1:].split())
        else:
            allowed |= expand(value.split())
    table = numbers()
    return {table[n] for n in allowed if n in table}


def _program(allowed: set[int], action: int) -> bytes:
    def ins(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    prog = [
        ins(0x20, 0, 0, 4),  # ld [arch]
        ins(0x15, 1, 0, AUDIT_ARCH_X86_64),  # jeq x86_64: skip the kill
        ins(0x06, 0, 0, RET_KILL_PROCESS),
        ins(0x20, 0, 0, 0),  # ld [nr]
    ]
    for nr in sorted(allowed):
        prog += [ins(0x15, 0, 1, nr), ins(0x06, 0, 0, RET_ALLOW)]  # jeq nr: allow, else next
    prog.append(ins(0x06, 0, 0, action))
    return b"".join(prog)


def main(argv: list[str]) -> None:
    allowed = {int(x) for x in argv[0].split(",")}
    name = argv[1]
    action = RET_KILL_PROCESS if name == "kill" else RET_ERRNO | getattr(errno, name)
    prog = _program(allowed, action)
    buf = ctypes.create_string_buffer(prog)

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
    os.execvp(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
