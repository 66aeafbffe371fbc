"""The reproduction's from-scratch MUX rows against what a user would do instead: the N = 1 row's
pre-trained encoder cut to fewer layers (fine-tuned by the reproduction's own rule) and int8
copies of every row, all timed side by side and judged by pareto.py.

    python3 benchmarks/experiments/reproduce_frontier.py --runs runs/reproduce-paper-full \\
        --results benchmarks/results/reproduce/paper-full --family bert --keep 2,1 \\
        --out benchmarks/results/reproduce/paper-full/frontier-bert

Reads the reproduction's results.json (its recipe and its fp32 scores, the table's), and from
the runs folder that trained it: fine-tunes each cut on every task from RUNS/BASE/2-pretrain into
RUNS/BASE-cutK/3-TASK (a finished stage is reused, as in the reproduction), scores int8 copies of
the N = 1 row, its cuts and the family's MUX rows (the recipe's composition seeds), writes
rows.jsonl and a plain config of the encoder's shape to OUT, and runs pareto.py on them with the
paper's retention targets (speed: each shape with random weights, one thread, round robin).

``--variant NAME=RUNS:RESULTS`` (repeatable) adds the family's MUX rows of a re-run with another
recipe (one unmuxed layer, say, or fewer layers: ``model_overrides.num_hidden_layers``) as rows
``KEY-NAME``: their fp32 scores from RESULTS, their int8 copies scored from the checkpoints in
RUNS, their shape (unmuxed layers and layer count included) timed with the rest. A row's tasks may
come from several re-runs of one NAME (sentence and token tasks apart).

``--scored FRONTIER_DIR`` takes the N = 1 row, its cuts, the table's rows and their int8 copies as
an earlier run of this script scored them (its rows.jsonl and encoder shape), so that variants can
join a frontier whose checkpoints are gone: only the variants are scored, and every shape is timed
again side by side.

    python3 benchmarks/experiments/reproduce_frontier.py --scored benchmarks/results/reproduce/paper-stable/frontier-bert \\
        --results benchmarks/results/reproduce/paper-stable --family bert \\
        --variant l1=runs/stable-l1:benchmarks/results/reproduce/paper-stable/stacked-l1 \\
        --out benchmarks/results/reproduce/paper-stable/stacked-l1/frontier

The committed frontier folders keep table.md only: the results.json, rows.jsonl and encoder/ that
these commands read are in the lab notebook commit 8c644a7 (or made again by the reproduction).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# The MUX rows whose shape pareto.py builds: the main rows (Gaussian multiplexer, unbinding
# demultiplexer), pre-trained like their N = 1 row.
MAIN_MUX = ("gaussian_hadamard", "unbind")


def family_rows(results: dict, base: str) -> list[str]:
    """The N = 1 row ``base`` and the main MUX rows measured against it, in the table's order."""
    from muxplm.bench.reproduce import MODELS

    if base not in results["rows"] or results["rows"][base]["num_instances"] != 1:
        raise SystemExit(f"reproduce_frontier.py: the results hold no N = 1 row {base!r} "
                         f"(rows: {', '.join(results['rows'])})")
    if MODELS[base].warm_start or not MODELS[base].pretrained:
        # The cuts start from RUNS/BASE/2-pretrain, and pareto.py times every MUX shape with no
        # unmuxed layers: the from-scratch rows. A converted encoder's frontier is convert_grid.py's.
        raise SystemExit(f"reproduce_frontier.py: {base!r} is not pre-trained from scratch by the reproduction; "
                         f"cut a converted encoder with convert_grid.py")
    mux = [key for key in results["rows"] if key != base and MODELS[key].baseline == base and MODELS[key].pretrained
           and (MODELS[key].mux_type, MODELS[key].demux_type) == MAIN_MUX]
    return [base, *mux]


def entry(row: str, task: str, precision: str, num_instances: int, keep: int | None, score: dict,
          unmuxed: int = 0) -> dict:
    """A row of pareto.py's rows.jsonl from a table score (in points) or an evaluation."""
    if "summary" in score:  # an evaluation: fractions
        main = score["summary"]["main"]
        score = dict(mean=100 * main["mean"], std=100 * main["std"], metric=score["main_metric"],
                     changed_across_seeds=score["changed_across_seeds"])
    return dict(row=row, task=task, precision=precision, num_instances=num_instances, unmuxed=unmuxed, keep=keep,
                metric=score["metric"], mean=score["mean"], std=score["std"],
                changed=score["changed_across_seeds"] if num_instances > 1 else None)


def variant_rows(specs: list[str], base: str) -> list[dict]:
    """``NAME=RUNS:RESULTS`` specs: one dict per (variant MUX row, task) measured against ``base``,
    with the runs folder and recipe it was trained by."""
    from muxplm.bench.reproduce import MODELS

    rows = []
    for spec in specs:
        name, _, where = spec.partition("=")
        runs, _, folder = where.partition(":")
        if not (name and runs and folder):
            raise SystemExit(f"reproduce_frontier.py: --variant takes NAME=RUNS:RESULTS, got {spec!r}")
        results = json.loads((Path(folder) / "results.json").read_text())
        recipe = results["recipe"]
        for key, row in results["rows"].items():
            if row["num_instances"] == 1 or MODELS[key].baseline != base:
                continue
            if (MODELS[key].mux_type, MODELS[key].demux_type) != MAIN_MUX:
                raise SystemExit(f"reproduce_frontier.py: {key} in {folder} is not a main MUX row: pareto.py "
                                 f"times the Gaussian multiplexer and unbinding demultiplexer only")
            rows += [dict(row=f"{key}-{name}", key=key, task=task, score=score, runs=runs, recipe=recipe,
                          num_instances=row["num_instances"], unmuxed=recipe["retrieval"].get("num_unmuxed_layers", 0),
                          keep=recipe["model_overrides"].get("num_hidden_layers"))
                     for task, score in row["scores"].items()]
    if len({(r["row"], r["task"]) for r in rows}) < len(rows):
        raise SystemExit("reproduce_frontier.py: two --variant results score one row on the same task")
    return rows


def _job(kind: str, runs: str, recipe: dict, key: str, task: str, keep: int | None) -> tuple:
    """One cut fine-tuning with its fp32 and int8 scores, or one row's int8 score; one thread."""
    import torch

    from muxplm.bench.reproduce import cut_key, evaluate, finetune_model

    torch.set_num_threads(1)
    runs_dir = Path(runs)
    int8 = dict(recipe, device="cpu")  # PyTorch's dynamic quantisation runs on the CPU only
    if kind == "cut":
        checkpoint, _ = finetune_model(key, task, str(runs_dir / key / "2-pretrain"), recipe, runs_dir, None,
                                       keep_layers=keep)
        row = cut_key(key, keep)
        return kind, row, task, keep, [evaluate(row, task, checkpoint, recipe, runs_dir, ensemble=False),
                                       evaluate(row, task, checkpoint, int8, runs_dir, ensemble=False, quantize="int8")]
    checkpoint = str(runs_dir / key / f"3-{task}")
    return kind, key, task, keep, [evaluate(key, task, checkpoint, int8, runs_dir, ensemble=False, quantize="int8")]


def check_runs_match(runs: Path, results: dict, keys: list[str]) -> None:
    """The runs folder must hold the checkpoints the table was scored from: each row's cached
    evaluation there gives the table's score, and the N = 1 row's pre-training (where the cuts
    start) is the one its fine-tunings started from."""
    pretrained = runs / keys[0] / "2-pretrain" / "train_results.json"
    if not pretrained.is_file():
        raise SystemExit(f"reproduce_frontier.py: {runs} has no pre-trained {keys[0]}: run the reproduction's "
                         f"shard of that row there first")
    for key in keys:
        check_scores(runs, key, results["rows"][key]["scores"], pretrained if key == keys[0] else None)


def check_scores(runs: Path, key: str, scores: dict, pretrained: Path | None = None) -> None:
    """Each of the row's table scores is its cached evaluation in ``runs`` (so int8 copies are of
    the scored checkpoints); ``pretrained``: the row's fine-tunings started from that stage."""
    for task, score in scores.items():
        cached = runs / key / f"eval-{task}.json"
        if not (runs / key / f"3-{task}" / "model.safetensors").is_file() or not cached.is_file():
            raise SystemExit(f"reproduce_frontier.py: {runs} has no fine-tuned {key} for {task}: run the "
                             f"reproduction's shard of that row there first")
        tuned = runs / key / f"3-{task}" / "train_results.json"
        if pretrained and tuned.is_file() and tuned.stat().st_mtime < pretrained.stat().st_mtime:
            raise SystemExit(f"reproduce_frontier.py: {pretrained.parent} was trained again after {tuned.parent}: "
                             f"the cuts would not start from the table's pre-training")
        mean = 100 * json.loads(cached.read_text())["summary"]["main"]["mean"]
        if abs(mean - score["mean"]) > 1e-6:
            raise SystemExit(f"reproduce_frontier.py: {cached} scores {mean:.4f}, the table {score['mean']:.4f}: "
                             f"these are not the checkpoints the results came from")


def plain_config(checkpoint: Path, out: Path) -> Path:
    """A plain encoder config of the row's shape (pareto.py builds every shape from one)."""
    from transformers import AutoConfig

    from muxplm.families import family_of_mux_type

    saved = json.loads((checkpoint / "config.json").read_text())
    plain_type = family_of_mux_type(saved["model_type"]).plain_model_types[0]
    fields = AutoConfig.for_model(plain_type).to_dict()
    config = AutoConfig.for_model(plain_type, **{k: v for k, v in saved.items()
                                                 if k in fields and k not in ("model_type", "architectures")})
    config.save_pretrained(out)
    return out


def table_rows(runs: Path, results: dict, family: str, keep: str) -> tuple[list[dict], list[tuple]]:
    """The table's fp32 rows of the family, and the jobs that train and score its cuts and score
    every row's int8 copy, from the checkpoints in ``runs``."""
    recipe, keys, tasks = results["recipe"], family_rows(results, family), results["tasks"]
    check_runs_match(runs, results, keys)
    layers = json.loads((runs / family / f"3-{tasks[0]}" / "config.json").read_text())["num_hidden_layers"]
    keeps = sorted({int(k) for k in keep.split(",") if k}, reverse=True)
    if any(not 1 <= k < layers for k in keeps):
        raise SystemExit(f"reproduce_frontier.py: --keep takes layer counts in [1, {layers - 1}], got {keep}")
    # The table's MUX rows run as many layers per input as its recipe primed them with (the
    # stable preset's one), which is the shape pareto.py times.
    unmuxed = {key: recipe["retrieval"].get("num_unmuxed_layers", 0) if results["rows"][key]["num_instances"] > 1 else 0
               for key in keys}
    entries = [entry(key, task, "fp32", results["rows"][key]["num_instances"], None, score, unmuxed[key])
               for key in keys for task, score in results["rows"][key]["scores"].items()]
    # (job, row name, N, unmuxed layers) per training or evaluation
    jobs = [(("cut", str(runs), recipe, family, task, kept), None, 1, 0) for kept in keeps for task in tasks]
    jobs += [(("int8", str(runs), recipe, key, task, None), key, results["rows"][key]["num_instances"], unmuxed[key])
             for key in keys for task in tasks]
    return entries, jobs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", help="the reproduction's runs folder (its checkpoints); not with --scored")
    parser.add_argument("--results", required=True, help="the reproduction's results folder (results.json)")
    parser.add_argument("--family", default="bert", help="the N = 1 row the MUX rows are measured against")
    parser.add_argument("--keep", default="2,1", help="the cuts: layers kept, comma-separated")
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=2, help="trainings and evaluations at a time, one thread each")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=RUNS:RESULTS",
                        help="the family's MUX rows of a re-run (its results folder, its checkpoints in RUNS), "
                             "as rows KEY-NAME; repeatable")
    parser.add_argument("--scored", metavar="FRONTIER_DIR",
                        help="an earlier run's output: its rows as scored there, only the variants scored now")
    args = parser.parse_args(argv)
    if bool(args.runs) == bool(args.scored):
        parser.error("give --runs (train and score the cuts and int8 copies) or --scored (take them as scored)")
    out = Path(args.out)
    results = json.loads((Path(args.results) / "results.json").read_text())
    variants = variant_rows(args.variant, args.family)
    for v in variants:
        check_scores(Path(v["runs"]), v["key"], {v["task"]: v["score"]})
    if args.scored:
        scored = Path(args.scored)
        entries = [json.loads(line) for line in (scored / "rows.jsonl").read_text().splitlines() if line]
        jobs = []
    else:
        entries, jobs = table_rows(Path(args.runs), results, args.family, args.keep)
    entries += [entry(v["row"], v["task"], "fp32", v["num_instances"], v["keep"], v["score"], v["unmuxed"])
                for v in variants]
    jobs += [(("int8", v["runs"], v["recipe"], v["key"], v["task"], v["keep"]), v["row"], v["num_instances"], v["unmuxed"])
             for v in variants]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [(pool.submit(_job, *job), name, num_instances, unmuxed) for job, name, num_instances, unmuxed in jobs]
        for future, name, num_instances, unmuxed in futures:
            kind, row, task, keep, scores = future.result()
            precisions = ("fp32", "int8") if kind == "cut" else ("int8",)
            for precision, score in zip(precisions, scores):
                entries.append(entry(name or row, task, precision, num_instances, keep, score, unmuxed))
                print(f"{name or row} {task} {precision}: {entries[-1]['mean']:.1f}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    if args.scored:  # the plain config pareto.py builds every shape from, as the earlier run wrote it
        encoder = Path(shutil.copytree(Path(args.scored) / "encoder", out / "encoder", dirs_exist_ok=True))
    else:
        encoder = plain_config(Path(args.runs) / args.family / f"3-{results['tasks'][0]}", out / "encoder")
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # pareto.py, its neighbour
    import pareto
    recipe = results["recipe"]
    return pareto.main(["--rows", str(out / "rows.jsonl"), "--out", str(out), "--encoder", str(encoder),
                        "--name", f"{results['rows'][args.family]['label']} ({recipe['preset']})",
                        "--targets", "paper", "--trials", str(args.trials), "--batches", str(args.batches)])


if __name__ == "__main__":
    sys.exit(main())
