"""Tests that need a tool the machine lacks: skipped on a developer's machine, failed under CI
(``CI`` set), where ``make test`` installs every tool and the suite must run whole."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["missing"]


def missing(reason: str) -> NoReturn:
    """Skip the test for ``reason``, or fail it under CI: a skip there hid a missing install."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: make debs installs it)")
    pytest.skip(reason)
