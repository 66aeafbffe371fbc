"""Multiplexers: ``[G, N, L, H] -> [G, L, H]``, chosen by name from the config.

Every multiplexer takes the embedded instances of each group, already arranged by
:mod:`muxplm.grouping` (filler slots are all-zero), and their token masks ``[G, N, L]``; an
instance's padding enters no mixture (its [PAD] states would otherwise be mixed into its
companions' real tokens at the same positions).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import initialization as init
from transformers.models.bert.modeling_bert import BertLayer
from transformers.masking_utils import create_bidirectional_mask

from .devices import host_checks_wanted
from .registry import Registry

MUX_REGISTRY = Registry("mux_type")
register_mux = MUX_REGISTRY.register


def build_mux(config) -> nn.Module:
    if getattr(config, "forward_variant", "native") == "released":  # the paper's checkpoints' own modules
        from .released import RELEASED_MUX

        return RELEASED_MUX[config.mux_type](config)
    return MUX_REGISTRY.build(config.mux_type, config)


def real_tokens(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` ``[G, N, L, H]`` with every padded position zeroed."""
    return x * mask[..., None].to(x.dtype)


def key_generator(num_instances: int) -> torch.Generator:
    return torch.Generator().manual_seed(1234 + num_instances)


class Multiplexer(nn.Module):
    """Base class. Subclasses implement ``forward(x, mask)`` and ``reset_parameters()``,
    which the model's weight initialisation calls (through ``transformers.initialization``,
    so weights loaded from a checkpoint are never overwritten). Fixed keys come from a
    seeded generator: two models built from one config multiplex identically."""

    registry_name = "base"

    def __init__(self, config):
        super().__init__()
        self.num_instances = config.num_instances
        self.width = config.mux_width
        self.key_norm = float(config.mux_key_norm)

    def _generator(self) -> torch.Generator:
        return key_generator(self.num_instances)

    def reset_parameters(self) -> None:
        pass


@register_mux("identity")
class IdentityMux(Multiplexer):
    """N = 1: the plain model."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x[:, 0]


@register_mux("gaussian_hadamard")
class GaussianHadamardMux(Multiplexer):
    """Non-contextual multiplexing (paper default): ``mean_i(x_i * v_i)`` with fixed Gaussian
    keys ``v_i`` rescaled to norm ``mux_key_norm``, the same at every position."""

    def __init__(self, config):
        super().__init__(config)
        self.keys = nn.Parameter(torch.empty(self.num_instances, self.width), requires_grad=config.learn_mux_keys)
        self.reset_parameters()

    @staticmethod
    def draw_keys(num_instances: int, width: int, key_norm: float) -> torch.Tensor:
        """The fixed keys ``[N, width]`` (the same for every model of this N and width)."""
        keys = torch.randn(num_instances, width, generator=key_generator(num_instances))
        return keys / keys.norm(dim=-1, keepdim=True) * key_norm

    def reset_parameters(self) -> None:
        init.copy_(self.keys, self.draw_keys(self.num_instances, self.width, self.key_norm))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (real_tokens(x, mask) * self.keys[:, None, :].to(x.dtype)).mean(dim=1)


@register_mux("binary_hadamard")
class BinaryHadamardMux(GaussianHadamardMux):
    """DataMUX ablation: each instance keeps its own random block of H/N dimensions
    (disjoint 0/1 masks), rescaled to norm ``mux_key_norm``."""

    @staticmethod
    def draw_keys(num_instances: int, width: int, key_norm: float) -> torch.Tensor:
        owner = torch.randperm(width, generator=key_generator(num_instances)) % num_instances
        keys = (owner[None, :] == torch.arange(num_instances)[:, None]).float()
        return keys / keys.norm(dim=-1, keepdim=True) * key_norm


@register_mux("adapter")
class AdapterMux(GaussianHadamardMux):
    """Light per-instance adapters before the Gaussian keys: ``mean_i(v_i * (x_i + A_i(x_i)))``
    with ``A_i`` a bottleneck MLP of its own per slot, ``up_i(gelu(down_i x))`` of width
    ``H / 8``. A converted encoder can then give each instance a learned view of its states
    before they share a mixture, at about 1/48 of a Transformer layer's weights per instance
    (the cheap alternative to unmuxed layers that run whole layers per instance). The
    up-projections start at zero: an untrained adapter multiplexer is the Gaussian one."""

    def __init__(self, config):
        super().__init__(config)
        n, width, size = self.num_instances, self.width, max(1, config.mux_width // 8)
        self.adapters = nn.ParameterDict({
            "down": nn.Parameter(torch.empty(n, width, size)), "down_bias": nn.Parameter(torch.empty(n, size)),
            "up": nn.Parameter(torch.empty(n, size, width)), "up_bias": nn.Parameter(torch.empty(n, width)),
        })
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if hasattr(self, "adapters"):  # the keys are drawn before the adapters exist
            init.normal_(self.adapters["down"], std=self.width ** -0.5)
            for name in ("down_bias", "up", "up_bias"):
                init.zeros_(self.adapters[name])

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        a = {name: weight.to(x.dtype) for name, weight in self.adapters.items()}
        inner = nn.functional.gelu(torch.einsum("gnlh,nhr->gnlr", x, a["down"]) + a["down_bias"][:, None, :])
        adapted = x + torch.einsum("gnlr,nrh->gnlh", inner, a["up"]) + a["up_bias"][:, None, :]
        return super().forward(adapted, mask)


@register_mux("random_ortho")
class RandomOrthogonalMux(Multiplexer):
    """DataMUX ablation: ``mean_i(x_i Q_i)`` with a fixed random orthogonal matrix per instance,
    scaled so a unit vector keeps norm ``mux_key_norm / sqrt(H)`` (matching the Gaussian keys)."""

    def __init__(self, config):
        super().__init__(config)
        self.matrices = nn.Parameter(
            torch.empty(self.num_instances, self.width, self.width), requires_grad=config.learn_mux_keys
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gen = self._generator()
        scale = self.key_norm / math.sqrt(self.width)
        matrices = []
        for _ in range(self.num_instances):
            q, r = torch.linalg.qr(torch.randn(self.width, self.width, generator=gen))
            matrices.append(q * torch.sign(torch.diagonal(r))[None, :] * scale)  # sign fix: uniform (Haar) draw
        init.copy_(self.matrices, torch.stack(matrices))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.einsum("gnlh,nhk->glk", real_tokens(x, mask), self.matrices.to(x.dtype)) / self.num_instances


@register_mux("contextual")
class ContextualMux(GaussianHadamardMux):
    """Contextual multiplexing: a Transformer layer over each instance's own tokens
    (TRANS_ctx), the Gaussian keys, a Transformer layer across the N instances at each
    position (TRANS_inst), a residual, and the mean over instances."""

    def __init__(self, config):
        super().__init__(config)
        self.config = config
        self.context_layer = BertLayer(config)
        self.instance_layer = BertLayer(config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.instance_terms(x, mask).mean(dim=1)

    def instance_terms(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Each slot's term of the mixture, ``[G, N, L, H]`` (the mixture is their mean); a
        filler's term is zero, its cross-instance output included."""
        g, n, l, h = x.shape
        flat = x.reshape(g * n, l, h)
        has_tokens = mask.any(dim=-1)  # False for filler slots
        # Filler slots have no token to attend to; let them attend everywhere (no NaN
        # from an all-masked softmax) and zero their output afterwards.
        token_mask = mask | ~has_tokens[..., None]
        may_skip = host_checks_wanted(x, self.training)  # see MuxBackboneMixin.encode_slots
        ctx_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=flat, attention_mask=token_mask.reshape(g * n, l),
            allow_is_bidirectional_skip=may_skip,
        )
        ctx = self.context_layer(flat, ctx_mask).view(g, n, l, h) * has_tokens[..., None, None].to(x.dtype)
        keyed = ctx * self.keys[None, :, None, :].to(x.dtype)
        # Attend across the N instances at each position: sequences of length N.
        across = keyed.transpose(1, 2).reshape(g * l, n, h)
        slot_mask = mask.transpose(1, 2).reshape(g * l, n)
        # A position where no instance has a token still needs one attendable slot.
        slot_mask = slot_mask | ~slot_mask.any(dim=-1, keepdim=True)
        inst_mask = create_bidirectional_mask(config=self.config, inputs_embeds=across, attention_mask=slot_mask,
                                              allow_is_bidirectional_skip=may_skip)
        mixed = self.instance_layer(across, inst_mask).view(g, l, n, h).transpose(1, 2)
        return real_tokens(keyed + mixed, mask)  # a filler has no token: its term is zero too
