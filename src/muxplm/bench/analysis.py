"""Analyses of MUX-PLMs from the paper: muxology, Pareto frontier,
ensembling gains and composition-seed lottery tickets.

Input schemas
-------------
Pareto (``muxplm analyze pareto FILE``): a JSON list of points, one per model::

    [{"name": "MUX-BERT small N=2", "size": "small", "num_instances": 2,
      "score": 81.3, "throughput": 5539.0}, ...]

(or ``{"points": [...]}``); ``score`` higher is better, ``throughput`` in samples/s.

Per-seed evaluation results (``muxplm analyze ensemble|lottery FILES``), either

* a JSON list of records ``{"model": str, "task": str, "seed": int, "score": float,
  "ensemble": bool}`` (``num_instances`` optional) — one record per composition seed, and
  ``ensemble: true`` records for ensembled inference; or
* the files ``muxplm evaluate`` writes (``training.evaluate.evaluate_checkpoint``): a dict with
  ``checkpoint``, ``task``, ``num_instances``, ``seeds``, ``per_seed`` (metric dicts with a
  ``main`` key) and ``ensemble`` (a metric dict or null), converted to the records above.

A directory argument stands for every ``*.json`` file in it.
"""

from __future__ import annotations

import glob
import json
import math
import os
import statistics
from collections import defaultdict

import torch

# --------------------------------------------------------------------------- records


def _records_from(data, source: str) -> list[dict]:
    if isinstance(data, dict) and "per_seed" in data:  # a `muxplm evaluate` result file
        model = os.path.basename(os.path.normpath(str(data.get("checkpoint", source))))
        common = dict(model=model, task=data.get("task", "?"), num_instances=data.get("num_instances"))
        seeds = data.get("seeds") or list(range(len(data["per_seed"])))
        records = [dict(common, seed=seed, score=float(metrics["main"]), ensemble=False)
                   for seed, metrics in zip(seeds, data["per_seed"])]
        if data.get("ensemble"):
            records.append(dict(common, seed=seeds[0], score=float(data["ensemble"]["main"]), ensemble=True))
        return records
    if isinstance(data, dict) and "points" in data:
        data = data["points"]
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ValueError(f"{source}: expected a JSON list of records or a `muxplm evaluate` result")
    return data


def load_records(paths: list[str]) -> list[dict]:
    """Every record of the given JSON files (directories: their ``*.json`` files)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            files += sorted(glob.glob(os.path.join(path, "*.json")))
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise FileNotFoundError(f"no such results file or directory: {path}")
    if not files:
        raise ValueError(f"no JSON results found in {', '.join(paths)}")
    records = []
    for path in files:
        with open(path) as handle:
            try:
                data = json.load(handle)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path} is not valid JSON: {error}") from error
        records += _records_from(data, path)
    return records


def _require(records: list[dict], fields: tuple[str, ...], what: str) -> None:
    for index, record in enumerate(records):
        missing = [f for f in fields if f not in record]
        if missing:
            raise ValueError(f"{what} record {index} lacks {', '.join(missing)}: {record}")


# --------------------------------------------------------------------------- tables


def lottery_table(records: list[dict]) -> list[dict]:
    """Per (model, task): the spread of scores over composition seeds (non-ensembled runs):
    mean, std (sample), worst and best seed and best minus worst."""
    _require(records, ("model", "task", "seed", "score"), "per-seed")
    by_key = defaultdict(list)
    for r in records:
        if not r.get("ensemble", False):
            by_key[(r["model"], r["task"])].append(r)
    rows = []
    for (model, task), runs in sorted(by_key.items()):
        scores = [float(r["score"]) for r in runs]
        best = max(runs, key=lambda r: r["score"])
        worst = min(runs, key=lambda r: r["score"])
        rows.append(dict(
            model=model, task=task, num_instances=runs[0].get("num_instances"), seeds=len(runs),
            mean=statistics.fmean(scores), std=statistics.stdev(scores) if len(scores) > 1 else 0.0,
            worst=float(worst["score"]), worst_seed=worst["seed"], best=float(best["score"]), best_seed=best["seed"],
            best_minus_worst=float(best["score"]) - float(worst["score"]),
        ))
    return rows


def ensemble_table(records: list[dict]) -> list[dict]:
    """Per (model, task) with both kinds of runs: the mean over seeds of plain multiplexed
    inference, the (mean) ensembled score and the gain of ensembling."""
    _require(records, ("model", "task", "score", "ensemble"), "per-seed")
    plain, ensembled = defaultdict(list), defaultdict(list)
    for r in records:
        (ensembled if r["ensemble"] else plain)[(r["model"], r["task"])].append(r)
    rows = []
    for key in sorted(set(plain) & set(ensembled)):
        plain_scores = [float(r["score"]) for r in plain[key]]
        ens_scores = [float(r["score"]) for r in ensembled[key]]
        plain_mean, ens_mean = statistics.fmean(plain_scores), statistics.fmean(ens_scores)
        rows.append(dict(
            model=key[0], task=key[1], num_instances=plain[key][0].get("num_instances"),
            seeds=len(plain_scores), plain_mean=plain_mean,
            plain_std=statistics.stdev(plain_scores) if len(plain_scores) > 1 else 0.0,
            ensemble=ens_mean, gain=ens_mean - plain_mean,
        ))
    if not rows:
        raise ValueError("no (model, task) has both ensembled and plain per-seed results")
    return rows


def table_markdown(rows: list[dict]) -> str:
    """A markdown table with one column per key of the rows (floats to 4 places)."""
    if not rows:
        return "(no rows)"
    columns = list(rows[0])
    cell = lambda v: f"{v:.4f}" if isinstance(v, float) else ("-" if v is None else str(v))  # noqa: E731
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- Pareto


def pareto_frontier(points: list[dict]) -> list[dict]:
    """The points no other point beats on both score and throughput, highest throughput first."""
    _require(points, ("name", "score", "throughput"), "Pareto")
    frontier, best_score = [], -math.inf
    for point in sorted(points, key=lambda p: (-float(p["throughput"]), -float(p["score"]))):
        if float(point["score"]) > best_score:
            frontier.append(point)
            best_score = float(point["score"])
    return frontier


def plot_pareto(points: list[dict], path: str, title: str = "score vs throughput") -> str:
    """Scatter of score against throughput (MUX N as colour), labelled, with the frontier in grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frontier = pareto_frontier(points)
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    instances = sorted({p.get("num_instances", 1) for p in points})
    colours = plt.get_cmap("viridis")
    for i, n in enumerate(instances):
        chosen = [p for p in points if p.get("num_instances", 1) == n]
        ax.scatter([p["throughput"] for p in chosen], [p["score"] for p in chosen],
                   color=colours(i / max(len(instances) - 1, 1)), label=f"N={n}", zorder=3)
    for p in points:
        ax.annotate(p["name"], (p["throughput"], p["score"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.plot([p["throughput"] for p in frontier], [p["score"] for p in frontier], color="grey", linewidth=3,
            alpha=0.5, label="Pareto frontier", zorder=2)
    ax.set_xscale("log")
    ax.set_xlabel("throughput (samples/s)")
    ax.set_ylabel("score")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- muxology


def read_sentences(text_files: list[str] | None, limit: int = 300) -> list[str]:
    """Held-out sentences: non-empty lines of ``text_files``, or, without files, passages spread
    evenly over ``muxplm.data.load_pretraining_corpus()``."""
    if text_files:
        sentences = []
        for path in text_files:
            with open(path, encoding="utf-8") as handle:
                sentences += [line.strip() for line in handle if line.strip()]
    else:
        from ..data import load_pretraining_corpus

        texts = load_pretraining_corpus()["text"]
        step = max(len(texts) // max(limit, 1), 1)
        sentences = list(texts[::step])
    if not sentences:
        raise ValueError("no text to analyse: the text files are empty")
    return sentences[:limit]


def muxology_models(paths: list[str], preset: str = "tiny", instances=(1, 2, 5, 10)) -> list[tuple[str, torch.nn.Module]]:
    """``(name, model)`` pairs with eager attention (needed to see attention probabilities):
    the checkpoints in ``paths`` (MUX or plain BERT/ELECTRA), or freshly initialised MUX-BERT
    models of ``preset`` for each N (N = 1 being the plain model)."""
    from transformers import AutoConfig, AutoModel

    from ..configuration import MuxBertConfig
    from ..modeling_bert import MuxBertModel

    models = []
    if paths:
        for path in paths:
            if not os.path.isdir(path):
                raise FileNotFoundError(f"no such checkpoint directory: {path}")
            config = AutoConfig.from_pretrained(path)
            model = AutoModel.from_pretrained(path, attn_implementation="eager")
            n = getattr(config, "num_instances", 1)
            models.append((f"{os.path.basename(os.path.normpath(path))} (N={n})", model))
        return models
    for n in instances:
        mux = dict(mux_type="identity", demux_type="identity") if n == 1 else {}
        torch.manual_seed(0)
        config = MuxBertConfig.from_preset(preset, num_instances=n, attn_implementation="eager", **mux)
        models.append((f"{preset} N={n}" + (" (plain)" if n == 1 else ""), MuxBertModel(config)))
    return models


def _real_positions(model, batch: dict) -> list[torch.Tensor]:
    """Runs the encoder on ``batch`` and returns, per encoder layer, the mask of real positions
    of the sequences that layer saw: each instance's own for a plain model and for a MUX
    model's unmuxed layers, the multiplexed groups' (a position any instance uses) after them."""
    if not hasattr(model, "multiplex"):
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return [batch["attention_mask"].bool()] * len(model.encoder.layer)
    state = model.multiplex(batch["input_ids"], batch["attention_mask"])
    n, slots = state.plan.num_instances, state.slot_mask
    prefix = state.muxed.shape[1] - slots.shape[1]
    own = torch.nn.functional.pad(slots, (prefix, 0), value=True) & slots.any(dim=1, keepdim=True)
    mixed = torch.nn.functional.pad(slots.view(-1, n, slots.shape[-1]).any(dim=1), (prefix, 0), value=True)
    unmuxed = model.config.num_unmuxed_layers or 0
    return [own if i < unmuxed else mixed for i in range(len(model.encoder.layer))]


@torch.inference_mode()
def muxology(models, sentences: list[str], tokenizer=None, max_length: int = 64, batch_size: int = 30,
             device: str = "cpu") -> dict:
    """Per encoder layer: mean |activation| over real positions and hidden units, and mean
    attention entropy (nats) over heads and real query positions, for each ``(name, model)``.

    Attention probabilities are captured by forward hooks on every encoder layer's
    self-attention module (eager attention returns ``(output, weights)``)."""
    from ..data import load_tokenizer

    if isinstance(tokenizer, (str, os.PathLike)) or tokenizer is None:
        tokenizer = load_tokenizer(tokenizer)
    if not sentences:
        raise ValueError("muxology needs at least one sentence")
    report = dict(num_sentences=len(sentences), max_length=max_length, models=[])
    for name, model in models:
        if getattr(model.config, "_attn_implementation", "eager") != "eager":
            raise ValueError(f"{name}: load the model with attn_implementation='eager' to see attention weights")
        model.to(device).eval()
        layers = model.encoder.layer
        act_sum, ent_sum = [0.0] * len(layers), [0.0] * len(layers)
        act_count, ent_count = [0] * len(layers), [0] * len(layers)
        # Every layer's attention probabilities and output, whether it ran on each instance alone
        # (an unmuxed layer) or on the mixture.
        captured: dict[int, torch.Tensor] = {}
        outputs: dict[int, torch.Tensor] = {}
        hooks = [
            layer.attention.self.register_forward_hook(
                lambda module, args, output, i=i: captured.__setitem__(i, output[1])
            )
            for i, layer in enumerate(layers)
        ] + [
            layer.register_forward_hook(
                lambda module, args, output, i=i: outputs.__setitem__(i, output[0] if isinstance(output, tuple) else output)
            )
            for i, layer in enumerate(layers)
        ]
        try:
            for start in range(0, len(sentences), batch_size):
                batch = tokenizer(sentences[start:start + batch_size], padding=True, truncation=True,
                                  max_length=max_length, return_tensors="pt")
                batch = {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
                captured.clear()
                outputs.clear()
                for i, mask in enumerate(_real_positions(model, batch)):
                    hidden = outputs[i]
                    real = mask.to(hidden.dtype)
                    act_sum[i] += float((hidden.abs().mean(dim=-1) * real).sum())
                    act_count[i] += int(mask.sum())
                    probs = captured[i].float()  # [S, heads, queries, keys]
                    entropy = -torch.special.xlogy(probs, probs).sum(dim=-1)  # [S, heads, queries]
                    ent_sum[i] += float((entropy * real[:, None, :]).sum())
                    ent_count[i] += int(mask.sum()) * probs.shape[1]
        finally:
            for hook in hooks:
                hook.remove()
        report["models"].append(dict(
            name=name,
            num_instances=getattr(model.config, "num_instances", 1),
            mean_abs_activation=[s / max(c, 1) for s, c in zip(act_sum, act_count)],
            attention_entropy=[s / max(c, 1) for s, c in zip(ent_sum, ent_count)],
        ))
    return report


def plot_muxology(report: dict, path: str) -> str:
    """The paper's figure: per-layer mean |activation| (top) and attention entropy (bottom),
    one line per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 7), sharex=True)
    for entry in report["models"]:
        layers = range(1, len(entry["mean_abs_activation"]) + 1)
        top.plot(layers, entry["mean_abs_activation"], marker="o", label=entry["name"])
        bottom.plot(layers, entry["attention_entropy"], marker="o", label=entry["name"])
    top.set_ylabel("mean |activation|")
    bottom.set_ylabel("mean attention entropy (nats)")
    bottom.set_xlabel("encoder layer")
    bottom.set_xticks(range(1, 1 + max((len(e["mean_abs_activation"]) for e in report["models"]), default=1)))
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    top.set_title(f"Muxology over {report['num_sentences']} sentences")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
