"""muxplm: multiplexed pre-trained language models (MUX-PLMs) on PyTorch + Transformers.

Importing the package registers the MUX configs and models of every encoder family (BERT,
ELECTRA, RoBERTa, DistilBERT, MPNet; :mod:`muxplm.families`) with the Transformers Auto
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

from .configuration import (
    DEMUX_TYPES,
    MUX_TYPES,
    SIZE_PRESETS,
    MuxBertConfig,
    MuxDistilBertConfig,
    MuxElectraConfig,
    MuxMPNetConfig,
    MuxRobertaConfig,
)
from .demux import DEMUX_REGISTRY, build_demux, register_demux
from .families import FAMILIES, EncoderFamily
from .grouping import GroupPlan, plan_groups
from .modeling_bert import (
    MuxBertForMaskedLM,
    MuxBertForRetrieval,
    MuxBertForSequenceClassification,
    MuxBertForTokenClassification,
    MuxBertModel,
    MuxBertPreTrainedModel,
)
from .modeling_distilbert import (
    MuxDistilBertForMaskedLM,
    MuxDistilBertForRetrieval,
    MuxDistilBertForSequenceClassification,
    MuxDistilBertForTokenClassification,
    MuxDistilBertModel,
    MuxDistilBertPreTrainedModel,
)
from .modeling_electra import (
    MuxElectraForPreTraining,
    MuxElectraForRetrieval,
    MuxElectraForSequenceClassification,
    MuxElectraForTokenClassification,
    MuxElectraModel,
    MuxElectraPreTrainedModel,
)
from .modeling_mpnet import (
    MuxMPNetForMaskedLM,
    MuxMPNetForRetrieval,
    MuxMPNetForSequenceClassification,
    MuxMPNetForTokenClassification,
    MuxMPNetModel,
    MuxMPNetPreTrainedModel,
)
from .modeling_mux import MuxModelOutput, MuxPreTrainingOutput, MuxRetrievalOutput, validate_inputs
from .modeling_roberta import (
    MuxRobertaForMaskedLM,
    MuxRobertaForRetrieval,
    MuxRobertaForSequenceClassification,
    MuxRobertaForTokenClassification,
    MuxRobertaModel,
    MuxRobertaPreTrainedModel,
)
from .mux import MUX_REGISTRY, build_mux, register_mux

__version__ = "0.1.0"

# The Auto class of each head (the family's stage-2 head serves both masked-LM and pre-training).
_AUTO_CLASS_OF_HEAD = {
    "base": (AutoModel,),
    "mlm": (AutoModelForMaskedLM, AutoModelForPreTraining),
    "electra": (AutoModelForPreTraining,),
    "sentence": (AutoModelForSequenceClassification,),
    "token": (AutoModelForTokenClassification,),
}


def _register_auto_classes() -> None:
    for family in FAMILIES.values():
        AutoConfig.register(family.config_class.model_type, family.config_class, exist_ok=True)
        for head, model_class in family.models.items():
            for auto_class in _AUTO_CLASS_OF_HEAD.get(head, ()):
                auto_class.register(family.config_class, model_class, exist_ok=True)


_register_auto_classes()

__all__ = [
    "DEMUX_REGISTRY",
    "DEMUX_TYPES",
    "MUX_REGISTRY",
    "MUX_TYPES",
    "SIZE_PRESETS",
    "FAMILIES",
    "EncoderFamily",
    "GroupPlan",
    "MuxBertConfig",
    "MuxBertForMaskedLM",
    "MuxBertForRetrieval",
    "MuxBertForSequenceClassification",
    "MuxBertForTokenClassification",
    "MuxBertModel",
    "MuxBertPreTrainedModel",
    "MuxDistilBertConfig",
    "MuxDistilBertForMaskedLM",
    "MuxDistilBertForRetrieval",
    "MuxDistilBertForSequenceClassification",
    "MuxDistilBertForTokenClassification",
    "MuxDistilBertModel",
    "MuxDistilBertPreTrainedModel",
    "MuxElectraConfig",
    "MuxElectraForPreTraining",
    "MuxElectraForRetrieval",
    "MuxElectraForSequenceClassification",
    "MuxElectraForTokenClassification",
    "MuxElectraModel",
    "MuxElectraPreTrainedModel",
    "MuxMPNetConfig",
    "MuxMPNetForMaskedLM",
    "MuxMPNetForRetrieval",
    "MuxMPNetForSequenceClassification",
    "MuxMPNetForTokenClassification",
    "MuxMPNetModel",
    "MuxMPNetPreTrainedModel",
    "MuxModelOutput",
    "MuxPreTrainingOutput",
    "MuxRetrievalOutput",
    "MuxRobertaConfig",
    "MuxRobertaForMaskedLM",
    "MuxRobertaForRetrieval",
    "MuxRobertaForSequenceClassification",
    "MuxRobertaForTokenClassification",
    "MuxRobertaModel",
    "MuxRobertaPreTrainedModel",
    "build_demux",
    "build_mux",
    "plan_groups",
    "register_demux",
    "register_mux",
    "validate_inputs",
]
