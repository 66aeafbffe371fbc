"""``muxplm convert``: a plain pretrained encoder (any family of :mod:`muxplm.families`: BERT,
ELECTRA, RoBERTa / XLM-R / CamemBERT, DistilBERT, MPNet) -> a MUX-PLM that fine-tunes well; or a
MUX checkpoint -> the same encoder at another N (a curriculum over N, ``regroup_instances``).

One priming stage on the plain model's own weights (warm start) with the conversion recipe
below (optionally distilling the plain encoder's per-instance states: ``teacher``); the result
is a MUX checkpoint for ``muxplm finetune --init``, which records the recipe (``convert``) so that
its fine-tuning takes the conversion's learning rates by default. Every setting can be
overridden (flags, ``--config`` file, or keyword arguments of :func:`convert`).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from .config import TrainConfig, build_config
from .recipes import CONVERT_RECIPE, GPU_CONVERT_RECIPE

def conversion_settings(plain_dir: str | Path, num_instances: int, gpu: bool = False,
                        keep_layers: int | None = None) -> dict[str, Any]:
    """The recipe for one encoder (``gpu``: the GPU recipe): keys of norm sqrt(hidden_size), so
    that each entry is of unit scale and the mixture keeps the scale of the states the
    pretrained layers expect; at most all but one layer run unmuxed."""
    import torch
    from transformers import AutoConfig

    from ..families import family_of_plain_type

    if gpu and not torch.cuda.is_available():
        raise ValueError("the --gpu conversion recipe needs a CUDA device; without one, leave --gpu off "
                         "(the CPU recipe: minutes on two cores)")
    plain = AutoConfig.from_pretrained(plain_dir)
    if plain.model_type.startswith("mux_"):
        # A curriculum over N: go on from a MUX checkpoint's encoder (already used to mixtures) at
        # another N, with its own demultiplexer type and unmuxed layers unless given.
        if keep_layers:
            raise ValueError("--keep-layers cuts a plain encoder; a MUX checkpoint keeps its layers")
        recipe = {k: v for k, v in CONVERT_RECIPE.items() if k not in ("demux_type", "num_unmuxed_layers")}
        return dict(recipe, **(GPU_CONVERT_RECIPE if gpu else {}), init=str(plain_dir), regroup_instances=True,
                    num_instances=num_instances, recipe="convert")
    family_of_plain_type(plain.model_type, f"convert {plain_dir}")  # a clear refusal of any other model
    settings = dict(CONVERT_RECIPE, **(GPU_CONVERT_RECIPE if gpu else {}), init_encoder=str(plain_dir),
                    num_instances=num_instances, mux_key_norm=math.sqrt(plain.hidden_size), recipe="convert")
    layers = min(keep_layers or plain.num_hidden_layers, plain.num_hidden_layers)
    settings["num_unmuxed_layers"] = min(settings["num_unmuxed_layers"], layers - 1)
    return settings


def conversion_config(plain_dir: str | Path, num_instances: int, output_dir: str | Path,
                      file_settings: dict[str, Any] | None = None, gpu: bool = False, **overrides) -> TrainConfig:
    """The :class:`TrainConfig` of a conversion: the recipe (``gpu``: the GPU recipe), then a
    config file's settings, then ``overrides`` (``None`` values are ignored, as for unset flags)."""
    if not isinstance(num_instances, int) or num_instances < 2:
        raise ValueError(f"convert multiplexes N >= 2 instances, got --num-instances {num_instances!r}")
    given = {**(file_settings or {}), **{key: value for key, value in overrides.items() if value is not None}}
    if given.get("stage", "retrieval") != "retrieval":
        raise ValueError(f"convert runs the retrieval stage, not {given['stage']!r}")
    if given.get("init") or given.get("preset"):
        raise ValueError("convert starts from the plain encoder it is given; --init/--preset do not apply")
    # build_config layers the flags (None: unset) over the file settings, as for every stage.
    recipe = conversion_settings(plain_dir, num_instances, gpu, keep_layers=given.get("keep_layers"))
    return build_config({**recipe, **(file_settings or {})},
                        **overrides, output_dir=str(output_dir))


# What the MLM stage after a conversion's priming shares with it: the block length, the corpus and
# the run's bookkeeping.
_CARRIED = ("max_length", "train_file", "dataset", "preprocessing_num_workers", "cache_dir", "corpus_max_words", "corpus_sources",
            "seed", "mixed_precision", "dataloader_workers", "report_to", "progress", "resume")


def conversion_with_mlm(config: TrainConfig) -> tuple[TrainConfig, TrainConfig]:
    """``convert --mlm-steps S``: the conversion's priming into ``OUTPUT_DIR/priming``, then S steps
    of MLM on mixtures (the convert recipe's: auxiliary retrieval loss, encoder at 1e-4) into
    ``OUTPUT_DIR`` (a ``teacher`` distils in the priming only)."""
    priming = dataclasses.replace(config, output_dir=str(Path(config.output_dir) / "priming"), mlm_steps=None)
    carried = {name: getattr(config, name) for name in _CARRIED}
    return priming, TrainConfig(stage="mlm", output_dir=config.output_dir, recipe="convert", max_steps=config.mlm_steps,
                                **carried)


def convert(plain_dir: str | Path, num_instances: int, output_dir: str | Path, gpu: bool = False,
            **overrides) -> dict[str, Any]:
    """Convert the plain encoder in ``plain_dir`` into an N-instance MUX model in
    ``output_dir`` (``gpu``: with the GPU recipe); returns the run summary. ``overrides`` are
    :class:`TrainConfig` fields."""
    from .stages import after_priming, run_stage

    config = conversion_config(plain_dir, num_instances, output_dir, gpu=gpu, **overrides)
    return run_stage(config) if not config.mlm_steps else after_priming(*conversion_with_mlm(config))
