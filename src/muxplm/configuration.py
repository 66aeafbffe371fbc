"""Configurations of the MUX-PLM model families.

A MUX config is the plain encoder's config (BERT, ELECTRA, RoBERTa, DistilBERT, MPNet) plus
the multiplexing fields. Invalid combinations fail at construction with a ``ValueError`` that
names the problem, so a bad config never gets as far as building a model.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import BertConfig, DistilBertConfig, ElectraConfig, MPNetConfig, RobertaConfig

from . import released
# The built-in variants and sizes are kept in the light `choices` module (the command line lists
# them without importing this one) and re-exported here.
from .choices import DEMUX_TYPES, MUX_TYPES, RETRIEVAL_SOFTMAX, SENTENCE_POOLING, SIZE_PRESETS  # noqa: F401
from .demux import DEMUX_REGISTRY
from .mux import MUX_REGISTRY

# The fields a MUX config adds to its plain parent; also what `from_pretrained` compares
# between a saved checkpoint and the config asked for.
MUX_FIELDS = (
    "num_instances",
    "mux_type",
    "demux_type",
    "mux_key_norm",
    "learn_mux_keys",
    "num_demux_layers",
    "retrieval_loss_weight",
    "retrieval_softmax",
    "sentence_pooling",
    "num_unmuxed_layers",
    "forward_variant",
)
IDENTITY_FIELDS = ("num_instances", "mux_type", "demux_type", "num_unmuxed_layers", "forward_variant")


def _validate_mux_fields(config) -> None:
    n = config.num_instances
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"num_instances must be an integer >= 1, got {n!r}")
    MUX_REGISTRY.check(config.mux_type)
    DEMUX_REGISTRY.check(config.demux_type)
    for field in ("mux_type", "demux_type"):
        if getattr(config, field) == "identity" and n != 1:
            raise ValueError(f"{field}='identity' only makes sense with num_instances=1, got num_instances={n}")
    if config.mux_type == "identity" and config.demux_type != "identity":
        raise ValueError("mux_type='identity' needs demux_type='identity' (the plain, un-multiplexed model)")
    if config.mux_key_norm <= 0:
        raise ValueError(f"mux_key_norm must be positive, got {config.mux_key_norm}")
    if config.num_demux_layers < 1:
        raise ValueError(f"num_demux_layers must be >= 1, got {config.num_demux_layers}")
    if not 0.0 <= config.retrieval_loss_weight <= 1.0:
        raise ValueError(f"retrieval_loss_weight must lie in [0, 1], got {config.retrieval_loss_weight}")
    if config.retrieval_softmax not in RETRIEVAL_SOFTMAX:
        raise ValueError(
            f"retrieval_softmax must be one of {', '.join(RETRIEVAL_SOFTMAX)}, got {config.retrieval_softmax!r}"
        )
    if config.sentence_pooling not in SENTENCE_POOLING:
        raise ValueError(
            f"sentence_pooling must be one of {', '.join(SENTENCE_POOLING)}, got {config.sentence_pooling!r}"
        )
    unmuxed = config.num_unmuxed_layers
    if not isinstance(unmuxed, int) or isinstance(unmuxed, bool) or not 0 <= unmuxed <= config.num_hidden_layers:
        raise ValueError(
            f"num_unmuxed_layers must be an integer between 0 and num_hidden_layers ({config.num_hidden_layers}), "
            f"got {unmuxed!r}"
        )
    if config.hidden_size % config.num_attention_heads != 0:
        raise ValueError(
            f"hidden_size ({config.hidden_size}) must be a multiple of num_attention_heads "
            f"({config.num_attention_heads})"
        )
    if config.mux_type == "binary_hadamard" and config.mux_width < n:
        raise ValueError(
            f"binary_hadamard gives each instance its own block of dimensions: the width "
            f"{config.mux_width} is smaller than num_instances={n}"
        )
    released.validate_config(config)
    prefix = config.num_prefix_tokens
    if prefix and config.max_input_tokens < 1:
        raise ValueError(
            f"the {config.demux_type} demux adds {prefix} positions to every sequence, but max_position_embeddings="
            f"{config.max_position_embeddings} leaves no room for a single token"
        )


def preset_kwargs(preset: str) -> dict[str, int]:
    if preset not in SIZE_PRESETS:
        raise ValueError(f"unknown size preset {preset!r}; choose one of {', '.join(SIZE_PRESETS)}")
    return dict(SIZE_PRESETS[preset])


class MuxConfigMixin:
    """Behaviour shared by the MUX configs (the fields themselves are declared per class,
    because the strict dataclass machinery reads them from each class body).

    ``has_token_types`` and ``num_reserved_positions`` say how the family's embeddings use the
    token-type and position tables; the input checks and the predictor read them, not the
    family's name."""

    # Whether the family embeds token types (segment A/B); without them, token_type_ids are
    # accepted and ignored, as the plain model never sees them.
    has_token_types = True
    # The contextual multiplexer's BERT layers read these decoder settings, which the configs of
    # encoder-only families (MPNet, DistilBERT) do not have; the others' own fields come first.
    is_decoder = False
    add_cross_attention = False
    # Only MUX-BERT and MUX-ELECTRA have the paper's released checkpoints, and the field.
    forward_variant = "native"

    @property
    def num_reserved_positions(self) -> int:
        """Rows of the position table no token can take: RoBERTa-style models number tokens
        from ``padding_idx + 1``."""
        return 0

    @property
    def max_input_tokens(self) -> int:
        """The longest input (in tokens) the position table leaves room for, after the reserved
        positions and the demux prefix."""
        return self.max_position_embeddings - self.num_reserved_positions - self.num_prefix_tokens

    @classmethod
    def from_preset(cls, preset: str, **kwargs):
        """A config of a named size (``tiny``, ``small``, ``base``, ``large``); kwargs override."""
        return cls(**{**preset_kwargs(preset), **kwargs})

    def to_diff_dict(self) -> dict:
        """As Transformers', but always with the labels: its diff leaves out a default label set
        (two labels), and a reader of config.json would then not know how many the head has."""
        settings = super().to_diff_dict()
        settings.setdefault("id2label", {str(key): value for key, value in self.id2label.items()})
        settings.setdefault("label2id", dict(self.label2id))
        return settings

    @property
    def mux_width(self) -> int:
        """Width of the multiplexed vectors: the encoder width (ELECTRA multiplexes after
        projecting its embeddings to hidden_size)."""
        return self.hidden_size

    @property
    def num_prefix_tokens(self) -> int:
        if self.forward_variant == "released":
            return released.prefix_length(self)
        return DEMUX_REGISTRY[self.demux_type].prefix_length(self)


@strict(accept_kwargs=True)
class MuxBertConfig(MuxConfigMixin, BertConfig):
    r"""Configuration of a MUX-BERT model.

    Args (beyond [`BertConfig`]'s):
        num_instances: N, the number of inputs multiplexed into one sequence.
        mux_type: one of ``gaussian_hadamard`` (paper default), ``contextual``, ``adapter`` (the
            Gaussian keys after a light bottleneck MLP per instance), ``binary_hadamard``,
            ``random_ortho``, ``identity`` (N=1 only).
        demux_type: one of ``rsa`` (paper default), ``unbind`` (RSA on the state unbound by a learned
            inverse key), ``prefix`` (T-MUX / DataMUX), ``identity`` (N=1 only).
        mux_key_norm: L2 norm each multiplexing key is rescaled to.
        learn_mux_keys: train the multiplexing keys (frozen by default, as in the paper).
        num_demux_layers: layers of the demultiplexing MLP (the first, key-conditioned one included).
        retrieval_loss_weight: r in ``(1 - r) * task_loss + r * retrieval_loss`` during pre-training.
        retrieval_softmax: ``full`` scores retrieval targets against the whole vocabulary; ``in_batch``
            (training only) against the distinct tokens of the batch, every instance's tokens
            included, which is what the demultiplexer must tell apart, at a fraction of the cost.
        sentence_pooling: what sentence heads classify: ``first`` (the demultiplexed first position,
            as in BERT), or ``mean`` (each instance's mean over its own tokens, demultiplexed).
        num_unmuxed_layers: partial multiplexing: the leading encoder layers that run on every
            instance alone before the mixture (0, the paper's model, mixes the embeddings). Each
            one costs N times its multiplexed price; in exchange a warm-started encoder keeps
            its first layers' view of the input.
        forward_variant: ``native`` (muxplm's forward pass) or ``released``: the computation the
            paper's released checkpoints were trained with (:mod:`muxplm.released`), set when
            one is loaded.

    Named sizes: ``MuxBertConfig.from_preset("tiny" | "small" | "base" | "large", **overrides)``.
    """

    model_type = "mux_bert"

    num_instances: int = 2
    mux_type: str = "gaussian_hadamard"
    demux_type: str = "rsa"
    mux_key_norm: float | int = 1.0
    learn_mux_keys: bool = False
    num_demux_layers: int = 2
    retrieval_loss_weight: float | int = 0.0
    retrieval_softmax: str = "full"
    sentence_pooling: str = "first"
    num_unmuxed_layers: int = 0
    forward_variant: str = "native"

    def __post_init__(self, **kwargs):
        _validate_mux_fields(self)
        super().__post_init__(**kwargs)


@strict(accept_kwargs=True)
class MuxElectraConfig(MuxConfigMixin, ElectraConfig):
    r"""Configuration of a MUX-ELECTRA model (discriminator only: the generator is a uniform
    random replacement, no network).

    Takes the same multiplexing arguments as [`MuxBertConfig`], plus:
        discriminator_loss_weight: weight of the replaced-token-detection loss (50 in ELECTRA).
        replace_probability: fraction of tokens replaced by random ones during pre-training.
    """

    model_type = "mux_electra"

    num_instances: int = 2
    mux_type: str = "gaussian_hadamard"
    demux_type: str = "rsa"
    mux_key_norm: float | int = 1.0
    learn_mux_keys: bool = False
    num_demux_layers: int = 2
    retrieval_loss_weight: float | int = 0.0
    retrieval_softmax: str = "full"
    sentence_pooling: str = "first"
    num_unmuxed_layers: int = 0
    forward_variant: str = "native"
    discriminator_loss_weight: float | int = 50.0
    replace_probability: float | int = 0.15

    def __post_init__(self, **kwargs):
        _validate_mux_fields(self)
        super().__post_init__(**kwargs)

    @classmethod
    def from_preset(cls, preset: str, **kwargs):
        # The paper's MUX-ELECTRA sizes use one width for embeddings and encoder.
        sizes = preset_kwargs(preset)
        sizes.setdefault("embedding_size", sizes["hidden_size"])
        return cls(**{**sizes, **kwargs})


@strict(accept_kwargs=True)
class MuxRobertaConfig(MuxConfigMixin, RobertaConfig):
    r"""Configuration of a MUX-RoBERTa model. XLM-RoBERTa and CamemBERT checkpoints have
    RoBERTa's architecture and convert to this family too.

    Takes the same multiplexing arguments as [`MuxBertConfig`]. RoBERTa numbers the positions
    of real tokens from ``pad_token_id + 1`` (padding sits at ``pad_token_id``), so an input
    may hold ``max_position_embeddings - pad_token_id - 1`` tokens.
    """

    model_type = "mux_roberta"

    num_instances: int = 2
    mux_type: str = "gaussian_hadamard"
    demux_type: str = "rsa"
    mux_key_norm: float | int = 1.0
    learn_mux_keys: bool = False
    num_demux_layers: int = 2
    retrieval_loss_weight: float | int = 0.0
    retrieval_softmax: str = "full"
    sentence_pooling: str = "first"
    num_unmuxed_layers: int = 0

    def __post_init__(self, **kwargs):
        if self.pad_token_id is None:
            raise ValueError("RoBERTa numbers positions from its padding id: pad_token_id must be set")
        _validate_mux_fields(self)
        super().__post_init__(**kwargs)

    @property
    def num_reserved_positions(self) -> int:
        return self.pad_token_id + 1


@strict(accept_kwargs=True)
class MuxDistilBertConfig(MuxConfigMixin, DistilBertConfig):
    r"""Configuration of a MUX-DistilBERT model.

    Takes the same multiplexing arguments as [`MuxBertConfig`]. DistilBERT has no token-type
    embeddings (``token_type_ids`` are accepted and ignored) and its own field names; BERT's
    names (``intermediate_size``, ``hidden_dropout_prob``, ...) are mapped onto them, since the
    modules MUX adds and the training flags use those.
    """

    model_type = "mux_distilbert"
    attribute_map = {
        **DistilBertConfig.attribute_map,
        "intermediate_size": "hidden_dim",
        "hidden_act": "activation",
        "hidden_dropout_prob": "dropout",
        "attention_probs_dropout_prob": "attention_dropout",
    }
    has_token_types = False

    num_instances: int = 2
    mux_type: str = "gaussian_hadamard"
    demux_type: str = "rsa"
    mux_key_norm: float | int = 1.0
    learn_mux_keys: bool = False
    num_demux_layers: int = 2
    retrieval_loss_weight: float | int = 0.0
    retrieval_softmax: str = "full"
    sentence_pooling: str = "first"
    num_unmuxed_layers: int = 0
    # DistilBERT's layer norms use a fixed epsilon; the demultiplexer's layer norm reads it here.
    layer_norm_eps: float = 1e-12

    def __post_init__(self, **kwargs):
        _validate_mux_fields(self)
        super().__post_init__(**kwargs)


@strict(accept_kwargs=True)
class MuxMPNetConfig(MuxConfigMixin, MPNetConfig):
    r"""Configuration of a MUX-MPNet model.

    Takes the same multiplexing arguments as [`MuxBertConfig`]. MPNet has no token-type
    embeddings (``token_type_ids`` are accepted and ignored) and numbers the positions of real
    tokens from 2 (its padding index is fixed at 1), so an input may hold
    ``max_position_embeddings - 2`` tokens.
    """

    model_type = "mux_mpnet"
    has_token_types = False

    num_instances: int = 2
    mux_type: str = "gaussian_hadamard"
    demux_type: str = "rsa"
    mux_key_norm: float | int = 1.0
    learn_mux_keys: bool = False
    num_demux_layers: int = 2
    retrieval_loss_weight: float | int = 0.0
    retrieval_softmax: str = "full"
    sentence_pooling: str = "first"
    num_unmuxed_layers: int = 0

    def __post_init__(self, **kwargs):
        _validate_mux_fields(self)
        super().__post_init__(**kwargs)

    @property
    def num_reserved_positions(self) -> int:
        return 2  # MPNetEmbeddings.padding_idx (1) + 1, whatever pad_token_id says
