"""The scripts under benchmarks/experiments/ (not a package) imported as modules for their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[1] / "benchmarks" / "experiments"


def load_script(name: str) -> ModuleType:
    """``benchmarks/experiments/NAME.py`` as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"{name}_script", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
