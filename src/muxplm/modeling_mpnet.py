"""MUX-MPNet: MPNet's embeddings and encoder layers, multiplexed (see :mod:`muxplm.modeling_mux`).
MPNet has no token types, numbers positions as RoBERTa does, and adds a relative position bias
to every layer's attention scores: computed once per sequence length and passed to each layer."""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.mpnet.modeling_mpnet import MPNetEmbeddings, MPNetEncoder, MPNetLMHead

from .configuration import MuxMPNetConfig
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
from .modeling_roberta import position_ids_after_padding_index
from .mux import build_mux


class MuxMPNetPreTrainedModel(MuxPreTrainedModel):
    config_class = MuxMPNetConfig
    config: MuxMPNetConfig
    base_model_prefix = "mpnet"
    plain_model_types = ("mpnet",)
    # MPNet's attention is its own eager code: it takes the additive float mask only.
    supports_gradient_checkpointing = False
    _supports_sdpa = False
    _supports_flash_attn = False
    _supports_attention_backend = False


class MuxMPNetModel(MuxBackboneMixin, MuxMPNetPreTrainedModel):
    """The bare MUX-MPNet encoder: returns demultiplexed per-instance hidden states."""

    _no_split_modules = ["MPNetEmbeddings", "MPNetLayer"]

    def __init__(self, config: MuxMPNetConfig):
        super().__init__(config)
        self.embeddings = MPNetEmbeddings(config)
        self.mux = build_mux(config)
        self.encoder = MPNetEncoder(config)
        self.demux = build_demux(config)
        self.post_init()

    def prefixed_position_ids(self, slot_ids: torch.Tensor, num_prefix: int) -> torch.Tensor:
        return position_ids_after_padding_index(slot_ids, self.embeddings.padding_idx, num_prefix)

    def layer_arguments(self, hidden: torch.Tensor) -> dict:
        # The bias depends on the length only: one row, broadcast over the batch by every layer.
        return {"position_bias": self.encoder.compute_position_bias(hidden[:1])}

    def run_layer(self, layer: nn.Module, hidden: torch.Tensor, mask, arguments: dict) -> torch.Tensor:
        return layer(hidden, mask, **arguments)[0]


class MuxMPNetForRetrieval(MuxRetrievalMixin, MuxMPNetPreTrainedModel):
    """Stage 1: token-retrieval priming."""

    base_model_class = MuxMPNetModel


class MuxMPNetForMaskedLM(MuxMaskedLMMixin, MuxMPNetPreTrainedModel):
    """Stage 2: masked language modelling (see :class:`~muxplm.modeling_mux.MuxMaskedLMMixin`)
    with MPNet's LM head."""

    base_model_class = MuxMPNetModel
    _tied_weights_keys = {
        "lm_head.decoder.weight": "mpnet.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: MuxMPNetConfig):
        super().__init__(config)
        self._build_base(config)
        self.lm_head = MPNetLMHead(config)
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


class MuxMPNetForSequenceClassification(MuxSequenceClassificationMixin, MuxMPNetPreTrainedModel):
    """Sentence(-pair) classification or regression (``num_labels=1``)."""

    base_model_class = MuxMPNetModel


class MuxMPNetForTokenClassification(MuxTokenClassificationMixin, MuxMPNetPreTrainedModel):
    """A label per token (POS, NER)."""

    base_model_class = MuxMPNetModel
