"""``muxplm frontier``: the budget, the plan sized to it, the recommendation rule, a run end to end on
the command line, and a killed run that resumes without training again what it finished."""

from __future__ import annotations

import dataclasses
import json
import random
import string
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "training"))  # the in-process command runner
from training_utils import run_cli  # noqa: E402

from muxplm.frontier.pareto import dominates, frontier, markdown_table, recommend  # noqa: E402
from muxplm.frontier.plan import (StepTimes, Workload, candidates, cheapest_first, estimate,  # noqa: E402
                                  parse_budget, size_plan)

# --------------------------------------------------------------------------- the budget


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("1h", 3600), ("1h30m", 5400), ("1.5h", 5400),
                                           ("5400", 5400), (" 2M ", 120), (42, 42)])
def test_a_budget_is_read_in_seconds_minutes_or_hours(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "1d", "0", "0s", "-5m", "1h30", "h", "1e9999"])
def test_a_budget_that_is_not_a_positive_duration_is_refused(text):
    with pytest.raises(ValueError, match="budget"):
        parse_budget(text)


def test_the_command_refuses_a_bad_budget_and_a_task_with_files():
    bad = run_cli("frontier", "model", "--task", "sentiment", "--budget", "soon")
    assert bad.returncode == 2 and "90s, 15m, 1h" in bad.stderr
    both = run_cli("frontier", "model", "--task", "sentiment", "--train-file", "a.csv", "--validation-file", "b.csv")
    assert both.returncode == 2 and "not both" in both.stderr
    half = run_cli("frontier", "model", "--train-file", "a.csv")
    assert half.returncode == 2 and "missing: give --validation-file" in half.stderr
    for flags, named in ((["--max-train-examples", "0"], "--max-train-examples"), (["--threads", "-1"], "--threads"),
                         (["--int8", "none,torch"], "none means no int8 copies")):
        refused = run_cli("frontier", "model", "--task", "sentiment", *flags)
        assert refused.returncode == 2 and named in refused.stderr and "Traceback" not in refused.stderr, flags


# --------------------------------------------------------------------------- the plan

# A MiniLM-like encoder (6 layers) on 3,000 examples: a step costs 0.05 s plus 0.05 s a layer.
TIMES = StepTimes.from_depths({1: 0.1, 6: 0.35}, {1: 0.03, 6: 0.1}, batch_size=32, train_length=40,
                              eval_batch_size=64, eval_length=40)
WORKLOAD = Workload(num_layers=6, train_examples=3000, eval_examples=500, seeds=5, int8=("torch", "onnx"))


def test_the_step_times_split_into_a_fixed_part_and_a_part_per_layer():
    assert TIMES.train_per_layer == pytest.approx(0.05) and TIMES.train_fixed == pytest.approx(0.05)
    assert TIMES.train_step(6) == pytest.approx(0.35) and TIMES.forward(1) == pytest.approx(0.03)


def test_every_lever_is_a_candidate_and_the_minimum_is_marked():
    planned = {c.name: c for c in candidates(6)}
    assert set(planned) == {"plain", "cut1", "cut2", "cut3", "cut4", "n2", "n5", "cut-n2", "cut-n5"}
    assert {name for name, c in planned.items() if c.required} == {"plain", "cut3", "n2"}  # half the depth; N = 2
    assert planned["cut-n5"].kind == "stacked" and planned["cut-n5"].num_layers is None
    assert {c.name for c in candidates(12, cuts=[2, 9], instances=[5, 10]) if c.required} == {"plain", "cut9", "n5"}
    with pytest.raises(ValueError, match="between 1 and 5"):
        candidates(6, cuts=[6])
    with pytest.raises(ValueError, match="N >= 2"):
        candidates(6, instances=[1])


def test_estimates_grow_with_depth_and_with_n_for_the_priming():
    sized = {c.name: c for c in size_plan(candidates(6), TIMES, WORKLOAD, budget=10**6).candidates}
    total = {name: c.estimate["total"] for name, c in sized.items()}
    assert total["cut1"] < total["cut2"] < total["cut3"] < total["cut4"] < total["plain"]
    assert 0 == sized["plain"].estimate["priming"] < sized["n2"].estimate["priming"] < sized["n5"].estimate["priming"]
    # a MUX model trains more epochs on a cheaper step: about the fine-tuning compute of its plain model
    assert sized["n2"].estimate["finetune"] == pytest.approx(sized["plain"].estimate["finetune"], rel=0.35)


def test_a_large_budget_plans_everything_cheapest_first_the_stacked_ones_after_the_cuts():
    plan = size_plan(candidates(6), TIMES, WORKLOAD, budget=10**6)
    assert plan.fits and plan.scale == 1 and not plan.skipped and len(plan.candidates) == 9
    names = [c.name for c in plan.candidates]
    last_needed = max(names.index(name) for name in ("plain", "cut1", "cut2", "cut3", "cut4"))
    assert all(names.index(name) > last_needed for name in ("cut-n2", "cut-n5"))
    free = [c for c in plan.candidates if c.kind != "stacked"]
    assert [c.estimate["total"] for c in free] == sorted(c.estimate["total"] for c in free)
    assert all(c.train_examples == 3000 for c in plan.candidates)
    assert {c.priming_steps for c in plan.candidates if c.num_instances > 1} == {200}  # the convert recipe's


def test_a_small_budget_drops_optional_candidates_first_then_scales_the_minimum_down():
    full = size_plan(candidates(6), TIMES, WORKLOAD, budget=10**6)
    required = sum(c.estimate["total"] for c in full.candidates if c.required)
    middle = size_plan(candidates(6), TIMES, WORKLOAD, budget=required * 1.1)
    assert middle.scale == 1 and {"plain", "cut3", "n2"} <= {c.name for c in middle.candidates}
    assert middle.estimated_seconds <= required * 1.1 and middle.skipped
    small = size_plan(candidates(6), TIMES, WORKLOAD, budget=required / 3)
    assert small.fits and small.scale < 1 and small.estimated_seconds <= required / 3
    chosen, skipped = {c.name for c in small.candidates}, {s["name"] for s in small.skipped}
    assert {"plain", "cut3", "n2"} <= chosen and {"n5", "cut-n5"} <= skipped
    assert chosen | skipped == {c.name for c in candidates(6)} and not chosen & skipped
    assert all("over the budget" in s["reason"] and s["estimated_seconds"] > 0 for s in small.skipped)
    assert all(c.train_examples == round(small.scale * 3000) for c in small.candidates)
    tiny = size_plan(candidates(6), TIMES, WORKLOAD, budget=1)
    assert not tiny.fits and {c.name for c in tiny.candidates} == {"plain", "cut3", "n2"}  # kept all the same
    assert tiny.candidates[0].train_examples == 188 and {c.priming_steps for c in tiny.candidates} == {0, 20}


def test_the_timing_is_priced_for_every_variant_the_benchmark_times():
    """ONNX Runtime's float32 graph is timed beside the rows, and PyTorch int8 beside ONNX Runtime
    int8 alone: the estimate counts them (fp32 and int8 in each runtime)."""
    plain = next(c for c in candidates(6) if c.name == "plain")
    timing = {int8: estimate(plain, TIMES, dataclasses.replace(WORKLOAD, int8=int8))["timing"]
              for int8 in ((), ("torch",), ("onnx",), ("torch", "onnx"))}
    fp32 = timing[()]
    assert timing[("torch",)] == pytest.approx(fp32 * (1 + 1 / 1.5))
    export = timing[("onnx",)] - 2 * fp32 * (1 + 1 / 1.5)
    assert export > 0 and timing[("torch", "onnx")] == pytest.approx(timing[("onnx",)])


def test_a_stacked_candidate_waits_for_the_cuts_and_the_plain_model_however_cheap():
    plan = size_plan(candidates(6), TIMES, WORKLOAD, budget=10**6).candidates
    stacked = next(c for c in plan if c.name == "cut-n2")
    stacked.estimate = dict(stacked.estimate, total=0.0)
    names = [c.name for c in cheapest_first(plan)]
    assert names.index("cut-n2") == 1 + max(names.index(n) for n in ("plain", "cut1", "cut2", "cut3", "cut4"))
    assert estimate(stacked, TIMES, WORKLOAD, deepest_cut=4)["total"] > 0


def test_the_report_names_a_stacked_candidate_as_it_was_built():
    from muxplm.frontier.run import built_names

    plan = size_plan(candidates(6), TIMES, WORKLOAD, budget=10**6)
    rows = [dict(kind="stacked", num_instances=2, candidate="cut3-n2"), dict(kind="cut", num_instances=1, candidate="cut3")]
    names = built_names(plan, rows)
    assert "cut3-n2" in names and "cut-n2" not in names and "cut-n5" in names  # never built: as planned


# --------------------------------------------------------------------------- the recommendation


def _row(name, speedup, accuracy, n=1, plain=90.0):
    return dict(name=name, speedup=speedup, accuracy=accuracy, retention=accuracy / plain, num_instances=n,
                num_layers=6, precision="fp32", accuracy_std=0.0, churn=0.0, weights_mb=1.0)


def test_the_fastest_model_that_keeps_enough_and_that_nothing_dominates_is_recommended():
    rows = [_row("plain", 1.0, 90.0), _row("cut4", 1.4, 89.5), _row("cut2", 3.0, 87.4), _row("n2", 3.0, 87.6, 2),
            _row("cut1", 5.3, 80.0), _row("plain int8", 1.5, 89.0)]
    assert recommend(rows, 0.97)["name"] == "n2"  # as fast as cut2, more accurate: cut2 is dominated
    assert dominates(rows[3], rows[2]) and not dominates(rows[2], rows[3]) and not dominates(rows[2], rows[2])
    assert recommend(rows, 0.99)["name"] == "cut4"
    assert recommend(rows, 0.8)["name"] == "cut1"
    assert [row["name"] for row in frontier(rows)] == ["cut1", "n2", "plain int8", "cut4", "plain"]
    assert recommend(rows, 1.01)["name"] == "plain"  # nothing keeps more than everything: the plain model
    table = markdown_table(rows, "n2")
    assert "| n2 | 87.6 ± 0.0 | 97.3 % |" in table and "| cut2 | 87.4 | 97.1 % | - | 3.00x" in table
    assert "recommended |" in table and "no: n2 |" in table


def test_a_retention_is_never_shown_on_the_wrong_side_of_the_threshold():
    from muxplm.frontier.pareto import retention_label

    assert retention_label(0.9697, 0.97) == "96.97 %" and retention_label(0.9697) == "97.0 %"
    assert retention_label(0.971, 0.97) == "97.1 %" and retention_label(0.96996, 0.97) == "96.996 %"
    rows = [_row("plain", 1.0, 90.0), _row("cut3", 3.9, 0.9697 * 90)]
    assert "| 96.97 % |" in markdown_table(rows, "plain", min_retention=0.97)


def test_a_dominated_row_is_never_recommended():
    rng = random.Random(0)
    for _ in range(300):
        rows = [_row("plain", 1.0, 90.0)] + [_row(f"m{i}", round(rng.uniform(0.5, 8), 1), round(rng.uniform(60, 95)),
                                                  rng.choice([1, 2, 5])) for i in range(rng.randint(1, 8))]
        minimum = rng.choice([0.8, 0.9, 0.97, 1.0])
        chosen = recommend(rows, minimum)
        assert not any(dominates(other, chosen) for other in rows)
        assert chosen["retention"] >= minimum
        faster = [r for r in rows if r["speedup"] > chosen["speedup"] and r["retention"] >= minimum]
        assert all(any(dominates(other, r) for other in rows) for r in faster)


# --------------------------------------------------------------------------- a real run, on a tiny model

RETENTION = 0.97
# Seconds, not minutes: a conversion of two priming steps on a little of one corpus, 8 examples a step.
FAST = ["--seeds", "2", "--finetune-setting", "batch_size=8", "--convert-setting", "max_steps=2",
        "--convert-setting", "batch_groups=4", "--convert-setting", 'corpus_sources=["moby_dick"]',
        "--convert-setting", "corpus_max_words=6000", "--threads", "1", "--no-progress"]
FAST_API = dict(seeds=2, finetune_overrides={"batch_size": 8}, progress=False,
                conversion_overrides={"max_steps": 2, "batch_groups": 4, "corpus_sources": ["moby_dick"],
                                      "corpus_max_words": 6000})
SCORED = ("name", "accuracy", "accuracy_std", "churn", "retention", "train_examples", "finetune_steps", "priming_steps")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matrices: more threads only add overhead, and on a busy machine they wait for each other."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A random 2-layer BERT with a WordPiece vocabulary of its own (74 tokens: a step takes
    milliseconds), and a tiny sentiment CSV split."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    folder = tmp_path_factory.mktemp("frontier")
    texts = [("a wonderful , moving film", "pos"), ("dull and far too long", "neg"), ("a joy to watch", "pos"),
             ("the plot makes no sense", "neg")]
    words = sorted({word for text, _ in texts for word in text.split()})
    letters = list(string.ascii_lowercase)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *letters, *(f"##{c}" for c in letters)]
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n")
    tokenizer = BertTokenizer(str(folder / "vocab.txt"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder / "plain")
    tokenizer.save_pretrained(folder / "plain")
    for name, repeat in (("train.csv", 8), ("dev.csv", 3)):
        (folder / name).write_text("text,label\n" + "".join(f'"{t}",{y}\n' for t, y in texts * repeat))
    return folder


@pytest.fixture(scope="module")
def uninterrupted(tiny):
    """``muxplm frontier`` run once on the tiny model, with a budget too small for anything but the
    minimum plan."""
    out = tiny / "uninterrupted"
    done = run_cli("frontier", str(tiny / "plain"), "--train-file", str(tiny / "train.csv"), "--validation-file",
                   str(tiny / "dev.csv"), "--budget", "1s", "--output-dir", str(out), *FAST)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


def test_the_command_writes_the_table_the_plot_and_a_recommendation_on_the_frontier(uninterrupted):
    out, done = uninterrupted
    report = json.loads((out / "frontier.json").read_text())
    rows = {row["name"]: row for row in report["rows"]}
    # The minimum plan whatever the budget, each model in fp32, PyTorch int8 and ONNX Runtime int8.
    variants = ("", " int8", " onnx int8")
    assert set(rows) == {f"{name}{variant}" for name in ("plain", "cut1", "n2") for variant in variants}
    assert not report["plan"]["fits"] and {s["name"] for s in report["plan"]["skipped"]} == {"n5", "cut-n2", "cut-n5"}
    for row in rows.values():
        assert {"name", "accuracy", "speedup", "num_instances", "num_layers", "precision", "retention", "churn",
                "weights_mb"} <= set(row)
    assert (rows["plain"]["speedup"], rows["plain"]["retention"]) == (1.0, 1.0)
    assert (rows["cut1"]["num_layers"], rows["n2"]["num_instances"], rows["n2 int8"]["precision"]) == (1, 2, "int8")
    assert rows["n2"]["priming_steps"] == 2 and rows["n2"]["churn"] >= 0 and rows["plain"]["churn"] == 0
    chosen = rows[report["recommended"]]
    assert not any(dominates(other, chosen) for other in rows.values()) and not chosen["dominated_by"]
    assert chosen["retention"] >= RETENTION and chosen["on_frontier"]
    assert Path(chosen["checkpoint"], "config.json").is_file() and chosen["commands"][-1].startswith("muxplm finetune")
    line = next(line for line in done.stdout.splitlines() if line.startswith("Recommended: "))
    assert line.startswith(f"Recommended: {chosen['name']} (") and chosen["checkpoint"] in line
    table = (out / "frontier.md").read_text()
    assert "| model | accuracy | retention | churn | speed-up |" in table and "recommended |" in table
    assert "Skipped: " in table and line in table
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len((out / "rows.jsonl").read_text().splitlines()) == len(rows)


def test_a_killed_run_resumes_without_training_again_and_ends_with_the_same_table(tiny, uninterrupted, monkeypatch):
    from muxplm.frontier import run as frontier_run

    out = tiny / "killed"
    settings = dict(train_file=tiny / "train.csv", validation_file=tiny / "dev.csv", budget=1.0, int8=("torch",),
                    **FAST_API)
    trained = []
    finetune = frontier_run.FrontierRun._finetune

    class Killed(Exception):
        """Stands for the process being killed while it trains its second candidate."""

    def killed_at_the_second(self, candidate):
        if trained:
            raise Killed
        trained.append(candidate.name)
        finetune(self, candidate)

    monkeypatch.setattr(frontier_run.FrontierRun, "_finetune", killed_at_the_second)
    with pytest.raises(Killed):
        frontier_run.run_frontier(tiny / "plain", out, **settings)
    first = trained[0]
    finished = (out / "candidates" / first / "result.json").read_text()
    assert not (out / "frontier.json").exists()

    def spy(self, candidate):
        trained.append(candidate.name)
        finetune(self, candidate)

    monkeypatch.setattr(frontier_run.FrontierRun, "_finetune", spy)
    resumed = frontier_run.run_frontier(tiny / "plain", out, **settings)
    assert trained.count(first) == 1 and set(trained) == {"plain", "cut1", "n2"}
    assert (out / "candidates" / first / "result.json").read_text() == finished
    # The scores of an uninterrupted run of the same plan (its ONNX Runtime rows aside).
    before = {row["name"]: row for row in json.loads((uninterrupted[0] / "frontier.json").read_text())["rows"]}
    assert [{key: row[key] for key in SCORED} for row in resumed["rows"]] == \
        [{key: before[row["name"]][key] for key in SCORED} for row in resumed["rows"]]

    table = (out / "frontier.md").read_text()
    monkeypatch.setattr(frontier_run.FrontierRun, "_finetune", lambda *args: pytest.fail("trained again"))
    monkeypatch.setattr(frontier_run.FrontierRun, "_convert", lambda *args: pytest.fail("converted again"))
    monkeypatch.setattr("muxplm.bench.throughput.time_checkpoints", lambda *args, **kwargs: pytest.fail("timed again"))
    again = frontier_run.run_frontier(tiny / "plain", out, **settings)
    assert (out / "frontier.md").read_text() == table and again["rows"] == resumed["rows"]
    with pytest.raises(ValueError, match="other settings"):
        frontier_run.run_frontier(tiny / "plain", out, **{**settings, "min_retention": 0.9})


def _scored_untrained(candidate, folder: Path, *, accuracy: float, metric: str = "accuracy",
                      finetune_seconds: float = 0.0) -> dict:
    """A candidate's result as ``FrontierRun.build`` returns it, without building anything."""
    score = dict(runtime="torch", quantize="none", metric=metric, accuracy=accuracy, accuracy_std=0.0,
                 accuracy_spread=0.0, churn=0.0, seeds=1, examples=12)
    return dict(name=candidate.name, kind=candidate.kind, num_layers=candidate.num_layers,
                num_instances=candidate.num_instances, num_unmuxed_layers=0, train_examples=candidate.train_examples,
                finetune_steps=1, priming_steps=candidate.priming_steps, commands=[],
                checkpoint=str(folder / candidate.name), estimate=candidate.estimate,
                seconds=dict(priming=0.0, finetune=finetune_seconds, evaluation=0.0), scores={"fp32": score})


def test_a_plain_model_that_learned_nothing_stops_the_run_before_the_rest_is_built(tiny, monkeypatch):
    from muxplm.frontier import run as frontier_run

    built = []

    def build(self, candidate):  # every candidate scored without training; the plain model at 0
        built.append(candidate.name)
        return _scored_untrained(candidate, tiny / "nothing", accuracy=0.0 if candidate.kind == "plain" else 40.0,
                                 metric="matthews")

    monkeypatch.setattr(frontier_run.FrontierRun, "build", build)
    with pytest.raises(ValueError, match=r"plain model scores 0\.0 \(matthews\).*nothing/plain"):
        frontier_run.run_frontier(tiny / "plain", tiny / "nothing", train_file=tiny / "train.csv",
                                  validation_file=tiny / "dev.csv", budget="1s", int8=(), **FAST_API)
    assert "plain" in built and "n2" not in built  # the conversion, the dearest, is never started


def test_an_optional_candidate_is_dropped_when_what_was_measured_leaves_no_room(tiny, monkeypatch):
    """Planned within the budget, but the first candidates take far longer than estimated: the
    optional conversion of the best cut is skipped (and says why), the required ones are built."""
    from muxplm.frontier import run as frontier_run

    built = []

    class Timed(Exception):
        """The run has reached the timing, after every candidate was built or skipped."""

    def build(self, candidate):  # each candidate scored without training, having taken a day
        built.append(candidate.name)
        return _scored_untrained(candidate, tiny / "slow", accuracy=60.0, finetune_seconds=86400.0)

    monkeypatch.setattr(frontier_run.FrontierRun, "build", build)
    monkeypatch.setattr(frontier_run, "time_rows", lambda *args: (_ for _ in ()).throw(Timed()))
    with pytest.raises(Timed):
        frontier_run.run_frontier(tiny / "plain", tiny / "slow", train_file=tiny / "train.csv",
                                  validation_file=tiny / "dev.csv", budget="1h", cuts=[1], instances=[2], int8=(),
                                  **FAST_API)
    planned = json.loads((tiny / "slow" / "plan.json").read_text())["plan"]["candidates"]
    assert "cut-n2" in [c["name"] for c in planned]  # it fitted the plan
    assert sorted(built) == ["cut1", "n2", "plain"]
    skipped = json.loads((tiny / "slow" / "skipped.json").read_text())
    assert list(skipped) == ["cut-n2"] and "over the budget as measured" in skipped["cut-n2"]["reason"]


def test_inference_passes_are_timed_where_models_are_scored(tiny, monkeypatch):
    """Training steps on the training device, the passes that price scoring and timing on --device."""
    from muxplm.frontier import run as frontier_run

    data = frontier_run.read_task(tiny / "plain", task=None, train_file=str(tiny / "train.csv"),
                                  validation_file=str(tiny / "dev.csv"), task_kind=None, max_train_examples=None,
                                  max_eval_examples=None, eval_batch_size=64)
    timed_on = []
    monkeypatch.setattr(frontier_run, "_seconds", lambda run, repeats, device, warmup=2: timed_on.append(device) or 0.1)
    frontier_run.measure_step_times(tiny / "plain", data, "cpu", eval_device="meta")
    assert timed_on == ["cpu", "meta", "cpu", "meta"]  # a step and a pass at each of two depths


def test_the_printed_commands_rebuild_a_candidate_that_evaluate_scores_alike(tiny, uninterrupted):
    """The table agrees with the same candidate built by hand: its printed `muxplm convert` and
    `muxplm finetune` commands, then `muxplm evaluate`, give its score."""
    import shlex

    out, _ = uninterrupted
    row = next(row for row in json.loads((out / "frontier.json").read_text())["rows"] if row["name"] == "n2")
    moved = {str(out / "candidates" / "n2"): str(tiny / "by-hand")}
    for command in row["commands"]:
        words = [next((word.replace(old, new) for old, new in moved.items() if word.startswith(old)), word)
                 for word in shlex.split(command)]
        assert words[0] == "muxplm" and run_cli(*words[1:], "--no-progress").returncode == 0, command
    scored = run_cli("evaluate", str(tiny / "by-hand" / "model"), "--validation-file", str(tiny / "dev.csv"),
                     "--seeds", "2", "--output", str(tiny / "by-hand.json"))
    assert scored.returncode == 0, scored.stderr[-2000:]
    from safetensors.torch import load_file

    folders = (row["checkpoint"], tiny / "by-hand" / "model")
    built, rebuilt = (load_file(Path(folder, "model.safetensors")) for folder in folders)
    assert built.keys() == rebuilt.keys() and all((built[key] == rebuilt[key]).all() for key in built)
    result = json.loads((tiny / "by-hand.json").read_text())
    assert 100 * result["summary"]["main"]["mean"] == pytest.approx(row["accuracy"])
    assert 100 * result["changed_across_seeds"] == pytest.approx(row["churn"])
