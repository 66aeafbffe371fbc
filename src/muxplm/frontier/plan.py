"""The plan of ``muxplm frontier``: which candidates to build, what each one costs on this device,
and which of them fit the budget.

A *candidate* is one model to fine-tune: the plain encoder, a cut of it (its first k layers), or a
conversion at N instances of the whole encoder or of the best cut. Its int8 copies need no
training and ride along with it (scored and timed, costed in its estimate).

The cost of a candidate comes from a few measured seconds (:class:`StepTimes`, timed on this
device before anything trains): a fine-tuning step of the plain encoder and of its first layer
alone give a step's fixed part and its part per layer, and so every shape's step: a model runs
``K + (layers - K) / N`` layers per instance (K of them unmuxed). A priming step of a conversion
reads ``32 x N`` blocks of 32 tokens. Evaluation and timing are priced by forward passes timed the
same way. Nothing here imports PyTorch.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..training.recipes import CONVERT_RECIPE, FRONTIER

# Seconds a training run spends before its first step (reading the data, building the model) and an
# evaluation before its first pass (loading the checkpoint and the data): guesses, corrected by the
# measured ratios as the candidates finish.
RUN_OVERHEAD_SECONDS = 5.0
EVAL_OVERHEAD_SECONDS = 1.5
# A conversion primes on blocks of this many tokens, this many multiplexed groups a step.
PRIMING_BLOCK = CONVERT_RECIPE["max_length"]
PRIMING_GROUPS = CONVERT_RECIPE["batch_groups"]
# Exporting a model to ONNX and checking it, in forward passes of the plain model (about a second for
# MiniLM on two cores).
ONNX_EXPORT_PASSES = 3
# How much faster an int8 copy runs its passes (MiniLM on a 2-core CPU: 1.5x in PyTorch, 1.8x in ONNX
# Runtime), to price its evaluation and timing.
INT8_SPEEDUP = 1.5

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([hms]?)", re.IGNORECASE)
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "": 1.0}


def parse_budget(text: str | float | int) -> float:
    """Seconds of a budget written ``90s``, ``15m``, ``1h``, ``1h30m``, ``1.5h`` or as plain seconds
    (``5400``). Raises ``ValueError`` for anything else, or for a budget that is not positive."""
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        compact = str(text).strip().replace(" ", "")
        parts = _DURATION.findall(compact)
        if not compact or "".join(number + unit for number, unit in parts) != compact:
            raise ValueError(f"budget {text!r}: write it as 90s, 15m, 1h, 1h30m or a number of seconds")
        if len(parts) > 1 and any(not unit for _, unit in parts):
            raise ValueError(f"budget {text!r}: give every part of a compound budget its unit (1h30m)")
        seconds = sum(float(number) * _UNIT_SECONDS[unit.lower()] for number, unit in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"budget {text!r}: it must be a positive duration")
    return seconds


def format_seconds(seconds: float) -> str:
    """``95`` -> ``1m35s``, ``3720`` -> ``1h02m``: durations as the plan and the table show them."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def unmuxed_layers(num_layers: int, num_instances: int) -> int:
    """The layers a conversion of ``num_layers`` layers runs on each instance alone: the convert
    recipe's, at most all but one (none at N = 1, which has no mixture)."""
    if num_instances == 1:
        return 0
    return min(CONVERT_RECIPE["num_unmuxed_layers"], num_layers - 1)


def layers_per_instance(num_layers: int, num_instances: int, unmuxed: int) -> float:
    """Encoder layers a model runs per instance: its unmuxed ones whole, the rest shared by N."""
    return unmuxed + (num_layers - unmuxed) / num_instances


def finetune_epochs(num_layers: int, num_instances: int, unmuxed: int) -> float:
    """Epochs of the frontier's fine-tuning rule: 3 for a plain or cut model; for a MUX model as
    many more as give it the encoder compute of its plain model of the same depth, at most 20."""
    epochs = FRONTIER["epochs"]
    if num_instances == 1:
        return epochs
    share = layers_per_instance(num_layers, num_instances, unmuxed) / num_layers
    return min(epochs / share, FRONTIER["epochs_cap"])


def default_cuts(num_layers: int) -> list[int]:
    """The depths cut by default: the first layer, a third, half and two thirds of the encoder
    (MiniLM's 6 layers: 1, 2, 3, 4); none for a one-layer encoder."""
    depths = {1, round(num_layers / 3), num_layers // 2, round(2 * num_layers / 3)}
    return sorted(depth for depth in depths if 1 <= depth < num_layers)


@dataclass(frozen=True)
class StepTimes:
    """Seconds measured on this device, what every estimate is made of: a fine-tuning step
    (``batch_size`` examples of ``train_length`` tokens) and an evaluation pass (``eval_batch_size``
    examples of ``eval_length`` tokens), each as a fixed part and a part per encoder layer."""

    train_fixed: float
    train_per_layer: float
    forward_fixed: float
    forward_per_layer: float
    batch_size: int
    train_length: int
    eval_batch_size: int
    eval_length: int

    def train_step(self, layers: float) -> float:
        return self.train_fixed + self.train_per_layer * layers

    def forward(self, layers: float) -> float:
        return self.forward_fixed + self.forward_per_layer * layers

    @classmethod
    def from_depths(cls, train: dict[int, float], forward: dict[int, float], **sizes) -> StepTimes:
        """From seconds measured at two depths (``{layers: seconds}``; one depth: all per layer)."""
        def split(seconds: dict[int, float]) -> tuple[float, float]:
            (low, low_s), (high, high_s) = min(seconds.items()), max(seconds.items())
            if high == low:
                return 0.0, high_s / high
            per_layer = max((high_s - low_s) / (high - low), 0.0)
            return max(low_s - per_layer * low, 0.0), per_layer

        (train_fixed, train_per_layer), (forward_fixed, forward_per_layer) = split(train), split(forward)
        return cls(train_fixed, train_per_layer, forward_fixed, forward_per_layer, **sizes)


@dataclass(frozen=True)
class Workload:
    """What every candidate is trained and scored on: the user's data and the run's settings."""

    num_layers: int  # the plain encoder's
    train_examples: int  # available (after --max-train-examples)
    eval_examples: int
    seeds: int
    int8: tuple[str, ...]  # the int8 runtimes scored and timed: torch, onnx
    timing_batch_size: int = FRONTIER["timing"]["batch_size"]
    timing_passes: int = (FRONTIER["timing"]["warmup"] + FRONTIER["timing"]["trials"] * FRONTIER["timing"]["batches"])
    priming_groups: int = PRIMING_GROUPS  # multiplexed groups a priming step
    priming_steps: int | None = None  # fixed by the user's conversion settings, else the recipe's, scaled


@dataclass
class Candidate:
    """One model of the plan. ``num_layers`` is ``None`` for a conversion of the best cut until the
    cuts are scored; its estimate assumes the deepest cut planned."""

    name: str
    kind: str  # plain, cut, conversion (of the whole encoder) or stacked (a conversion of the best cut)
    num_layers: int | None
    num_instances: int = 1
    required: bool = False
    train_examples: int = 0  # set by the plan's scale
    priming_steps: int = 0
    estimate: dict[str, float] = field(default_factory=dict)  # seconds: priming, finetune, evaluation, timing, total

    @property
    def on_best_cut(self) -> bool:
        return self.kind == "stacked"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Candidate:
        return cls(**values)


def candidates(num_layers: int, cuts: list[int] | None = None, instances: list[int] | tuple[int, ...] = (2, 5)
               ) -> list[Candidate]:
    """Every candidate for an encoder of ``num_layers`` layers: the plain model, its cuts, and for
    each N a conversion of the whole encoder and one of the best cut. The required minimum, kept by
    every plan: the plain model, the cut nearest half the depth and the N = 2 (else smallest N)
    conversion of the whole encoder."""
    cuts = sorted(set(default_cuts(num_layers) if cuts is None else cuts))
    bad = [k for k in cuts if not 1 <= k < num_layers]
    if bad:
        raise ValueError(f"cuts keep between 1 and {num_layers - 1} of the encoder's {num_layers} layers, got "
                         f"{', '.join(map(str, bad))}")
    instances = sorted(set(instances))
    if not instances or any(n < 2 for n in instances):
        raise ValueError(f"instances are the N >= 2 to convert at, got {instances}")
    half_cut = min(cuts, key=lambda k: (abs(k - num_layers / 2), -k)) if cuts else None
    plan = [Candidate("plain", "plain", num_layers, required=True)]
    plan += [Candidate(f"cut{k}", "cut", k, required=k == half_cut) for k in cuts]
    plan += [Candidate(f"n{n}", "conversion", num_layers, n, required=n == instances[0]) for n in instances]
    if cuts:
        plan += [Candidate(f"cut-n{n}", "stacked", None, n) for n in instances]
    return plan


def estimate(candidate: Candidate, times: StepTimes, workload: Workload, deepest_cut: int | None = None
             ) -> dict[str, float]:
    """Seconds the candidate should take on this device, by phase (see the module's docstring)."""
    layers = candidate.num_layers or deepest_cut or workload.num_layers
    n = candidate.num_instances
    k = unmuxed_layers(layers, n)
    per_instance = layers_per_instance(layers, n, k)
    step = times.train_step(per_instance)
    steps = math.ceil(finetune_epochs(layers, n, k) * max(1, candidate.train_examples // times.batch_size))
    finetune = RUN_OVERHEAD_SECONDS + steps * step
    priming = 0.0
    if n > 1:
        # A priming step: priming_groups x N blocks of PRIMING_BLOCK tokens against a fine-tuning
        # step's batch_size examples of train_length tokens.
        work = (workload.priming_groups * n * PRIMING_BLOCK) / (times.batch_size * times.train_length)
        priming = RUN_OVERHEAD_SECONDS + candidate.priming_steps * work * step
    passes = math.ceil(workload.eval_examples / times.eval_batch_size)
    seeds = workload.seeds if n > 1 else 1
    forward = times.forward(per_instance)
    variants = 1 + len(workload.int8) / INT8_SPEEDUP  # in fp32 passes
    export = ONNX_EXPORT_PASSES * times.forward(workload.num_layers) if "onnx" in workload.int8 else 0.0
    evaluation = (1 + len(workload.int8)) * EVAL_OVERHEAD_SECONDS + variants * passes * seeds * forward + export
    # The side-by-side timing: every variant's passes of a timing batch (eval_length tokens). It times
    # the grid the benchmark command it prints times: fp32 and int8 in each runtime, so ONNX Runtime's
    # float32 graph (not a row) and PyTorch int8 (with --int8 onnx alone) are timed too.
    runtimes = 2 if "onnx" in workload.int8 else 1
    timed_variants = runtimes * (1 + (1 / INT8_SPEEDUP if workload.int8 else 0))
    timing_forward = forward * workload.timing_batch_size / times.eval_batch_size
    timing = timed_variants * workload.timing_passes * timing_forward + export
    total = priming + finetune + evaluation + timing
    return dict(priming=priming, finetune=finetune, evaluation=evaluation, timing=timing, total=total)


def scaled(candidate: Candidate, scale: float, workload: Workload) -> Candidate:
    """The candidate trained on ``scale`` of the training examples and of the priming steps (never
    under the floors of the frontier recipe, nor over what there is)."""
    examples = min(workload.train_examples, max(FRONTIER["min_train_examples"], round(scale * workload.train_examples)))
    priming = 0
    if candidate.num_instances > 1:
        scaled_steps = max(FRONTIER["min_priming_steps"], round(scale * CONVERT_RECIPE["max_steps"]))
        priming = workload.priming_steps or scaled_steps
    return dataclasses.replace(candidate, train_examples=examples, priming_steps=priming)


@dataclass
class Plan:
    """The candidates to build, in the order to build them, at one scale, and those left out."""

    candidates: list[Candidate]
    skipped: list[dict[str, Any]]  # {name, reason, estimated_seconds}
    scale: float
    budget: float
    estimated_seconds: float
    fits: bool  # False: even the required minimum at the smallest scale is over the budget

    def to_dict(self) -> dict[str, Any]:
        return dict(candidates=[c.to_dict() for c in self.candidates], skipped=self.skipped, scale=self.scale,
                    budget=self.budget, estimated_seconds=self.estimated_seconds, fits=self.fits)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Plan:
        return cls(**{**values, "candidates": [Candidate.from_dict(c) for c in values["candidates"]]})


def cheapest_first(chosen: list[Candidate]) -> list[Candidate]:
    """The candidates by estimated cost, cheapest first, except that a conversion of the best cut
    waits until the cuts and the plain model are built: it is chosen by their scores."""
    ordered = sorted(chosen, key=lambda c: c.estimate["total"])
    needed = [i for i, c in enumerate(ordered) if c.kind in ("plain", "cut")]
    last_needed = max(needed, default=-1)
    waiting = [c for c in ordered[: last_needed + 1] if c.kind == "stacked"]
    rest = [c for c in ordered if c not in waiting]
    at = rest.index(ordered[last_needed]) + 1 if last_needed >= 0 else 0
    return rest[:at] + waiting + rest[at:]


def size_plan(all_candidates: list[Candidate], times: StepTimes, workload: Workload, budget: float) -> Plan:
    """The plan that fits ``budget`` seconds: the largest scale at which the required candidates
    fit (the smallest when none does), then the optional ones, cheapest first, while they fit at that
    scale. Every candidate is estimated with :func:`estimate`."""
    deepest_cut = max((c.num_layers for c in all_candidates if c.kind == "cut"), default=None)

    def at(scale: float) -> list[Candidate]:
        chosen = [scaled(c, scale, workload) for c in all_candidates]
        for c in chosen:
            c.estimate = estimate(c, times, workload, deepest_cut)
        return chosen

    scales = FRONTIER["scales"]
    for scale in scales:
        sized = at(scale)
        required = sum(c.estimate["total"] for c in sized if c.required)
        if required <= budget:
            fits = True
            break
    else:
        fits = False
    chosen = [c for c in sized if c.required]
    left = budget - required
    skipped = []
    for c in sorted((c for c in sized if not c.required), key=lambda c: c.estimate["total"]):
        if c.estimate["total"] <= left:
            chosen.append(c)
            left -= c.estimate["total"]
        else:
            skipped.append(dict(name=c.name, estimated_seconds=c.estimate["total"],
                                reason=f"over the budget: needs ~{format_seconds(c.estimate['total'])}, "
                                       f"{format_seconds(max(left, 0))} left"))
    ordered = cheapest_first(chosen)
    return Plan(ordered, skipped, scale, budget, sum(c.estimate["total"] for c in ordered), fits)


def plan_table(plan: Plan) -> str:
    """The plan as a few aligned lines: what will be built, its training size and its estimate."""
    lines = [f"{'candidate':12s} {'layers':>8s} {'N':>3s} {'examples':>8s} {'priming':>7s} {'estimate':>9s}"]
    for c in plan.candidates:
        layers = "best cut" if c.num_layers is None else str(c.num_layers)
        priming = str(c.priming_steps) if c.num_instances > 1 else "-"
        lines.append(f"{c.name:12s} {layers:>8s} {c.num_instances:3d} {c.train_examples:8d} {priming:>7s} "
                     f"{format_seconds(c.estimate['total']):>9s}" + ("  (required)" if c.required else ""))
    for skip in plan.skipped:
        lines.append(f"{skip['name']:12s} skipped: {skip['reason']}")
    return "\n".join(lines)
