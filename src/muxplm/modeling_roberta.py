"""MUX-RoBERTa: RoBERTa's embeddings and encoder layers, multiplexed (see :mod:`muxplm.modeling_mux`).
XLM-RoBERTa and CamemBERT checkpoints have RoBERTa's architecture and warm-start this family."""

from __future__ import annotations

import torch
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings, RobertaEncoder, RobertaLMHead

from .configuration import MuxRobertaConfig
from .demux import build_demux
from .modeling_mux import (
    MuxBackboneMixin,
    MuxMaskedLMMixin,
    MuxPreTrainedModel,
    MuxRetrievalMixin,
    MuxSequenceClassificationMixin,
    MuxTokenClassificationMixin,
    RetrievalHead,
)
from .mux import build_mux


def position_ids_after_padding_index(slot_ids: torch.Tensor, padding_idx: int, num_prefix: int) -> torch.Tensor:
    """RoBERTa's (and MPNet's) position ids ``[S, P + L]`` with a T-MUX prefix of ``num_prefix``
    positions first: real tokens are numbered from ``padding_idx + 1`` and padding keeps
    ``padding_idx``, as the plain embeddings number them; the prefix takes the first numbers."""
    is_token = slot_ids.ne(padding_idx)
    tokens = torch.cumsum(is_token, dim=1) * is_token  # 1, 2, ... on real tokens, 0 on padding
    tokens = torch.where(is_token, tokens + num_prefix, tokens) + padding_idx
    prefix = torch.arange(num_prefix, device=slot_ids.device) + padding_idx + 1
    return torch.cat([prefix.expand(slot_ids.shape[0], -1), tokens], dim=1)


class MuxRobertaPreTrainedModel(MuxPreTrainedModel):
    config_class = MuxRobertaConfig
    config: MuxRobertaConfig
    base_model_prefix = "roberta"
    plain_model_types = ("roberta", "xlm-roberta", "camembert")


class MuxRobertaModel(MuxBackboneMixin, MuxRobertaPreTrainedModel):
    """The bare MUX-RoBERTa encoder: returns demultiplexed per-instance hidden states."""

    _no_split_modules = ["RobertaEmbeddings", "RobertaLayer"]

    def __init__(self, config: MuxRobertaConfig):
        super().__init__(config)
        self.embeddings = RobertaEmbeddings(config)
        self.mux = build_mux(config)
        self.encoder = RobertaEncoder(config)
        self.demux = build_demux(config)
        self.post_init()

    def prefixed_position_ids(self, slot_ids: torch.Tensor, num_prefix: int) -> torch.Tensor:
        return position_ids_after_padding_index(slot_ids, self.embeddings.padding_idx, num_prefix)


class MuxRobertaForRetrieval(MuxRetrievalMixin, MuxRobertaPreTrainedModel):
    """Stage 1: token-retrieval priming."""

    base_model_class = MuxRobertaModel


class MuxRobertaForMaskedLM(MuxMaskedLMMixin, MuxRobertaPreTrainedModel):
    """Stage 2: masked language modelling (see :class:`~muxplm.modeling_mux.MuxMaskedLMMixin`)
    with RoBERTa's LM head."""

    base_model_class = MuxRobertaModel
    _tied_weights_keys = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: MuxRobertaConfig):
        super().__init__(config)
        self._build_base(config)
        self.lm_head = RobertaLMHead(config)
        if config.retrieval_loss_weight:
            self.retrieval_head = RetrievalHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings
        self.lm_head.bias = new_embeddings.bias

    def mlm_logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.lm_head(states)


class MuxRobertaForSequenceClassification(MuxSequenceClassificationMixin, MuxRobertaPreTrainedModel):
    """Sentence(-pair) classification or regression (``num_labels=1``)."""

    base_model_class = MuxRobertaModel


class MuxRobertaForTokenClassification(MuxTokenClassificationMixin, MuxRobertaPreTrainedModel):
    """A label per token (POS, NER)."""

    base_model_class = MuxRobertaModel
