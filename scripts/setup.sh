#!/usr/bin/env bash
# Installs muxplm and everything its tests need on a fresh CPU machine.
# torch is pinned first: on this kind of machine `torch==2.13.0` resolves to a local CPU build,
# while an unpinned torch (asked for by any dependency) would pull gigabytes of CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_SPEC=${MUXPLM_TORCH_SPEC:-torch==2.13.0}
$PY -m pip install --quiet --disable-pip-version-check "$TORCH_SPEC"
# ray: the tests run `muxplm predict --ray` on a local Ray instance (the default install does not need it).
$PY -m pip install --quiet --disable-pip-version-check -e ".[minilm,serve,onnx,ray,test]"
# pyenv installs put the `muxplm` console script behind a shim that must be regenerated.
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
