"""Atomic, resumable training checkpoints.

A checkpoint is a folder ``checkpoint-<step>`` holding the model (``save_pretrained``:
config.json + model.safetensors), the tokenizer, what ``Accelerator.save_state`` writes
(``optimizer.bin``, the scheduler as ``custom_checkpoint_0.pkl``, ``scaler.pt`` in fp16, one
``random_states_<rank>.pkl`` per process) and ``trainer_state.json`` (step, data position, config).
Every file is first written into ``.tmp-checkpoint-<step>`` next to the target, which is
renamed into place only when complete, and ``trainer_state.json`` is written last: a crash
mid-write leaves at most a temp folder, which resume ignores and the next save removes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

STATE_FILE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints in ``output_dir``, oldest (lowest step) first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _CHECKPOINT.match(child.name)
        if match and child.is_dir() and (child / STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    dirs = checkpoint_dirs(output_dir)
    return dirs[-1] if dirs else None


def staging_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / f".tmp-checkpoint-{step}"


def write_json_atomic(path: Path, payload: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        json.dump(payload, handle, indent=1, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def sync_tree(root: Path) -> None:
    """fsync every file under ``root`` and the folders themselves, so that a rename published
    after it never points at data still in the page cache (a power cut would truncate it)."""
    for path in sorted(root.rglob("*"), reverse=True) + [root]:
        flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
        try:
            handle = os.open(path, flags)
        except OSError:  # folders cannot be opened on some platforms
            continue
        try:
            os.fsync(handle)
        except OSError:
            pass
        finally:
            os.close(handle)


def publish(staging: Path, final: Path) -> None:
    """Move a finished staging folder to its final name (replacing an older copy)."""
    sync_tree(staging)
    if final.exists():
        old = final.with_name(f".old-{final.name}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, final)


# The final model sits at the top of the run folder, next to the checkpoints and logs, so that
# ``--init RUN`` and ``from_pretrained(RUN)`` find it. It is replaced whole: a sibling folder is
# filled with the new files plus hard links to the run's other entries and then swaps places
# with the run folder (two renames; ``recover_run_folder`` completes a swap a crash cut short).
# A run folder that cannot be swapped (a mount point, an unwritable parent) gets its files
# replaced one by one instead, the manifest last.
FINAL_MANIFEST = "final_files.json"


def _swap_names(output_dir: Path) -> tuple[Path, Path]:
    return (output_dir.with_name(f".{output_dir.name}.final-new"),
            output_dir.with_name(f".{output_dir.name}.final-old"))


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # a file system without hard links
        shutil.copy2(source, target)


def _can_swap(folder: Path) -> bool:
    """Not for a mount point (the sibling would sit on another file system), a folder whose
    parent is read-only, or the working directory or a folder above it (renaming it would
    pull the ground from under the process)."""
    parent = folder.parent
    if not os.access(parent, os.W_OK) or (folder.exists() and os.path.ismount(folder)):
        return False
    if Path.cwd().resolve().is_relative_to(folder):
        return False
    return not folder.exists() or os.stat(parent).st_dev == os.stat(folder).st_dev


def publish_final(output_dir: str | Path, write) -> None:
    """Replace the final model in ``output_dir`` in one step: ``write(folder)`` writes the new
    final files; the files an earlier final save left (its manifest) are dropped, every other
    entry (checkpoints, logs) is carried over."""
    output_dir = Path(output_dir).resolve()  # "." and symbolic links name the real folder
    if not _can_swap(output_dir):
        _replace_in_place(output_dir, write)
        return
    new, old = _swap_names(output_dir)
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    write(new)
    made = sorted(path.name for path in new.iterdir())
    previous = set(_manifest(output_dir))
    for entry in sorted(output_dir.iterdir()) if output_dir.is_dir() else []:
        if entry.name in made or entry.name in previous or entry.name == FINAL_MANIFEST or entry.name.startswith((".tmp-", ".old-")):
            continue
        if entry.is_dir():
            shutil.copytree(entry, new / entry.name, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, new / entry.name)
    write_json_atomic(new / FINAL_MANIFEST, made)  # written last: the new folder is complete
    sync_tree(new)
    if output_dir.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(output_dir, old)
    try:
        os.replace(new, output_dir)
    except FileNotFoundError:  # a recovery by another command completed the swap meanwhile
        if not (output_dir / FINAL_MANIFEST).is_file():
            raise
    shutil.rmtree(old, ignore_errors=True)


def _replace_in_place(output_dir: Path, write) -> None:
    """The fallback: staged in the run folder, then moved file by file, the manifest last (a
    crash midway can mix old and new files, which ``verify_final`` reports)."""
    staging = output_dir / ".tmp-final"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    write(staging)
    sync_tree(staging)
    made = sorted(path.name for path in staging.iterdir())
    previous = set(_manifest(output_dir))
    (output_dir / FINAL_MANIFEST).unlink(missing_ok=True)
    for name in previous - set(made):  # what the previous save wrote and this one does not
        target = output_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    for name in made:
        target = output_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(staging / name, target)
    staging.rmdir()
    write_json_atomic(output_dir / FINAL_MANIFEST, made)


def _manifest(folder: Path) -> list[str]:
    try:
        return list(json.loads((folder / FINAL_MANIFEST).read_text()))
    except (OSError, ValueError):
        return []


def verify_final(output_dir: str | Path) -> str | None:
    """Why the final model in ``output_dir`` is not whole (naming the file), or ``None``."""
    output_dir = Path(output_dir)
    names = _manifest(output_dir)
    if not names:
        return f"{output_dir} holds no final model ({FINAL_MANIFEST} missing or unreadable)"
    try:
        for name in names:
            if not (output_dir / name).exists():
                raise ValueError(f"{output_dir / name} is missing")
            if name.endswith(".safetensors"):
                _check_safetensors(output_dir / name)
    except (OSError, ValueError) as error:
        return str(error)
    return None


def recover_run_folder(output_dir: str | Path, clean: bool = True) -> None:
    """Finish (or undo) a final-model swap that a crash interrupted; with ``clean``, also clear
    the debris of one that never started (only for a folder no other run may be publishing:
    this run's own)."""
    output_dir = Path(output_dir).resolve()
    new, old = _swap_names(output_dir)
    if not output_dir.exists():
        if (new / FINAL_MANIFEST).is_file():
            os.replace(new, output_dir)  # the crash fell between the two renames
        elif old.exists():
            os.replace(old, output_dir)
    if clean:
        shutil.rmtree(new, ignore_errors=True)  # a swap that never started
        shutil.rmtree(old, ignore_errors=True)  # a swap whose clean-up never ran


def best_checkpoint(output_dir: str | Path) -> Path | None:
    """The complete checkpoint with the best recorded score (``score`` in its state: the
    evaluation made at its step), the earliest on ties; ``None`` when none was scored."""
    scored = []
    for order, path in enumerate(checkpoint_dirs(output_dir)):
        score = read_state(path).get("score")
        if score is not None and math.isfinite(float(score["value"])):
            sign = 1.0 if score.get("greater_is_better", True) else -1.0
            scored.append((sign * float(score["value"]), -order, path))
    return max(scored)[2] if scored else None


def rotate(output_dir: str | Path, keep: int | None, protect: Path | None = None) -> list[Path]:
    """Delete the complete checkpoints older than the ``keep`` newest; never ``protect`` nor
    the best-scoring checkpoint (which is thus kept in addition to the newest)."""
    if keep is None:
        return []
    dirs = checkpoint_dirs(output_dir)
    kept = {Path(p).resolve() for p in (protect, best_checkpoint(output_dir)) if p is not None}
    removed = []
    for path in dirs[: max(len(dirs) - keep, 0)]:
        if path.resolve() in kept:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def read_state(checkpoint: str | Path) -> dict[str, Any]:
    path = Path(checkpoint) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint} is not a complete training checkpoint (no {STATE_FILE})")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is corrupt ({error})") from error


def _safe_globals() -> list:
    """The only classes and functions a checkpoint's pickles may name besides tensors and plain
    containers: NumPy's RNG state (an ``ndarray`` of ``uint32``, in ``random_states_<rank>.pkl``),
    the same list Accelerate allows for its own ``weights_only`` loads."""
    try:
        from accelerate.utils.other import TORCH_SAFE_GLOBALS

        return list(TORCH_SAFE_GLOBALS)
    except ImportError:  # another Accelerate: name NumPy's types ourselves
        import numpy as np

        try:
            from numpy._core.multiarray import _reconstruct
        except ImportError:
            from numpy.core.multiarray import _reconstruct
        return [_reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32)), __import__("codecs").encode]


@contextlib.contextmanager
def weights_only_loads():
    """Every ``torch.load`` inside is a ``weights_only`` load, whatever its caller asks for
    (Accelerate's ``load_state`` reads the registered scheduler with ``weights_only=False``): a
    pickle that names any class or function outside tensors, plain containers and NumPy's RNG
    state is refused instead of run. Meant for the main thread while it loads a checkpoint."""
    previous = os.environ.get(_FORCE_WEIGHTS_ONLY)
    os.environ[_FORCE_WEIGHTS_ONLY] = "1"
    try:
        with torch.serialization.safe_globals(_safe_globals()):
            yield
    finally:
        if previous is None:
            os.environ.pop(_FORCE_WEIGHTS_ONLY, None)
        else:
            os.environ[_FORCE_WEIGHTS_ONLY] = previous


_FORCE_WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"  # read by torch.load on every call


def load_file(path: Path, map_location=None) -> Any:
    """``torch.load`` of a checkpoint file, ``weights_only`` (a pickle naming anything but tensors,
    plain containers and NumPy's RNG state is refused unrun), with an error that names the file."""
    try:
        with torch.serialization.safe_globals(_safe_globals()):
            return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # truncated, garbled or code-carrying pickles raise many types
        raise ValueError(f"{path} is corrupt, unreadable or not plain checkpoint state "
                         f"({type(error).__name__}: {_first_line(error)})") from error


def _first_line(error: Exception) -> str:
    # torch's refusal of a weights_only load is many lines of advice on how to lift it: only
    # what it refused is worth repeating.
    text = str(error)
    if "WeightsUnpickler error:" in text:
        text = "refused by the weights-only unpickler: " + text.split("WeightsUnpickler error:", 1)[1].split(
            "Check the documentation", 1)[0]
    return " ".join(text.split())[:300]


def _check_safetensors(path: Path) -> None:
    """safetensors refuses a file whose header does not account for every byte (cut short)."""
    try:
        with safe_open(path, "pt"):
            pass
    except SafetensorError as error:
        raise ValueError(f"{path} is truncated or corrupt ({error})") from error


def verify(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from (naming the file), or ``None`` if it can."""
    try:
        read_state(checkpoint)
        for weights in sorted(checkpoint.glob("*.safetensors")):
            _check_safetensors(weights)
        # Accelerate's load_state would skip an unreadable RNG file with a log line only.
        states = sorted(p.name for p in checkpoint.glob("random_states_*.pkl"))
        if not states:
            raise ValueError(f"{checkpoint} has no random_states_<rank>.pkl")
        scaler = ["scaler.pt"] if (checkpoint / "scaler.pt").exists() else []
        for name in ("optimizer.bin", "custom_checkpoint_0.pkl", *scaler, *states):
            load_file(checkpoint / name, map_location="cpu")
    except (OSError, ValueError) as error:
        return str(error)
    return None


def resumable_checkpoint(output_dir: str | Path, warn) -> Path | None:
    """The newest checkpoint that is whole; each newer broken one is reported through ``warn``
    (naming the file) and skipped. ``None`` when there is none."""
    for path in reversed(checkpoint_dirs(output_dir)):
        problem = verify(path)
        if problem is None:
            return path
        warn(f"cannot resume from {path.name}: {problem}; falling back to the previous checkpoint")
    return None
