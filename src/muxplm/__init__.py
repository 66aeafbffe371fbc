"""muxplm: multiplexed pre-trained language models (MUX-PLMs) on PyTorch + Transformers.

``import muxplm`` is light: it imports neither PyTorch nor Transformers, so the ``muxplm``
command answers ``--help`` at once. Each name below is imported on first use (``from muxplm
import MuxBertConfig``, ``muxplm.plan_groups``), and the MUX configs and models of every encoder
family (BERT, ELECTRA, RoBERTa, DistilBERT, MPNet; :mod:`muxplm.families`) are registered with
the Transformers Auto classes before those meet a MUX checkpoint
(:mod:`muxplm.auto_registration`), so ``AutoModelForSequenceClassification.from_pretrained(dir)``
loads a MUX model after ``import muxplm``.
"""

from __future__ import annotations

import importlib

from . import auto_registration

__version__ = "0.1.0"

# The module of this package that defines each exported name.
_EXPORTS = {
    **dict.fromkeys(("DEMUX_TYPES", "MUX_TYPES", "SIZE_PRESETS"), "choices"),
    **dict.fromkeys(("MuxBertConfig", "MuxDistilBertConfig", "MuxElectraConfig", "MuxMPNetConfig",
                     "MuxRobertaConfig"), "configuration"),
    **dict.fromkeys(("DEMUX_REGISTRY", "build_demux", "register_demux"), "demux"),
    **dict.fromkeys(("MUX_REGISTRY", "build_mux", "register_mux"), "mux"),
    **dict.fromkeys(("FAMILIES", "EncoderFamily"), "families"),
    **dict.fromkeys(("GroupPlan", "plan_groups"), "grouping"),
    **dict.fromkeys(("MuxModelOutput", "MuxPreTrainingOutput", "MuxRetrievalOutput", "validate_inputs"),
                    "modeling_mux"),
    **{f"Mux{family}{head}": f"modeling_{family.lower()}"
       for family in ("Bert", "DistilBert", "Electra", "MPNet", "Roberta")
       for head in ("ForRetrieval", "ForSequenceClassification", "ForTokenClassification", "Model",
                    "PreTrainedModel")},
    **{f"Mux{family}ForMaskedLM": f"modeling_{family.lower()}" for family in ("Bert", "DistilBert", "MPNet",
                                                                               "Roberta")},
    "MuxElectraForPreTraining": "modeling_electra",
}
_LIGHT_MODULES = {"choices"}  # the ones that import neither PyTorch nor Transformers
# The Transformers Auto classes, reachable as attributes (``muxplm.AutoModelForSequenceClassification``)
# for code written against the versions that imported them; not exported.
_AUTO_CLASSES = ("AutoConfig", "AutoModel", "AutoModelForMaskedLM", "AutoModelForPreTraining",
                 "AutoModelForSequenceClassification", "AutoModelForTokenClassification")

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if name in _AUTO_CLASSES:
        module = "families"  # the classes registered with them
    elif module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if module not in _LIGHT_MODULES:
        # Every family at once, as an eager import had them: registered with the Auto classes,
        # so that AutoModel.from_config(MuxBertConfig(...)) works too.
        importlib.import_module(".families", __name__)
    source = importlib.import_module("transformers" if name in _AUTO_CLASSES else f".{module}", __name__)
    value = getattr(source, name)
    globals()[name] = value  # later look-ups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_AUTO_CLASSES))


auto_registration.install()
