"""Which code produced a result: the package's source hash (what a reuse check compares) and,
in a git checkout, the commit and whether the tree had uncommitted changes (what a results file
names)."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent


def git(*args: str) -> str | None:
    """``git ARGS`` run in the package's folder; None outside a checkout or without git."""
    try:
        done = subprocess.run(["git", *args], cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def source_hash() -> str:
    """SHA-256 over every Python file of the installed package (paths and contents, in order):
    equal exactly when the code that trains and evaluates is the same."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        digest.update(str(path.relative_to(PACKAGE_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def code_version() -> dict[str, str | bool | None]:
    from . import __version__

    return dict(muxplm=__version__, source_hash=source_hash(), git_commit=git("rev-parse", "HEAD"),
                git_dirty=bool(git("status", "--porcelain", "--untracked-files=no")))


def folder_hash(folder: str | Path) -> str:
    """SHA-256 over every file under ``folder`` (relative paths and contents, in order): which
    encoder a warm start read, wherever it is installed. Each reuse check asks again, so the
    digest is remembered for as long as no file's path, size or modification time changes."""
    folder = Path(folder).resolve()
    stats = sorted((p, p.stat()) for p in folder.rglob("*") if p.is_file())
    signature = tuple((str(p.relative_to(folder)), stat.st_size, stat.st_mtime_ns) for p, stat in stats)
    return _files_hash(folder, signature)


@functools.lru_cache(maxsize=64)
def _files_hash(folder: Path, signature: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for relative, _, _ in signature:
        digest.update(relative.encode() + b"\0")
        with open(folder / relative, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()
