"""The multiplexed forward pass and the task heads, shared by every encoder family (BERT,
ELECTRA, RoBERTa, DistilBERT, MPNet). The family modules (``modeling_bert``, ...) only pick
the plain model's embedding and layer blocks, adapt the pass to them through a few hooks
(:class:`MuxBackboneMixin`) and add the pre-training head; everything else lives here once.

Forward pass (docs/how-it-works.md): embed each instance once -> group (:mod:`muxplm.grouping`) ->
multiplex (:mod:`muxplm.mux`) -> the unchanged encoder layers, with a mask that attends a
position when any instance has a real token there -> demultiplex only the positions a head
needs (:mod:`muxplm.demux`) -> ungroup to input order -> head.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from safetensors import SafetensorError
from torch.nn import functional as F
from transformers import AutoConfig, AutoModel, PreTrainedModel
from transformers import initialization as init
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils import ModelOutput

from . import released
from .checkpoints import saved_config
from .configuration import IDENTITY_FIELDS
from .demux import Demultiplexer
from .devices import host_checks_wanted
from .grouping import GroupPlan, plan_groups
from .mux import Multiplexer

# --------------------------------------------------------------------------- outputs


@dataclass
class MuxModelOutput(ModelOutput):
    """Output of the base MUX models.

    Args:
        last_hidden_state: ``[B, L, H]`` demultiplexed per-instance states, in input order.
        muxed_hidden_state: ``[G, L', H]`` encoder output for the G multiplexed groups
            (L' = L plus any demux prefix).
        hidden_states: with ``output_hidden_states``, the multiplexed input and the output of
            every encoder layer after it (all but ``num_unmuxed_layers``), each ``[G, L', H]``.
    """

    last_hidden_state: torch.Tensor | None = None
    muxed_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class MuxRetrievalOutput(ModelOutput):
    """Output of token-retrieval priming.

    Args:
        loss: cross-entropy of retrieving the sampled instance's input tokens.
        logits: ``[S, V]`` for the S sampled (group, position) targets.
        labels: ``[S]`` the tokens to retrieve (``-100`` where the instance has padding).
        accuracy: fraction of non-ignored targets retrieved correctly.
        similarity: with state distillation, the mean cosine similarity of the demultiplexed
            states to the teacher's (:mod:`muxplm.training.distill`).
        last_hidden_state: with ``output_demuxed``, every instance's demultiplexed states
            ``[B, L, H]`` in input order.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    accuracy: torch.Tensor | None = None
    similarity: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None


@dataclass
class MuxPreTrainingOutput(ModelOutput):
    """Output of MLM / replaced-token-detection pre-training.

    Args:
        loss: ``(1 - r) * task_loss + r * retrieval_loss`` (r = ``config.retrieval_loss_weight``).
        logits: MLM: ``[B, L, V]`` without labels, else ``[M, V]`` for the M labelled positions
            in row-major order; ELECTRA: ``[B, L]`` replaced-token logits.
        task_loss / retrieval_loss: the two parts of ``loss``.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    task_loss: torch.Tensor | None = None
    retrieval_loss: torch.Tensor | None = None
    retrieval_accuracy: torch.Tensor | None = None


# --------------------------------------------------------------------------- input checks


def _check_same_shape(name: str, tensor: torch.Tensor | None, shape: torch.Size) -> None:
    if tensor is not None and tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(tensor.shape)} but input_ids has shape {tuple(shape)}")


def validate_inputs(config, input_ids, attention_mask=None, token_type_ids=None, training: bool = False) -> None:
    """Raise a ``ValueError`` naming the problem for inputs the model cannot take."""
    if not torch.is_tensor(input_ids):
        raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape [batch, seq_len], got {tuple(input_ids.shape)}")
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    batch, length = input_ids.shape
    if batch == 0 or length == 0:
        raise ValueError(f"input_ids is empty: shape {tuple(input_ids.shape)}")
    _check_same_shape("attention_mask", attention_mask, input_ids.shape)
    _check_same_shape("token_type_ids", token_type_ids, input_ids.shape)
    room = config.max_input_tokens
    if length > room:
        taken = []
        if config.num_reserved_positions:
            taken.append(f"the {config.num_reserved_positions} positions below the first token's")
        if config.num_prefix_tokens:
            taken.append(f"the {config.num_prefix_tokens}-token demux prefix")
        extra = f" minus {' and '.join(taken)}" if taken else ""
        raise ValueError(
            f"sequence length {length} is longer than the model's position table allows: at most {room} "
            f"tokens (max_position_embeddings={config.max_position_embeddings}{extra}); truncate the input"
        )
    if not host_checks_wanted(input_ids, training):
        return
    if not config.has_token_types:
        token_type_ids = None  # ignored by a family without token-type embeddings: any value will do
    # One device->host transfer for all range checks (each separate read would be a GPU sync).
    bounds = [*torch.aminmax(input_ids)]
    if token_type_ids is not None:
        bounds += [*torch.aminmax(token_type_ids)]
    bounds = torch.stack(bounds).tolist()
    low, high = bounds[:2]
    if low < 0 or high >= config.vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"input_ids contains token id {bad}, outside the vocabulary [0, {config.vocab_size})")
    if token_type_ids is not None:
        low, high = bounds[2:]
        if low < 0 or high >= config.type_vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"token_type_ids must lie in [0, {config.type_vocab_size}), got {bad}")


def validate_labels(labels: torch.Tensor | None, shape: tuple[int, ...], what: str) -> None:
    if labels is not None and tuple(labels.shape) != tuple(shape):
        raise ValueError(f"labels for {what} must have shape {tuple(shape)}, got {tuple(labels.shape)}")


# --------------------------------------------------------------------------- the forward pass


@dataclass
class MuxState:
    """The encoder output of one multiplexed batch, with what is needed to demultiplex
    any subset of it and to map results back to the input order."""

    muxed: torch.Tensor  # [G, L', H]
    plan: GroupPlan
    slot_input_ids: torch.Tensor  # [S, L] ids in slot order (fillers: pad)
    slot_mask: torch.Tensor  # [S, L] bool, False for fillers and padding
    demux: Demultiplexer
    hidden_states: tuple[torch.Tensor, ...] | None = None

    def demux_rows(self, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Every output row (copy-major when ensembling) at ``positions``: ``[C*B, P, H]``."""
        dense = self.demux(self.muxed, positions)  # [G, N, P, H]
        return self.plan.ungroup(dense.flatten(0, 1))

    def demux_slots(self, slots: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One vector per (slot, token position) pair: ``[M, H]``."""
        n = self.plan.num_instances
        return self.demux.gather(self.muxed, slots // n, slots % n, positions)

    def demux_where(self, selection: torch.Tensor) -> torch.Tensor:
        """Vectors for the True entries of a ``[B, L]`` boolean selection, row-major: ``[M, H]``."""
        rows, positions = selection.nonzero(as_tuple=True)
        return self.demux_slots(self.plan.slot_of[rows], positions)


def mean_over_tokens(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's mean over its real tokens, ``[B, L, H] -> [B, H]`` (a weighted sum: no
    data-dependent shape, so no host sync; a row without real tokens gives zeros)."""
    weights = mask[..., None].to(states.dtype)
    return (states * weights).sum(1) / weights.sum(1).clamp(min=1)


def pooled_instance_states(demux: Demultiplexer, muxed: torch.Tensor, slot_mask: torch.Tensor) -> torch.Tensor:
    """Each instance's mean over its own token positions of the encoder output, demultiplexed:
    ``[G, N, H]``. Pooling comes first: it is linear, so for the unbinding demux it equals the
    mean of the unbound states, at the cost of demultiplexing one position."""
    groups, length = muxed.shape[0], slot_mask.shape[-1]
    weights = slot_mask.view(groups, -1, length).to(muxed.dtype)  # [G, N, L]; fillers all zero
    tokens = muxed[:, demux.num_prefix_tokens:]
    pooled = torch.einsum("gnl,glh->gnh", weights, tokens) / weights.sum(-1, keepdim=True).clamp(min=1)
    return demux.demux_states(muxed, pooled)


class MuxBackboneMixin:
    """The multiplexed forward pass of a base model, over the plain model's own embeddings and
    layers. The family class provides ``embeddings``, the layer stack, ``mux`` and ``demux``,
    and adapts the pass to its plain model by overriding the hooks below (the defaults fit
    BERT): which layers to run (:meth:`encoder_layers`), how to embed (:meth:`embed`,
    :meth:`prefixed_position_ids`, :meth:`project_embeddings`) and how to call a layer
    (:meth:`layer_arguments`, :meth:`run_layer`)."""

    # What the released forward reads of its head (:class:`muxplm.released.ReleasedHead`); the
    # head model sets its own when it builds the base model.
    released_head = released.CLASSIFIER_HEAD

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def encoder_layers(self) -> nn.ModuleList:
        """The plain model's stack of layers."""
        return self.encoder.layer

    def embed(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None) -> torch.Tensor:
        """The plain embeddings; position ids, when not given, are the plain model's own."""
        types = dict(token_type_ids=token_type_ids) if self.config.has_token_types else {}
        return self.embeddings(input_ids=input_ids, position_ids=position_ids, inputs_embeds=inputs_embeds, **types)

    def prefixed_position_ids(self, slot_ids: torch.Tensor, num_prefix: int) -> torch.Tensor:
        """Position ids ``[S or 1, P + L]`` of a T-MUX prefix of ``num_prefix`` positions
        followed by the slots' tokens: the prefix takes the first positions."""
        return torch.arange(num_prefix + slot_ids.shape[1], device=slot_ids.device)[None]

    def project_embeddings(self, embedded: torch.Tensor) -> torch.Tensor:
        return embedded

    def layer_arguments(self, hidden: torch.Tensor) -> dict:
        """What every layer takes besides the states and the mask, computed once for a batch of
        states ``[*, L', H]`` (all of one length)."""
        return {}

    def run_layer(self, layer: nn.Module, hidden: torch.Tensor, mask, arguments: dict) -> torch.Tensor:
        return layer(hidden, mask, **arguments)

    def encode_slots(
        self,
        slot_ids: torch.Tensor,
        slot_mask: torch.Tensor,
        slot_types: torch.Tensor,
        is_real: torch.Tensor,
        output_hidden_states: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """Embed the slots ``[S, L]`` (S a multiple of N, consecutive slots form a group), run
        the first ``num_unmuxed_layers`` encoder layers on each slot alone, multiplex every
        group and run the remaining layers on the mixtures. Returns the encoder output
        ``[G, L', H]`` and, with ``output_hidden_states``, the mixture and every later layer's
        output. The one multiplexed forward pass: :meth:`multiplex` and the ONNX export both
        call it (shapes only through ``reshape``, so exported batch sizes stay symbolic)."""
        if released.is_released(self.config):
            return released.encode_slots(self, slot_ids, slot_mask, slot_types, is_real, output_hidden_states)
        config, n = self.config, self.config.num_instances
        num_slots, length = slot_ids.shape
        device = slot_ids.device
        prefix = self.demux.num_prefix_tokens
        # Transformers skips an all-ones mask after reading it on the host; a training step on an
        # accelerator always passes the mask instead of waiting for that read.
        may_skip_mask = host_checks_wanted(slot_ids, self.training)
        if prefix:
            # T-MUX: prepend the prefix and embed it together with the tokens, once.
            words = self.get_input_embeddings()(slot_ids)
            prefix_words = self.demux.prefix_embeddings(torch.arange(num_slots, device=device))
            embedded = self.embed(
                inputs_embeds=torch.cat([prefix_words.to(words.dtype), words], dim=1),
                token_type_ids=F.pad(slot_types, (prefix, 0)),
                position_ids=self.prefixed_position_ids(slot_ids, prefix),
            )
            full_mask = F.pad(slot_mask, (prefix, 0), value=True) & is_real[:, None]
        else:
            embedded = self.embed(input_ids=slot_ids, token_type_ids=slot_types)
            full_mask = slot_mask
        hidden = self.project_embeddings(embedded)
        layers = self.encoder_layers()
        unmuxed = config.num_unmuxed_layers
        if unmuxed:
            # A slot with no real token (a filler) attends everywhere so that its states stay
            # finite; it is zeroed below like every filler.
            attend = full_mask | ~full_mask.any(dim=1, keepdim=True)
            slot_attention = create_bidirectional_mask(config=config, inputs_embeds=hidden, attention_mask=attend,
                                                       allow_is_bidirectional_skip=may_skip_mask)
            arguments = self.layer_arguments(hidden)
            for layer in layers[:unmuxed]:
                hidden = self.run_layer(layer, hidden, slot_attention, arguments)
        # Fillers contribute nothing to the mixture.
        hidden = torch.where(is_real[:, None, None], hidden, torch.zeros((), dtype=hidden.dtype, device=device))
        grouped_mask = full_mask.reshape(-1, n, prefix + length)
        hidden = self.mux(hidden.reshape(-1, n, prefix + length, hidden.shape[-1]), grouped_mask)
        # A position is attended if any instance of the group has a real token there.
        encoder_mask = create_bidirectional_mask(
            config=config, inputs_embeds=hidden, attention_mask=grouped_mask.any(dim=1),
            allow_is_bidirectional_skip=may_skip_mask,
        )
        arguments = self.layer_arguments(hidden)
        all_hidden = (hidden,) if output_hidden_states else None
        for layer in layers[unmuxed:]:
            hidden = self.run_layer(layer, hidden, encoder_mask, arguments)
            if output_hidden_states:
                all_hidden += (hidden,)
        return hidden, all_hidden

    def multiplex(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        composition_seed: int | None = None,
        ensemble: bool = False,
        output_hidden_states: bool = False,
    ) -> MuxState:
        config = self.config
        validate_inputs(config, input_ids, attention_mask, token_type_ids, training=self.training)
        batch, device = input_ids.shape[0], input_ids.device
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)

        plan = plan_groups(batch, config.num_instances, seed=composition_seed, ensemble=ensemble, device=device)
        pad_id = config.pad_token_id if config.pad_token_id is not None else 0
        slot_ids = plan.group(input_ids, fill_value=pad_id)
        slot_mask = plan.group(attention_mask.bool(), fill_value=False)
        slot_types = plan.group(token_type_ids, fill_value=0)
        # A row with no attended token is a filler, as in the exported graph: it enters no mixture
        # (its outputs are defined, finite and meaningless).
        is_real = plan.is_real & slot_mask.any(dim=1)
        hidden, all_hidden = self.encode_slots(
            slot_ids, slot_mask, slot_types, is_real, output_hidden_states=output_hidden_states
        )
        return MuxState(
            muxed=hidden,
            plan=plan,
            slot_input_ids=slot_ids,
            slot_mask=slot_mask,
            demux=self.demux,
            hidden_states=all_hidden,
        )

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        composition_seed: int | None = None,
        ensemble: bool = False,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> MuxModelOutput:
        """Multiplex, encode and demultiplex every position.

        Args:
            composition_seed: shuffle which instances share a group (None keeps input order).
            ensemble: run every instance N times in different slots and average its states.
        """
        state = self.multiplex(
            input_ids,
            attention_mask,
            token_type_ids,
            composition_seed=composition_seed,
            ensemble=ensemble,
            output_hidden_states=bool(output_hidden_states),
        )
        return MuxModelOutput(
            last_hidden_state=state.plan.reduce_copies(state.demux_rows()),
            muxed_hidden_state=state.muxed,
            hidden_states=state.hidden_states,
        )


# --------------------------------------------------------------------------- base class

# The task heads' weights: the only ones a checkpoint may hand over in another shape, when the caller
# asks (``ignore_mismatched_sizes``: a head for another label set starts afresh).
HEAD_PREFIXES = ("classifier.", "cls.", "discriminator_predictions.", "retrieval_head.")


class MuxPreTrainedModel(PreTrainedModel):
    """Weight initialisation, warm start and checked loading for every MUX model.

    Family subclasses set ``config_class``, ``base_model_prefix`` and ``plain_model_types``
    (the ``model_type`` of the plain checkpoints :meth:`from_encoder` takes).
    """

    supports_gradient_checkpointing = True
    # The forwards return mean losses and take no ``num_items_in_batch``; without this the
    # Trainer, seeing ``**kwargs``, would skip its division by the accumulation steps (and, over
    # several processes, multiply by their number).
    accepts_loss_kwargs = False
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    plain_model_types: tuple[str, ...] = ()

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, (Multiplexer, Demultiplexer)):
            module.reset_parameters()
        elif isinstance(getattr(module, "position_ids", None), torch.Tensor):  # embedding buffers
            init.copy_(module.position_ids, torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            if isinstance(getattr(module, "token_type_ids", None), torch.Tensor):
                init.zeros_(module.token_type_ids)
        elif hasattr(module, "bias") and isinstance(module.bias, nn.Parameter) and hasattr(module, "decoder"):
            init.zeros_(module.bias)  # the MLM decoder's output bias

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, regroup: bool = False, **kwargs):
        """As in Transformers, but refuses a checkpoint that is not of this family, or whose
        number of instances or mux/demux type disagrees with the config asked for.

        ``regroup=True`` with another ``num_instances`` than the checkpoint's (a curriculum over
        N): the encoder and every other weight are loaded, and only the per-instance weights of
        the multiplexer and demultiplexer (keys of shape ``[N, ...]``) start afresh for the new N."""
        saved = saved_config(pretrained_model_name_or_path, **{key: value for key, value in kwargs.items() if key in (
            "revision", "cache_dir", "token", "local_files_only")})
        if released.is_released_layout(saved):
            if regroup:
                raise ValueError("regroup=True does not apply to the paper's released checkpoints")
            return cls._from_released(pretrained_model_name_or_path, saved, kwargs)
        requested = kwargs.get("config")
        asked_instances = getattr(requested, "num_instances", None) if requested is not None else kwargs.get("num_instances")
        regrouping = regroup and saved is not None and asked_instances not in (None, saved.get("num_instances"))
        if saved is not None:
            expected = cls.config_class.model_type
            found = saved.get("model_type")
            if found != expected:
                hint = (
                    f"; it is a plain {found} checkpoint: use {cls.__name__}.from_encoder(path, num_instances=...)"
                    f" to multiplex it"
                    if found in cls.plain_model_types
                    else ""
                )
                raise ValueError(
                    f"{pretrained_model_name_or_path} holds a {found!r} checkpoint, not {expected!r}{hint}"
                )
            for field in IDENTITY_FIELDS:
                asked = getattr(requested, field, None) if requested is not None else kwargs.get(field)
                if asked is not None and field in saved and asked != saved[field] and \
                        not (regrouping and field == "num_instances"):
                    raise ValueError(
                        f"checkpoint {pretrained_model_name_or_path} was trained with {field}={saved[field]!r}, "
                        f"but {field}={asked!r} was asked for; its weights cannot serve that configuration"
                        + ("" if field != "num_instances" else " (regroup=True / --regroup-instances starts its "
                                                               "per-instance keys afresh for the new N)")
                    )
        head_may_restart = kwargs.get("ignore_mismatched_sizes", False)
        wants_info = kwargs.get("output_loading_info", False)
        # Every weight that does not fit is checked below, so the error can name it.
        kwargs.update(ignore_mismatched_sizes=True, output_loading_info=True)
        try:
            model, info = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        except SafetensorError as error:
            raise ValueError(
                f"the weights in {pretrained_model_name_or_path} are corrupt or incomplete ({error}); "
                f"re-save or re-download the checkpoint"
            ) from error
        except pickle.UnpicklingError:
            raise ValueError(
                f"{os.path.join(str(pretrained_model_name_or_path), 'pytorch_model.bin')} is not a plain file of "
                f"tensors (it is read with weights_only=True: nothing in it is executed); re-save the model from a "
                f"source you trust (save_pretrained writes safetensors)"
            ) from None
        _freeze_mux_keys(model)
        per_instance = (f"{model.base_model_prefix}.mux.", f"{model.base_model_prefix}.demux.")
        for key, in_file, in_model in info.get("mismatched_keys", []):
            if (regrouping and key.startswith(per_instance)) or (head_may_restart and key.startswith(HEAD_PREFIXES)):
                continue
            if regrouping:
                raise ValueError(
                    f"regrouping {pretrained_model_name_or_path} from num_instances={saved.get('num_instances')} "
                    f"to {asked_instances}: {key} does not fit the new model, and only the multiplexer's and "
                    f"demultiplexer's per-instance weights may start afresh")
            raise ValueError(
                f"the weights in {pretrained_model_name_or_path} do not fit its configuration: {key} has shape "
                f"{list(in_file)} in the weight file but {list(in_model)} in the model that config.json (and the "
                f"settings asked for) describe; a config.json edited or copied from another model?")
        return (model, info) if wants_info else model

    @classmethod
    def _from_released(cls, name_or_path, saved: dict, kwargs: dict):
        """A checkpoint released with the paper (the authors' layout): converted to this class's
        config and weight names (:func:`muxplm.released.convert_checkpoint`), then loaded."""
        hub = {key: kwargs.pop(key) for key in ("revision", "cache_dir", "token", "local_files_only") if key in kwargs}
        folder = Path(name_or_path)
        if not folder.is_dir():  # a hub name: its files through the Hugging Face cache
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(str(name_or_path), allow_patterns=["config.json", *released.WEIGHT_FILES],
                                            **hub))
        config, weights, kwargs = released.convert_checkpoint(cls, name_or_path, saved, folder, kwargs)
        loaded = super().from_pretrained(None, config=config, state_dict=weights, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        model.name_or_path = model.config._name_or_path = str(name_or_path)
        _freeze_mux_keys(model)
        return loaded

    @classmethod
    def config_from_encoder(cls, plain_config, keep_layers: int | None = None, source: str | os.PathLike = "the encoder",
                            **config_overrides):
        """The MUX config that :meth:`from_encoder` builds from a plain checkpoint's config of this
        family: its settings under this family's field names, ``keep_layers`` layers (default all),
        then ``config_overrides``. Also for models of the same shape with random weights (timing)."""
        if plain_config.model_type not in cls.plain_model_types:
            raise ValueError(
                f"{source} holds a {plain_config.model_type!r} model; {cls.__name__}.from_encoder needs a "
                f"plain {_one_of(cls.plain_model_types)} checkpoint"
            )
        layers = plain_config.num_hidden_layers
        if keep_layers is not None and not 1 <= keep_layers <= layers:
            raise ValueError(f"keep_layers must lie in [1, {layers}] for the {layers}-layer encoder {source}, "
                             f"got {keep_layers}")
        settings = plain_config.to_dict()
        for key in ("model_type", "architectures", "transformers_version", "_name_or_path"):
            settings.pop(key, None)
        # Settings by BERT's names land on the family's own fields (DistilBERT: n_layers, dim, ...);
        # a plain config keeps its values under those fields, so an alias in it is a stray key.
        field_of = cls.config_class.attribute_map
        for alias in field_of:
            settings.pop(alias, None)
        settings[field_of.get("num_hidden_layers", "num_hidden_layers")] = keep_layers or layers
        settings.update({field_of.get(key, key): value for key, value in config_overrides.items()})
        return cls.config_class(**settings)

    @classmethod
    def from_encoder(cls, path: str | os.PathLike, keep_layers: int | None = None, **config_overrides):
        """Warm-start from a plain checkpoint directory of this family (``plain_model_types``):
        its embedding and encoder weights are copied, the mux/demux modules and heads start
        fresh (a retrieval head's decoder from the word embeddings).

        ``keep_layers`` keeps only the plain encoder's first k layers (a cut encoder);
        ``config_overrides`` (e.g. ``num_instances=2, num_labels=3``) are applied on top of
        the plain config.
        """
        model = cls(cls.config_from_encoder(AutoConfig.from_pretrained(path), keep_layers, path, **config_overrides))
        target = model.base_model
        plain = AutoModel.from_pretrained(path)
        # A cut encoder: the plain stack (found where the MUX model keeps its own) loses its last layers.
        stack = next(name for name, module in target.named_modules() if module is target.encoder_layers())
        owner, _, attribute = stack.rpartition(".")
        plain_owner = plain.get_submodule(owner)
        setattr(plain_owner, attribute, getattr(plain_owner, attribute)[: model.config.num_hidden_layers])
        for name, source in plain.named_children():
            if name == "pooler":  # the heads read demultiplexed states, not a pooled vector
                continue
            if not isinstance(getattr(target, name, None), nn.Module):
                raise ValueError(f"{path}: the plain model's {name!r} has no counterpart in {type(target).__name__}")
            getattr(target, name).load_state_dict(source.state_dict())
        # Retrieval reads input tokens back: start its decoder at the encoder's own word
        # embeddings (the tying a pretrained MLM head has), not at random.
        head = getattr(model, "retrieval_head", None)
        words = plain.get_input_embeddings().weight
        if head is not None and head.decoder.weight.shape == words.shape:
            with torch.no_grad():
                head.decoder.weight.copy_(words)
        return model


def _freeze_mux_keys(model) -> None:
    """Loading hands back trainable parameters: fixed multiplexing keys must stay frozen. A
    multiplexer's own (non-submodule) parameters are exactly its keys."""
    for module in model.modules():
        if isinstance(module, Multiplexer):
            for key in module.parameters(recurse=False):
                key.requires_grad_(bool(model.config.learn_mux_keys))


def _one_of(names) -> str:
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


# --------------------------------------------------------------------------- heads


class RetrievalHead(nn.Module):
    """Predicts an instance's input token from its demultiplexed state (H -> V)."""

    def __init__(self, config):
        super().__init__()
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, states: torch.Tensor, candidates: torch.Tensor | None = None) -> torch.Tensor:
        """Logits over the vocabulary, or over the token ids ``candidates`` only."""
        if candidates is None:
            return self.decoder(states)
        return F.linear(states, self.decoder.weight[candidates], self.decoder.bias[candidates])


def retrieval_targets(state: MuxState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample, for every group and position, one instance to retrieve (token-retrieval priming).

    Returns the chosen slots ``[G*L]``, positions ``[G*L]`` and labels ``[G*L]``
    (``-100`` where that instance has padding or is a filler).
    """
    n = state.plan.num_instances
    groups = state.plan.num_groups
    length = state.slot_input_ids.shape[1]
    device = state.muxed.device
    chosen = torch.randint(0, n, (groups, length), device=device)
    slots = (torch.arange(groups, device=device)[:, None] * n + chosen).flatten()
    positions = torch.arange(length, device=device).repeat(groups)
    labels = state.slot_input_ids[slots, positions]
    labels = labels.masked_fill(~state.slot_mask[slots, positions], -100)
    return slots, positions, labels


def retrieval_loss(head: RetrievalHead, state: MuxState, in_batch: bool = False,
                   training: bool = False) -> MuxRetrievalOutput:
    """Cross-entropy of the sampled retrieval targets. ``in_batch``: the softmax runs over the
    distinct tokens of the batch (all instances), not the vocabulary; ``logits`` then has one
    column per such token, and ``accuracy`` is still over token ids. ``logits`` and ``labels``
    hold the scored targets only, except in a training step on an accelerator
    (:func:`host_checks_wanted`), where every sampled position is scored, ``labels`` is ``-100``
    at the unscored ones and ``in_batch`` columns repeat tokens with their repeats masked out."""
    slots, positions, labels = retrieval_targets(state)
    if not host_checks_wanted(labels, training):
        return _fixed_shape_retrieval_loss(head, state, slots, positions, labels, in_batch)
    keep = labels != -100
    states = state.demux_slots(slots[keep], positions[keep])
    targets = labels[keep]
    if in_batch:
        candidates = torch.unique(state.slot_input_ids[state.slot_mask])  # sorted; holds every target
        logits = head(states, candidates)
        loss = F.cross_entropy(logits, torch.searchsorted(candidates, targets))
        predicted = candidates[logits.argmax(-1)]
    else:
        logits = head(states)
        loss = F.cross_entropy(logits, targets)
        predicted = logits.argmax(-1)
    accuracy = (predicted == targets).float().mean()
    return MuxRetrievalOutput(loss=loss, logits=logits, labels=targets, accuracy=accuracy.detach())


def _fixed_shape_retrieval_loss(head, state, slots, positions, labels, in_batch: bool) -> MuxRetrievalOutput:
    """:func:`retrieval_loss` without a shape that depends on the data (no host sync): the same
    loss and accuracy."""
    keep = labels != -100
    states = state.demux_slots(slots, positions)
    if in_batch:
        # Every slot token is a column (sorted); padding and repeats get no probability, so the
        # softmax runs over the distinct real tokens, as torch.unique's would.
        candidates = state.slot_input_ids.masked_fill(~state.slot_mask, -1).flatten().sort().values
        unused = candidates < 0
        unused[1:] |= candidates[1:] == candidates[:-1]
        logits = head(states, candidates.clamp(min=0))
        logits = logits.masked_fill(unused, torch.finfo(logits.dtype).min)
        columns = torch.searchsorted(candidates, labels).masked_fill(~keep, -100)  # first of the repeats
        loss = F.cross_entropy(logits, columns, ignore_index=-100, reduction="sum")
        predicted = candidates[logits.argmax(-1)]
    else:
        logits = head(states)
        loss = F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
        predicted = logits.argmax(-1)
    counted = keep.sum().clamp(min=1)
    accuracy = ((predicted == labels) & keep).sum() / counted
    return MuxRetrievalOutput(loss=loss / counted, logits=logits, labels=labels, accuracy=accuracy.detach())


def _in_batch_softmax(model) -> bool:
    """The cheap in-batch softmax is a training device: evaluation always scores the vocabulary."""
    return model.training and model.config.retrieval_softmax == "in_batch"


def mix_retrieval(model, task_loss: torch.Tensor, state: MuxState) -> MuxPreTrainingOutput:
    """``(1 - r) * task + r * retrieval`` when the config asks for the auxiliary loss."""
    weight = model.config.retrieval_loss_weight
    if not weight:
        return MuxPreTrainingOutput(loss=task_loss, task_loss=task_loss)
    aux = retrieval_loss(model.retrieval_head, state, in_batch=_in_batch_softmax(model), training=model.training)
    return MuxPreTrainingOutput(
        loss=(1 - weight) * task_loss + weight * aux.loss,
        task_loss=task_loss,
        retrieval_loss=aux.loss,
        retrieval_accuracy=aux.accuracy,
    )


class MuxHeadMixin:
    """Common plumbing of the models with a head: builds the base model under the family's
    prefix (``bert``, ``roberta``, ``distilbert``, ...) so warm-start and checkpoint names match
    Transformers'."""

    base_model_class: type
    # How the paper's released model of this head fed the forward pass (forward_variant="released").
    released_head = released.CLASSIFIER_HEAD

    def _build_base(self, config) -> None:
        base = self.base_model_class(config)
        base.released_head = self.released_head
        if released.is_released(config):
            base.demux.path = self.released_head.demux_path
            if hasattr(base.mux, "instance_mask"):
                base.mux.instance_mask = self.released_head.instance_mask
        setattr(self, self.base_model_prefix, base)

    def _multiplex(self, input_ids, attention_mask, token_type_ids, **kwargs) -> MuxState:
        return self.base_model.multiplex(input_ids, attention_mask, token_type_ids, **kwargs)


class MuxMaskedLMMixin(MuxHeadMixin):
    """Stage 2: masked language modelling, masks chosen per instance before multiplexing, with
    the optional auxiliary retrieval loss (``config.retrieval_loss_weight``). The family class
    builds its plain MLM head and defines ``mlm_logits(states) -> [*, V]`` with it."""

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
            return MuxPreTrainingOutput(logits=self.mlm_logits(state.demux_rows()))
        validate_labels(labels, tuple(input_ids.shape), "masked language modelling")
        selected = labels != -100
        if host_checks_wanted(labels, self.training):
            logits = self.mlm_logits(state.demux_where(selected))
            targets = labels[selected]
            check_class_ids(targets, self.config.vocab_size, "vocabulary ids (MLM labels: a token id, or -100)",
                            training=self.training)
            # A batch without a single masked token gives a zero loss, not NaN.
            loss = F.cross_entropy(logits, targets) if targets.numel() else logits.sum() * 0.0
        else:  # every position scored, the unmasked ones ignored: no data-dependent shape
            logits = self.mlm_logits(state.demux_rows())
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
            loss = loss / selected.sum().clamp(min=1)
        output = mix_retrieval(self, loss, state)
        output.logits = logits
        return output


class MuxRetrievalMixin(MuxHeadMixin):
    """Stage 1, token-retrieval priming: for every group and position, retrieve the input
    token of a randomly chosen instance from the multiplexed encoding."""

    def __init__(self, config):
        super().__init__(config)
        self._build_base(config)
        self.retrieval_head = RetrievalHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        composition_seed: int | None = None,
        output_demuxed: bool = False,
        **kwargs,
    ) -> MuxRetrievalOutput:
        state = self._multiplex(input_ids, attention_mask, token_type_ids, composition_seed=composition_seed)
        output = retrieval_loss(self.retrieval_head, state, in_batch=_in_batch_softmax(self), training=self.training)
        if output_demuxed:  # through forward, so that a DDP wrapper sees the whole computation
            output.last_hidden_state = state.plan.reduce_copies(state.demux_rows())
        return output

    @torch.no_grad()
    def reconstruct(self, input_ids, attention_mask=None, token_type_ids=None, composition_seed=None) -> torch.Tensor:
        """Every instance's tokens as retrieved from the multiplexed encoding: ``[B, L]``."""
        state = self._multiplex(input_ids, attention_mask, token_type_ids, composition_seed=composition_seed)
        return self.retrieval_head(state.demux_rows()).argmax(-1)


class _LinearHeadMixin(MuxHeadMixin):
    """Dropout + linear classifier on demultiplexed states."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self._build_base(config)
        self.dropout, self.classifier = self.build_classifier(config)
        self.post_init()

    def build_classifier(self, config) -> tuple[nn.Module, nn.Module]:
        """The dropout and classifier on the demultiplexed states (a family may have its own)."""
        dropout = getattr(config, "classifier_dropout", None)
        return nn.Dropout(config.hidden_dropout_prob if dropout is None else dropout), \
            nn.Linear(config.hidden_size, config.num_labels)

    def slot_logits(self, muxed: torch.Tensor, slot_mask: torch.Tensor) -> torch.Tensor:
        """The head on the encoder output ``[G, L', H]``: logits of every slot, in slot order
        (``[S, C]``, or ``[S, L, C]`` for tokens). The one head computation that :meth:`forward`
        and the ONNX export share (shapes only through ``reshape``, so exported sizes stay
        symbolic)."""
        return self.classifier(self.dropout(self.slot_states(muxed, slot_mask)))  # each head's own states


class MuxSequenceClassificationMixin(_LinearHeadMixin):
    """Classification (or regression when ``num_labels == 1``) from the demultiplexed first
    position, or from each instance's demultiplexed mean over its tokens
    (``config.sentence_pooling = "mean"``); ``ensemble=True`` averages the logits of N copies
    of every instance."""

    def slot_states(self, muxed: torch.Tensor, slot_mask: torch.Tensor) -> torch.Tensor:
        """Each slot's sentence vector ``[S, H]``."""
        demux = self.base_model.demux
        if self.config.sentence_pooling == "mean":
            states = pooled_instance_states(demux, muxed, slot_mask)
        else:
            states = demux.sentence_states(muxed)
        return states.flatten(0, 1)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        composition_seed: int | None = None,
        ensemble: bool = False,
        **kwargs,
    ) -> SequenceClassifierOutput:
        state = self._multiplex(
            input_ids, attention_mask, token_type_ids, composition_seed=composition_seed, ensemble=ensemble
        )
        logits = state.plan.reduce_copies(state.plan.ungroup(self.slot_logits(state.muxed, state.slot_mask)))
        loss = None
        if labels is not None:
            loss = sequence_classification_loss(self.config, logits, labels, training=self.training)
        return SequenceClassifierOutput(loss=loss, logits=logits)


def sequence_classification_loss(config, logits: torch.Tensor, labels: torch.Tensor,
                                 training: bool = False) -> torch.Tensor:
    batch = logits.shape[0]
    if config.num_labels == 1 or config.problem_type == "regression":
        validate_labels(labels.view(-1) if labels.dim() == 2 else labels, (batch,), "regression")
        return F.mse_loss(logits.view(-1), labels.view(-1).to(logits.dtype))
    if config.problem_type == "multi_label_classification":
        validate_labels(labels, tuple(logits.shape), "multi-label classification")
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
    validate_labels(labels, (batch,), "sequence classification")
    check_class_ids(labels, config.num_labels, training=training)
    return F.cross_entropy(logits, labels)


def check_class_ids(labels: torch.Tensor, num_labels: int, what: str = "classes", training: bool = False,
                    ignore_index: int | None = None) -> None:
    """Refuse labels outside ``[0, num_labels)`` (``ignore_index`` aside) here: on CUDA they
    would be a device assert."""
    if labels.dtype.is_floating_point:
        raise ValueError("classification labels must be integer class ids (float labels mean regression: num_labels=1)")
    if not host_checks_wanted(labels, training):
        return
    if ignore_index is not None:
        labels = labels[labels != ignore_index]
    if labels.numel() == 0:
        return
    low, high = torch.aminmax(labels)
    if low < 0 or high >= num_labels:
        bad = int(low) if low < 0 else int(high)
        raise ValueError(f"label {bad} is outside the model's {num_labels} {what} [0, {num_labels})")


class MuxTokenClassificationMixin(_LinearHeadMixin):
    """A label per token from the demultiplexed states of every position."""

    def slot_states(self, muxed: torch.Tensor, slot_mask: torch.Tensor) -> torch.Tensor:
        """Every slot's demultiplexed states ``[S, L, H]``."""
        return self.base_model.demux(muxed, None).flatten(0, 1)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        composition_seed: int | None = None,
        ensemble: bool = False,
        **kwargs,
    ) -> TokenClassifierOutput:
        state = self._multiplex(
            input_ids, attention_mask, token_type_ids, composition_seed=composition_seed, ensemble=ensemble
        )
        logits = state.plan.reduce_copies(state.plan.ungroup(self.slot_logits(state.muxed, state.slot_mask)))
        loss = None
        if labels is not None:
            validate_labels(labels, tuple(input_ids.shape), "token classification")
            check_class_ids(labels, self.config.num_labels, training=self.training, ignore_index=-100)
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return TokenClassifierOutput(loss=loss, logits=logits)
