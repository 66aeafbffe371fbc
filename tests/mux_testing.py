"""Micro-sized models and batches shared by the tests, so the core suite runs in seconds."""

from __future__ import annotations

import itertools

import torch

from muxplm import DEMUX_TYPES, MUX_TYPES, MuxBertConfig  # the built-in variants

MICRO = dict(
    vocab_size=120,
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=40,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def micro_config(config_class=MuxBertConfig, **overrides):
    return config_class(**{**MICRO, **overrides})


def valid_combinations():
    """Every (N, mux, demux) the config accepts, for N in the paper's {1, 2, 5, 10}."""
    combos = []
    for n, mux, demux in itertools.product((1, 2, 5, 10), MUX_TYPES, DEMUX_TYPES):
        try:
            MuxBertConfig(num_instances=n, mux_type=mux, demux_type=demux, **MICRO)
        except ValueError:
            continue
        combos.append((n, mux, demux))
    return combos


COMBOS = valid_combinations()
COMBO_IDS = [f"N{n}-{mux}-{demux}" for n, mux, demux in COMBOS]


def random_batch(batch_size=7, length=9, vocab=MICRO["vocab_size"], seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch_size, length), generator=gen)
    mask = torch.ones_like(ids)
    # Ragged lengths: every row keeps at least two tokens.
    lengths = torch.randint(2, length + 1, (batch_size,), generator=gen)
    mask[torch.arange(length)[None, :] >= lengths[:, None]] = 0
    ids = ids.masked_fill(mask == 0, 0)
    types = torch.zeros_like(ids)
    types[:, length // 2 :] = 1
    types = types * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
