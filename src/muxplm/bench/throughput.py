"""Inference throughput of MUX-PLMs, measured with the paper's protocol.

Protocol: a fixed batch (default 128 x 128 tokens) already on the device, warm-up batches,
then ``trials`` trials of ``batches`` mini-batches each under ``torch.inference_mode()``;
throughput = samples / second, averaged over the trials. The models of one (size, head)
group are timed **round robin** — trial t of every model before trial t + 1 of any, the
starting model rotating — so machine noise hits all of them alike.

Every MUX model is compared with the N = 1 model (``mux_type = demux_type = "identity"``)
of the same size, head and variant, measured in the same run, and with plain
``transformers.BertModel`` plus the same dropout + linear head. Variants stack a
complementary speed-up on every model of the grid so one can see whether gains multiply:

* ``default`` — the model in ``--dtype`` with SDPA attention;
* ``eager``   — ``attn_implementation="eager"``;
* ``int8``    — ``torch.ao.quantization.quantize_dynamic`` on the Linear layers (CPU only);
* ``compile`` — ``torch.compile(model)`` (failures are recorded, not raised);
* ``graphs``  — ``torch.compile(model, mode="reduce-overhead")``: the pass replayed as CUDA
  graphs, against the kernel-launch floor of small batches (CUDA only; failures recorded);
* ``bfloat16`` / ``float16`` — the model cast to that precision (meant for GPUs).

``speedup_vs_n1`` is against the N = 1 model of the same variant, ``speedup_vs_default_n1``
against the N = 1 ``default`` model: for MUX on int8 the latter is the product of both gains
when they multiply.

:func:`time_checkpoints` times a user's fine-tuned checkpoints instead of the grid (and, with
``quantize=("none", "int8")``, each one's int8 copy next to it), with the same timer and inputs.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import nn
from transformers import BertConfig, BertModel

from ..choices import BENCH_HEADS, BENCH_VARIANTS, RUNTIMES
from ..configuration import MuxBertConfig, preset_kwargs
from ..devices import DTYPES
from ..modeling_bert import MuxBertForSequenceClassification, MuxBertForTokenClassification
from ..quantization import QUANTIZE_CHOICES, check_quantize, quantize_dynamic_int8
from ..timing import CLOCKS, random_inputs, rates, round_robin, side_by_side, time_batches

HEADS, VARIANTS = BENCH_HEADS, BENCH_VARIANTS  # named in the light `choices` module, for the command line
COMPILED = ("compile", "graphs")  # variants that compile on first use: warmed up first, failures recorded
PRECISION_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int8": "int8"}
NUM_LABELS = {"sentence": 2, "token": 9}  # QQP-like pair classification, CoNLL-like NER tags
BASELINE_TOLERANCE = 0.02  # the N=1 muxplm model must be within 2% of transformers.BertModel


@dataclass(frozen=True)
class ModelSpec:
    """One model of the benchmark grid."""

    size: str
    num_instances: int = 1
    mux_type: str = "identity"
    demux_type: str = "identity"
    implementation: str = "muxplm"  # or "transformers": plain BertModel + the same head
    variant: str = "default"

    @property
    def is_n1(self) -> bool:
        return self.implementation == "muxplm" and self.num_instances == 1

    @property
    def name(self) -> str:
        if self.implementation == "transformers":
            name = f"{self.size}/transformers.BertModel"
        elif self.is_n1:
            name = f"{self.size}/N=1"
        else:
            name = f"{self.size}/N={self.num_instances}/{self.mux_type}+{self.demux_type}"
        return name if self.variant == "default" else f"{name}[{self.variant}]"


def build_specs(
    sizes=("tiny",),
    instances=(1, 2, 5, 10),
    mux_types=("gaussian_hadamard", "contextual"),
    demux_types=("rsa", "prefix"),
    variants=("default",),
    with_transformers: bool = True,
) -> list[ModelSpec]:
    """The grid: for every size and variant, the N = 1 model, the transformers reference and
    every (N > 1, mux, demux) combination. N = 1 is always included (it is the baseline)."""
    for variant in variants:
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    for n in instances:
        if n < 1:
            raise ValueError(f"num_instances must be >= 1, got {n}")
    specs = []
    for size in sizes:
        preset_kwargs(size)  # validates the name
        for variant in variants:
            specs.append(ModelSpec(size, variant=variant))
            if with_transformers:
                specs.append(ModelSpec(size, implementation="transformers", variant=variant))
            for n in sorted(set(instances) - {1}):
                for mux in mux_types:
                    for demux in demux_types:
                        specs.append(ModelSpec(size, n, mux, demux, variant=variant))
    return specs


# --------------------------------------------------------------------------- models


class PlainBertClassifier(nn.Module):
    """``transformers.BertModel`` (no pooler) with the MUX heads' dropout + linear classifier on
    the first position (sentence) or every position (token): the reference implementation."""

    def __init__(self, config: BertConfig, head: str, num_labels: int):
        super().__init__()
        self.head = head
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        if self.head == "sentence":
            hidden = hidden[:, 0]
        return self.classifier(self.dropout(hidden))


def build_model(spec: ModelSpec, head: str, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """Instantiate (randomly initialised: speed does not depend on the weights) and prepare
    the model of ``spec`` for inference on ``device``."""
    if head not in HEADS:
        raise ValueError(f"unknown head {head!r}; choose from {', '.join(HEADS)}")
    attention = "eager" if spec.variant == "eager" else "sdpa"
    num_labels = NUM_LABELS[head]
    if spec.implementation == "transformers":
        config = BertConfig(**preset_kwargs(spec.size), attn_implementation=attention)
        model = PlainBertClassifier(config, head, num_labels)
    else:
        config = MuxBertConfig.from_preset(
            spec.size,
            num_instances=spec.num_instances,
            mux_type=spec.mux_type,
            demux_type=spec.demux_type,
            num_labels=num_labels,
            attn_implementation=attention,
        )
        cls = MuxBertForSequenceClassification if head == "sentence" else MuxBertForTokenClassification
        model = cls(config)
    model.eval()
    if spec.variant in DTYPES:
        dtype = DTYPES[spec.variant]
    if spec.variant == "int8":
        if device.type != "cpu" or dtype != torch.float32:
            raise ValueError("the int8 variant (dynamic quantization) runs on the CPU in float32 only")
        return quantize_dynamic_int8(model)
    model = model.to(device=device, dtype=dtype)
    if spec.variant == "compile":
        model = torch.compile(model)
    if spec.variant == "graphs":
        if device.type != "cuda":
            raise ValueError("the graphs variant replays CUDA graphs: it needs --device cuda")
        model = torch.compile(model, mode="reduce-overhead")
    return model


def speedup_target(num_instances: int, head: str) -> float | None:
    """The project's targets over the same-size N = 1 model (none for N = 1)."""
    n = num_instances
    if n == 1:
        return None
    if head == "token" or n >= 10:
        return 0.95 * n
    return 0.97 * n


def filler_ceiling(batch_size: int, num_instances: int) -> float:
    """Best possible speed-up when the last group is padded with fillers: B / ceil(B / N)."""
    return batch_size / math.ceil(batch_size / num_instances)


def run_throughput(
    specs: list[ModelSpec],
    heads=HEADS,
    *,
    batch_size: int = 128,
    seq_len: int = 128,
    warmup: int = 3,
    trials: int = 3,
    batches: int = 200,
    device: str | torch.device = "cpu",
    dtype: str = "float32",
    clock: str = "wall",
    seed: int = 0,
    log=print,
) -> dict:
    """Time every spec for every head; returns ``{"environment", "settings", "results", "checks"}``
    (see :func:`summarise`). Models are built and timed one (size, head) group at a time.

    ``clock="wall"`` (the paper's measure) derives throughput from elapsed time; ``"process"``
    from the CPU seconds this process used, which other processes on a shared CPU machine
    disturb far less (CPU only). Both are always recorded."""
    device = _check_settings(device, clock, dtype, batch_size=batch_size, seq_len=seq_len, trials=trials,
                             batches=batches)
    settings = dict(
        batch_size=batch_size, seq_len=seq_len, warmup=warmup, trials=trials, batches=batches,
        device=str(device), dtype=dtype, clock=clock, seed=seed, heads=list(heads),
    )
    inputs = random_inputs(batch_size, seq_len, device, seed=seed)
    rows = []
    groups: dict[tuple[str, str], list[ModelSpec]] = {}
    for head in heads:
        for spec in specs:
            groups.setdefault((spec.size, head), []).append(spec)
    for (size, head), group in groups.items():
        log(f"== {size} / {head} head: {len(group)} models, batch {batch_size} x {seq_len}, {device} {dtype}")
        rows += _time_group(group, head, inputs, warmup, trials, batches, device, DTYPES[dtype], batch_size, clock, log)
    return summarise(rows, settings, environment(device))


def _check_settings(device: str | torch.device, clock: str, dtype: str, **counts: int) -> torch.device:
    """The device to time on, or a ``ValueError`` for settings that cannot be measured."""
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch sees no CUDA device")
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}; choose from {', '.join(CLOCKS)}")
    if clock == "process" and device.type != "cpu":
        raise ValueError("clock='process' measures CPU time and only makes sense with --device cpu")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    for name, value in counts.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    return device


def _time_group(group, head, inputs, warmup, trials, batches, device, dtype, batch_size, clock, log) -> list[dict]:
    models, errors = {}, {}
    for spec in group:
        try:
            torch.manual_seed(0)
            model = build_model(spec, head, device, dtype)
            with torch.inference_mode():
                start = time.perf_counter()
                # CUDA graphs are recorded on the second or third call: warm up past that.
                time_batches(model, inputs, max(warmup, 3 if spec.variant in COMPILED else 0), device)
            models[spec] = model
            log(f"   ready {spec.name} (warm-up {time.perf_counter() - start:.1f}s)")
        except Exception as error:  # noqa: BLE001 — a variant that cannot run is a result, not a crash
            if spec.variant not in COMPILED and not isinstance(error, ValueError):
                raise
            errors[spec] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            log(f"   FAILED {spec.name}: {errors[spec]}")
    log(f"   timing {len(models)} models round robin, {trials} trials")
    elapsed = round_robin(models, inputs, batches=batches, trials=trials, device=device, warmup=0)
    rows = []
    for spec in group:
        row = dict(asdict(spec), name=spec.name, head=head)
        if spec in errors:
            row["error"] = errors[spec]
        else:
            measured = rates(elapsed[spec], batch_size * batches, clock)
            row.update(
                throughput=measured["samples_per_s"], throughput_std=measured["std"],
                trial_throughputs=measured["trials"], wall_throughput=measured["wall_samples_per_s"],
                cpu_throughput=measured["cpu_samples_per_s"],
            )
        rows.append(row)
    del models
    return rows


def summarise(rows: list[dict], settings: dict, env: dict) -> dict:
    """Add speed-ups, targets and the printed checks to the raw timings."""
    def find(size, head, variant, implementation="muxplm"):
        for row in rows:
            if (row["size"], row["head"], row["variant"], row["implementation"]) == (size, head, variant, implementation) \
                    and row["num_instances"] == 1 and "throughput" in row:
                return row["throughput"]
        return None

    batch_size = settings["batch_size"]
    checks = []
    for row in rows:
        if "throughput" not in row:
            continue
        size, head, variant, n = row["size"], row["head"], row["variant"], row["num_instances"]
        n1, default_n1 = find(size, head, variant), find(size, head, "default")
        reference = find(size, head, variant, "transformers") or find(size, head, "default", "transformers")
        row["speedup_vs_n1"] = row["throughput"] / n1 if n1 else None
        row["speedup_vs_default_n1"] = row["throughput"] / default_n1 if default_n1 else None
        row["speedup_vs_transformers"] = row["throughput"] / reference if reference else None
        if row["implementation"] != "muxplm":
            continue
        if n == 1:
            ratio = row["speedup_vs_transformers"]
            if ratio is not None:
                met = ratio >= 1 - BASELINE_TOLERANCE
                checks.append(dict(
                    name=row["name"], head=head, what="N=1 muxplm vs transformers.BertModel",
                    value=ratio, target=1 - BASELINE_TOLERANCE, met=met,
                    message=f"{'ok    ' if met else 'MISSED'} {row['name']} ({head}): {ratio:.3f}x transformers.BertModel"
                    + ("" if met else f" — {100 * (1 - ratio):.1f}% slower, tolerance {100 * BASELINE_TOLERANCE:.0f}%"),
                ))
            continue
        target = speedup_target(n, head)
        row["target_speedup"] = target
        row["filler_ceiling"] = filler_ceiling(batch_size, n)
        value = row["speedup_vs_n1"]
        if value is None:
            continue
        met = value >= target
        row["target_met"] = met
        message = f"{'ok    ' if met else 'MISSED'} {row['name']} ({head}): {value:.2f}x vs N=1, target {target:.2f}x"
        if not met:
            message += f" — short by {100 * (1 - value / target):.1f}%"
            if row["filler_ceiling"] < target:
                message += f" (unreachable at batch {batch_size}: filler ceiling {row['filler_ceiling']:.2f}x)"
        checks.append(dict(name=row["name"], head=head, what="speed-up vs same-size N=1",
                           value=value, target=target, met=met, message=message))
    return dict(environment=env, settings=settings, results=rows, checks=checks)


def format_table(report: dict) -> str:
    """A fixed-width table of the results, one line per model and head."""
    lines = [f"{'model':58s} {'head':8s} {'samples/s':>10s} {'±':>6s} {'vs N=1':>7s} {'vs dflt':>7s} {'vs HF':>6s}"]
    fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    for row in report["results"]:
        if "error" in row:
            lines.append(f"{row['name']:58s} {row['head']:8s} FAILED: {row['error']}")
            continue
        lines.append(
            f"{row['name']:58s} {row['head']:8s} {row['throughput']:10.1f} {row['throughput_std']:6.1f} "
            f"{fmt(row['speedup_vs_n1']):>7s} {fmt(row['speedup_vs_default_n1']):>7s} {fmt(row['speedup_vs_transformers']):>6s}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- user checkpoints


def checkpoint_labels(paths: Sequence[str | os.PathLike]) -> dict[str, str]:
    """A label per checkpoint directory: its name, or as many trailing path parts as make the
    labels distinct (``runs/n2/3-sentiment`` and ``runs/n5/3-sentiment``: ``n2/3-sentiment``,
    ``n5/3-sentiment``). Returns ``{label: path}`` in the order given."""
    resolved = [Path(path).resolve() for path in paths]
    for index, path in enumerate(resolved):
        if path in resolved[:index]:
            raise ValueError(f"checkpoint {paths[index]} is given twice")
    for depth in range(1, max((len(path.parts) for path in resolved), default=1) + 1):
        labels = ["/".join(path.parts[-depth:]).lstrip("/") for path in resolved]
        if len(set(labels)) == len(labels):
            return {label: str(path) for label, path in zip(labels, paths)}
    raise AssertionError("distinct resolved paths always have distinct labels")


def variant_label(label: str, runtime: str = "torch", quantize: str = "none") -> str:
    """The label :func:`time_checkpoints` gives a model in a runtime and precision: ``label``,
    ``label int8``, ``label onnx``, ``label onnx int8``."""
    return " ".join([label] + (["onnx"] if runtime == "onnx" else []) + ([quantize] if quantize != "none" else []))


def time_checkpoints(
    models: Mapping[str, str | os.PathLike | nn.Module],
    *,
    quantize: Sequence[str] = ("none",),
    batch_size: int = 128,
    seq_length: int = 128,
    batches: int = 200,
    trials: int = 3,
    warmup: int = 3,
    clock: str = "wall",
    device: str | torch.device = "cpu",
    dtype: str = "float32",
    seed: int = 0,
    runtimes: Sequence[str] = ("torch",),
) -> dict[str, dict[str, Any]]:
    """Inference samples/s of fine-tuned classifiers, all timed round robin on one random batch
    (:func:`muxplm.timing.side_by_side`, the timer and inputs of the benchmark and the
    reproduction).

    ``models`` maps a label to a checkpoint directory or a loaded model; every model is put on
    ``device`` in ``dtype``. ``quantize`` lists the precisions to time each one in: ``"none"``
    (``dtype``) and ``"int8"`` (its int8 dynamically quantised copy, labelled ``"<label> int8"``;
    CPU and float32 only). ``runtimes`` lists where each runs: ``"torch"`` (PyTorch eager) and
    ``"onnx"`` (its graph exported by :func:`muxplm.serving.onnx_export.export_graph`, checked
    against PyTorch, in ONNX Runtime with ``torch.get_num_threads()`` threads; int8: ONNX Runtime's
    dynamic quantisation of that graph; CPU and float32 only), labelled ``"<label> onnx"`` and
    ``"<label> onnx int8"``. Returns ``{label: {"model", "precision", "runtime", "checkpoint",
    "samples_per_s", "std", "trials", "wall_samples_per_s", "cpu_samples_per_s", "speedup",
    "weights_bytes"}}`` (the weights as run: :func:`weights_bytes`),
    models in the order given, each one's variants next to it; ``speedup`` is over the first
    entry. Raises ``ValueError`` naming a directory that does not hold a fine-tuned classifier."""
    import tempfile

    from ..checkpoints import local_folder
    from ..training.models import classifier_class

    quantize = [check_quantize(choice, device, dtype) for choice in quantize]  # int8 off the CPU: refused first
    device = _check_settings(device, clock, dtype, batch_size=batch_size, seq_length=seq_length, trials=trials,
                             batches=batches)
    if not quantize or len(set(quantize)) != len(quantize):
        raise ValueError(f"quantize must list distinct choices of {', '.join(QUANTIZE_CHOICES)}, got {quantize}")
    if not runtimes or len(set(runtimes)) != len(runtimes) or not set(runtimes) <= set(RUNTIMES):
        raise ValueError(f"runtimes must list distinct choices of {', '.join(RUNTIMES)}, got {list(runtimes)}")
    if "onnx" in runtimes and (device.type != "cpu" or dtype != "float32"):
        raise ValueError(f"the onnx runtime is timed on the CPU in float32, not on {device} in {dtype}")
    if not models:
        raise ValueError("no model to time")
    variants: dict[str, Any] = {}
    described: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="muxplm-onnx-") as graphs:
        for index, (label, model) in enumerate(models.items()):
            checkpoint = None
            if not isinstance(model, nn.Module):
                checkpoint = str(local_folder(model))  # a hub name: downloaded first
                try:  # the model only: timing feeds random ids of its vocabulary, no tokenizer needed
                    model = classifier_class(checkpoint).from_pretrained(checkpoint)
                except ValueError as error:
                    raise ValueError(f"cannot time {checkpoint}: {error}") from None
            model.eval()
            for runtime in runtimes:
                if runtime == "onnx":  # exported from the model as loaded (float32, CPU), before the move below
                    from ..serving.onnx_export import OnnxRuntimeClassifier, export_graph

                    graph = export_graph(model, Path(graphs) / f"{index}.onnx")["path"]
                for choice in quantize:
                    name = variant_label(label, runtime, choice)
                    if name in variants:
                        raise ValueError(f"two models are labelled {name!r}")
                    if runtime == "onnx":
                        variants[name] = OnnxRuntimeClassifier(graph, model.config, threads=torch.get_num_threads(),
                                                               quantize=choice)
                    else:  # the int8 copy comes from the model as loaded (float32, CPU), before the move below
                        variants[name] = quantize_dynamic_int8(model) if choice == "int8" else model
                    described[name] = dict(model=label, precision=PRECISION_NAMES[dtype if choice == "none" else choice],
                                           runtime=runtime, checkpoint=checkpoint)
            if "none" in quantize and "torch" in runtimes:
                model.to(device=device, dtype=DTYPES[dtype])
        for name, variant in variants.items():
            described[name]["weights_bytes"] = weights_bytes(variant)
        measured = side_by_side(variants, batch_size=batch_size, seq_length=seq_length, batches=batches, trials=trials,
                                device=device, clock=clock, warmup=warmup, seed=seed)
    first = measured[next(iter(variants))]["samples_per_s"]
    return {name: dict(described[name], samples_per_s=m["samples_per_s"], std=m["std"], trials=m["trials"],
                       wall_samples_per_s=m["wall_samples_per_s"], cpu_samples_per_s=m["cpu_samples_per_s"],
                       speedup=m["samples_per_s"] / first)
            for name, m in measured.items()}


def weights_bytes(model) -> int:
    """Bytes of a model's weights as run: its state as saved (int8 layers as their packed int8
    weights), or the size of an ONNX Runtime model's graph file."""
    if hasattr(model, "path"):  # OnnxRuntimeClassifier
        return Path(model.path).stat().st_size
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def format_checkpoint_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """A fixed-width table of :func:`time_checkpoints`' results, one line per model, runtime and precision."""
    width = max([24, *map(len, results)])
    lines = [f"{'model':{width}s} {'runtime':7s} {'precision':9s} {'samples/s':>10s} {'±':>7s} {'speed-up':>8s}"]
    for label, row in results.items():
        lines.append(f"{label:{width}s} {row.get('runtime', 'torch'):7s} {row['precision']:9s} "
                     f"{row['samples_per_s']:10.1f} {row['std']:7.1f} {row['speedup']:7.2f}x")
    return "\n".join(lines)


# --------------------------------------------------------------------------- environment and plot


def environment(device: torch.device | str = "cpu") -> dict:
    """Machine, library versions, date and git commit, stored with every result file."""
    import transformers

    from .. import __version__
    from ..provenance import code_version

    device = torch.device(device)
    env = dict(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        cpu=_cpu_model(),
        cpu_cores=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        platform=platform.platform(),
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        muxplm=__version__,
        device=str(device),
        **{key: value for key, value in code_version().items() if key.startswith("git_")},
    )
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def plot_throughput(report: dict, path: str, against: str = "n1") -> str:
    """Speed-up against N, one panel per head, one line per (size, mux+demux, variant), with
    the ideal y = N line. ``against="n1"``: over the same-size N = 1 model of the same variant;
    ``"default_n1"``: over the same-size plain ``default`` N = 1 model (stacked gains)."""
    key = {"n1": "speedup_vs_n1", "default_n1": "speedup_vs_default_n1"}[against]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["results"] if r.get(key) and r["implementation"] == "muxplm"]
    heads = [h for h in HEADS if any(r["head"] == h for r in rows)] or list(HEADS)
    fig, axes = plt.subplots(1, len(heads), figsize=(6 * len(heads), 4.8), squeeze=False)
    max_n = max((r["num_instances"] for r in rows), default=2)
    for ax, head in zip(axes[0], heads):
        lines: dict[tuple, list[tuple[int, float]]] = {}
        for r in rows:
            if r["head"] != head:
                continue
            if r["num_instances"] == 1:
                # The N=1 point starts every line of this size and variant.
                for line in {(r["size"], m, d, r["variant"]) for m, d in _mux_pairs(rows, r["size"], head, r["variant"])}:
                    lines.setdefault(line, []).append((1, r[key]))
            else:
                lines.setdefault((r["size"], r["mux_type"], r["demux_type"], r["variant"]), []).append(
                    (r["num_instances"], r[key])
                )
        for (size, mux, demux, variant), points in sorted(lines.items()):
            points.sort()
            label = f"{size} {mux}+{demux}" + ("" if variant == "default" else f" [{variant}]")
            style = "-" if demux == "rsa" else "--"
            ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", label=label)
        ax.plot([1, max_n], [1, max_n], color="grey", linestyle=":", label="ideal (N)")
        ax.set_xlabel("N (instances multiplexed)")
        ax.set_ylabel("speed-up over same-size N=1" + (" (default variant)" if against == "default_n1" else ""))
        ax.set_title(f"{head} head")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    settings, env = report["settings"], report["environment"]
    where = env.get("gpu") or f"{env['cpu']} ({env['cpu_cores']} cores)"
    fig.suptitle(
        f"MUX-BERT throughput: batch {settings['batch_size']} x {settings['seq_len']}, "
        f"{settings['device']} {settings['dtype']}, {where}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _mux_pairs(rows, size, head, variant):
    return {
        (r["mux_type"], r["demux_type"])
        for r in rows
        if (r["size"], r["head"], r["variant"]) == (size, head, variant) and r["num_instances"] > 1
    }
