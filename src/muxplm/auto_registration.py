"""The MUX configs and models in Transformers' Auto classes, with ``import muxplm`` importing
neither PyTorch nor Transformers.

``import muxplm`` puts a light stand-in for each family's config class into ``AutoConfig`` as
soon as Transformers' ``configuration_auto`` module exists: at once when it is imported
already, else right after it is imported (an import hook, which then removes itself). The first
time Transformers uses a stand-in (``AutoConfig.from_pretrained(mux_dir)`` calls its
``from_dict``), it imports :mod:`muxplm.families`, which registers the real config and model
classes of every family (:func:`muxplm.families.register_auto_classes`), and hands the call on.
``AutoModelForSequenceClassification.from_pretrained(mux_dir)`` reads the config through
``AutoConfig`` before it looks the model class up, so it finds the model registered.

Why stand-ins and not the real classes from the hook: Transformers imports ``configuration_auto``
half way through importing a model module (``transformers.models.bert.modeling_bert``, through
``modeling_layers``), and the MUX modules import that same module, which at that moment exists
only in part.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

from .choices import FAMILY_CONFIGS

CONFIGURATION_AUTO = "transformers.models.auto.configuration_auto"


class _StandIn(type):
    """The type of a stand-in config class: whatever Transformers asks of it (``from_dict``,
    ``from_pretrained``, a call that makes a config, ...) is answered by the real class, which
    is imported and registered, in place of the stand-in, on first use."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):  # probes of the class itself (copy, pickle, typing) stay here
            raise AttributeError(name)
        return getattr(cls.real_class(), name)

    def __call__(cls, *args, **kwargs):
        return cls.real_class()(*args, **kwargs)


def _stand_in(model_type: str, class_name: str) -> type:
    def real_class() -> type:
        from .families import FAMILIES  # registers every family's real classes (see there)

        return next(family.config_class for family in FAMILIES.values()
                    if family.config_class.model_type == model_type)

    # Named as the real class: Transformers finds a registered config's model_type by its name.
    return _StandIn(class_name, (), {"model_type": model_type, "real_class": staticmethod(real_class),
                                     "__module__": "muxplm.configuration", "__qualname__": class_name})


def register_stand_ins() -> None:
    """Every family's config stand-in in ``AutoConfig``, where no class is registered yet."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, AutoConfig

    for model_type, class_name in FAMILY_CONFIGS.values():
        if model_type not in CONFIG_MAPPING:
            AutoConfig.register(model_type, _stand_in(model_type, class_name))


class _RegisterAfterLoading(importlib.abc.Loader):
    """A module's own loader, then :func:`register_stand_ins`."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # the module keeps its own loader
        self.loader.exec_module(module)
        register_stand_ins()


class _ConfigurationAutoHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``configuration_auto`` is about to be imported it steps aside,
    lets the other finders find it and has the stand-ins registered once it has run."""

    def find_spec(self, name, path=None, target=None):
        if name != CONFIGURATION_AUTO:
            return None
        _remove_hook()  # once; and the search below must not come back here
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisterAfterLoading(spec.loader)
        return spec


def _remove_hook() -> None:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _ConfigurationAutoHook)]


def install() -> None:
    """What ``import muxplm`` runs: the stand-ins now if Transformers' Auto configs are imported,
    else the hook that registers them when they are."""
    if CONFIGURATION_AUTO in sys.modules:
        register_stand_ins()
    elif not any(isinstance(finder, _ConfigurationAutoHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ConfigurationAutoHook())
