"""MUX-DistilBERT: DistilBERT's embeddings and transformer blocks, multiplexed (see
:mod:`muxplm.modeling_mux`). DistilBERT has no token types and keeps its layers under
``transformer``."""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import get_activation
from transformers.models.distilbert.modeling_distilbert import Embeddings, Transformer, create_sinusoidal_embeddings

from .configuration import MuxDistilBertConfig
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


class MuxDistilBertPreTrainedModel(MuxPreTrainedModel):
    config_class = MuxDistilBertConfig
    config: MuxDistilBertConfig
    base_model_prefix = "distilbert"
    plain_model_types = ("distilbert",)

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, Embeddings) and self.config.sinusoidal_pos_embds:  # fixed, as in DistilBERT
            weight = module.position_embeddings.weight
            init.copy_(weight, create_sinusoidal_embeddings(*weight.shape, weight.new_empty(weight.shape)))


class MuxDistilBertModel(MuxBackboneMixin, MuxDistilBertPreTrainedModel):
    """The bare MUX-DistilBERT encoder: returns demultiplexed per-instance hidden states."""

    _no_split_modules = ["Embeddings", "TransformerBlock"]

    def __init__(self, config: MuxDistilBertConfig):
        super().__init__(config)
        self.embeddings = Embeddings(config)
        self.mux = build_mux(config)
        self.transformer = Transformer(config)
        self.demux = build_demux(config)
        self.post_init()

    def encoder_layers(self) -> nn.ModuleList:
        return self.transformer.layer


class MuxDistilBertForRetrieval(MuxRetrievalMixin, MuxDistilBertPreTrainedModel):
    """Stage 1: token-retrieval priming."""

    base_model_class = MuxDistilBertModel


class MuxDistilBertForMaskedLM(MuxMaskedLMMixin, MuxDistilBertPreTrainedModel):
    """Stage 2: masked language modelling (see :class:`~muxplm.modeling_mux.MuxMaskedLMMixin`)
    with DistilBERT's MLM head, under DistilBertForMaskedLM's parameter names (Transformers
    builds that head inline, not as a module)."""

    base_model_class = MuxDistilBertModel
    _tied_weights_keys = {"vocab_projector.weight": "distilbert.embeddings.word_embeddings.weight"}

    def __init__(self, config: MuxDistilBertConfig):
        super().__init__(config)
        self._build_base(config)
        self.activation = get_activation(config.activation)
        self.vocab_transform = nn.Linear(config.dim, config.dim)
        self.vocab_layer_norm = nn.LayerNorm(config.dim, eps=1e-12)
        self.vocab_projector = nn.Linear(config.dim, config.vocab_size)
        if config.retrieval_loss_weight:
            self.retrieval_head = RetrievalHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.vocab_projector

    def set_output_embeddings(self, new_embeddings):
        self.vocab_projector = new_embeddings

    def mlm_logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.vocab_projector(self.vocab_layer_norm(self.activation(self.vocab_transform(states))))


class MuxDistilBertForSequenceClassification(MuxSequenceClassificationMixin, MuxDistilBertPreTrainedModel):
    """Sentence(-pair) classification or regression (``num_labels=1``)."""

    base_model_class = MuxDistilBertModel


class MuxDistilBertForTokenClassification(MuxTokenClassificationMixin, MuxDistilBertPreTrainedModel):
    """A label per token (POS, NER)."""

    base_model_class = MuxDistilBertModel
