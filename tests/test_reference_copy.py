"""The vendored reference vectors are a verbatim copy of ``../shared/reference_vectors.json``."""

from __future__ import annotations

import pytest

from tests.conftest import SHARED_VECTORS, VENDORED_VECTORS


def test_vendored_copy_matches_shared() -> None:
    if not SHARED_VECTORS.exists():
        pytest.skip(f"{SHARED_VECTORS} is not beside this checkout; using the vendored copy")
    assert VENDORED_VECTORS.read_bytes() == SHARED_VECTORS.read_bytes(), (
        "shared/reference_vectors.json changed: copy it to tests/data/ and re-run the suite"
    )
