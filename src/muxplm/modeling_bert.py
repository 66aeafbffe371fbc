"""MUX-BERT: BERT's embeddings and encoder layers, multiplexed (see :mod:`muxplm.modeling_mux`)."""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.bert.modeling_bert import BertEmbeddings, BertEncoder, BertOnlyMLMHead

from .configuration import MuxBertConfig
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
from .released import ReleasedHead, is_released


class MuxBertPreTrainedModel(MuxPreTrainedModel):
    config_class = MuxBertConfig
    config: MuxBertConfig
    base_model_prefix = "bert"
    plain_model_types = ("bert",)


class MuxBertModel(MuxBackboneMixin, MuxBertPreTrainedModel):
    """The bare MUX-BERT encoder: returns demultiplexed per-instance hidden states."""

    _no_split_modules = ["BertEmbeddings", "BertLayer"]

    def __init__(self, config: MuxBertConfig):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.mux = build_mux(config)
        self.encoder = BertEncoder(config)
        self.demux = build_demux(config)
        self.post_init()


class MuxBertForRetrieval(MuxRetrievalMixin, MuxBertPreTrainedModel):
    """Stage 1: token-retrieval priming."""

    base_model_class = MuxBertModel


class MuxBertForMaskedLM(MuxMaskedLMMixin, MuxBertPreTrainedModel):
    """Stage 2: masked language modelling (see :class:`~muxplm.modeling_mux.MuxMaskedLMMixin`)
    with BERT's MLM head."""

    base_model_class = MuxBertModel
    released_head = ReleasedHead(token_types=True, demux_path="mlm")
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: MuxBertConfig):
        super().__init__(config)
        self._build_base(config)
        self.cls = BertOnlyMLMHead(config)
        if is_released(config) and config.demux_type == "prefix":
            # The released prefix model's masked-LM stack ends in its own LayerNorm: no transform.
            self.cls.predictions.transform = nn.Identity()
        if config.retrieval_loss_weight:
            self.retrieval_head = RetrievalHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def mlm_logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.cls(states)


class MuxBertForSequenceClassification(MuxSequenceClassificationMixin, MuxBertPreTrainedModel):
    """Sentence(-pair) classification or regression (``num_labels=1``)."""

    base_model_class = MuxBertModel
    released_head = ReleasedHead(instance_mask=True)


class MuxBertForTokenClassification(MuxTokenClassificationMixin, MuxBertPreTrainedModel):
    """A label per token (POS, NER)."""

    base_model_class = MuxBertModel
