"""MUX-BERT: BERT's embeddings and encoder layers, multiplexed (see :mod:`muxplm.modeling_mux`)."""

from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers.models.bert.modeling_bert import BertEmbeddings, BertEncoder, BertOnlyMLMHead

from .configuration import MuxBertConfig
from .demux import build_demux
from .devices import host_checks_wanted
from .modeling_mux import (
    MuxBackboneMixin,
    MuxHeadMixin,
    MuxPreTrainedModel,
    MuxPreTrainingOutput,
    MuxRetrievalMixin,
    MuxSequenceClassificationMixin,
    MuxTokenClassificationMixin,
    RetrievalHead,
    check_class_ids,
    mix_retrieval,
    validate_labels,
)
from .mux import build_mux


class MuxBertPreTrainedModel(MuxPreTrainedModel):
    config_class = MuxBertConfig
    config: MuxBertConfig
    base_model_prefix = "bert"
    plain_model_type = "bert"


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

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value


class MuxBertForRetrieval(MuxRetrievalMixin, MuxBertPreTrainedModel):
    """Stage 1: token-retrieval priming."""

    base_model_class = MuxBertModel


class MuxBertForMaskedLM(MuxHeadMixin, MuxBertPreTrainedModel):
    """Stage 2: masked language modelling, masks chosen per instance before multiplexing,
    with the optional auxiliary retrieval loss (``config.retrieval_loss_weight``)."""

    base_model_class = MuxBertModel
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: MuxBertConfig):
        super().__init__(config)
        self._build_base(config)
        self.cls = BertOnlyMLMHead(config)
        if config.retrieval_loss_weight:
            self.retrieval_head = RetrievalHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        composition_seed: int | None = None,
        **kwargs,
    ) -> MuxPreTrainingOutput:
        """Without ``labels``: logits for every position, ``[B, L, V]``. With ``labels``
        (``-100`` = not masked): only the masked positions are demultiplexed and scored,
        logits ``[M, V]`` in row-major order of ``labels != -100``; except in a training step
        on an accelerator, which scores every position (``[B, L, V]``, as Transformers'
        BertForMaskedLM) so that no shape depends on the data and the step never waits for the host."""
        state = self._multiplex(input_ids, attention_mask, token_type_ids, composition_seed=composition_seed)
        if labels is None:
            return MuxPreTrainingOutput(logits=self.cls(state.demux_rows()))
        validate_labels(labels, tuple(input_ids.shape), "masked language modelling")
        selected = labels != -100
        if host_checks_wanted(labels, self.training):
            logits = self.cls(state.demux_where(selected))
            targets = labels[selected]
            check_class_ids(targets, self.config.vocab_size, "vocabulary ids (MLM labels: a token id, or -100)",
                            training=self.training)
            # A batch without a single masked token gives a zero loss, not NaN.
            loss = F.cross_entropy(logits, targets) if targets.numel() else logits.sum() * 0.0
        else:  # every position scored, the unmasked ones ignored: no data-dependent shape
            logits = self.cls(state.demux_rows())
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
            loss = loss / selected.sum().clamp(min=1)
        output = mix_retrieval(self, loss, state)
        output.logits = logits
        return output


class MuxBertForSequenceClassification(MuxSequenceClassificationMixin, MuxBertPreTrainedModel):
    """Sentence(-pair) classification or regression (``num_labels=1``)."""

    base_model_class = MuxBertModel


class MuxBertForTokenClassification(MuxTokenClassificationMixin, MuxBertPreTrainedModel):
    """A label per token (POS, NER)."""

    base_model_class = MuxBertModel
