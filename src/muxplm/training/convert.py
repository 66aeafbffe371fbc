"""``muxplm convert``: a plain pretrained encoder (any family of :mod:`muxplm.families`: BERT,
ELECTRA, RoBERTa / XLM-R / CamemBERT, DistilBERT, MPNet) -> a MUX-PLM that fine-tunes well.

One priming stage on the plain model's own weights (warm start) with the conversion recipe
below (optionally distilling the plain encoder's per-instance states: ``teacher``); the result
is a MUX checkpoint for ``muxplm finetune --init``. Every setting can be
overridden (flags, ``--config`` file, or keyword arguments of :func:`convert`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .config import TrainConfig, build_config

# Measured on MiniLM (benchmarks/results/curves/convert, 2-core CPU): 200 priming steps of 32
# groups of 32-token blocks; the fresh modules' learning rate rises to 2e-4 over the run, the
# encoder's to 2e-5. Three of MiniLM's six layers run unmuxed: with the same fine-tuning compute
# as plain MiniLM that keeps 96.3 / 94.0 / 90.7 % of its sentence-task average at N = 2 / 5 / 10
# and runs 1.5x / 1.9x / 1.9x as fast; two keep 92.2 / 86.3 / 88.7 % at 1.6x / 2.0x / 2.3x, none
# left N = 2 sentiment at 68.5 % (benchmarks/results/reproduce/convert-k3, .../convert).
# It is the most accurate conversion found, but not ahead of MiniLM cut to its first layers
# (--keep-layers) at the same speed (benchmarks/results/convert-pareto). With every layer on
# the mixture (K = 0), 15x the priming or distilling the plain encoder's states for as long
# did not lift the fine-tuned score (benchmarks/results/convert-curves).
# Distilling the plain encoder's states as well (--teacher PLAIN_DIR) changed nothing measurable
# at twice the step cost, so it is off.
CONVERT_RECIPE: dict[str, Any] = dict(
    stage="retrieval", demux_type="unbind", batch_groups=32, max_length=32, max_steps=200, lr=2e-4,
    encoder_lr=2e-5, retrieval_softmax="in_batch", warmup_ratio=1.0, weight_decay=0.01, eval_steps=100,
    save_steps=100, logging_steps=10, num_unmuxed_layers=3,
)
# On a GPU (``muxplm convert --gpu``): the measured recipe as it is, in bf16 (seconds to minutes).
# Not longer: three times the priming steps doubled N = 10's held-out retrieval (27 -> 56 %) but
# fine-tuned no better on trec and 2.4 points worse on sentiment (benchmarks/README.md,
# *Longer conversion priming*). Conversions ran on an H100 in fp32 (benchmarks/results/convert-curves);
# this bf16 recipe itself has not.
GPU_CONVERT_RECIPE: dict[str, Any] = dict(mixed_precision="bf16")


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
    family_of_plain_type(plain.model_type, f"convert {plain_dir}")  # a clear refusal of any other model
    settings = dict(CONVERT_RECIPE, **(GPU_CONVERT_RECIPE if gpu else {}), init_encoder=str(plain_dir),
                    num_instances=num_instances, mux_key_norm=math.sqrt(plain.hidden_size))
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


def convert(plain_dir: str | Path, num_instances: int, output_dir: str | Path, gpu: bool = False,
            **overrides) -> dict[str, Any]:
    """Convert the plain encoder in ``plain_dir`` into an N-instance MUX model in
    ``output_dir`` (``gpu``: with the GPU recipe); returns the run summary. ``overrides`` are
    :class:`TrainConfig` fields."""
    from .stages import run_stage

    return run_stage(conversion_config(plain_dir, num_instances, output_dir, gpu=gpu, **overrides))
