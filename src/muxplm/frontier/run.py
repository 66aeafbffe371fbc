"""``muxplm frontier``: fine-tune every speed-up lever on the user's data, score and time them side
by side, and recommend the fastest model that keeps enough of the plain model's accuracy.

The run, in ``output_dir``:

1. the data is read and its lengths measured; a few training steps and forward passes of the plain
   encoder are timed (:func:`measure_step_times`) and the plan sized to the budget
   (:mod:`muxplm.frontier.plan`), saved as ``plan.json``;
2. each candidate is built in ``candidates/NAME/``: a conversion's priming (``convert/``,
   :func:`muxplm.training.convert.convert`), the fine-tuning (``model/``,
   :func:`muxplm.training.stages.run_stage`), then its scores in fp32 and int8
   (``eval-*.json``, :func:`muxplm.training.evaluate.evaluate_checkpoint`) and ``result.json``, the
   mark of a finished candidate. A re-run with the same settings skips what is finished, so a killed
   run resumes where it stopped; a candidate the budget leaves out is recorded in ``skipped.json``;
3. every model, in every precision, is timed side by side in one run (``timing.json``, kept for a
   re-run), on the validation data's padded length;
4. ``rows.jsonl``, ``frontier.json``, ``frontier.md`` and ``frontier.png`` are written.

Every file is written whole (written aside, then renamed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import random
import shlex
import shutil
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..progress import progress_bar
from ..training.recipes import FRONTIER
from .pareto import dominating, markdown_table, plot_frontier, recommend, retention_label
from .plan import (PRIMING_GROUPS, Candidate, Plan, StepTimes, Workload, candidates, estimate, finetune_epochs,
                   format_seconds, parse_budget, plan_table, size_plan, unmuxed_layers)

INT8_RUNTIMES = ("torch", "onnx")
# The variants of a candidate: (file key, runtime, quantize).
FP32 = ("fp32", "torch", "none")
INT8 = {"torch": ("int8", "torch", "int8"), "onnx": ("onnx-int8", "onnx", "int8")}
# A measured phase may run this many times over or under its estimate before the rest of the plan is
# corrected by no more than that: one odd candidate should not reprice all the others wildly.
CORRECTION_LIMITS = (0.2, 5.0)


# --------------------------------------------------------------------------- files


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: into a neighbour first, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)


def write_json_atomic(path: Path, payload: Any) -> None:
    write_text_atomic(path, json.dumps(payload, indent=1, default=str) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


# --------------------------------------------------------------------------- the data and the device


@dataclasses.dataclass(frozen=True)
class TaskData:
    """What the plan needs to know of the user's data."""

    name: str
    kind: str  # sentence or token
    metric: str
    num_labels: int
    train_examples: int
    eval_examples: int
    train_length: int  # padded length of a shuffled training batch, on average
    eval_length: int  # padded length of an evaluation batch, in order, on average


def padded_length(lengths: Sequence[int], batch_size: int, shuffle: bool = False) -> int:
    """The mean padded length of ``lengths`` in batches of ``batch_size`` (each batch as long as its
    longest row), in order or shuffled (as training reads them)."""
    order = list(lengths)
    if shuffle:
        random.Random(0).shuffle(order)
    batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    return max(1, round(statistics.fmean(max(batch) for batch in batches))) if batches else 1


def read_task(plain_dir: Path, *, task: str | None, train_file: str | None, validation_file: str | None,
              task_kind: str | None, max_train_examples: int | None, max_eval_examples: int | None,
              eval_batch_size: int) -> TaskData:
    """The user's task tokenized once as the candidates will read it: its size, labels and lengths."""
    from transformers import AutoConfig

    from ..data import load_tokenizer
    from ..training.inputs import load_task_features
    from ..vocabulary import tokenizer_source

    plain = AutoConfig.from_pretrained(plain_dir)
    tokenizer = load_tokenizer(tokenizer_source(plain_dir, plain.model_type))
    spec, features = load_task_features(
        tokenizer, task=task, train_file=train_file, validation_file=validation_file, task_kind=task_kind,
        max_length=min(128, plain.max_position_embeddings),
        max_examples={"train": max_train_examples, "validation": max_eval_examples})
    train, validation = features["train"], features["validation"]
    if len(train) == 0 or len(validation) == 0:
        raise ValueError(f"{spec.name}: the frontier needs training and validation examples, got {len(train)} and "
                         f"{len(validation)}")
    train_lengths = [len(ids) for ids in train["input_ids"]]
    eval_lengths = [len(ids) for ids in validation["input_ids"]]
    return TaskData(name=spec.name, kind=spec.kind, metric=spec.metric,
                    num_labels=1 if spec.is_regression else len(spec.label_names),
                    train_examples=len(train), eval_examples=len(validation),
                    train_length=padded_length(train_lengths, FRONTIER["finetune"]["batch_size"], shuffle=True),
                    eval_length=padded_length(eval_lengths, eval_batch_size))


def int8_runtimes(requested: Sequence[str], device: str, log: Callable[[str], None]) -> tuple[str, ...]:
    """The int8 variants this run can score and time: PyTorch's dynamic quantisation and ONNX
    Runtime's run on the CPU only, and ONNX Runtime where it is installed."""
    unknown = set(requested) - set(INT8_RUNTIMES)
    if unknown:
        raise ValueError(f"int8 runtimes are {', '.join(INT8_RUNTIMES)}, got {', '.join(sorted(unknown))}")
    chosen = tuple(runtime for runtime in INT8_RUNTIMES if runtime in requested)
    if chosen and not device.startswith("cpu"):
        log(f"frontier: int8 runs on the CPU only; no int8 variants are timed on {device}")
        return ()
    if "onnx" in chosen and not all(importlib.util.find_spec(name) for name in ("onnx", "onnxruntime")):
        log("frontier: onnxruntime is not installed (pip install 'muxplm[onnx]'); no ONNX Runtime int8 variants")
        chosen = tuple(runtime for runtime in chosen if runtime != "onnx")
    return chosen


def measure_step_times(plain_dir: Path, data: TaskData, device: str,
                       batch_size: int = FRONTIER["finetune"]["batch_size"], steps: int = 5,
                       eval_device: str | None = None) -> StepTimes:
    """Seconds of a fine-tuning step (``batch_size`` examples) on ``device`` and of an evaluation pass
    on ``eval_device`` (default: ``device``) of the plain encoder and of its first layer alone, with
    random weights of its shape (the median of ``steps``, after two untimed ones)."""
    import torch
    from transformers import AutoConfig

    from ..families import family_of_plain_type
    from ..timing import random_inputs

    plain = AutoConfig.from_pretrained(plain_dir)
    model_class = family_of_plain_type(plain.model_type, str(plain_dir)).models[data.kind]
    train_inputs = random_inputs(batch_size, data.train_length, device, vocab_size=plain.vocab_size)
    eval_device = eval_device or device
    eval_inputs = random_inputs(FRONTIER["eval_batch_size"], data.eval_length, eval_device, vocab_size=plain.vocab_size)
    classes = max(data.num_labels, 2)  # a regression head times as a two-class one
    labels_shape = (batch_size,) if data.kind == "sentence" else (batch_size, data.train_length)
    labels = torch.randint(0, classes, labels_shape, device=device)
    train, forward = {}, {}
    for depth in sorted({1, plain.num_hidden_layers}):
        torch.manual_seed(0)
        config = model_class.config_from_encoder(plain, depth, plain_dir, num_instances=1, num_labels=classes,
                                                 mux_type="identity", demux_type="identity")
        model = model_class(config).to(device)
        train[depth] = _train_seconds(model, train_inputs, labels, steps, device)
        forward[depth] = _forward_seconds(model.to(eval_device), eval_inputs, steps, eval_device)
    return StepTimes.from_depths(train, forward, batch_size=batch_size, train_length=data.train_length,
                                 eval_batch_size=FRONTIER["eval_batch_size"], eval_length=data.eval_length)


def _train_seconds(model, train_inputs: dict, labels, steps: int, device: str) -> float:
    """Seconds of a training step (cross-entropy, AdamW) of ``model``."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step():
        logits = model(**train_inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return _seconds(step, steps, device)


def _forward_seconds(model, eval_inputs: dict, steps: int, device: str) -> float:
    """Seconds of an inference pass of ``model``."""
    import torch

    model.eval()
    with torch.inference_mode():
        return _seconds(lambda: model(**eval_inputs), steps, device)


@contextlib.contextmanager
def quiet_export():
    """Without the ONNX exporter's tracing notes: every graph is checked against PyTorch when it is
    exported (:func:`muxplm.serving.onnx_export.export_graph`), so they ask nothing of the user."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=r"Exporting aten::index operator", category=UserWarning)
        yield


def _seconds(run: Callable[[], Any], repeats: int, device: str, warmup: int = 2) -> float:
    """The median seconds of ``repeats`` calls of ``run`` after ``warmup`` untimed ones (the first
    calls pay for allocation and kernel selection); the median, as a busy machine's bursts of load
    would move a mean."""
    from ..timing import sync

    for _ in range(warmup):
        run()
    seconds = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        run()
        sync(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


# --------------------------------------------------------------------------- commands


def _flags(settings: dict[str, Any]) -> list[str]:
    """Command-line flags of training settings (``max_steps=3`` -> ``--max-steps 3``)."""
    words = []
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            words += [flag] if value else [f"--no-{key.replace('_', '-')}"]
        elif isinstance(value, (list, tuple)):
            words += [flag, *map(str, value)]
        elif isinstance(value, dict):
            words += [flag, json.dumps(value)]
        else:
            words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return words


def ship_command(model_dir: Path, runtime: str, quantize: str) -> str:
    """How to serve a model as it was timed."""
    words = ["muxplm", "serve", str(model_dir)]
    if runtime == "onnx":
        words += ["--backend", "onnx"]
    if quantize == "int8":
        words += ["--quantize", "int8"]
    return shlex.join(words)


# --------------------------------------------------------------------------- the run


@dataclasses.dataclass
class FrontierRun:
    """One frontier run: its settings, and where everything goes."""

    plain_dir: Path
    output_dir: Path
    data_settings: dict[str, Any]  # task / train_file / validation_file / task_kind, as the stages take them
    max_eval_examples: int | None
    min_retention: float
    seeds: int
    int8: tuple[str, ...]
    device: str
    train_device: str
    finetune_overrides: dict[str, Any]
    conversion_overrides: dict[str, Any]
    progress: bool
    log: Callable[[str], None]
    data: TaskData | None = None
    num_layers: int = 0

    @property
    def model_label(self) -> str:
        """The encoder by its folder's name (with its parent's where the folder is a generic ``model``)."""
        name = self.plain_dir.name
        return f"{self.plain_dir.parent.name}/{name}" if name in ("model", "models") else name

    @property
    def task_label(self) -> str:
        """The task as the user named it: its name, or its training file's."""
        files = self.data_settings.get("train_file")
        return Path(files[0]).name if files else self.data_settings["task"]

    def folder(self, name: str) -> Path:
        return self.output_dir / "candidates" / name

    def workload(self) -> Workload:
        given = self.conversion_overrides
        return Workload(self.num_layers, self.data.train_examples, self.data.eval_examples, self.seeds, self.int8,
                        priming_groups=given.get("batch_groups", PRIMING_GROUPS), priming_steps=given.get("max_steps"))

    # ------------------------------------------------------------------ training settings

    def conversion_settings(self, candidate: Candidate) -> dict[str, Any]:
        keep = candidate.num_layers if candidate.num_layers < self.num_layers else None
        return {"keep_layers": keep, "max_steps": candidate.priming_steps, **self.conversion_overrides}

    def finetune_settings(self, candidate: Candidate) -> dict[str, Any]:
        """The fine-tuning of a candidate: the frontier rule, as :class:`TrainConfig` settings."""
        layers, n = candidate.num_layers, candidate.num_instances
        if n > 1:
            source = {"init": str(self.folder(candidate.name) / "convert")}
        else:
            source = {"init_encoder": str(self.plain_dir), "num_instances": 1,
                      "keep_layers": layers if layers < self.num_layers else None}
        rule = dict(FRONTIER["finetune"], **(FRONTIER["sentence_finetune"] if self.data.kind == "sentence" else {}))
        epochs = round(finetune_epochs(layers, n, unmuxed_layers(layers, n)), 2)
        return {**source, **self.data_settings, **rule, "num_epochs": epochs,
                "max_train_examples": candidate.train_examples, "max_eval_examples": self.max_eval_examples,
                **self.finetune_overrides}

    def commands(self, candidate: Candidate) -> list[str]:
        """The commands that build the candidate again, as this run built it."""
        folder = self.folder(candidate.name)
        lines = []
        if candidate.num_instances > 1:
            words = ["muxplm", "convert", str(self.plain_dir), "--num-instances", str(candidate.num_instances),
                     *_flags(self.conversion_settings(candidate)), "--output-dir", str(folder / "convert")]
            lines.append(shlex.join(words + (["--gpu"] if self.train_device == "cuda" else [])))
        lines.append(shlex.join(["muxplm", "finetune", *_flags(self.finetune_settings(candidate)),
                                 "--output-dir", str(folder / "model")]))
        return lines

    # ------------------------------------------------------------------ building a candidate

    def build(self, candidate: Candidate) -> dict[str, Any]:
        """Train (or finish training) and score one candidate; returns its ``result.json``."""
        folder = self.folder(candidate.name)
        phases = read_json(folder / "phases.json") or {}
        steps = [("finetune", "model", self._finetune)]
        if candidate.num_instances > 1:
            steps.insert(0, ("priming", "convert", self._convert))
        for phase, subfolder, train in steps:
            if phase in phases:
                continue
            finished = read_json(folder / subfolder / "train_results.json")  # killed before its time was noted
            phases[phase] = finished["train_seconds"] if finished else self._timed(lambda train=train: train(candidate))
            write_json_atomic(folder / "phases.json", phases)
        scores, evaluation = {}, 0.0
        for key, runtime, quantize in [FP32, *(INT8[runtime] for runtime in self.int8)]:
            path = folder / f"eval-{key}.json"
            if not path.is_file():
                start = time.monotonic()
                write_json_atomic(path, self._evaluate(folder / "model", runtime, quantize))
                phases[f"eval-{key}"] = time.monotonic() - start
                write_json_atomic(folder / "phases.json", phases)
            evaluation += phases.get(f"eval-{key}", 0.0)
            scores[key] = _score(read_json(path))
        trained = read_json(folder / "model" / "train_results.json")
        primed = read_json(folder / "convert" / "train_results.json") or {}
        model_config = read_json(folder / "model" / "config.json")
        result = dict(
            name=candidate.name, kind=candidate.kind, num_layers=candidate.num_layers,
            num_instances=candidate.num_instances, num_unmuxed_layers=model_config.get("num_unmuxed_layers") or 0,
            train_examples=trained.get("train_examples", candidate.train_examples),
            finetune_steps=trained.get("final_step"), priming_steps=primed.get("final_step", 0),
            seconds=dict(priming=phases.get("priming", 0.0), finetune=phases["finetune"], evaluation=evaluation),
            estimate=candidate.estimate, checkpoint=str(folder / "model"), commands=self.commands(candidate),
            scores=scores,
        )
        write_json_atomic(folder / "result.json", result)
        return result

    @staticmethod
    def _timed(run: Callable[[], Any]) -> float:
        start = time.monotonic()
        run()
        return time.monotonic() - start

    def _bookkeeping(self, output_dir: Path) -> dict[str, Any]:
        """Settings of a training run that do not change what it learns."""
        from ..training.checkpoint import latest_checkpoint

        # A run killed after a checkpoint goes on from it; the frontier keeps no intermediate checkpoint.
        return dict(progress=self.progress, report_to=["none"], save_total_limit=1,
                    resume=latest_checkpoint(output_dir) is not None)

    def _convert(self, candidate: Candidate) -> None:
        from ..training.convert import convert

        output = self.folder(candidate.name) / "convert"
        convert(self.plain_dir, candidate.num_instances, output, gpu=self.train_device == "cuda",
                **{**self._bookkeeping(output), **self.conversion_settings(candidate)})
        _drop_checkpoints(output)

    def _finetune(self, candidate: Candidate) -> None:
        from ..training.config import TrainConfig
        from ..training.stages import run_stage

        output = self.folder(candidate.name) / "model"
        settings = {key: value for key, value in self.finetune_settings(candidate).items() if value is not None}
        run_stage(TrainConfig(stage="finetune", output_dir=str(output), **{**self._bookkeeping(output), **settings}))
        _drop_checkpoints(output)

    def _evaluate(self, model_dir: Path, runtime: str, quantize: str) -> dict[str, Any]:
        from ..devices import default_batch_size
        from ..training.evaluate import evaluate_checkpoint

        fp32 = quantize == "none" and runtime == "torch"
        device = self.device if fp32 else "cpu"  # int8 and ONNX Runtime score on the CPU
        n = read_json(model_dir / "config.json").get("num_instances", 1)
        with quiet_export():
            given = self.data_settings
            return evaluate_checkpoint(model_dir, given.get("task"), seeds=self.seeds,
                                       train_file=_first(given.get("train_file")),
                                       validation_file=given.get("validation_file"), task_kind=given.get("task_kind"),
                                       max_examples=self.max_eval_examples, batch_size=default_batch_size(device, n),
                                       device=device if fp32 else None, quantize=quantize, runtime=runtime)


def _first(files: list[str] | None) -> str | None:
    return files[0] if files else None


def _drop_checkpoints(output_dir: Path) -> None:
    """The intermediate checkpoints of a finished run: only for resuming it, and hundreds of MB each."""
    from ..training.checkpoint import checkpoint_dirs

    for folder in checkpoint_dirs(output_dir):
        shutil.rmtree(folder, ignore_errors=True)


def _score(evaluation: dict[str, Any]) -> dict[str, Any]:
    """An evaluation's main metric in points, its spread over composition seeds and its churn."""
    main = evaluation["summary"]["main"]
    return dict(accuracy=100 * main["mean"], accuracy_std=100 * main["std"],
                accuracy_spread=100 * main["best_minus_worst"], churn=100 * evaluation["changed_across_seeds"],
                metric=evaluation["main_metric"], seeds=len(evaluation["seeds"]), examples=evaluation["num_examples"],
                runtime=evaluation.get("runtime", "torch"), quantize=evaluation["quantize"])


# --------------------------------------------------------------------------- the budget while it runs


def corrections(results: list[dict[str, Any]]) -> dict[str, float]:
    """Measured over estimated seconds of each phase over the finished candidates, within
    :data:`CORRECTION_LIMITS` (1 where nothing is measured yet)."""
    ratios = {}
    for phase in ("priming", "finetune", "evaluation"):
        spent = sum(r["seconds"][phase] for r in results if r["estimate"].get(phase))
        estimated = sum(r["estimate"][phase] for r in results if r["estimate"].get(phase))
        ratio = spent / estimated if estimated else 1.0
        ratios[phase] = min(max(ratio, CORRECTION_LIMITS[0]), CORRECTION_LIMITS[1])
    return ratios


def corrected(candidate: Candidate, ratios: dict[str, float]) -> float:
    return sum(candidate.estimate[phase] * ratio for phase, ratio in ratios.items()) + candidate.estimate["timing"]


def check_plain_score(plain: dict[str, Any]) -> None:
    """Every retention is a share of the plain model's score: a score of zero or below (a Matthews
    or Pearson correlation of a model that learned nothing) leaves nothing to keep a share of, so
    the run stops there instead of building the rest."""
    score = plain["scores"]["fp32"]
    if score["accuracy"] <= 0:
        raise ValueError(f"the fine-tuned plain model scores {score['accuracy']:.1f} ({score['metric']}) on the "
                         f"validation data, so no candidate can keep a share of it; train it longer "
                         f"(--finetune-setting num_epochs=...) or check the data. Its checkpoint: {plain['checkpoint']}")


def best_cut(results: dict[str, dict[str, Any]], min_retention: float) -> int:
    """The cut a stacked conversion starts from: the fastest (fewest layers) cut whose fp32 score keeps
    ``min_retention`` of the plain model's, else the most accurate cut."""
    plain = results["plain"]["scores"]["fp32"]["accuracy"]
    cuts = sorted((r for r in results.values() if r["kind"] == "cut"), key=lambda r: r["num_layers"])
    if not cuts:
        raise ValueError("a conversion of the best cut needs a finished cut")
    kept = [r for r in cuts if r["scores"]["fp32"]["accuracy"] >= min_retention * plain]
    chosen = kept[0] if kept else max(cuts, key=lambda r: (r["scores"]["fp32"]["accuracy"], -r["num_layers"]))
    return chosen["num_layers"]


# --------------------------------------------------------------------------- timing


def time_rows(run: FrontierRun, results: list[dict[str, Any]], log: Callable[[str], None]) -> dict[str, Any]:
    """Samples/s of every model in every precision, side by side in one round-robin run on
    ``run.device`` by the throughput benchmark's own function
    (:func:`muxplm.bench.throughput.time_checkpoints`), at the validation data's padded length;
    and the size of each one's weights as run. Kept in ``timing.json``: a re-run over the same models
    and settings reads it instead of timing again."""
    settings = dict(FRONTIER["timing"], seq_length=run.data.eval_length, device=run.device)
    labels, checkpoints = [], {}  # the rows' names; each candidate's checkpoint
    for result in results:
        for key, runtime, quantize in [FP32, *(INT8[runtime] for runtime in run.int8)]:
            if key in result["scores"]:
                labels.append(_row_name(result["name"], runtime, quantize))
                checkpoints[result["name"]] = result["checkpoint"]
    cached = read_json(run.output_dir / "timing.json")
    if cached and cached["settings"] == settings and list(cached["results"]) == labels:
        return cached
    start = time.monotonic()
    from ..bench.throughput import environment, time_checkpoints

    expected = format_seconds(sum(result["estimate"]["timing"] for result in results))
    log(f"frontier: timing {len(labels)} models side by side on {run.device} (batch {settings['batch_size']} x "
        f"{settings['seq_length']} tokens, {settings['trials']} trials; estimated {expected})")
    # The benchmark's own function, with the variants of the `muxplm bench throughput` command that
    # frontier.md prints (ONNX Runtime float32 too, timed but not a row), so that both time alike.
    with quiet_export():
        measured = time_checkpoints(checkpoints, quantize=("none", "int8") if run.int8 else ("none",),
                                    runtimes=("torch", "onnx") if "onnx" in run.int8 else ("torch",),
                                    batch_size=settings["batch_size"], seq_length=settings["seq_length"],
                                    batches=settings["batches"], trials=settings["trials"],
                                    warmup=settings["warmup"], clock=settings["clock"], device=run.device)
    timing = dict(settings=settings, environment=environment(run.device), seconds=time.monotonic() - start,
                  results={label: {key: measured[label][key] for key in ("samples_per_s", "std", "trials",
                                                                         "weights_bytes")}
                           for label in labels})
    write_json_atomic(run.output_dir / "timing.json", timing)
    return timing


def _row_name(candidate: str, runtime: str, quantize: str) -> str:
    """``cut2``, ``cut2 int8``, ``cut2 onnx int8``: the labels ``muxplm bench throughput --model`` gives."""
    from ..bench.throughput import variant_label

    return variant_label(candidate, runtime, quantize)


# --------------------------------------------------------------------------- rows and outputs


def build_rows(results: list[dict[str, Any]], timing: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per candidate and precision: its scores, retention against the plain fp32 model, and
    (with ``timing``) its speed-up over it and the size of its weights."""
    plain = next(r for r in results if r["name"] == "plain")["scores"]["fp32"]["accuracy"]
    base = timing["results"]["plain"]["samples_per_s"] if timing else None
    rows = []
    for result in results:
        for score in result["scores"].values():
            name = _row_name(result["name"], score["runtime"], score["quantize"])
            row = dict(
                name=name, candidate=result["name"], kind=result["kind"],
                precision="fp32" if score["quantize"] == "none" else "int8", runtime=score["runtime"],
                num_layers=result["num_layers"], num_instances=result["num_instances"],
                num_unmuxed_layers=result["num_unmuxed_layers"], metric=score["metric"], accuracy=score["accuracy"],
                accuracy_std=score["accuracy_std"], accuracy_spread=score["accuracy_spread"],
                retention=score["accuracy"] / plain if plain else 0.0, churn=score["churn"], seeds=score["seeds"],
                eval_examples=score["examples"], train_examples=result["train_examples"],
                finetune_steps=result["finetune_steps"], priming_steps=result["priming_steps"],
                checkpoint=result["checkpoint"], commands=result["commands"],
                serve=ship_command(Path(result["checkpoint"]), score["runtime"], score["quantize"]),
            )
            if timing:
                measured = timing["results"][name]
                row.update(speedup=measured["samples_per_s"] / base, samples_per_s=measured["samples_per_s"],
                           weights_mb=measured["weights_bytes"] / 1e6)
            rows.append(row)
    return rows


def built_names(plan: Plan, rows: list[dict[str, Any]]) -> list[str]:
    """The plan's candidates by the names they were built under: a conversion of the best cut is
    planned as ``cut-nN`` and built as ``cutK-nN`` once the cuts are scored."""
    stacked = {row["num_instances"]: row["candidate"] for row in rows if row["kind"] == "stacked"}
    return [stacked.get(c.num_instances, c.name) if c.kind == "stacked" else c.name for c in plan.candidates]


def recommendation_line(row: dict[str, Any], min_retention: float) -> str:
    """The one-line answer: what to ship, how fast and accurate it is, where it is, how to rebuild it."""
    kept = f"{retention_label(row['retention'], min_retention)} of the plain model's {row['metric']}"
    head = "Recommended" if row["retention"] >= min_retention else \
        f"No model keeps {100 * min_retention:g} %; keep the plain model"
    return (f"{head}: {row['name']} ({kept}, {row['accuracy']:.1f}, at {row['speedup']:.2f}x); checkpoint "
            f"{row['checkpoint']}; serve: {row['serve']}; rebuild: {' && '.join(row['commands'])}")


def benchmark_command(rows: list[dict[str, Any]], int8: Sequence[str], settings: dict[str, Any]) -> str:
    """``muxplm bench throughput`` over the same checkpoints and inputs: the speeds, measured again."""
    words = ["muxplm", "bench", "throughput"]
    for row in rows:
        if row["precision"] == "fp32":
            words += ["--model", row["checkpoint"]]
    words += ["--quantize", "none,int8" if int8 else "none", "--runtime", "torch,onnx" if "onnx" in int8 else "torch",
              "--batch-size", str(settings["batch_size"]), "--seq-len", str(settings["seq_length"]),
              "--batches", str(settings["batches"]), "--trials", str(settings["trials"]),
              "--warmup", str(settings["warmup"]), "--device", settings["device"]]
    return shlex.join(words)


def write_outputs(run: FrontierRun, plan: Plan, rows: list[dict[str, Any]], timing: dict[str, Any],
                  skipped: list[dict[str, Any]], spent: float) -> dict[str, Any]:
    """``rows.jsonl``, ``frontier.json``, ``frontier.md`` and ``frontier.png``; returns the report."""
    chosen = recommend(rows, run.min_retention)
    for row in rows:
        row["dominated_by"] = dominating(rows, row)
        row["on_frontier"] = not row["dominated_by"]
    line = recommendation_line(chosen, run.min_retention)
    settings, environment = timing["settings"], timing["environment"]
    check = benchmark_command(rows, run.int8, settings)
    report = dict(
        model=str(run.plain_dir), task=run.task_label, metric=run.data.metric, min_retention=run.min_retention,
        recommended=chosen["name"], recommendation=line, rows=rows,
        plan=dict(scale=plan.scale, fits=plan.fits, budget_seconds=plan.budget,
                  estimated_seconds=plan.estimated_seconds, spent_seconds=spent,
                  candidates=built_names(plan, rows), skipped=skipped),
        data=dataclasses.asdict(run.data), timing=dict(settings=settings, environment=environment, check_command=check),
    )
    write_text_atomic(run.output_dir / "rows.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    write_json_atomic(run.output_dir / "frontier.json", report)
    where = environment.get("gpu") or f"{environment['cpu']}, {environment['torch_threads']} threads"
    trained_on = ("all the training examples" if plan.scale == 1 else
                  f"{plan.scale:g} of the training examples and of the priming steps, to fit the budget")
    data = run.data
    lines = [
        f"# Frontier: {run.model_label} on {run.task_label}",
        "",
        f"Task {run.task_label} ({data.kind}, main metric {data.metric}): {data.train_examples} training and "
        f"{data.eval_examples} validation examples; every model trained on {trained_on}.",
        f"Speed: samples/s over the plain model in fp32, batch {settings['batch_size']} x {settings['seq_length']} "
        f"tokens (the validation data's padded length), {settings['trials']} round-robin trials on "
        f"{settings['device']} ({where}).",
        f"Accuracy: mean over {run.seeds} composition seeds for N > 1 (± their standard deviation); churn: the "
        f"share of predictions that change with the composition. Weights: their size as run.",
        f"Budget {format_seconds(plan.budget)}: spent {format_seconds(spent)} "
        f"(estimated {format_seconds(plan.estimated_seconds)}).",
        "",
        markdown_table(rows, chosen["name"], run.min_retention),
        "",
        line,
    ]
    if skipped:
        lines += ["", "Skipped: " + "; ".join(f"{s['name']} ({s['reason']})" for s in skipped) + "."]
    lines += ["", f"Timing again with the benchmark: `{check}`", ""]
    write_text_atomic(run.output_dir / "frontier.md", "\n".join(lines))
    plot_frontier(rows, run.output_dir / "frontier.png", recommended=chosen["name"], min_retention=run.min_retention,
                  title=f"{run.model_label} on {run.task_label}: accuracy against speed-up")
    return report


# What the frontier sets for each candidate itself: where it starts, what it trains on, where it goes.
OWN_SETTINGS = ("stage", "output_dir", "init", "init_encoder", "keep_layers", "num_instances", "task", "train_file",
                "validation_file", "task_kind", "max_train_examples", "max_eval_examples", "resume", "preset",
                "regroup_instances")


def check_overrides(settings: dict[str, Any], command: str) -> None:
    """Refuse a setting that is not one of ``muxplm COMMAND``'s, or that the frontier sets per candidate."""
    from ..training.config import command_settings

    known = {setting.name for setting in command_settings(command)}
    for key in settings:
        if key in OWN_SETTINGS:
            raise ValueError(f"{key} is set by the frontier for each candidate; it cannot be overridden")
        if key not in known:
            raise ValueError(f"{key} is not a setting of `muxplm {command}`")


def run_frontier(
    model: str | os.PathLike,
    output_dir: str | os.PathLike = "runs/frontier",
    *,
    task: str | None = None,
    train_file: str | os.PathLike | None = None,
    validation_file: str | os.PathLike | None = None,
    task_kind: str | None = None,
    budget: float | str = 3600.0,
    min_retention: float = 0.97,
    instances: Sequence[int] = (2, 5),
    cuts: Sequence[int] | None = None,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
    seeds: int = FRONTIER["seeds"],
    int8: Sequence[str] = INT8_RUNTIMES,
    device: str | None = None,
    finetune_overrides: dict[str, Any] | None = None,
    conversion_overrides: dict[str, Any] | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Build, score and time every candidate speed-up of the plain encoder ``model`` on a task
    (``task``, or ``train_file`` + ``validation_file``) within ``budget`` (seconds, or ``"15m"``,
    ``"1h"``: :func:`~muxplm.frontier.plan.parse_budget`), and recommend the
    fastest model that keeps ``min_retention`` of the plain model's score. ``finetune_overrides``
    and ``conversion_overrides`` are :class:`~muxplm.training.TrainConfig` settings over the
    frontier's rule (every candidate alike). Returns the report written to ``frontier.json``.
    A second call with the same ``output_dir`` and settings goes on where the first stopped."""
    from transformers import AutoConfig

    from ..checkpoints import local_folder
    from ..devices import default_device, resolve_device
    from ..families import family_of_plain_type

    files = (train_file is not None, validation_file is not None)
    if task and any(files):
        raise ValueError("give --task NAME, or --train-file and --validation-file, not both")
    if not task and not all(files):
        missing = "--validation-file" if files[0] else "--train-file" if files[1] else "--task NAME, or --train-file " \
            "and --validation-file"
        raise ValueError(f"the data to measure on is missing: give {missing}")
    if max_train_examples is not None and max_train_examples < 1:
        raise ValueError(f"--max-train-examples must be >= 1, got {max_train_examples}")
    if max_eval_examples is not None and max_eval_examples < 1:
        raise ValueError(f"--max-eval-examples must be >= 1, got {max_eval_examples}")
    if not 0 < min_retention <= 1:
        raise ValueError(f"min_retention is a share of the plain model's score in (0, 1], got {min_retention}")
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    budget = parse_budget(budget)
    check_overrides(finetune_overrides or {}, "finetune")
    check_overrides(conversion_overrides or {}, "convert")
    plain_dir = Path(local_folder(model)).resolve()
    plain = AutoConfig.from_pretrained(plain_dir)
    if plain.model_type.startswith("mux_"):
        raise ValueError(f"{model} is a MUX checkpoint; the frontier starts from a plain pretrained encoder")
    family_of_plain_type(plain.model_type, f"frontier {model}")  # a clear refusal of an unsupported family
    candidates(plain.num_hidden_layers, None if cuts is None else list(cuts), list(instances))  # refused before any work
    device = device or default_device()
    resolve_device(device, "float32")  # a device this machine lacks is refused before any training
    if task:
        data_settings = {"task": task}
    else:
        data_settings = {"train_file": [str(Path(train_file).resolve())],
                         "validation_file": str(Path(validation_file).resolve())}
    if task_kind:
        data_settings["task_kind"] = task_kind
    run = FrontierRun(plain_dir=plain_dir, output_dir=Path(output_dir), data_settings=data_settings,
                      max_eval_examples=max_eval_examples, min_retention=min_retention, seeds=seeds,
                      int8=int8_runtimes(int8, device, log), device=device,
                      train_device=default_device(),
                      finetune_overrides=dict(finetune_overrides or {}),
                      conversion_overrides=dict(conversion_overrides or {}), progress=progress, log=log,
                      num_layers=plain.num_hidden_layers)
    settings = dict(model=str(plain_dir), data=data_settings, budget=budget, min_retention=min_retention,
                    instances=sorted(set(instances)), cuts=None if cuts is None else sorted(set(cuts)),
                    max_train_examples=max_train_examples, max_eval_examples=max_eval_examples, seeds=seeds,
                    int8=list(run.int8), device=device, finetune_overrides=run.finetune_overrides,
                    conversion_overrides=run.conversion_overrides)
    plan, spent_before = _plan(run, settings, cuts, instances, max_train_examples, budget, log)
    results = _build_all(run, plan, spent_before, budget, log)
    timing = time_rows(run, results, log)
    rows = build_rows(results, timing)
    skipped = plan.skipped + [dict(name=name, **reason) for name, reason in
                              (read_json(run.output_dir / "skipped.json") or {}).items()]
    spent = spent_before + sum(sum(r["seconds"].values()) for r in results) + timing["seconds"]
    report = write_outputs(run, plan, rows, timing, skipped, spent)
    log(report["recommendation"])
    return report


def _plan(run: FrontierRun, settings: dict[str, Any], cuts, instances, max_train_examples, budget: float, log
          ) -> tuple[Plan, float]:
    """The run's plan: ``plan.json`` of an earlier run with the same settings, else a new one sized
    to the budget from step times measured now. Also the seconds its preparation took."""
    path = run.output_dir / "plan.json"
    saved = read_json(path)
    if saved is not None:
        settings = json.loads(json.dumps(settings, default=str))  # as saved
        if saved["settings"] != settings:
            differ = sorted(key for key in settings if saved["settings"].get(key) != settings[key])
            raise ValueError(f"{run.output_dir} holds a frontier run with other settings ({', '.join(differ)}); run "
                             f"it again with its own settings to go on, or choose another --output-dir")
        run.data = TaskData(**saved["data"])
        plan = Plan.from_dict(saved["plan"])
        log(f"frontier: going on with the plan in {path}")
        return plan, saved["prepare_seconds"]
    start = time.monotonic()
    log(f"frontier: reading the data and timing a few steps of {run.model_label} on {run.train_device}")
    given = run.data_settings
    run.data = read_task(run.plain_dir, task=given.get("task"), train_file=_first(given.get("train_file")),
                         validation_file=given.get("validation_file"), task_kind=given.get("task_kind"),
                         max_train_examples=max_train_examples, max_eval_examples=run.max_eval_examples,
                         eval_batch_size=FRONTIER["eval_batch_size"])
    times = measure_step_times(run.plain_dir, run.data, run.train_device, eval_device=run.device,
                               batch_size=run.finetune_overrides.get("batch_size", FRONTIER["finetune"]["batch_size"]))
    plan = size_plan(candidates(run.num_layers, None if cuts is None else list(cuts), list(instances)), times,
                     run.workload(), budget)
    prepare = time.monotonic() - start
    write_json_atomic(path, dict(settings=settings, data=dataclasses.asdict(run.data),
                                 step_times=dataclasses.asdict(times), plan=plan.to_dict(), prepare_seconds=prepare))
    over = "" if plan.fits else "; even the smallest plan is over the budget, built anyway"
    log(f"frontier: plan for a budget of {format_seconds(budget)} (estimated {format_seconds(plan.estimated_seconds)}"
        f"{over}):\n{plan_table(plan)}")
    return plan, prepare


def _build_all(run: FrontierRun, plan: Plan, spent_before: float, budget: float, log) -> list[dict[str, Any]]:
    """Every candidate of the plan in order, finished ones read back, optional ones dropped when the
    corrected estimates no longer fit the budget. A candidate whose training diverges is dropped too
    (a result of its own); the plain model's cannot be, every retention is measured against it."""
    from ..training.trainer import TrainingDiverged

    skipped_path = run.output_dir / "skipped.json"
    skipped = read_json(skipped_path) or {}

    def skip(name: str, reason: str, seconds: float) -> None:
        skipped[name] = dict(reason=reason, estimated_seconds=seconds)
        write_json_atomic(skipped_path, skipped)
        log(f"frontier: skipping {name}: {reason}")

    results: dict[str, dict[str, Any]] = {}
    times = StepTimes(**read_json(run.output_dir / "plan.json")["step_times"])
    bar = progress_bar(len(plan.candidates), desc="frontier", disable=not run.progress)
    try:
        for index, planned in enumerate(plan.candidates):
            candidate = planned
            if planned.kind == "stacked" and planned.name not in skipped:
                depth = best_cut(results, run.min_retention)
                candidate = dataclasses.replace(planned, name=f"cut{depth}-n{planned.num_instances}", num_layers=depth)
                candidate.estimate = estimate(candidate, times, run.workload())
            bar.set_postfix(candidate=candidate.name)
            done = read_json(run.folder(candidate.name) / "result.json")
            if done is not None:
                results[candidate.name] = done
            elif planned.name not in skipped:
                ratios = corrections(list(results.values()))
                pending = [c for c in plan.candidates[index + 1:] if c.required]
                left = budget - spent_before - sum(sum(r["seconds"].values()) + r["estimate"]["timing"]
                                                   for r in results.values())
                need = corrected(candidate, ratios) + sum(corrected(c, ratios) for c in pending)
                if not candidate.required and need > left:
                    skip(planned.name, f"over the budget as measured: needs ~{format_seconds(need)} with the required "
                                       f"ones, {format_seconds(max(left, 0))} left", corrected(candidate, ratios))
                else:
                    expected = format_seconds(corrected(candidate, ratios))
                    log(f"frontier: building {candidate.name} (estimated {expected})")
                    try:
                        results[candidate.name] = run.build(candidate)
                    except TrainingDiverged as error:
                        if candidate.kind == "plain":
                            raise
                        skip(planned.name, f"its training diverged ({error})", corrected(candidate, ratios))
            if candidate.kind == "plain" and "plain" in results:
                check_plain_score(results["plain"])
            bar.update(1)
            if "plain" in results:  # the rows so far, scored but not yet timed
                write_text_atomic(run.output_dir / "rows.jsonl", "".join(
                    json.dumps(row) + "\n" for row in build_rows(list(results.values()), None)))
    finally:
        bar.close()
    return list(results.values())
