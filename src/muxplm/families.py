"""The encoder families muxplm multiplexes, and how a checkpoint's ``model_type`` maps to one.

One table: each family's MUX config, its model class per head, and the plain Transformers
checkpoints (``model_type``) that warm-start it (:meth:`MuxPreTrainedModel.from_encoder`,
``muxplm convert``, ``muxplm finetune --init-encoder``). Every family runs the plain model's own
embeddings and layers through :class:`~muxplm.modeling_mux.MuxBackboneMixin`, adapted by a few
hooks. Families the hooks do not cover: DeBERTa (v1/v2: its encoder builds a pairwise 0/1 mask
of its own rather than Transformers' attention masks, feeds layer-normed relative embeddings and
query states to every layer, and v2 adds a convolution over the first layer's output with the
per-instance input mask), ALBERT (one shared layer group applied num_hidden_layers times behind
a projection inside the encoder: no stack of layers to split or cut).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .configuration import MuxBertConfig, MuxDistilBertConfig, MuxElectraConfig, MuxMPNetConfig, MuxRobertaConfig
from .modeling_bert import (
    MuxBertForMaskedLM,
    MuxBertForRetrieval,
    MuxBertForSequenceClassification,
    MuxBertForTokenClassification,
    MuxBertModel,
)
from .modeling_distilbert import (
    MuxDistilBertForMaskedLM,
    MuxDistilBertForRetrieval,
    MuxDistilBertForSequenceClassification,
    MuxDistilBertForTokenClassification,
    MuxDistilBertModel,
)
from .modeling_electra import (
    MuxElectraForPreTraining,
    MuxElectraForRetrieval,
    MuxElectraForSequenceClassification,
    MuxElectraForTokenClassification,
    MuxElectraModel,
)
from .modeling_mpnet import (
    MuxMPNetForMaskedLM,
    MuxMPNetForRetrieval,
    MuxMPNetForSequenceClassification,
    MuxMPNetForTokenClassification,
    MuxMPNetModel,
)
from .modeling_roberta import (
    MuxRobertaForMaskedLM,
    MuxRobertaForRetrieval,
    MuxRobertaForSequenceClassification,
    MuxRobertaForTokenClassification,
    MuxRobertaModel,
)


@dataclass(frozen=True)
class EncoderFamily:
    """One family. ``models`` maps a head to its class: ``base``, ``retrieval`` (stage 1),
    ``mlm`` or ``electra`` (stage 2), ``sentence`` and ``token`` (fine-tuning).
    ``bert_vocabulary``: the family's usual checkpoints tokenize with BERT's uncased WordPiece
    vocabulary, so the default tokenizer may stand in when none is saved with a checkpoint."""

    name: str
    config_class: type
    models: dict[str, type] = field(repr=False)
    bert_vocabulary: bool

    @property
    def plain_model_types(self) -> tuple[str, ...]:
        return self.models["base"].plain_model_types

    @property
    def pretraining_stage(self) -> str:
        return "electra" if "electra" in self.models else "mlm"


FAMILIES: dict[str, EncoderFamily] = {
    family.name: family
    for family in (
        EncoderFamily("bert", MuxBertConfig, {
            "base": MuxBertModel, "retrieval": MuxBertForRetrieval, "mlm": MuxBertForMaskedLM,
            "sentence": MuxBertForSequenceClassification, "token": MuxBertForTokenClassification,
        }, bert_vocabulary=True),
        EncoderFamily("electra", MuxElectraConfig, {
            "base": MuxElectraModel, "retrieval": MuxElectraForRetrieval, "electra": MuxElectraForPreTraining,
            "sentence": MuxElectraForSequenceClassification, "token": MuxElectraForTokenClassification,
        }, bert_vocabulary=True),
        EncoderFamily("roberta", MuxRobertaConfig, {
            "base": MuxRobertaModel, "retrieval": MuxRobertaForRetrieval, "mlm": MuxRobertaForMaskedLM,
            "sentence": MuxRobertaForSequenceClassification, "token": MuxRobertaForTokenClassification,
        }, bert_vocabulary=False),
        EncoderFamily("distilbert", MuxDistilBertConfig, {
            "base": MuxDistilBertModel, "retrieval": MuxDistilBertForRetrieval, "mlm": MuxDistilBertForMaskedLM,
            "sentence": MuxDistilBertForSequenceClassification, "token": MuxDistilBertForTokenClassification,
        }, bert_vocabulary=True),
        EncoderFamily("mpnet", MuxMPNetConfig, {
            "base": MuxMPNetModel, "retrieval": MuxMPNetForRetrieval, "mlm": MuxMPNetForMaskedLM,
            "sentence": MuxMPNetForSequenceClassification, "token": MuxMPNetForTokenClassification,
        }, bert_vocabulary=False),
    )
}


def supported_plain_types() -> str:
    """The plain checkpoints that warm-start a MUX model, for error messages."""
    return ", ".join(f"{name} ({' / '.join(family.plain_model_types)})" if family.plain_model_types != (name,)
                     else name for name, family in FAMILIES.items())


def family_of_mux_type(model_type: str | None) -> EncoderFamily | None:
    """The family of a MUX checkpoint's ``model_type`` (``mux_roberta`` -> roberta), else None."""
    return next((f for f in FAMILIES.values() if f.config_class.model_type == model_type), None)


def family_of_model_type(model_type: str | None) -> EncoderFamily | None:
    """The family of a MUX checkpoint's (``mux_roberta``) or a plain one's (``xlm-roberta``)
    ``model_type``, else None."""
    return family_of_mux_type(model_type) or next(
        (f for f in FAMILIES.values() if model_type in f.plain_model_types), None)


def family_of_plain_type(model_type: str | None, source: str = "the checkpoint") -> EncoderFamily:
    """The family a plain checkpoint of ``model_type`` warm-starts; a ``ValueError`` listing
    the supported ones for any other (a MUX checkpoint included)."""
    for family in FAMILIES.values():
        if model_type in family.plain_model_types:
            return family
    if family_of_mux_type(model_type) is not None:
        raise ValueError(f"{source} is a MUX checkpoint ({model_type!r}), not a plain encoder; start from it with "
                         f"--init instead")
    raise ValueError(f"{source} holds a {model_type!r} model; muxplm multiplexes plain encoders of these families: "
                     f"{supported_plain_types()}")


# The Auto class of each head (the family's stage-2 head serves both masked-LM and pre-training).
_AUTO_CLASSES_OF_HEAD = {
    "base": ("AutoModel",),
    "mlm": ("AutoModelForMaskedLM", "AutoModelForPreTraining"),
    "electra": ("AutoModelForPreTraining",),
    "sentence": ("AutoModelForSequenceClassification",),
    "token": ("AutoModelForTokenClassification",),
}


def register_auto_classes() -> None:
    """Every family's config and model classes in Transformers' Auto classes, so that
    ``AutoModelForSequenceClassification.from_pretrained(dir)`` loads a MUX model. Run when
    this module is imported: ``import muxplm`` has stand-ins that import it on first use
    (:mod:`muxplm.auto_registration`)."""
    import transformers

    for family in FAMILIES.values():
        transformers.AutoConfig.register(family.config_class.model_type, family.config_class, exist_ok=True)
        for head, model_class in family.models.items():
            for auto_class in _AUTO_CLASSES_OF_HEAD.get(head, ()):
                getattr(transformers, auto_class).register(family.config_class, model_class, exist_ok=True)


register_auto_classes()
