"""The paper's released checkpoints: their layout, and the forward pass their weights need.

The MUX-BERT and MUX-ELECTRA models released with the paper were trained by the authors'
research code, whose forward pass differs from muxplm's own (:mod:`muxplm.modeling_mux`) in
ways the weights depend on. A model whose config says ``forward_variant="released"`` runs that
computation instead; it is set when a released checkpoint is loaded and kept when the model is
saved (in muxplm's own safetensors layout, which reloads without this module's conversion).
docs/released-models.md lists every difference and why each is kept.

What the released forward does, per batch of slots ``[S, L]`` (S a multiple of N):

1. with the RSA demultiplexer (the authors' ``index_pos``), position 0 of every input becomes
   [CLS] (id 101) in the heads whose weights were trained so; with the prefix demultiplexer
   (``index``), every input gets N + 1 prefix tokens: a filler id everywhere but a marker id of
   its slot, then [CLS];
2. embeds each input (token types only in the pre-training heads), including its padding;
3. multiplexes: the mean over the group of ``x_i * v_i`` (padding included), or the contextual
   multiplexer with its additive mask of -10000;
4. embeds the mixture a second time (position and token-type embeddings, LayerNorm);
5. runs the encoder with no attention mask: padding is attended (inputs were padded to 128
   tokens, so that is part of what the weights learned: the input path pads them so);
6. demultiplexes with the authors' layer stacks (a dropout where a LayerNorm would be, residuals,
   a ``pre_decoder`` block; the masked-LM head reads another stack over the same weights).

Loading (:func:`load_released`) maps the authors' ``config.json`` fields and weight names onto
muxplm's and reads the pickle ``pytorch_model.bin`` with ``weights_only=True``: nothing in it
is executed.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.bert.modeling_bert import BertLayer
from transformers.models.electra.modeling_electra import ElectraClassificationHead

from .demux import Demultiplexer
from .mux import Multiplexer

logger = logging.getLogger(__name__)

FORWARD_VARIANTS = ("native", "released")

# Token ids the authors' forward hard-codes (BERT's uncased vocabulary): [CLS], and the prefix of
# their prefix demultiplexer: a filler id, and a marker id per slot counting down from 678.
CLS_ID = 101
PREFIX_FILLER_ID = 680
PREFIX_FIRST_MARKER_ID = 678
# The additive mask value of the Transformers version the weights were trained with; where every
# key is masked the softmax then still weighs the scores (as it did in training).
MASK_VALUE = -10000.0
# Every input was padded to this many tokens in training and evaluation, and padding is attended:
# the input path (:func:`input_length`) pads a released model's inputs so; the model itself
# computes exactly what it is given.
RELEASED_INPUT_LENGTH = 128

# The authors' multiplexer and demultiplexer names, and muxplm's for the same modules.
MUX_TYPE_OF = {"gaussian_hadamard": "gaussian_hadamard", "gaussian_attention_v2": "contextual"}
DEMUX_TYPE_OF = {"index_pos": "rsa", "index": "prefix"}
# The fields their configs add to BERT's / ELECTRA's (some are never read by their forward).
AUTHORS_FIELDS = (
    "num_instances", "muxing_variant", "demuxing_variant", "num_hidden_demux_layers", "gaussian_hadamard_norm",
    "binary_hadamard_epsilon", "learn_muxing", "retrieval_percentage", "retrieval_loss_coeff", "task_loss_coeff",
)
# Their model classes -> muxplm's; the N = 1 baselines are the plain Transformers classes.
CLASS_OF_ARCHITECTURE = {
    "MuxedBertForMaskedLM": "MuxBertForMaskedLM",
    "MuxedBertForSequenceClassification": "MuxBertForSequenceClassification",
    "MuxedBertForTokenClassification": "MuxBertForTokenClassification",
    "MuxedElectraForPreTraining": "MuxElectraForPreTraining",
    "MuxedElectraForSequenceClassification": "MuxElectraForSequenceClassification",
    "MuxedElectraForTokenClassification": "MuxElectraForTokenClassification",
    "BertForMaskedLM": "MuxBertForMaskedLM",
    "ElectraForPreTraining": "MuxElectraForPreTraining",
}
PLAIN_ARCHITECTURES = ("BertForMaskedLM", "ElectraForPreTraining")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


# --------------------------------------------------------------------------- what each head reads


@dataclass(frozen=True)
class ReleasedHead:
    """How the authors' class of one head fed the shared forward pass (their classes differ).

    Args:
        token_types: the per-instance embedding sees the token types (their pre-training
            classes); else all zero (their classification classes drop them).
        forces_cls: with the RSA demultiplexer, position 0 of every input is set to [CLS].
        instance_mask: the contextual multiplexer's attention across the N instances masks
            padding (their sentence classifier only).
        demux_path: ``token`` (their classification stack) or ``mlm`` (their masked-LM stack).
    """

    token_types: bool = False
    forces_cls: bool = True
    instance_mask: bool = False
    demux_path: str = "token"


CLASSIFIER_HEAD = ReleasedHead()


def is_released(config) -> bool:
    return getattr(config, "forward_variant", "native") == "released"


def input_length(config) -> int | None:
    """The fixed length a model's inputs are padded to (``None``: the batch's longest): 128 for
    a released model (or what its position table leaves room for, if less)."""
    return min(RELEASED_INPUT_LENGTH, config.max_input_tokens) if is_released(config) else None


def prefix_length(config) -> int:
    """Positions the released prefix demultiplexer adds: N markers and a [CLS]."""
    return config.num_instances + 1 if config.demux_type == "prefix" else 0


def validate_config(config) -> None:
    """Refuse a released configuration that no released checkpoint has (and the forward does
    not cover), naming the field."""
    variant = getattr(config, "forward_variant", "native")
    if variant not in FORWARD_VARIANTS:
        raise ValueError(f"forward_variant must be one of {', '.join(FORWARD_VARIANTS)}, got {variant!r}")
    if variant != "released":
        return
    if config.model_type not in ("mux_bert", "mux_electra"):
        raise ValueError(f"forward_variant='released' is the forward of the paper's MUX-BERT and MUX-ELECTRA "
                         f"checkpoints; a {config.model_type} model has none")
    allowed = {"mux_type": tuple(MUX_TYPE_OF.values()), "demux_type": tuple(DEMUX_TYPE_OF.values()),
               "num_unmuxed_layers": (0,), "sentence_pooling": ("first",)}
    if config.model_type == "mux_electra":
        allowed["mux_type"] = ("gaussian_hadamard",)
    for field, values in allowed.items():
        if getattr(config, field) not in values:
            raise ValueError(f"forward_variant='released' supports {field} in {values}, got {getattr(config, field)!r}")
    if config.retrieval_loss_weight:
        raise ValueError("forward_variant='released' has no auxiliary retrieval loss (retrieval_loss_weight must be 0)")
    if config.demux_type == "rsa" and config.num_demux_layers < 2:
        raise ValueError(f"the released RSA demultiplexer has at least 2 layers, got num_demux_layers="
                         f"{config.num_demux_layers}")
    if config.model_type == "mux_electra" and config.embedding_size != config.hidden_size:
        raise ValueError(f"the released MUX-ELECTRA models embed at the encoder's width: embedding_size "
                         f"({config.embedding_size}) must equal hidden_size ({config.hidden_size})")


# --------------------------------------------------------------------------- multiplexers


class ReleasedHadamardMux(Multiplexer):
    """``mean_i(x_i * v_i)`` over every position, padding included (the keys are loaded)."""

    registry_name = "gaussian_hadamard"

    def __init__(self, config):
        super().__init__(config)
        self.keys = nn.Parameter(torch.zeros(self.num_instances, self.width), requires_grad=config.learn_mux_keys)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (x * self.keys[:, None, :].to(x.dtype)).mean(dim=1)


class ReleasedContextualMux(ReleasedHadamardMux):
    """The contextual multiplexer as released: a layer over each instance's tokens plus a
    residual, the keys, a layer across the N instances at each position plus a residual, the
    mean. Masks are additive with :data:`MASK_VALUE`; the layer across instances masks padding
    only when the head says so (:class:`ReleasedHead`)."""

    registry_name = "contextual"

    def __init__(self, config):
        super().__init__(config)
        self.context_layer = BertLayer(config)
        self.instance_layer = BertLayer(config)
        self.instance_mask = False

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        groups, n, length, width = x.shape
        flat = x.reshape(groups * n, length, width)
        context = self.context_layer(flat, additive_mask(mask.reshape(groups * n, length), x.dtype)) + flat
        keyed = context.view(groups, n, length, width) * self.keys[None, :, None, :].to(x.dtype)
        across = keyed.transpose(1, 2).reshape(groups * length, n, width)
        slot_mask = additive_mask(mask.transpose(1, 2).reshape(groups * length, n), x.dtype) \
            if self.instance_mask else None
        mixed = self.instance_layer(across, slot_mask).view(groups, length, n, width).transpose(1, 2)
        return (mixed + keyed).mean(dim=1)


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, K]`` 0/1 -> ``[B, 1, 1, K]`` additive: 0 where attended, :data:`MASK_VALUE` elsewhere."""
    return (1.0 - mask[:, None, None, :].to(dtype)) * MASK_VALUE


RELEASED_MUX = {"gaussian_hadamard": ReleasedHadamardMux, "contextual": ReleasedContextualMux}


# --------------------------------------------------------------------------- demultiplexers


class ReleasedRSADemux(Demultiplexer):
    """The released RSA demultiplexer (the authors' ``index_pos``): N learned keys ``k_i`` and a
    first layer on ``[k_i ; h]``, then one of two stacks over shared weights:

    * ``token`` (classification and replaced-token detection): GELU and dropout after the first
      layer; then residual blocks ``x + dropout(gelu(W x))``; then ``x + LN(gelu(P x))``;
    * ``mlm``: ``LN_1(gelu(first))``, then ``LN_2(gelu(W_2 x))``, no residuals (the masked-LM
      head's own transform follows).

    The first layer's weight is kept whole (``[H, 2H]``, as trained) and applied as its two
    halves, so ``W_h h`` is computed once per group and position, not once per instance."""

    registry_name = "rsa"

    def __init__(self, config):
        super().__init__(config)
        hidden = config.hidden_size
        self.path = "token"
        self.keys = nn.Parameter(torch.zeros(config.num_instances, hidden))
        self.first = nn.Linear(2 * hidden, hidden)
        # The token stack uses layers 2 .. K-1, the masked-LM stack layer 2: whichever is longer.
        self.blocks = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(max(1, config.num_demux_layers - 2)))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden, eps=config.layer_norm_eps) for _ in range(2))
        self.num_token_blocks = config.num_demux_layers - 2
        self.pre_decoder = nn.Linear(hidden, hidden)
        self.pre_decoder_norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def first_layer(self, hidden: torch.Tensor, instances: torch.Tensor | None = None) -> torch.Tensor:
        """``W [k_i ; h] + b`` for every instance (``[G, N, P, H]`` from ``[G, P, H]``), or for
        the given ``instances`` of each row of ``hidden`` (``[M, H]``)."""
        width = self.keys.shape[1]
        keys = F.linear(self.keys, self.first.weight[:, :width]).to(hidden.dtype)
        shared = F.linear(hidden, self.first.weight[:, width:], self.first.bias)
        if instances is None:
            return shared[:, None] + keys[None, :, None]
        return shared + keys[instances]

    def finish(self, pre_activation: torch.Tensor) -> torch.Tensor:
        x = F.gelu(pre_activation)
        if self.path == "mlm":
            return self.norms[1](F.gelu(self.blocks[0](self.norms[0](x))))
        x = self.dropout(x)
        for block in self.blocks[: self.num_token_blocks]:
            x = x + self.dropout(F.gelu(block(x)))
        return x + self.pre_decoder_norm(F.gelu(self.pre_decoder(x)))

    def forward(self, h_mux: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        tokens = h_mux if positions is None else h_mux[:, positions]
        return self.finish(self.first_layer(tokens))

    def gather(self, h_mux, groups, instances, positions) -> torch.Tensor:
        return self.finish(self.first_layer(h_mux[groups, positions], instances))


class ReleasedPrefixDemux(Demultiplexer):
    """The released prefix demultiplexer (the authors' ``index``): each input is prefixed with
    N marker positions and a [CLS] (:meth:`prefix_ids`); instance i's key is the encoder output
    at marker position i. One layer ``LN(gelu(W [key ; h] + b))``; sentence heads read the
    prefix's [CLS] position. The masked-LM head has its own layer of the same shape."""

    registry_name = "prefix"

    @classmethod
    def prefix_length(cls, config) -> int:
        return config.num_instances + 1

    def __init__(self, config):
        super().__init__(config)
        hidden = config.hidden_size
        self.path = "token"
        self.first = nn.Linear(2 * hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.mlm_first = nn.Linear(2 * hidden, hidden)
        self.mlm_norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.register_buffer("prefix_id_table", self._prefix_id_table(), persistent=False)

    def _prefix_id_table(self) -> torch.Tensor:
        """Row i: the filler id everywhere but marker i at position i, then [CLS]."""
        n = self.num_instances
        markers = PREFIX_FIRST_MARKER_ID - torch.arange(n)
        ids = torch.where(torch.eye(n, dtype=torch.bool), markers[:, None], torch.tensor(PREFIX_FILLER_ID))
        return torch.cat([ids, torch.full((n, 1), CLS_ID)], dim=1)

    def reset_parameters(self) -> None:
        with torch.no_grad():  # a non-persistent buffer: rebuilt whenever weights are initialised
            self.prefix_id_table.copy_(self._prefix_id_table())

    def prefix_ids(self, num_slots: int, device) -> torch.Tensor:
        """The prefix of every slot ``[S, N + 1]`` (slot s is instance s % N of its group)."""
        return self.prefix_id_table.to(device)[torch.arange(num_slots, device=device) % self.num_instances]

    def _layer(self):
        return (self.mlm_first, self.mlm_norm) if self.path == "mlm" else (self.first, self.norm)

    def _apply(self, keys: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        first, norm = self._layer()
        width = hidden.shape[-1]
        pre = F.linear(hidden, first.weight[:, width:], first.bias) + F.linear(keys, first.weight[:, :width])
        return norm(F.gelu(pre))

    def forward(self, h_mux: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        n = self.num_instances
        tokens = h_mux[:, self.num_prefix_tokens:]
        if positions is not None:
            tokens = tokens[:, positions]
        return self._apply(h_mux[:, :n, None], tokens[:, None])

    def gather(self, h_mux, groups, instances, positions) -> torch.Tensor:
        return self._apply(h_mux[groups, instances], h_mux[groups, positions + self.num_prefix_tokens])

    def sentence_states(self, h_mux: torch.Tensor) -> torch.Tensor:
        n = self.num_instances
        return self._apply(h_mux[:, :n], h_mux[:, n:n + 1])


RELEASED_DEMUX = {"rsa": ReleasedRSADemux, "prefix": ReleasedPrefixDemux}


class ReleasedElectraSentenceHead(ElectraClassificationHead):
    """ELECTRA's classification head (dense, GELU, projection, with dropouts) on the
    demultiplexed sentence vectors ``[S, H]``, as the released MUX-ELECTRA classifiers have it."""

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return super().forward(states[:, None])


# --------------------------------------------------------------------------- the forward pass


def encode_slots(backbone, slot_ids: torch.Tensor, slot_mask: torch.Tensor, slot_types: torch.Tensor,
                 is_real: torch.Tensor, output_hidden_states: bool = False):
    """The released forward's :meth:`~muxplm.modeling_mux.MuxBackboneMixin.encode_slots`: the
    encoder output ``[G, L', H]`` of every group. A filler slot takes a copy of its group's first
    real input (the weights never saw an empty slot: every training group held N inputs)."""
    config, head = backbone.config, backbone.released_head
    n = config.num_instances
    num_slots, length = slot_ids.shape
    device = slot_ids.device
    groups = slot_ids.shape[0] // n
    first_real = is_real.view(groups, n).int().argmax(dim=1)  # 0 in a group with none (its outputs are dropped)
    donor = (torch.arange(groups, device=device) * n + first_real).repeat_interleave(n)
    keep = is_real[:, None]
    ids = torch.where(keep, slot_ids, slot_ids[donor])
    mask = torch.where(keep, slot_mask, slot_mask[donor])
    types = torch.where(keep, slot_types, slot_types[donor]) if head.token_types else torch.zeros_like(slot_types)
    if head.forces_cls and config.demux_type == "rsa":
        ids = torch.cat([torch.full_like(ids[:, :1], CLS_ID), ids[:, 1:]], dim=1)
    if config.demux_type == "prefix":
        prefix = backbone.demux.prefix_ids(num_slots, device)
        ids = torch.cat([prefix, ids], dim=1)
        mask = torch.cat([torch.ones_like(prefix, dtype=mask.dtype), mask], dim=1)
        # The token types were not shifted with the tokens: they start at the first prefix position.
        types = F.pad(types, (0, prefix.shape[1]))
    width = length + backbone.demux.num_prefix_tokens
    embedded = backbone.embed(input_ids=ids, token_type_ids=types)
    mixed = backbone.mux(embedded.reshape(groups, n, width, embedded.shape[-1]), mask.reshape(groups, n, width))
    hidden = backbone.embed(inputs_embeds=mixed, token_type_ids=torch.zeros_like(ids[:groups]))
    hidden = backbone.project_embeddings(hidden)
    arguments = backbone.layer_arguments(hidden)
    all_hidden = (hidden,) if output_hidden_states else None
    for layer in backbone.encoder_layers():
        hidden = backbone.run_layer(layer, hidden, None, arguments)  # no mask: padding is attended
        if output_hidden_states:
            all_hidden += (hidden,)
    return hidden, all_hidden


# --------------------------------------------------------------------------- the released layout


def is_released_layout(saved: dict | None) -> bool:
    """Whether a ``config.json`` is the authors' (a plain ``bert`` / ``electra`` model type with
    their multiplexing fields), for MUX models and N = 1 baselines alike."""
    return bool(saved) and saved.get("model_type") in ("bert", "electra") and "num_instances" in saved \
        and "muxing_variant" in saved


def architecture_of(saved: dict, source) -> str:
    architectures = saved.get("architectures") or []
    if not architectures:
        raise ValueError(f"{source}/config.json names no architecture: cannot tell which released model it holds")
    if architectures[0] not in CLASS_OF_ARCHITECTURE:
        raise ValueError(f"{source} holds a {architectures[0]}; muxplm loads the released "
                         f"{', '.join(sorted(CLASS_OF_ARCHITECTURE))}")
    return architectures[0]


def muxplm_settings(saved: dict, source="the checkpoint") -> dict:
    """The released ``config.json`` as muxplm's config of the same model: ``model_type``
    ``mux_bert`` / ``mux_electra``, muxplm's multiplexing fields, ``architectures`` naming the
    muxplm class. An N = 1 baseline (a plain BERT / ELECTRA) becomes muxplm's plain N = 1 model,
    with the native forward; every other one gets ``forward_variant="released"``."""
    architecture = architecture_of(saved, source)
    settings = {key: value for key, value in saved.items() if key not in AUTHORS_FIELDS and key not in (
        "architectures", "transformers_version", "_name_or_path", "gradient_checkpointing", "use_cache")}
    settings["model_type"] = "mux_" + saved["model_type"]
    settings["architectures"] = [CLASS_OF_ARCHITECTURE[architecture]]
    if architecture in PLAIN_ARCHITECTURES:
        settings.update(num_instances=1, mux_type="identity", demux_type="identity")
        return settings
    muxing, demuxing = saved.get("muxing_variant"), saved.get("demuxing_variant")
    if muxing not in MUX_TYPE_OF:
        raise ValueError(f"{source}/config.json: muxing_variant {muxing!r} is not one of the released "
                         f"{', '.join(MUX_TYPE_OF)}")
    if demuxing not in DEMUX_TYPE_OF:
        raise ValueError(f"{source}/config.json: demuxing_variant {demuxing!r} is not one of the released "
                         f"{', '.join(DEMUX_TYPE_OF)}")
    settings.update(
        num_instances=int(saved["num_instances"]), mux_type=MUX_TYPE_OF[muxing], demux_type=DEMUX_TYPE_OF[demuxing],
        # Their stack defaults to 2 layers when the field is absent; the prefix demultiplexer has one.
        num_demux_layers=int(saved.get("num_hidden_demux_layers") or 2) if demuxing == "index_pos" else 1,
        mux_key_norm=float(saved.get("gaussian_hadamard_norm") or 1.0),
        learn_mux_keys=bool(saved.get("learn_muxing")), forward_variant="released",
    )
    return settings


def read_weights(folder: Path, source) -> dict[str, torch.Tensor]:
    """The tensors of a released folder: ``model.safetensors`` if there is one, else the pickle
    ``pytorch_model.bin`` read with ``weights_only=True`` (a pickle that would run code is
    refused, naming the file)."""
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if name.endswith(".safetensors"):
            from safetensors.torch import load_file

            return load_file(str(path))
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as error:  # UnpicklingError, a truncated zip, ...: never run what it holds
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ValueError(f"{path} is not a plain file of tensors (read with weights_only=True, nothing in it "
                             f"is executed): {reason}") from None
    raise FileNotFoundError(f"{source} holds no weights ({' or '.join(WEIGHT_FILES)})")


def _renames(config, prefix: str) -> list[tuple[str, str]]:
    """``(pattern, replacement)`` from the authors' weight names to muxplm's; a name that
    matches none is not read by muxplm's forward (their duplicates of the demultiplexer's
    tensors, a retrieval head used only by their training losses)."""
    rules = [
        (rf"^{prefix}\.embeddings\.position_ids$", ""),
        (rf"^({prefix}\.(embeddings|encoder|embeddings_project)\..*)$", r"\1"),
        (r"^(cls\.predictions\..*)$", r"\1"),
        (r"^(discriminator_predictions\..*)$", r"\1"),
        (r"^(classifier\..*)$", r"\1"),
        (r"^instance_embedding$", f"{prefix}.mux.keys"),
        (r"^muxing_attention\.(.*)$", rf"{prefix}.mux.context_layer.\1"),
        (r"^muxing_attention_2\.(.*)$", rf"{prefix}.mux.instance_layer.\1"),
    ]
    if config.demux_type == "rsa":
        blocks = max(1, config.num_demux_layers - 2)
        rules += [
            (r"^demux_module\.demux_instance_embedding$", f"{prefix}.demux.keys"),
            (r"^demux_module\.dense_1\.(weight|bias)$", rf"{prefix}.demux.first.\1"),
            *[(rf"^demux_module\.dense_{i + 2}\.(weight|bias)$", rf"{prefix}.demux.blocks.{i}.\1") for i in range(blocks)],
            *[(rf"^demux_module\.layer_norm_{i + 1}\.(weight|bias)$", rf"{prefix}.demux.norms.{i}.\1") for i in range(2)],
            (r"^demultiplexer\.pre_decoder\.(weight|bias)$", rf"{prefix}.demux.pre_decoder.\1"),
            (r"^demultiplexer\.pre_decoder_layer_norm\.(weight|bias)$", rf"{prefix}.demux.pre_decoder_norm.\1"),
            # BERT's masked-LM head: their retrieval head's last block and decoder.
            (r"^retrieval_head\.pre_decoder\.(weight|bias)$", r"cls.predictions.transform.dense.\1"),
            (r"^retrieval_head\.pre_decoder_layer_norm\.(weight|bias)$", r"cls.predictions.transform.LayerNorm.\1"),
        ]
    else:
        rules += [
            (r"^demultiplexer\.dense\.(weight|bias)$", rf"{prefix}.demux.first.\1"),
            (r"^demultiplexer\.layer_norm\.(weight|bias)$", rf"{prefix}.demux.norm.\1"),
            (r"^retrieval_head\.dense\.(weight|bias)$", rf"{prefix}.demux.mlm_first.\1"),
            (r"^retrieval_head\.layer_norm\.(weight|bias)$", rf"{prefix}.demux.mlm_norm.\1"),
        ]
    if config.model_type == "mux_bert":
        rules += [(r"^retrieval_head\.decoder\.weight$", "cls.predictions.decoder.weight"),
                  (r"^retrieval_head\.(decoder\.)?bias$", "cls.predictions.bias")]
    return rules


def convert_weights(state: dict[str, torch.Tensor], config, prefix: str) -> dict[str, torch.Tensor]:
    """The released tensors under muxplm's names (a folder saved through the authors' ELECTRA
    wrapper keeps the discriminator's under ``discriminator.``; only those are read)."""
    if any(key.startswith("discriminator.") for key in state):
        state = {key[len("discriminator."):]: value for key, value in state.items() if key.startswith("discriminator.")}
    rules = [(re.compile(pattern), replacement) for pattern, replacement in _renames(config, prefix)]
    converted = {}
    for key, value in state.items():
        for pattern, replacement in rules:
            if pattern.match(key):
                new = pattern.sub(replacement, key)
                if new:
                    converted[new] = value
                break
    return converted


# The weights of each kind of head; a fresh head (another kind than the checkpoint's) starts anew.
HEAD_WEIGHTS = {"sentence": ("classifier.",), "token": ("classifier.",), "pretraining": ("cls.", "discriminator_predictions.")}


def _head_of(architecture: str) -> str:
    return next(head for marker, head in (("Sequence", "sentence"), ("Token", "token"), ("", "pretraining"))
                if marker in architecture)


def convert_checkpoint(cls, name_or_path, saved: dict, folder: Path, kwargs: dict):
    """A released folder as what ``cls.from_pretrained`` loads: muxplm's config, the weights
    under muxplm's names (only those ``cls`` has) and the remaining keyword arguments. Raises a
    ``ValueError`` naming the folder for another family, an unreadable weight file, or weights
    that lack something the released architecture has."""
    source = str(name_or_path)
    settings = muxplm_settings(saved, source)
    if settings.pop("model_type") != cls.config_class.model_type:
        raise ValueError(f"{source} holds a released {saved['model_type']} checkpoint; load it with the muxplm "
                         f"{saved['model_type'].upper()} classes, not {cls.__name__}")
    architecture = architecture_of(saved, source)
    same_head = _head_of(architecture) == _head_of(cls.__name__)
    state = read_weights(folder, source)
    config = kwargs.pop("config", None)
    if config is None:
        fields = set(cls.config_class.__dataclass_fields__) | {"num_labels", "id2label", "label2id", "problem_type"}
        overrides = {key: kwargs.pop(key) for key in list(kwargs) if key in fields}
        for field in ("num_instances", "mux_type", "demux_type", "forward_variant"):
            if field in overrides and overrides[field] != settings[field]:
                raise ValueError(f"checkpoint {source} was trained with {field}={settings[field]!r}, but "
                                 f"{field}={overrides[field]!r} was asked for; its weights cannot serve that "
                                 f"configuration")
        classifier = state.get("classifier.weight", state.get("classifier.out_proj.weight"))
        if same_head and classifier is not None and len(settings.get("id2label") or {}) != classifier.shape[0]:
            # A config without labels (or with another count): the classifier's rows say how many.
            settings["id2label"] = {str(i): f"LABEL_{i}" for i in range(classifier.shape[0])}
            settings.pop("label2id", None)
        settings.pop("num_labels", None)
        if "num_labels" in overrides and "id2label" not in overrides:
            settings.pop("id2label", None)
            settings.pop("label2id", None)
        config = cls.config_class(**{**settings, **overrides})
    config.architectures = [cls.__name__]
    weights = convert_weights(state, config, cls.base_model_prefix)
    with torch.device("meta"):
        expected = set(cls(config).state_dict())
    fresh = () if same_head else HEAD_WEIGHTS[_head_of(cls.__name__)]
    weights = {key: value for key, value in weights.items() if key in expected and not key.startswith(fresh)}
    tied = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")  # read from their tied originals
    missing = sorted(key for key in expected - set(weights) if not key.startswith(fresh) and key not in tied)
    if missing:
        raise ValueError(f"{source} lacks weights the released {architecture} has: {', '.join(missing[:8])}"
                         + (" ..." if len(missing) > 8 else ""))
    return config, weights, kwargs
