"""The one inference path of a MUX model: tokenized instances in, one prediction per instance out.

Evaluation (:mod:`muxplm.training.evaluate`), the :class:`~muxplm.serving.Predictor` behind the
server and ONNX Runtime (:class:`~muxplm.serving.onnx_export.OnnxRuntimeClassifier`) all run
these steps, so what evaluation measures is what the server answers:

1. :func:`pad_batch`: the instances as one padded batch (a released model's inputs at their
   fixed length), validated on the host;
2. :func:`forward_pass`: one multiplexed forward pass over it, the instances grouped in the order
   given or by a composition seed (:func:`muxplm.grouping.plan_groups`, inside the model or
   :func:`~muxplm.serving.onnx_export.run_graph`), one output per instance;
3. :func:`forward_batches`: a list of instances in passes of ``batch_size``, each grouped by a
   composition seed that depends on the seed asked for and the pass's index only;
4. :func:`decode`: an instance's output as its prediction (class id, score, or an id per token).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .devices import inputs_checked_on_host
from .modeling_mux import validate_inputs
from .released import input_length

# The task with one output row per instance; token and reconstruct outputs have one per token.
SENTENCE_TASK = "sentence"


@dataclass
class Encoded:
    """One tokenized instance.

    ``word_starts`` (token tasks): token position of each whitespace word's first sub-word,
    ``-1`` for words cut off by truncation.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    words: list[str] | None = None
    word_starts: list[int] | None = None
    truncated: bool = False

    def __len__(self) -> int:
        return len(self.input_ids)

    @classmethod
    def from_features(cls, row: dict[str, Any]) -> Encoded:
        """A tokenized dataset row (``input_ids``, optionally ``token_type_ids``; the tokenizer's
        own output, unpadded) as an instance."""
        ids = list(row["input_ids"])
        types = row.get("token_type_ids")
        return cls(ids, list(types) if types is not None else [0] * len(ids))


def pad_token_id(tokenizer, config) -> int:
    """The id that pads a batch: the tokenizer's, else the model config's, else 0."""
    pad = getattr(tokenizer, "pad_token_id", None)
    return pad if pad is not None else (config.pad_token_id or 0)


def pad_batch(encoded: Sequence[Encoded], config, pad_token_id: int, *, rows: int | None = None,
              length: int | None = None) -> dict[str, torch.Tensor]:
    """The instances right-padded into one batch of host tensors (``input_ids``,
    ``attention_mask``, ``token_type_ids``), checked against ``config``
    (:func:`muxplm.modeling_mux.validate_inputs`). ``rows`` / ``length`` pad it further: rows past
    the instances are empty (attention mask all zero), fillers that join no real group."""
    # The paper's released models attend to padding: their inputs have the fixed length they
    # were trained with.
    length = max(length or 0, max(len(item) for item in encoded), input_length(config) or 0)
    rows = max(rows or 0, len(encoded))
    ids = torch.full((rows, length), pad_token_id, dtype=torch.long)
    types = torch.zeros((rows, length), dtype=torch.long)
    mask = torch.zeros((rows, length), dtype=torch.long)
    # One tensor from padded lists, not one per row: a pass of 64 short texts spent more time making
    # 128 small tensors than some of its layers.
    count, lengths = len(encoded), [len(item) for item in encoded]
    ids[:count] = torch.tensor([list(item.input_ids) + [pad_token_id] * (length - n)
                                for item, n in zip(encoded, lengths)], dtype=torch.long).view(count, length)
    types[:count] = torch.tensor([list(item.token_type_ids) + [0] * (length - n)
                                  for item, n in zip(encoded, lengths)], dtype=torch.long).view(count, length)
    mask[:count] = torch.arange(length) < torch.tensor(lengths)[:, None]
    validate_inputs(config, ids, mask, types)  # on the host, once: the pass reads nothing back
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


@torch.inference_mode()
def forward_pass(model, encoded: Sequence[Encoded], *, task: str, pad_token_id: int,
                 composition_seed: int | None = None, ensemble: bool = False, rows: int | None = None,
                 length: int | None = None, device: torch.device | str | None = None,
                 forward: Callable | None = None) -> list[torch.Tensor]:
    """One multiplexed forward pass of ``model`` over ``encoded``.

    Args:
        model: a MUX model, or anything called like one that has its ``config`` (an
            :class:`~muxplm.serving.onnx_export.OnnxRuntimeClassifier`, an int8 copy).
        task: ``"sentence"`` (one output row per instance), ``"token"`` or ``"reconstruct"``
            (one per token, trimmed to the instance's length).
        composition_seed: which instances share a group (``None``: the order given).
        ensemble: every instance in N copies, their outputs averaged.
        rows, length: pad the batch further (:func:`pad_batch`).
        device: where the batch goes (default: the model's device).
        forward: what runs the batch, if not ``model`` itself (a compiled model; a function of
            the batch's keywords, ``composition_seed`` and ``ensemble``).

    Returns one CPU tensor per instance (floating outputs as float32): sentence ``[C]``,
    token ``[L_i, C]``, reconstruct ``[L_i]`` (retrieved token ids).
    """
    batch = pad_batch(encoded, model.config, pad_token_id, rows=rows, length=length)
    device = device if device is not None else getattr(model, "device", "cpu")
    batch = {key: value.to(device) for key, value in batch.items()}
    with inputs_checked_on_host():  # validated above: the pass reads nothing back from a GPU
        out = (model if forward is None else forward)(**batch, composition_seed=composition_seed, ensemble=ensemble)
    out = getattr(out, "logits", out)[: len(encoded)]  # an ONNX Runtime graph returns the logits themselves
    out = out.float().cpu() if out.is_floating_point() else out.cpu()
    if task == SENTENCE_TASK:
        return list(out)
    return [out[row, : len(item)] for row, item in enumerate(encoded)]


def batch_composition_seed(composition_seed: int | None, batch_index: int) -> int | None:
    """The composition seed of the ``batch_index``-th pass: a different composition per pass,
    fixed by the seed asked for and the pass's index (``None`` stays ``None``: input order)."""
    return None if composition_seed is None else composition_seed * 1_000_003 + batch_index


def forward_batches(run_pass: Callable[..., list], encoded: Sequence, *, batch_size: int,
                    composition_seed: int | None = None, shard: tuple[int, int] = (0, 1),
                    first_pass: int = 0) -> list:
    """The outputs of every instance of ``encoded``, in order, from passes of ``batch_size``
    instances: ``run_pass(instances, composition_seed=...)`` (e.g. :func:`forward_pass` with its
    other arguments bound; one output per instance), pass ``i`` grouped by
    :func:`batch_composition_seed` of index ``first_pass + i``. ``first_pass``: where these passes
    start in a longer run (a file labelled part by part), so that no two parts share a composition.

    ``shard=(rank, world)``: this process runs every world-th pass and every process gets all
    outputs back (Accelerate's ``gather_object``); since a pass's composition depends on its
    index only, the outputs do not depend on the number of processes.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rank, world = shard
    mine: list[tuple[int, int, list]] = []  # (pass index, its first instance, its outputs)
    for index, start in enumerate(range(0, len(encoded), batch_size)):
        if index % world != rank:
            continue
        seed = batch_composition_seed(composition_seed, first_pass + index)
        mine.append((index, start, run_pass(encoded[start : start + batch_size], composition_seed=seed)))
    if world > 1:
        from accelerate.utils import gather_object

        mine = gather_object(mine)
    return [output for _, _, outputs in sorted(mine, key=lambda part: part[0]) for output in outputs]


def decode(output: torch.Tensor, task: str, is_regression: bool = False) -> int | float | list[int]:
    """An instance's prediction from its output (:func:`forward_pass`): a sentence task's class
    id (regression: its score), a token task's class id per token, reconstruct's token ids."""
    if task == SENTENCE_TASK:
        return float(output[0]) if is_regression else int(output.argmax(-1))
    if task == "token":
        return output.argmax(-1).tolist()
    return output.tolist()
