"""A checkpoint folder's ``config.json`` as muxplm sees it, the model class it names, and the model.

Every command that takes a checkpoint (``finetune --init``, ``evaluate``, ``serve``, ``bench
throughput --model``, ``export``) reads it here. The inference path (``evaluate``, ``serve``,
``export``) reads it once through ``AutoConfig`` (:func:`load_config`) and hands the config on
(:func:`model_class`, :func:`load_model`). :func:`read_config` gives the raw settings, for the
training code that also starts from plain encoders: a muxplm checkpoint's config as saved; a
folder released with the paper (the authors' layout, :mod:`muxplm.released`) as the muxplm config
of the same model. Both read the file through Transformers (:func:`saved_config` is the raw
reader, which the models' ``from_pretrained`` also uses). A file that is not JSON is named in the
error.
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


def saved_config(name_or_path: str | Path, **hub) -> dict[str, Any] | None:
    """A checkpoint's ``config.json`` as saved, read by Transformers' own reader
    (``PretrainedConfig.get_config_dict``): a local folder's, or a hub model's through the Hugging
    Face cache (``hub``: ``revision``, ``cache_dir``, ``token``, ``local_files_only``). ``None`` for
    a folder without one or a name that is neither a folder nor a hub name; ``ValueError`` naming the
    file when it is not a JSON object; the hub's own error when it cannot provide the file."""
    from transformers import PretrainedConfig

    path = str(name_or_path)
    config_file = Path(path) / "config.json"
    is_folder = os.path.isdir(path)
    # A hub name: owner/model, or a legacy one-part name such as bert-base-uncased.
    if (is_folder and not config_file.is_file()) or \
            (not is_folder and not (_HUB_NAME.match(path) or re.fullmatch(r"[\w.-]+", path))):
        return None
    try:
        saved, _ = PretrainedConfig.get_config_dict(path, **hub)
    except OSError as error:  # Transformers' report of a file it cannot parse
        if isinstance(error.__context__, (json.JSONDecodeError, UnicodeDecodeError)):
            raise ValueError(f"{config_file} is not valid JSON: {error.__context__}") from None
        raise
    if not isinstance(saved, dict):
        raise ValueError(f"{config_file} does not hold a JSON object")
    return saved


def read_config(path: str | Path) -> dict[str, Any]:
    """The settings of the checkpoint folder ``path`` (``model_type``, ``architectures``, ...) as
    muxplm's: a folder released with the paper reads as the muxplm config of the same model.
    ``FileNotFoundError`` without a config.json; ``ValueError`` naming the file when it is not a
    JSON object or not a released layout muxplm can read."""
    saved = saved_config(path) if Path(path).is_dir() else None
    if saved is None:
        raise FileNotFoundError(f"{path} is not a model directory (no config.json)")
    if released.is_released_layout(saved):
        return released.muxplm_settings(saved, path)
    return saved


def load_config(path: str | Path):
    """The config of the checkpoint folder ``path``, read once through Transformers' ``AutoConfig``
    (where ``import muxplm`` registers the MUX configs), to be handed on to :func:`model_class` and
    :func:`load_model`. A folder released with the paper reads as the BERT / ELECTRA config with the
    authors' fields that it holds. ``FileNotFoundError`` without a config.json, ``ValueError``
    naming the file when it is not valid JSON."""
    from transformers import AutoConfig

    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{path} is not a model directory (no config.json)")
    try:
        return AutoConfig.from_pretrained(str(path))
    except OSError as error:  # Transformers' report of a file it cannot parse
        if isinstance(error.__context__, (json.JSONDecodeError, UnicodeDecodeError)):
            raise ValueError(f"{config_file} is not valid JSON: {error.__context__}") from None
        raise


def is_released_config(config) -> bool:
    """Whether ``config`` (from :func:`load_config`) is that of a folder released with the paper."""
    return released.is_released_layout(config.to_dict())


def model_class(config, source: str | Path = "the checkpoint") -> type:
    """The muxplm class that a checkpoint's config (from :func:`load_config`) names by its first
    architecture; for a folder released with the paper, the muxplm class of the same model."""
    import muxplm

    if is_released_config(config):
        architectures = [released.CLASS_OF_ARCHITECTURE[released.architecture_of(config.to_dict(), source)]]
    else:
        architectures = config.architectures or []
    if not architectures:
        raise ValueError(f"{source}/config.json names no architecture; cannot tell which model to load")
    found = getattr(muxplm, architectures[0], None)
    if not isinstance(found, type):
        raise ValueError(f"{source} holds a {architectures[0]}, which is not a muxplm model")
    return found


def load_model(path: str | Path, config=None, **kwargs):
    """The muxplm model of the checkpoint folder ``path``, of the class its config names, built
    from ``config`` (:func:`load_config`; read here when not given) rather than a second reading
    of config.json. ``kwargs`` go to ``from_pretrained``."""
    config = load_config(path) if config is None else config
    cls = model_class(config, path)
    if is_released_config(config):
        # Converted by the loader from the folder itself, which also counts the labels of a
        # config without them from the classifier's weights.
        return cls.from_pretrained(str(path), **kwargs)
    return cls.from_pretrained(str(path), config=config, **kwargs)
