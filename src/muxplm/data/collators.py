"""Batch collators: padding, MLM masking and ELECTRA-style random replacement (torch only).

Each takes a list of feature dicts (lists of ints, as the tokenization functions produce) and
returns a dict of tensors; padding is Transformers' (``DataCollatorWithPadding`` /
``DataCollatorForTokenClassification``), the corruption is ours: an exact count per instance
from a seeded generator of the collator's own, so that a batch's masks depend on its index only.
Masking is per instance, before any multiplexing, as the paper does. Token ids ([PAD], [MASK], specials) always come from the tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

from ..metrics import IGNORE_INDEX

__all__ = ["PaddingCollator", "MLMCollator", "ReplacedTokenCollator"]


class PaddingCollator:
    """Right-pad a batch with Transformers' collators: ``DataCollatorForTokenClassification``
    when the labels are per token (padded with ``label_pad``, -100: ignored by the losses),
    ``DataCollatorWithPadding`` otherwise. Input keys pad as the tokenizer says ([PAD] ids,
    zero attention and token types); scalar labels become a 1-D tensor, int64 class ids or
    float32 regression targets. Text columns are refused: remove them before collating.
    """

    def __init__(self, tokenizer, label_pad: int = IGNORE_INDEX, pad_to_multiple_of: int | None = None,
                 pad_to_length: int | None = None):
        if tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token")
        self.pad_token_id = tokenizer.pad_token_id
        # A fixed length (``pad_to_length``) for the models whose outputs depend on it: the paper's
        # released checkpoints attend to padding (:func:`muxplm.released.input_length`).
        padding = dict(padding="max_length", max_length=pad_to_length) if pad_to_length else {}
        self.per_token = DataCollatorForTokenClassification(
            tokenizer, label_pad_token_id=label_pad, pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt",
            **padding)
        self.per_example = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt",
                                                   **padding)

    def __call__(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("empty batch")
        for key, value in features[0].items():
            if isinstance(value, str):
                raise TypeError(f"feature {key!r} has non-numeric values (str); remove text columns before collating")
        labels = features[0].get("labels")
        per_token = isinstance(labels, (list, tuple)) or (torch.is_tensor(labels) and labels.dim() > 0)
        batch = dict((self.per_token if per_token else self.per_example)(list(features)))
        if "labels" in batch and batch["labels"].is_floating_point():
            batch["labels"] = batch["labels"].float()
        return batch


class _CorruptingCollator:
    """Shared parts: padding, candidate positions, exact-count sampling, random tokens."""

    def __init__(self, tokenizer, probability: float, seed: int | None):
        if not 0.0 < probability < 1.0:
            raise ValueError("probability must be in (0, 1)")
        self.tokenizer = tokenizer
        self.probability = probability
        self.pad = PaddingCollator(tokenizer)
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
        vocab = torch.arange(len(tokenizer))
        # Random replacements never produce special tokens ([CLS], [PAD], [MASK] ...).
        self.replacement_ids = vocab[~torch.isin(vocab, self.special_ids)]
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()  # fresh non-deterministic seed, global RNG untouched
        else:
            self.generator.manual_seed(seed)

    def _candidates(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Real (attended), non-special positions: the only ones that may be corrupted."""
        ids = batch["input_ids"]
        real = batch["attention_mask"].bool() if "attention_mask" in batch else \
            ids != self.pad.pad_token_id
        special = batch.pop("special_tokens_mask", None)
        special = special.bool() if special is not None else torch.isin(ids, self.special_ids)
        return real & ~special & ~torch.isin(ids, self.special_ids)

    def _select(self, candidates: torch.Tensor) -> torch.Tensor:
        """Per instance choose round(p * n) (at least 1) of its n candidates uniformly."""
        n = candidates.sum(dim=1)
        k = torch.clamp(torch.round(n.float() * self.probability).long(), min=1)
        k = torch.minimum(k, n)
        scores = torch.rand(candidates.shape, generator=self.generator)
        scores[~candidates] = 2.0  # non-candidates sort last
        ranks = scores.argsort(dim=1).argsort(dim=1)
        return (ranks < k[:, None]) & candidates

    def _random_tokens(self, shape) -> torch.Tensor:
        idx = torch.randint(len(self.replacement_ids), shape, generator=self.generator)
        return self.replacement_ids[idx]


class MLMCollator(_CorruptingCollator):
    """BERT masked-LM corruption per instance.

    Of each instance's real non-special tokens, ``round(mlm_probability * n)`` (at least one) are
    chosen; of those 80% become [MASK], 10% a uniformly random non-special vocabulary token,
    10% stay unchanged. ``labels`` = original id at chosen positions, -100 elsewhere.
    ``seed`` makes the masks reproducible (the generator advances from batch to batch).
    """

    def __init__(self, tokenizer, mlm_probability: float = 0.15, seed: int | None = None):
        super().__init__(tokenizer, mlm_probability, seed)
        if tokenizer.mask_token_id is None:
            raise ValueError("tokenizer has no [MASK] token")
        self.mask_token_id = tokenizer.mask_token_id

    def __call__(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        batch = self.pad([{k: v for k, v in f.items() if k != "labels"} for f in features])
        chosen = self._select(self._candidates(batch))
        ids = batch["input_ids"]
        labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
        r = torch.rand(ids.shape, generator=self.generator)
        to_mask = chosen & (r < 0.8)
        to_random = chosen & (r >= 0.8) & (r < 0.9)
        ids = torch.where(to_mask, torch.full_like(ids, self.mask_token_id), ids)
        ids = torch.where(to_random, self._random_tokens(ids.shape), ids)
        batch["input_ids"], batch["labels"] = ids, labels
        return batch


class ReplacedTokenCollator(_CorruptingCollator):
    """ELECTRA-style replaced-token detection without a generator network (MUX-ELECTRA).

    ``round(replace_probability * n)`` (at least one) of each instance's real non-special tokens
    are replaced by uniformly random non-special vocabulary tokens. ``labels``: 1 where the token
    now differs from the original, 0 on the other real tokens (including a "replacement" that
    happened to draw the same id), -100 on padding and special tokens.
    """

    def __init__(self, tokenizer, replace_probability: float = 0.15, seed: int | None = None):
        super().__init__(tokenizer, replace_probability, seed)

    def __call__(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        batch = self.pad([{k: v for k, v in f.items() if k != "labels"} for f in features])
        candidates = self._candidates(batch)
        chosen = self._select(candidates)
        orig = batch["input_ids"]
        ids = torch.where(chosen, self._random_tokens(orig.shape), orig)
        labels = torch.full_like(orig, IGNORE_INDEX)
        labels[candidates] = (ids != orig)[candidates].long()
        batch["input_ids"], batch["labels"] = ids, labels
        return batch
