"""muxplm: multiplexed pre-trained language models (MUX-PLMs) on PyTorch + Transformers.

Importing the package registers the MUX configs and models with the Transformers Auto
classes, so ``AutoModelForSequenceClassification.from_pretrained(dir)`` loads a MUX model.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration import DEMUX_TYPES, MUX_TYPES, SIZE_PRESETS, MuxBertConfig, MuxElectraConfig
from .demux import DEMUX_REGISTRY, build_demux, register_demux
from .grouping import GroupPlan, plan_groups
from .modeling_bert import (
    MuxBertForMaskedLM,
    MuxBertForRetrieval,
    MuxBertForSequenceClassification,
    MuxBertForTokenClassification,
    MuxBertModel,
    MuxBertPreTrainedModel,
)
from .modeling_electra import (
    MuxElectraForPreTraining,
    MuxElectraForRetrieval,
    MuxElectraForSequenceClassification,
    MuxElectraForTokenClassification,
    MuxElectraModel,
    MuxElectraPreTrainedModel,
)
from .modeling_mux import MuxModelOutput, MuxPreTrainingOutput, MuxRetrievalOutput, validate_inputs
from .mux import MUX_REGISTRY, build_mux, register_mux

__version__ = "0.1.0"

_AUTO_CLASSES = (
    (MuxBertConfig, AutoModel, MuxBertModel),
    (MuxBertConfig, AutoModelForMaskedLM, MuxBertForMaskedLM),
    (MuxBertConfig, AutoModelForPreTraining, MuxBertForMaskedLM),
    (MuxBertConfig, AutoModelForSequenceClassification, MuxBertForSequenceClassification),
    (MuxBertConfig, AutoModelForTokenClassification, MuxBertForTokenClassification),
    (MuxElectraConfig, AutoModel, MuxElectraModel),
    (MuxElectraConfig, AutoModelForPreTraining, MuxElectraForPreTraining),
    (MuxElectraConfig, AutoModelForSequenceClassification, MuxElectraForSequenceClassification),
    (MuxElectraConfig, AutoModelForTokenClassification, MuxElectraForTokenClassification),
)


def _register_auto_classes() -> None:
    for config_class in (MuxBertConfig, MuxElectraConfig):
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    for config_class, auto_class, model_class in _AUTO_CLASSES:
        auto_class.register(config_class, model_class, exist_ok=True)


_register_auto_classes()

__all__ = [
    "DEMUX_REGISTRY",
    "DEMUX_TYPES",
    "MUX_REGISTRY",
    "MUX_TYPES",
    "SIZE_PRESETS",
    "GroupPlan",
    "MuxBertConfig",
    "MuxBertForMaskedLM",
    "MuxBertForRetrieval",
    "MuxBertForSequenceClassification",
    "MuxBertForTokenClassification",
    "MuxBertModel",
    "MuxBertPreTrainedModel",
    "MuxElectraConfig",
    "MuxElectraForPreTraining",
    "MuxElectraForRetrieval",
    "MuxElectraForSequenceClassification",
    "MuxElectraForTokenClassification",
    "MuxElectraModel",
    "MuxElectraPreTrainedModel",
    "MuxModelOutput",
    "MuxPreTrainingOutput",
    "MuxRetrievalOutput",
    "build_demux",
    "build_mux",
    "plan_groups",
    "register_demux",
    "register_mux",
    "validate_inputs",
]
