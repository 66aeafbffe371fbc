"""MUX-ELECTRA: ELECTRA's embeddings and encoder layers, multiplexed, trained by
replaced-token detection against a uniform random generator (no generator network)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.electra.modeling_electra import (
    ElectraDiscriminatorPredictions,
    ElectraEmbeddings,
    ElectraEncoder,
)

from .configuration import MuxElectraConfig
from .demux import build_demux
from .modeling_mux import (
    MuxBackboneMixin,
    MuxHeadMixin,
    MuxPreTrainedModel,
    MuxPreTrainingOutput,
    MuxRetrievalMixin,
    MuxSequenceClassificationMixin,
    MuxTokenClassificationMixin,
    RetrievalHead,
    mix_retrieval,
    validate_labels,
)
from .mux import build_mux
from .released import ReleasedElectraSentenceHead, ReleasedHead, is_released


class MuxElectraPreTrainedModel(MuxPreTrainedModel):
    config_class = MuxElectraConfig
    config: MuxElectraConfig
    base_model_prefix = "electra"
    plain_model_types = ("electra",)


class MuxElectraModel(MuxBackboneMixin, MuxElectraPreTrainedModel):
    """The bare MUX-ELECTRA encoder: returns demultiplexed per-instance hidden states."""

    _no_split_modules = ["ElectraEmbeddings", "ElectraLayer"]

    def __init__(self, config: MuxElectraConfig):
        super().__init__(config)
        self.embeddings = ElectraEmbeddings(config)
        if config.embedding_size != config.hidden_size:
            self.embeddings_project = nn.Linear(config.embedding_size, config.hidden_size)
        self.mux = build_mux(config)
        self.encoder = ElectraEncoder(config)
        self.demux = build_demux(config)
        self.post_init()

    def project_embeddings(self, embedded: torch.Tensor) -> torch.Tensor:
        project = getattr(self, "embeddings_project", None)
        return embedded if project is None else project(embedded)


class MuxElectraForRetrieval(MuxRetrievalMixin, MuxElectraPreTrainedModel):
    """Stage 1: token-retrieval priming."""

    base_model_class = MuxElectraModel


class MuxElectraForPreTraining(MuxHeadMixin, MuxElectraPreTrainedModel):
    """Stage 2: replaced-token detection. ``input_ids`` already hold the random
    replacements (see ``muxplm.data.ReplacedTokenCollator``); ``labels`` are 1 where a
    token was replaced, 0 where it is original, -100 where it does not count."""

    base_model_class = MuxElectraModel
    released_head = ReleasedHead(token_types=True)

    def __init__(self, config: MuxElectraConfig):
        super().__init__(config)
        self._build_base(config)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        if config.retrieval_loss_weight:
            self.retrieval_head = RetrievalHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        composition_seed: int | None = None,
        **kwargs,
    ) -> MuxPreTrainingOutput:
        state = self._multiplex(input_ids, attention_mask, token_type_ids, composition_seed=composition_seed)
        logits = self.discriminator_predictions(state.demux_rows())  # [B, L]
        if labels is None:
            return MuxPreTrainingOutput(logits=logits)
        validate_labels(labels, tuple(input_ids.shape), "replaced-token detection")
        counted = labels != -100
        if attention_mask is not None:
            counted &= attention_mask.bool()
        # A weighted mean rather than a boolean selection: no shape depends on the data (no
        # host sync on an accelerator), and a batch without a counted token gives a zero loss.
        per_token = F.binary_cross_entropy_with_logits(logits, labels.clamp(min=0).to(logits.dtype), reduction="none")
        bce = (per_token * counted).sum() / counted.sum().clamp(min=1)
        output = mix_retrieval(self, self.config.discriminator_loss_weight * bce, state)
        output.logits = logits
        return output


class MuxElectraForSequenceClassification(MuxSequenceClassificationMixin, MuxElectraPreTrainedModel):
    """Sentence(-pair) classification or regression (``num_labels=1``); a released model has
    ELECTRA's classification head (dense, GELU, projection) instead of one linear layer."""

    base_model_class = MuxElectraModel
    released_head = ReleasedHead(forces_cls=False, instance_mask=True)

    def build_classifier(self, config) -> tuple[nn.Module, nn.Module]:
        if is_released(config):  # the head has its own dropouts
            return nn.Identity(), ReleasedElectraSentenceHead(config)
        return super().build_classifier(config)


class MuxElectraForTokenClassification(MuxTokenClassificationMixin, MuxElectraPreTrainedModel):
    """A label per token (POS, NER)."""

    base_model_class = MuxElectraModel
    released_head = ReleasedHead(forces_cls=False)
