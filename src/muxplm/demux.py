"""Demultiplexers: ``[G, L, H] -> N per-instance representations``, chosen by name.

Each demultiplexer offers two ways out, so that only the positions a head needs are
computed:

* ``forward(h_mux, positions)`` — dense: every instance at the given token positions
  (``None`` = all), ``[G, N, P, H]``. Sentence heads ask for position 0, token heads for all.
* ``gather(h_mux, groups, instances, positions)`` — sparse: one vector per requested
  (group, instance, position) triple, ``[S, H]``. Used for masked-LM and retrieval targets.

Positions are *token* positions; a demultiplexer that prepends a prefix (T-MUX) shifts them.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init

from .mux import MUX_REGISTRY
from .registry import Registry

DEMUX_REGISTRY = Registry("demux_type")
register_demux = DEMUX_REGISTRY.register


def build_demux(config) -> nn.Module:
    if getattr(config, "forward_variant", "native") == "released":  # the paper's checkpoints' own modules
        from .released import RELEASED_DEMUX

        return RELEASED_DEMUX[config.demux_type](config)
    return DEMUX_REGISTRY.build(config.demux_type, config)


class Demultiplexer(nn.Module):
    """Base class. Subclasses implement ``forward``/``gather``/``demux_states``; one that adds
    positions to every sequence says how many in :meth:`prefix_length` (the config reads it)."""

    registry_name = "base"

    def __init__(self, config):
        super().__init__()
        self.num_instances = config.num_instances
        self.num_prefix_tokens = self.prefix_length(config)

    @classmethod
    def prefix_length(cls, config) -> int:
        """Positions this demultiplexer prepends to every sequence (T-MUX: N)."""
        return 0

    def demux_states(self, h_mux: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """Demultiplex per-instance summaries of the encoder output, ``[G, N, H] -> [G, N, H]``
        (e.g. each instance's mean over its own token positions), as if each were a position."""
        # Every registered demultiplexer defines it; one that does not cannot serve mean pooling.
        raise TypeError(f"the {self.registry_name} demultiplexer does not demultiplex pooled states: use "
                        f"sentence_pooling='first' with it, or define demux_states")

    def sentence_states(self, h_mux: torch.Tensor) -> torch.Tensor:
        """Every instance's sentence vector ``[G, N, H]``: its demultiplexed first token."""
        return self(h_mux, torch.zeros(1, dtype=torch.long, device=h_mux.device))[:, :, 0]

    def prefix_embeddings(self, slot_index: torch.Tensor) -> torch.Tensor | None:
        """Word-level embeddings ``[S, P, E]`` to prepend to each slot's tokens (T-MUX only)."""
        return None

    def reset_parameters(self) -> None:
        pass


@register_demux("identity")
class IdentityDemux(Demultiplexer):
    """N = 1: the encoder output is the instance's output."""

    def forward(self, h_mux: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        h = h_mux if positions is None else h_mux[:, positions]
        return h[:, None]

    def gather(self, h_mux, groups, instances, positions) -> torch.Tensor:
        return h_mux[groups, positions]

    def demux_states(self, h_mux: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        return states


class KeyedMLP(nn.Module):
    """``MLP([k ; h])``: Linear(2H -> H), GELU, LayerNorm, then residual blocks of
    Linear(H -> H), GELU, LayerNorm.

    The first linear layer is kept as its two halves, ``W_k k + W_h h``, so callers can
    compute ``W_h h`` once per group and position and add the N projected keys to it,
    instead of running a 2H-wide layer N times.
    """

    def __init__(self, hidden_size: int, num_layers: int, eps: float):
        super().__init__()
        self.key_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.hidden_proj = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)
        self.blocks = nn.ModuleList(_ResidualBlock(hidden_size, eps) for _ in range(num_layers - 1))

    def finish(self, pre_activation: torch.Tensor) -> torch.Tensor:
        x = self.norm(F.gelu(pre_activation))
        for block in self.blocks:
            x = block(x)
        return x


class _ResidualBlock(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + F.gelu(self.dense(x)))


class _KeyedDemux(Demultiplexer):
    """Shared body of the RSA and prefix demultiplexers; they differ only in where the
    per-instance key comes from: each defines ``projected_keys(h_mux)``, the keys after the
    key half of the first layer, ``W_k k_i``, shaped ``[1 or G, N, H]``."""

    def __init__(self, config):
        super().__init__(config)
        self.mlp = KeyedMLP(config.hidden_size, config.num_demux_layers, config.layer_norm_eps)

    def forward(self, h_mux: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        keys = self.projected_keys(h_mux)  # [1 or G, N, H]
        tokens = h_mux[:, self.num_prefix_tokens :]
        if positions is not None:
            tokens = tokens[:, positions]
        shared = self.mlp.hidden_proj(tokens)  # [G, P, H], once per group, not per instance
        return self.mlp.finish(shared[:, None] + keys[:, :, None])

    def gather(self, h_mux, groups, instances, positions) -> torch.Tensor:
        keys = self.projected_keys(h_mux)
        key_rows = keys[groups if keys.shape[0] > 1 else torch.zeros_like(groups), instances]
        hidden = self.mlp.hidden_proj(h_mux[groups, positions + self.num_prefix_tokens])
        return self.mlp.finish(hidden + key_rows)

    def demux_states(self, h_mux: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        return self.mlp.finish(self.mlp.hidden_proj(self.unbind(states)) + self.projected_keys(h_mux))

    def unbind(self, states: torch.Tensor) -> torch.Tensor:
        """Per-instance states ``[..., N, H]`` before the MLP (the RSA demux takes them as they are)."""
        return states


@register_demux("rsa")
class RSADemux(_KeyedDemux):
    """The paper's RSA-inspired demultiplexer: N learned private keys ``k_i``."""

    def __init__(self, config):
        super().__init__(config)
        self.keys = nn.Parameter(torch.empty(config.num_instances, config.hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.keys)

    def projected_keys(self, h_mux: torch.Tensor) -> torch.Tensor:
        return self.mlp.key_proj(self.keys)[None]


@register_demux("unbind")
class UnbindDemux(RSADemux):
    """RSA demultiplexing of the *unbound* encoder output: instance i's MLP sees ``h * u_i``
    instead of ``h``, with learned ``u_i`` that start as the elementwise inverses of the
    multiplexer's keys (``v_i * u_i`` has mean 1). Unbinding is what recovers a Hadamard-keyed
    instance from a superposition; the additive RSA key must otherwise learn it through the
    MLP, which takes thousands of priming steps at N >= 5. Costs the first demux layer once
    per instance instead of once per group."""

    def __init__(self, config):
        super().__init__(config)
        self.mux_type, self.key_norm = config.mux_type, float(config.mux_key_norm)
        self.unbind_keys = nn.Parameter(torch.empty(config.num_instances, config.hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if not hasattr(self, "unbind_keys"):
            return  # called by the parent constructor, before the unbinding keys exist
        draw = getattr(MUX_REGISTRY[self.mux_type], "draw_keys", None) if self.mux_type in MUX_REGISTRY else None
        if draw is None:  # a multiplexer without Hadamard keys: random unbinding keys
            init.normal_(self.unbind_keys)
            return
        keys = draw(self.num_instances, self.unbind_keys.shape[1], self.key_norm)
        init.copy_(self.unbind_keys, keys / keys.pow(2).mean(dim=-1, keepdim=True))

    def unbind(self, states: torch.Tensor) -> torch.Tensor:
        return states * self.unbind_keys.to(states.dtype)

    def forward(self, h_mux: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        tokens = h_mux if positions is None else h_mux[:, positions]  # [G, P, H]
        unbound = tokens[:, None] * self.unbind_keys[None, :, None, :].to(tokens.dtype)  # [G, N, P, H]
        keys = self.projected_keys(h_mux)[:, :, None]
        return self.mlp.finish(self.mlp.hidden_proj(unbound) + keys)

    def gather(self, h_mux, groups, instances, positions) -> torch.Tensor:
        unbound = h_mux[groups, positions] * self.unbind_keys[instances].to(h_mux.dtype)
        return self.mlp.finish(self.mlp.hidden_proj(unbound) + self.projected_keys(h_mux)[0, instances])


@register_demux("prefix")
class PrefixDemux(_KeyedDemux):
    """T-MUX (DataMUX) demultiplexer. Instance i of a group gets a prefix of N tokens, all
    a shared filler token except position i, which holds instance i's marker token. After
    the encoder, the output at prefix position i plays the role of instance i's key. Costs
    N extra positions per sequence."""

    @classmethod
    def prefix_length(cls, config) -> int:
        return config.num_instances

    def __init__(self, config):
        super().__init__(config)
        width = getattr(config, "embedding_size", config.hidden_size)
        # Rows 0..N-1 are the instance markers, row N the filler.
        self.prefix_tokens = nn.Embedding(config.num_instances + 1, width)
        self.register_buffer("prefix_ids", self._prefix_ids(), persistent=False)
        self.reset_parameters()

    def _prefix_ids(self) -> torch.Tensor:
        """Row i: the filler id N everywhere except position i, which holds marker i."""
        n = self.num_instances
        return torch.where(torch.eye(n, dtype=torch.bool), torch.arange(n)[:, None], torch.tensor(n))

    def reset_parameters(self) -> None:
        init.normal_(self.prefix_tokens.weight, std=0.02)
        # Not saved in checkpoints, so it must be rebuilt whenever weights are initialised.
        init.copy_(self.prefix_ids, self._prefix_ids())

    def prefix_embeddings(self, slot_index: torch.Tensor) -> torch.Tensor:
        return self.prefix_tokens(self.prefix_ids[slot_index % self.num_instances])

    def projected_keys(self, h_mux: torch.Tensor) -> torch.Tensor:
        return self.mlp.key_proj(h_mux[:, : self.num_prefix_tokens])
