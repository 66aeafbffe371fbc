"""A checkpoint folder's ``config.json`` as muxplm sees it, and the model class it names.

One reader for every command that takes a checkpoint (``finetune --init``, ``evaluate``,
``serve``, ``bench throughput --model``, ``export``): a muxplm checkpoint's config as saved; a
folder released with the paper (the authors' layout, :mod:`muxplm.released`) as the muxplm
config of the same model. A file that is not JSON is named in the error.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from . import released


# What a checkpoint folder holds that a command may read: config, weights, tokenizer files.
CHECKPOINT_FILES = ("config.json", *released.WEIGHT_FILES, "vocab.txt", "tokenizer.json", "tokenizer_config.json",
                    "special_tokens_map.json", "vocab.json", "merges.txt", "sentencepiece.bpe.model", "spiece.model")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def local_folder(name_or_path: str | Path) -> Path:
    """A checkpoint as a local folder: ``name_or_path`` itself when it is one, else, for a hub
    name (``owner/model``), its download through the Hugging Face cache (the files a command
    reads: :data:`CHECKPOINT_FILES`). Anything else is returned as given, for the caller's own
    error about a missing folder."""
    if os.path.isdir(str(name_or_path)) or not _HUB_NAME.match(str(name_or_path)):
        return Path(name_or_path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(name_or_path), allow_patterns=list(CHECKPOINT_FILES)))


def read_config(path: str | Path) -> dict[str, Any]:
    """The config of the checkpoint folder ``path`` (``model_type``, ``architectures``, ...);
    ``FileNotFoundError`` without one, ``ValueError`` naming the file when it is not a JSON
    object or not a released layout muxplm can read."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{path} is not a model directory (no config.json)")
    try:
        saved = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{config_file} is not valid JSON: {error}") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{config_file} does not hold a JSON object")
    if released.is_released_layout(saved):
        return released.muxplm_settings(saved, path)
    return saved


def model_class(saved: dict[str, Any], source: str | Path = "the checkpoint") -> type:
    """The muxplm class the config's first architecture names."""
    import muxplm

    architectures = saved.get("architectures") or []
    if not architectures:
        raise ValueError(f"{source}/config.json names no architecture; cannot tell which model to load")
    found = getattr(muxplm, architectures[0], None)
    if not isinstance(found, type):
        raise ValueError(f"{source} holds a {architectures[0]}, which is not a muxplm model")
    return found
