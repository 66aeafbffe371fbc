"""Atomic, resumable training checkpoints.

A checkpoint is the Trainer's folder ``checkpoint-<step>``: the model (``save_pretrained``:
config.json + model.safetensors), the tokenizer, ``optimizer.pt``, ``scheduler.pt``,
``scaler.pt`` in fp16, ``rng_state.pth`` (``rng_state_<rank>.pth`` per process), the training
arguments as ``training_args.json`` and ``trainer_state.json``, with muxplm's record of the run
(:func:`run_record`). :class:`~muxplm.training.trainer.MuxTrainer` writes every file into
``.tmp-checkpoint-<step>`` next to the target, ``trainer_state.json`` last, and renames it into
place only when complete: a crash mid-write leaves at most a temp folder, which resume ignores
and the next save removes. This module finds, checks and publishes them; the final model at the
top of a run folder is replaced in one step (:func:`publish_final`).
"""

from __future__ import annotations

import json
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


def rotate(output_dir: str | Path, keep: int | None, best: str | Path | None = None) -> None:
    """The Trainer's rotation (``save_total_limit``: the newest and the best checkpoint always
    kept) over complete checkpoints only: a folder that merely looks like one is neither counted
    nor deleted."""
    if not keep:
        return
    dirs = checkpoint_dirs(output_dir)
    protected = {dirs[-1].resolve()} if dirs else set()
    if best is not None:
        protected.add(Path(best).resolve())
    surplus = len(dirs) - max(keep, len(protected))
    for path in dirs:
        if surplus <= 0:
            break
        if path.resolve() not in protected:
            shutil.rmtree(path, ignore_errors=True)
            surplus -= 1


def read_state(checkpoint: str | Path) -> dict[str, Any]:
    """A checkpoint's ``trainer_state.json`` (the Trainer's format), as a mapping."""
    path = Path(checkpoint) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint} is not a complete training checkpoint (no {STATE_FILE})")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is corrupt ({error})") from error


def run_record(checkpoint: str | Path) -> dict[str, Any]:
    """What muxplm records of the run in a checkpoint: its step, data layout (``world_size``,
    ``batch_size``, ``gradient_accumulation_steps``), ``train_seconds`` and the run's facts
    (``config``, ``source_hash``, ``init_encoder_sha256``)."""
    state = read_state(checkpoint)
    recorded = state.get("stateful_callbacks", {}).get("RunState") or {}
    return {"step": state.get("global_step"), **recorded.get("args", {}).get("facts", {}),
            **recorded.get("attributes", {})}


def load_file(path: Path, map_location=None) -> Any:
    """``torch.load`` of a checkpoint file, ``weights_only`` (a pickle naming anything but tensors,
    plain containers and NumPy's RNG state is refused unrun), with an error that names the file."""
    from accelerate.utils.other import TORCH_SAFE_GLOBALS

    try:
        # NumPy's RNG state (random_states_<rank>.pkl) is the one thing allowed beyond tensors and
        # plain containers: the list Accelerate allows for its own weights-only loads.
        with torch.serialization.safe_globals(list(TORCH_SAFE_GLOBALS)):
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
        # The Trainer would go on without an RNG file, with a log line only.
        states = sorted(p.name for p in checkpoint.glob("rng_state*.pth"))
        if not states:
            raise ValueError(f"{checkpoint} has no rng_state.pth")
        scaler = ["scaler.pt"] if (checkpoint / "scaler.pt").exists() else []
        for name in ("optimizer.pt", "scheduler.pt", *scaler, *states):
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
