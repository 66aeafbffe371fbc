"""Test-wide settings and fixtures."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402

from mux_testing import random_batch  # noqa: E402


@pytest.fixture
def batch():
    return random_batch()
