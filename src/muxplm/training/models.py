"""Models for the training stages: the MUX class for each family and head, building one from a
preset, a MUX checkpoint or a plain encoder (warm start), and loading a fine-tuned classifier."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..checkpoints import read_config as read_model_config
from ..configuration import SIZE_PRESETS
from ..data import load_tokenizer
from ..families import FAMILIES, family_of_model_type, family_of_mux_type, family_of_plain_type
from ..vocabulary import tokenizer_source
from .config import TrainConfig

CONFIG_CLASSES = {name: family.config_class for name, family in FAMILIES.items()}
# (family, head) -> model class; head = the stage for pre-training, the task kind for fine-tuning.
MODEL_CLASSES = {(name, head): cls for name, family in FAMILIES.items() for head, cls in family.models.items()
                 if head != "base"}
DEFAULT_NEW_DEMUX = "unbind"

logger = logging.getLogger(__name__)



def tokenizer_for(config: TrainConfig, model_dir: str | Path | None, model_type: str | None = None):
    """``--tokenizer`` if given, else the tokenizer saved with the model (of ``model_type``; read
    from its config when not given), else the default (BERT's uncased WordPiece vocabulary) where
    it fits the model's family (:mod:`muxplm.vocabulary`)."""
    if config.tokenizer:
        return load_tokenizer(config.tokenizer)
    if model_dir is None:
        return load_tokenizer()
    return load_tokenizer(tokenizer_source(model_dir, model_type or read_model_config(model_dir).get("model_type")))


def classifier_class(checkpoint: str | Path) -> type:
    """The MUX classifier class (family and head) a fine-tuned checkpoint's ``config.json`` names.
    Raises ``ValueError`` for a checkpoint without a classification head (e.g. an MLM one)."""
    saved = read_model_config(checkpoint)
    family = family_of_mux_type(saved.get("model_type"))
    if family is None:
        raise ValueError(f"{checkpoint} holds a {saved.get('model_type')!r} model, not a MUX model")
    architectures = saved.get("architectures") or []
    kind = next((k for k, marker in (("sentence", "ForSequenceClassification"), ("token", "ForTokenClassification"))
                 if any(marker in a for a in architectures)), None)
    if kind is None:
        found = ", ".join(architectures) or "unknown"
        raise ValueError(
            f"{checkpoint} is not a fine-tuned classifier (it holds {found}); evaluate needs the output of "
            f"`muxplm finetune`"
        )
    return family.models[kind]


def load_classifier(checkpoint: str | Path):
    """A fine-tuned sequence/token classifier and its tokenizer (saved beside it, else the default
    where it fits: :func:`muxplm.vocabulary.tokenizer_source`) from a checkpoint directory.
    Raises ``ValueError`` for a checkpoint without a classification head (e.g. an MLM one)."""
    model = classifier_class(checkpoint).from_pretrained(checkpoint)
    return model, load_tokenizer(tokenizer_source(checkpoint, model.config.model_type))


def with_bert_names(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved config's settings, plus its family's own fields under BERT's names (DistilBERT
    saves ``dim``, ``n_layers``, ...: they are also given as ``hidden_size``, ...)."""
    family = family_of_model_type(saved.get("model_type"))
    aliases = family.config_class.attribute_map if family is not None else {}
    return {**saved, **{alias: saved[field] for alias, field in aliases.items() if field in saved}}


def size_of(model_config) -> str | None:
    """The preset a model config matches, for picking default hyper-parameters; small models
    that match none get the CPU (``tiny``) recipe."""
    for name, sizes in SIZE_PRESETS.items():
        if all(getattr(model_config, key, None) == value for key, value in sizes.items()):
            return name
    return "tiny" if getattr(model_config, "hidden_size", 0) <= 256 else None



def _family(config: TrainConfig, saved: dict[str, Any] | None) -> str:
    if saved is not None:
        family = family_of_mux_type(saved.get("model_type"))
        if family is None:
            raise ValueError(f"cannot start from a {saved.get('model_type')!r} checkpoint; need a MUX one (of the "
                             f"families {', '.join(FAMILIES)}); a plain encoder warm-starts with --init-encoder")
        family = family.name
        if config.family and config.family != family:
            raise ValueError(f"--family {config.family} disagrees with the {family} checkpoint given")
        return family
    return config.family or ("electra" if config.stage == "electra" else "bert")


def _mux_settings(config: TrainConfig) -> dict[str, Any]:
    """The multiplexing fields given by the user. N = 1 defaults to the plain identity model; a
    new MUX model (N > 1, fresh or warm-started) to the unbinding demultiplexer, which primes
    in hundreds of steps where the paper's RSA demultiplexer needs thousands."""
    settings = {}
    if config.num_instances is not None:
        settings["num_instances"] = config.num_instances
    mux, demux = config.mux_type, config.demux_type
    if config.num_instances == 1 or mux == "identity":
        mux, demux = mux or "identity", demux or "identity"
    elif (config.preset or config.init_encoder) and not config.init:
        demux = demux or DEFAULT_NEW_DEMUX
    if mux is not None:
        settings["mux_type"] = mux
    if demux is not None:
        settings["demux_type"] = demux
    return settings


def _config_overrides(config: TrainConfig, labels: dict[str, Any]) -> dict[str, Any]:
    overrides = dict(config.model_overrides)
    if config.dropout is not None:
        overrides.update(hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.dropout)
    for field in ("retrieval_loss_weight", "retrieval_softmax", "sentence_pooling", "num_unmuxed_layers",
                  "mux_key_norm"):
        if getattr(config, field) is not None:
            overrides[field] = getattr(config, field)
    if config.start_unmuxed_layers is not None:  # progressive: the run starts there (train() moves it down)
        overrides["num_unmuxed_layers"] = config.start_unmuxed_layers
    overrides.update(labels)
    return overrides


def build_model(config: TrainConfig, head: str, tokenizer, labels: dict[str, Any], resume_from: Path | None,
                source_config: dict[str, Any] | None = None):
    """The model for a run: from the resume checkpoint, ``init``, ``init_encoder`` or a preset.
    ``source_config`` is the ``config.json`` of the folder it starts from, read here if not given."""
    source = resume_from or config.init or config.init_encoder
    if source_config is None:
        source_config = read_model_config(source) if source else {}
    saved = source_config if resume_from or config.init else None
    if config.init_encoder and resume_from is None:
        family = family_of_plain_type(source_config.get("model_type"), f"--init-encoder {config.init_encoder}").name
        if config.family and config.family != family:
            raise ValueError(f"--family {config.family} disagrees with the {family} checkpoint given")
    else:
        family = _family(config, saved)
    key = (family, head)
    if key not in MODEL_CLASSES:
        raise ValueError(f"stage {config.stage!r} does not apply to a MUX-{family.upper()} model"
                         + (f" (MUX-{family.upper()} pre-trains with --stage {FAMILIES[family].pretraining_stage})"
                            if head in ("mlm", "electra") else ""))
    model_class = MODEL_CLASSES[key]
    overrides = _config_overrides(config, labels)
    mux = _mux_settings(config)
    classifier = head in ("sentence", "token")
    if resume_from is not None:
        model = model_class.from_pretrained(resume_from)
    elif config.init:
        if config.model_overrides:
            raise ValueError("--model-overrides only applies to a fresh --preset model")
        if config.keep_layers is not None:  # a cut encoder: the weights of the layers past k are left out
            layers = with_bert_names(saved)["num_hidden_layers"]
            if not 1 <= config.keep_layers <= layers:
                raise ValueError(f"keep_layers must lie in [1, {layers}] for the {layers}-layer checkpoint "
                                 f"{config.init}, got {config.keep_layers}")
            # Transformers sets the override after validating the saved config, so the unmuxed
            # layers a cut keeps are checked here: more than k would leave the model inconsistent.
            unmuxed = overrides.get("num_unmuxed_layers", saved.get("num_unmuxed_layers", 0))
            if unmuxed > config.keep_layers:
                raise ValueError(f"keep_layers={config.keep_layers} cuts below the {unmuxed} unmuxed layers of "
                                 f"{config.init}: keep at least {unmuxed}")
            overrides["num_hidden_layers"] = config.keep_layers
        model = model_class.from_pretrained(config.init, **mux, **overrides, ignore_mismatched_sizes=classifier,
                                            regroup=config.regroup_instances)
        if classifier:  # a retrieval or MLM head has no labels to disagree with
            _say_if_head_restarts(saved, model, config.init)
    elif config.init_encoder:
        mux.setdefault("num_instances", 2)
        model = model_class.from_encoder(config.init_encoder, keep_layers=config.keep_layers, **mux, **overrides)
    elif config.preset:
        model_config = CONFIG_CLASSES[family].from_preset(
            config.preset, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **mux, **overrides
        )
        model = model_class(model_config)
    else:
        raise ValueError("choose the model: --preset tiny|small|base|large, --init CHECKPOINT_DIR or "
                         "--init-encoder PLAIN_ENCODER_DIR")
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary holds only "
                         f"{model.config.vocab_size}")
    return model



def _say_if_head_restarts(saved: dict[str, Any], model, init: str) -> None:
    """Transformers' own notice is silenced (``_quiet_libraries``): a classifier whose trained
    head does not fit the new task, and so starts from scratch, is announced here."""
    wanted = type(model).__name__
    # A config saved without labels has Transformers' default of two.
    previous = len(saved.get("id2label") or {}) or saved.get("num_labels") or 2
    if wanted in (saved.get("architectures") or []) and previous != model.config.num_labels:
        logger.warning("%s holds a %s head for %d labels; this task has %d, so the classifier head starts from "
                       "scratch (the encoder is kept)", init, wanted, previous, model.config.num_labels)
