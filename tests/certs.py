"""Self-signed certificates made with the real ``openssl`` binary (tests/ci.py when missing)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.ci import missing

__all__ = ["self_signed"]


def self_signed(
    directory: Path, name: str = "server", *, cn: str = "127.0.0.1"
) -> tuple[Path, Path]:
    """``(cert, key)``: a fresh RSA-2048 self-signed certificate (127.0.0.1, ::1, localhost)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        missing("openssl is not installed: run .ci/install-debian-packages.sh (make debs)")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={cn}",
            "-addext",
            "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
