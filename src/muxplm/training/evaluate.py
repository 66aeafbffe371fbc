"""Evaluation of fine-tuned MUX models: multi-seed composition, ensembling, throughput.

The paper evaluates every MUX model over several random *compositions* (which instances share
a group; the ``composition_seed`` forward argument) and reports mean, std, max and the spread
between the best and worst seed ("lottery tickets"). The whole dev set is scored: batches need
not be a multiple of N (the model fills the last group itself), and the last batch is kept.
Predictions come from the inference path that the server answers through (:mod:`muxplm.inference`).
"""

from __future__ import annotations

import json
import statistics
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ..checkpoints import load_config, load_model, local_folder, model_class
from ..choices import RUNTIMES
from ..data import TaskSpec, load_tokenizer
from ..devices import check_finite_weights, resolve_device
from ..inference import Encoded, decode, forward_batches, forward_pass, pad_token_id
from ..metrics import compute_task_metrics
from ..quantization import check_quantize, quantize_dynamic_int8
from ..timing import side_by_side
from ..vocabulary import tokenizer_source
from .inputs import load_task_features


def dev_predictions(model, spec: TaskSpec, features, tokenizer, batch_size: int = 64,
                    composition_seed: int | None = 0, ensemble: bool = False,
                    shard: tuple[int, int] = (0, 1)) -> tuple[list, list]:
    """What the inference path (:mod:`muxplm.inference`, the server's too) predicts for every row
    of the tokenized ``features``, in order, and the rows' gold labels.

    Sentence tasks: (a class id or regression score per row, label values). Token tasks: (per-row
    predicted id lists, per-row label lists), each as long as the row. ``composition_seed`` and
    ``shard=(rank, world)``: see :func:`muxplm.inference.forward_batches`.
    """
    model.eval()
    run_instances = partial(forward_pass, model, task=spec.kind, pad_token_id=pad_token_id(tokenizer, model.config),
                            ensemble=ensemble)

    def run_pass(rows, composition_seed):
        outputs = run_instances([instance for _, instance, _ in rows], composition_seed=composition_seed)
        for (index, _, _), output in zip(rows, outputs):
            if not torch.isfinite(output).all():  # metrics of infinite or NaN scores would be meaningless
                raise ValueError(f"the model's outputs are not finite (overflow or NaN) on row {index}; its weights "
                                 f"or precision cannot score this data")
        # Decoded before processes gather them, each prediction with its row's label.
        return [(decode(output, spec.kind, spec.is_regression), label) for (_, _, label), output in zip(rows, outputs)]

    rows = []  # (row index, instance, gold label)
    for index in range(len(features)):
        row = features[index]
        rows.append((index, Encoded.from_features(row), row["labels"]))
    scored = forward_batches(run_pass, rows, batch_size=batch_size, composition_seed=composition_seed, shard=shard)
    return [prediction for prediction, _ in scored], [label for _, label in scored]


def score(spec: TaskSpec, predictions: list, golds: list) -> dict[str, float]:
    """The task's metrics of :func:`dev_predictions`' predictions."""
    if spec.kind == "token":
        return compute_task_metrics(spec, predictions, golds)
    return compute_task_metrics(spec, torch.tensor(predictions), torch.tensor(golds))


def evaluate_model(model, spec: TaskSpec, features, tokenizer, batch_size: int = 64,
                   composition_seed: int | None = 0, ensemble: bool = False,
                   shard: tuple[int, int] = (0, 1)) -> dict[str, float]:
    """Metrics of ``model`` on tokenized ``features`` for one composition seed (sharded over
    processes with ``shard=(rank, world)``; every process gets the metrics)."""
    return score(spec, *dev_predictions(model, spec, features, tokenizer, batch_size, composition_seed, ensemble,
                                        shard))


def predicted_labels(spec: TaskSpec, predictions: list, golds: list) -> list:
    """The predicted label of every scored unit: one per example for sentence tasks, one per
    labelled token for token tasks (regression: the prediction rounded to one decimal)."""
    if spec.kind == "token":
        return [p for row, gold in zip(predictions, golds) for p, g in zip(row, gold) if g != -100]
    if spec.is_regression:
        return torch.tensor(predictions).round(decimals=1).tolist()
    return list(predictions)


def changed_fraction(per_seed_predictions: list[list]) -> float:
    """Stability across composition seeds: the fraction of units whose prediction is not the
    same under every seed (0 for a plain model)."""
    if len(per_seed_predictions) < 2 or not per_seed_predictions[0]:
        return 0.0
    changed = sum(len(set(unit)) > 1 for unit in zip(*per_seed_predictions))
    return changed / len(per_seed_predictions[0])


def summarize(per_seed: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Mean, std (sample), max, min and best-minus-worst of every metric across seeds."""
    summary = {}
    for key in per_seed[0]:
        values = [run[key] for run in per_seed]
        summary[key] = {
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "max": max(values),
            "min": min(values),
            "best_minus_worst": max(values) - min(values),
        }
    return summary


def evaluate_checkpoint(
    checkpoint: str | Path,
    task: str | None = None,
    *,
    seeds: int = 5,
    ensemble: bool = False,
    batch_size: int = 64,
    max_length: int | None = None,
    split: str = "validation",
    train_file: str | None = None,
    validation_file: str | None = None,
    task_kind: str | None = None,
    max_examples: int | None = None,
    cache_dir: str | None = None,
    output_file: str | Path | None = None,
    device: str | None = None,
    quantize: str = "none",
    runtime: str = "torch",
) -> dict[str, Any]:
    """Evaluate a fine-tuned checkpoint on a task over ``seeds`` composition seeds;
    ``quantize="int8"`` scores its int8 dynamically quantised copy (CPU only).
    ``runtime="onnx"`` scores the checkpoint's ONNX graph in ONNX Runtime instead (exported and
    checked against PyTorch into a temporary folder; with ``quantize="int8"`` ONNX Runtime's
    dynamic quantisation of it), grouped by the same composition seeds as PyTorch.

    Returns ``{"checkpoint", "task", "num_instances", "quantize", "num_examples", "seeds": [...],
    "per_seed": [metrics...], "summary": {metric: {mean, std, max, min, best_minus_worst}},
    "changed_across_seeds": fraction of predictions that differ between seeds,
    "ensemble": metrics or None}`` and writes it to ``output_file`` when given.
    Raises ``ValueError`` when the checkpoint is not a classifier for this kind of task, or
    its labels do not match the task's.
    """
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    if runtime == "onnx" and device not in (None, "cpu"):
        raise ValueError("runtime='onnx' scores on the CPU (ONNX Runtime's CPU session); leave device unset")
    quantize = check_quantize(quantize, device or "cpu")
    checkpoint = local_folder(checkpoint)  # a hub name: downloaded first
    config = load_config(checkpoint)  # read once, handed to the loader
    kind = classifier_kind(config, checkpoint)
    model = load_model(checkpoint, config)
    tokenizer = load_tokenizer(tokenizer_source(checkpoint, config.model_type))
    check_finite_weights(model, checkpoint)  # scores of NaN weights would be silently meaningless
    label_names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    spec, features = load_task_features(
        tokenizer, task=task, train_file=train_file, validation_file=validation_file,
        task_kind=task_kind or kind, label_names=label_names, max_length=max_length or _max_length(model),
        cache_dir=cache_dir, splits=(split,), max_examples={split: max_examples},
    )
    _check_compatible(spec, kind, label_names, checkpoint)
    rows = features[split]
    if len(rows) == 0:
        raise ValueError(f"the {split} split of {spec.name} is empty")
    if device:
        model.to(resolve_device(device, "float32")[0])
    with tempfile.TemporaryDirectory(prefix="muxplm-eval-onnx-") as scratch:
        if runtime == "onnx":
            model = _onnx_runtime_model(model, Path(scratch), quantize)
        elif quantize == "int8":
            model = quantize_dynamic_int8(model)
        n = model.config.num_instances
        seed_list = list(range(seeds)) if n > 1 else [0]  # N=1: every composition is the same
        per_seed, predictions = [], []
        for seed in seed_list:
            predicted, golds = dev_predictions(model, spec, rows, tokenizer, batch_size, seed)
            per_seed.append(score(spec, predicted, golds))
            predictions.append(predicted_labels(spec, predicted, golds))
        ensembled = evaluate_model(model, spec, rows, tokenizer, batch_size, 0, ensemble=True) if ensemble else None
    result = {
        "checkpoint": str(checkpoint), "task": spec.name, "split": split, "num_instances": n, "quantize": quantize,
        "runtime": runtime, "num_examples": len(rows), "main_metric": spec.metric, "seeds": seed_list,
        "per_seed": per_seed, "summary": summarize(per_seed),
        # Fraction of examples (token tasks: labelled tokens) whose prediction changes with
        # the composition, i.e. with which other inputs share the forward pass.
        "changed_across_seeds": changed_fraction(predictions),
        "ensemble": ensembled,
    }
    if output_file is not None:
        Path(output_file).parent.mkdir(parents=True, exist_ok=True)
        Path(output_file).write_text(json.dumps(result, indent=1))
    return result


def _onnx_runtime_model(model, folder: Path, quantize: str):
    """The model's exported graph (within 1e-4 of PyTorch, else RuntimeError) in an ONNX Runtime
    session, int8-quantised by ONNX Runtime when asked."""
    from ..serving.onnx_export import OnnxRuntimeClassifier, export_graph

    graph = export_graph(model.eval(), folder / "model.onnx")["path"]
    # As many threads as PyTorch would use (OMP_NUM_THREADS / torch.set_num_threads)
    return OnnxRuntimeClassifier(graph, model.config, threads=torch.get_num_threads(), quantize=quantize)


def classifier_kind(config, checkpoint) -> str:
    """``"sentence"`` or ``"token"``: the kind of classifier a checkpoint's config names; a
    ``ValueError`` for any other model (e.g. a pre-training checkpoint)."""
    architecture = model_class(config, checkpoint).__name__
    for marker, kind in (("ForSequenceClassification", "sentence"), ("ForTokenClassification", "token")):
        if architecture.endswith(marker):
            return kind
    raise ValueError(f"{checkpoint} is not a fine-tuned classifier (it holds {architecture}); evaluate needs the "
                     f"output of `muxplm finetune`")


def _max_length(model) -> int:
    return min(128, model.config.max_input_tokens)


def generic_label_names(names: list[str]) -> bool:
    """Whether labels are Transformers' placeholders ``LABEL_0``, ``LABEL_1``, ... (a config saved
    without names)."""
    return list(names) == [f"LABEL_{i}" for i in range(len(names))]


def _check_compatible(spec: TaskSpec, kind: str, label_names: list[str], checkpoint) -> None:
    if spec.kind != kind:
        raise ValueError(
            f"{checkpoint} is a {kind}-classification model but task {spec.name!r} is a {spec.kind}-level task"
        )
    if spec.is_regression:
        if len(label_names) != 1:
            raise ValueError(f"task {spec.name!r} is a regression task but {checkpoint} is a "
                             f"{len(label_names)}-class classifier")
        return
    if generic_label_names(label_names) and len(label_names) == len(spec.label_names):
        return  # unnamed labels (the paper's released classifiers): class i is the task's label i
    if not spec.is_regression and list(spec.label_names) != list(label_names):
        raise ValueError(
            f"{checkpoint} was trained with labels {label_names}, but task {spec.name!r} has labels "
            f"{list(spec.label_names)}"
        )


def results_table(result: dict[str, Any], title: str | None = None):
    """A rich table of one :func:`evaluate_checkpoint` result."""
    from rich.table import Table

    precision = ("  ONNX Runtime" if result.get("runtime") == "onnx" else "") + \
        ("  int8" if result.get("quantize") == "int8" else "")
    table = Table(title=title or f"{result['task']}  N={result['num_instances']}{precision}  "
                                 f"({result['num_examples']} examples, {len(result['seeds'])} seeds)")
    for column in ("metric", "mean", "std", "max", "best-worst", "ensemble"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for key, stats in result["summary"].items():
        if key == "main":
            continue
        ensemble = result["ensemble"][key] if result.get("ensemble") else None
        table.add_row(
            key, f"{stats['mean']:.4f}", f"{stats['std']:.4f}", f"{stats['max']:.4f}",
            f"{stats['best_minus_worst']:.4f}", "-" if ensemble is None else f"{ensemble:.4f}",
        )
    return table


@torch.inference_mode()
def measure_throughput(model, batch_size: int = 128, seq_length: int = 128, num_batches: int = 20,
                       trials: int = 3, warmup: int = 3, seed: int = 0) -> dict[str, float]:
    """Inference samples/s (wall clock): random full-length inputs already on the model's
    device, warm-up batches first, the mean (and spread) of ``trials`` timings of
    ``num_batches`` batches (:mod:`muxplm.timing`)."""
    device = next(model.parameters()).device
    model.eval()
    measured = side_by_side({"model": model}, batch_size=batch_size, seq_length=seq_length, batches=num_batches,
                            trials=trials, device=device, warmup=warmup, seed=seed)["model"]
    return {"samples_per_s": measured["samples_per_s"], "std": measured["std"], "batch_size": batch_size,
            "seq_length": seq_length, "num_batches": num_batches, "trials": trials}
