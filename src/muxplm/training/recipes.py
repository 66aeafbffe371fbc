"""Every training recipe in one place, by name (``get_recipe``, ``RECIPES``): the per-stage
defaults (the paper's and the tiny CPU ones), the conversion of a pretrained encoder, the demo,
the reproduction presets, and the settings the benchmark sweeps share. Each keeps, beside its
numbers, the measurements that chose them. The modules that run them (``config``, ``convert``,
``demo``, ``muxplm.bench.reproduce``) read them from here. The experiment grids read their
shared settings from here too (``SWEEP_WARM_FINETUNE``, ``CONVERT_GRID``); the settings a grid
varies are its own (they are what it measures).
"""

from __future__ import annotations

import copy
from typing import Any

# --------------------------------------------------------------------------- stages (TrainConfig defaults)

# Paper recipe: priming 10k steps at 1e-4; pre-training 1e-4, 10k warmup, batch
# 256, seq 512; fine-tuning 2e-5 (5e-5 also studied), warmup 10%, weight decay 0, batch 32, seq 128.
PAPER_RECIPE = {
    "retrieval": dict(lr=1e-4, batch_size=256, max_length=512, max_steps=10_000, warmup_steps=1000,
                      weight_decay=0.01, eval_steps=1000, save_steps=1000, logging_steps=50),
    "mlm": dict(lr=1e-4, batch_size=256, max_length=512, max_steps=1_000_000, warmup_steps=10_000,
                weight_decay=0.01, eval_steps=10_000, save_steps=10_000, logging_steps=100),
    "finetune": dict(lr=2e-5, batch_size=32, max_length=128, num_epochs=3.0, warmup_ratio=0.1,
                     weight_decay=0.0, eval_steps=1000, save_steps=1000, logging_steps=50),
}
PAPER_RECIPE["electra"] = dict(PAPER_RECIPE["mlm"])

# The paper's pre-training as one command (``pretrain --recipe paper-small|paper-base|paper-large``,
# the paper's section on pre-training): a fresh model of that size, primed 10k steps at 1e-4 when N > 1, then MLM or ELECTRA
# at 1e-4 (AdamW eps 1e-6, 10k warm-up, linear decay, dropout 0.1) on global batches of 256
# sequences of 512 tokens (split over the processes) for 1M steps.
PAPER_PRETRAINING = {
    "retrieval": dict(lr=1e-4, global_batch_size=256, max_length=512, max_steps=10_000, warmup_steps=1_000,
                      weight_decay=0.01, adam_eps=1e-6, dropout=0.1),
    "mlm": dict(lr=1e-4, global_batch_size=256, max_length=512, max_steps=1_000_000, warmup_steps=10_000,
                weight_decay=0.01, adam_eps=1e-6, dropout=0.1),
}
PAPER_PRETRAINING["electra"] = dict(PAPER_PRETRAINING["mlm"])

# The paper's fine-tuning (its table of fine-tuning hyper-parameters, and the steps of its GLUE
# runs): AdamW at 5e-5 (2e-5 is the other value of its grid), epsilon 1e-8, warm-up over the first
# tenth, linear decay, no weight decay, 32 groups of N inputs a step, 128 tokens, steps by task, the
# best evaluation's weights kept. ``--recipe paper``; the default for the paper's released checkpoints.
PAPER_FINETUNE = dict(lr=5e-5, adam_eps=1e-8, warmup_ratio=0.1, weight_decay=0.0, batch_groups=32, max_length=128,
                      load_best_at_end=True, logging_steps=100, consistency_weight=0.0)
# (training steps, steps between evaluations) per task; other tasks train 3 epochs, evaluating
# every 1,000 steps.
PAPER_FINETUNE_STEPS = {
    "mnli": (100_000, 5_000), "qqp": (100_000, 5_000), "qnli": (20_000, 5_000), "sst2": (20_000, 5_000),
    "cola": (10_000, 500), "stsb": (10_000, 500), "mrpc": (10_000, 500), "rte": (2_000, 100), "wnli": (2_000, 100),
    "conll2003": (20_000, 5_000), "ner": (20_000, 5_000), "pos": (20_000, 5_000),
}


def paper_finetune(task: str | None) -> dict[str, Any]:
    """The paper's fine-tuning settings for ``task`` (a GLUE name such as ``glue/qnli``, or any)."""
    settings = dict(PAPER_FINETUNE)
    steps = PAPER_FINETUNE_STEPS.get((task or "").rsplit("/", 1)[-1].lower())
    if steps is None:
        settings.update(num_epochs=3.0, eval_steps=1_000, save_steps=1_000)
    else:
        settings.update(max_steps=steps[0], eval_steps=steps[1], save_steps=steps[1])
    return settings


# Named training recipes (``--recipe NAME``): a function of the stage and task giving the settings
# the recipe chooses; a flag given on the command line still wins. A checkpoint trained with a
# recipe records its name (``training_recipe`` in config.json), and the next stage started from it
# takes the same recipe unless another is named: `finetune --init CONVERTED` fine-tunes with the
# conversion's rates, with nothing to retype. Registered below, once the recipes they name exist.
def _paper(stage: str, task: str | None, size: str | None) -> dict[str, Any]:
    if stage != "finetune":
        raise ValueError(f"the paper recipe covers fine-tuning (for now), not --stage {stage}")
    return paper_finetune(task)


# Composition consistency for MUX fine-tuning:
# at N = 2 / 5 on sentiment it cut the dev predictions that change with the composition from
# 21.8 / 27.1 % to 11.7 / 16.2 % (weight 4) and kept or raised the accuracy; each step encodes
# the batch twice.
CONSISTENCY_WEIGHT = 4.0

# CPU recipe for the tiny preset: short sequences, higher learning rates, a few hundred steps.
# Priming: 32 multiplexed groups a step, 32-token blocks and the in-batch softmax; MUX
# pre-training keeps the auxiliary retrieval loss (r = 0.2), without which a short MLM stage
# undoes the priming (not for N = 1: MUX_ONLY_SETTINGS below).
TINY_RECIPE = {
    "retrieval": dict(lr=1e-3, batch_groups=32, max_length=32, max_steps=400, warmup_ratio=0.1,
                      weight_decay=0.01, eval_steps=100, save_steps=100, logging_steps=10,
                      retrieval_softmax="in_batch"),
    "mlm": dict(lr=5e-4, batch_size=32, max_length=64, max_steps=400, warmup_ratio=0.1,
                weight_decay=0.01, eval_steps=200, save_steps=200, logging_steps=10,
                retrieval_loss_weight=0.2, retrieval_softmax="in_batch"),
    # Sentence heads read each instance's mean over its tokens (N = 2 sentiment 77.6 vs 73.5 from
    # the first position; N = 1 80.3 vs 81.3).
    # MUX models fine-tune N times the epochs (the same encoder compute; capped): with 2 epochs
    # the N = 5 sentiment head stays at chance, with 10 it learns.
    "finetune": dict(lr=2e-4, batch_size=32, max_length=64, num_epochs=3.0, min_steps=600, warmup_ratio=0.1,
                     weight_decay=0.0, eval_steps=200, save_steps=200, logging_steps=10, sentence_pooling="mean",
                     epochs_scale_with_instances=20.0, consistency_weight=CONSISTENCY_WEIGHT),
}
TINY_RECIPE["electra"] = dict(TINY_RECIPE["mlm"])

# Recipe settings that only multiplexed models use: with N = 1 there is nothing to retrieve and no
# composition to disagree over. A recipe states them once; each model's stage reads them through
# `for_instances`.
MUX_ONLY_SETTINGS = ("retrieval_loss_weight", "consistency_weight")


def for_instances(settings: dict[str, Any], num_instances: int) -> dict[str, Any]:
    """A copy of a stage's recipe ``settings`` for a model of ``num_instances``: at N = 1 without
    the multiplexed-only ones; with the settings its ``by_instances`` entry for that N gives."""
    own = settings.get("by_instances", {}).get(num_instances, {})
    return {**{key: value for key, value in settings.items()
               if key != "by_instances" and (num_instances > 1 or key not in MUX_ONLY_SETTINGS)}, **own}


# --------------------------------------------------------------------------- muxplm convert

# Measured on MiniLM (2-core CPU): 200 priming steps of 32 groups of 32-token blocks; the fresh modules'
# learning rate rises to 2e-4 over the run, the encoder's to 2e-5. Three of MiniLM's six layers run
# unmuxed: with the same fine-tuning compute as plain MiniLM that keeps 96.3 / 94.0 / 90.7 % of its
# sentence-task average at N = 2 / 5 / 10 and runs 1.5x / 1.9x / 1.9x as fast; two keep 92.2 / 86.3 /
# 88.7 % at 1.6x / 2.0x / 2.3x, none left N = 2 sentiment at 68.5 %. It is the most accurate conversion
# found, but not ahead of MiniLM cut to its first layers (--keep-layers) at the same speed. With every
# layer on the mixture (K = 0), 15x the priming or distilling the plain encoder's states for as long
# does not lift the fine-tuned score. Distilling the plain encoder's states as well (--teacher
# PLAIN_DIR) changes nothing measurable at twice the step cost, so it is off.
CONVERT_RECIPE: dict[str, Any] = dict(
    stage="retrieval", demux_type="unbind", batch_groups=32, max_length=32, max_steps=200, lr=2e-4,
    encoder_lr=2e-5, retrieval_softmax="in_batch", warmup_ratio=1.0, weight_decay=0.01, eval_steps=100,
    save_steps=100, logging_steps=10, num_unmuxed_layers=3,
)
# `convert --mlm-steps S`: S steps of MLM on mixtures after the priming, with the auxiliary retrieval
# loss (r = 0.2), lr 5e-4 for the fresh MLM head and 1e-4 for the encoder, warm-up over the first
# tenth, on blocks of the priming's length.
CONVERT_MLM: dict[str, Any] = dict(retrieval_loss_weight=0.2, lr=5e-4, encoder_lr=1e-4, warmup_ratio=0.1,
                                   warmup_steps=None, batch_groups=32, weight_decay=0.01)
# A converted encoder fine-tunes at 2e-4 with its encoder at 1e-4: the larger encoder rate is what the
# converted encoder needs (at N = 2, encoder rate 1e-4 against 2e-4).
CONVERTED_FINETUNE: dict[str, Any] = dict(lr=2e-4, encoder_lr=1e-4)
# On a GPU (``muxplm convert --gpu``): the measured recipe as it is, in bf16 (seconds to minutes).
# Not longer: three times the priming steps doubled N = 10's held-out retrieval (27 -> 56 %) but
# fine-tuned no better on trec and 2.4 points worse on sentiment. The conversions were measured on
# an H100 in fp32; this bf16 recipe itself was not.
GPU_CONVERT_RECIPE: dict[str, Any] = dict(mixed_precision="bf16")


# --------------------------------------------------------------------------- muxplm demo

# `muxplm demo`: the tiny preset on the CPU; the full demo needs 30 to 40 minutes on 2 idle cores
# (most of it the N = 1 fine-tuning), --quick about one.
# Priming as in the tiny training recipe (unbinding demux, 32 groups a step of 32-token blocks,
# in-batch softmax); MUX pre-training keeps the auxiliary retrieval loss (r = 0.2): without it
# the short MLM stage undoes the priming and fine-tuning stays at chance (51 % vs 77 % on
# sentiment at N = 2).
# Every stage warms up over its first tenth. The MLM section's retrieval loss applies to MUX models
# only (a plain model has nothing to retrieve).
DEMO_FULL = dict(
    model_overrides={}, max_length=48, corpus_max_words=400_000, corpus_sources=None, instances=(1, 2, 5),
    warmup_ratio=0.1,
    retrieval=dict(max_steps=200, lr=1e-3, batch_groups=32, max_length=32, retrieval_softmax="in_batch"),
    mlm=dict(max_steps=150, lr=5e-4, batch_size=32, retrieval_loss_weight=0.2),
    # Every row fine-tunes 8 epochs: the N = 5 head needs them to leave chance, and the N = 1
    # baseline gets as much training as the rows it is compared with. N = 2 fine-tunes with
    # composition consistency (weight 4) for 6 epochs instead, at about the same time: on the demo's
    # checkpoints 79.7 % against 79.1 %, and 12.0 % of its predictions changed by the composition
    # against 18.8 %, in 1.06x the fine-tuning time. N = 5 keeps it off: at 6 epochs it lost 1.2
    # points (76.5 %), at 4 epochs 4.3, and 8 epochs with it would double the fine-tuning time.
    finetune=dict(num_epochs=8.0, lr=2e-4, batch_size=32, max_train_examples=None, max_eval_examples=None,
                  min_steps=1, sentence_pooling="mean", consistency_weight=0.0,
                  by_instances={2: dict(num_epochs=6.0, consistency_weight=CONSISTENCY_WEIGHT)}),
    # Timed by the median of nine round-robin trials: the mean of three put N = 2 anywhere from
    # 1.82x to 2.35x across the demo's runs on a 2-core VM.
    seeds=5, throughput=dict(batch_size=128, seq_length=48, num_batches=5, trials=9, statistic="median"),
)
DEMO_QUICK = dict(
    model_overrides=dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128),
    max_length=32, corpus_max_words=20_000, corpus_sources=["moby_dick"], instances=(1, 2), warmup_ratio=0.1,
    retrieval=dict(max_steps=30, lr=2e-3, batch_size=16),
    mlm=dict(max_steps=20, lr=1e-3, batch_size=16, retrieval_loss_weight=0.2),
    finetune=dict(num_epochs=1.0, lr=1e-3, batch_size=16, max_train_examples=800, max_eval_examples=200, min_steps=1,
                  consistency_weight=0.0),
    seeds=2, throughput=dict(batch_size=64, seq_length=32, num_batches=5, trials=3, statistic="median"),
)


def stage_defaults(stage: str, size: str | None) -> dict[str, Any]:
    """The settings of ``stage`` for a model of ``size``: the CPU recipe for ``tiny``, else the paper's."""
    return dict((TINY_RECIPE if size == "tiny" else PAPER_RECIPE)[stage])


def _convert(stage: str, task: str | None, size: str | None) -> dict[str, Any]:
    if stage == "retrieval":  # the training settings; the model's layout stays the checkpoint's or convert's
        layout = ("stage", "demux_type", "num_unmuxed_layers")
        return {**stage_defaults(stage, size), **{key: value for key, value in CONVERT_RECIPE.items() if key not in layout}}
    if stage == "finetune":
        return {**stage_defaults(stage, size), **CONVERTED_FINETUNE}
    if stage == "mlm":
        return {**stage_defaults(stage, size), **CONVERT_MLM}
    raise ValueError(f"the convert recipe covers the conversion's priming and the fine-tuning after it, "
                     f"not --stage {stage}")


def _demo(stage: str, task: str | None, size: str | None) -> dict[str, Any]:
    section = "retrieval" if stage == "retrieval" else ("finetune" if stage == "finetune" else "mlm")
    return {**stage_defaults(stage, "tiny"), "max_length": DEMO_FULL["max_length"],
            "warmup_ratio": DEMO_FULL["warmup_ratio"], **DEMO_FULL[section]}


def _paper_pretraining(size: str):
    """The paper's pre-training of a fresh ``size`` model (``pretrain --recipe paper-SIZE``)."""

    def recipe(stage: str, task: str | None, _size: str | None) -> dict[str, Any]:
        if stage == "finetune":
            return paper_finetune(task)
        return {**stage_defaults(stage, size), **PAPER_PRETRAINING[stage]}

    return recipe


TRAINING_RECIPES = {"paper": _paper, "demo": _demo, "convert": _convert,
                    **{f"paper-{size}": _paper_pretraining(size) for size in ("small", "base", "large")}}
# The stages each named recipe covers: a checkpoint's recorded recipe carries on only to those.
RECIPE_STAGES = {"paper": ("finetune",), "demo": ("retrieval", "mlm", "electra", "finetune"),
                 "convert": ("retrieval", "mlm", "finetune"),
                 **{f"paper-{size}": ("retrieval", "mlm", "electra", "finetune") for size in ("small", "base", "large")}}
# The recipes that pre-train in two stages from one command: priming, then MLM / ELECTRA from it.
PRIMED_RECIPES = tuple(f"paper-{size}" for size in ("small", "base", "large"))


# --------------------------------------------------------------------------- muxplm bench reproduce

_TINY_2L = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512)

# `muxplm bench reproduce --preset NAME`. Every model of a run shares the same budget; MiniLM rows use
# the same steps at the warm-start learning rates. Every stage warms up over its first tenth
# (``warmup_ratio``; the conversion keeps its own ramp, CONVERT_RECIPE). ``quick``: <= 30 min on the 2-core CPU machine;
# ``full``: the tiny preset, about 11 h there for the paper's 19 rows (two one-thread shards side by
# side); ``gpu``: the full rule on a GPU with a three times longer fine-tuning (below).
REPRODUCTION_PRESETS: dict[str, dict[str, Any]] = {
    "quick": dict(
        preset="tiny", model_overrides=_TINY_2L, max_length=32, warmup_ratio=0.1, corpus_max_words=60_000,
        corpus_sources=None,
        retrieval=dict(max_steps=30, lr=2e-3, batch_size=16),
        pretrain=dict(max_steps=50, lr=1e-3, batch_size=16, retrieval_loss_weight=0.2),
        finetune=dict(num_epochs=1.0, lr=1e-3, batch_size=16, max_train_examples=640, max_eval_examples=200),
        warm=dict(retrieval_steps=10, pretrain_steps=10, lr=1e-4, finetune_lr=5e-5, max_train_examples=320),
        seeds=3, ensemble_models=["mux-bert-2"], mixed_precision="no", device="cpu",
        throughput=dict(batch_size=128, seq_length=32, batches=2, trials=3, warmup=1, clock="process",
                        dtype="float32"),
    ),
    # ``full`` is the demo's proven tiny recipe (see muxplm.training.demo) applied to every row.
    # Priming: the unbinding demux, 32 groups a step (batch = 32 x N instances), the in-batch
    # softmax and 32-token blocks take held-out retrieval accuracy at N = 10 from 10 % to 59 % in
    # 300 steps; 400 steps here.
    "full": dict(
        preset="tiny", model_overrides={"retrieval_softmax": "in_batch"}, max_length=48, warmup_ratio=0.1,
        corpus_max_words=400_000, corpus_sources=None,
        retrieval=dict(max_steps=400, lr=1e-3, batch_groups=32, max_length=32),
        pretrain=dict(max_steps=250, lr=5e-4, batch_size=32, retrieval_loss_weight=0.2),
        # One rule for every row's fine-tuning, N = 1 included: the same 1,500 steps of 32 examples
        # on every task, evaluated on the dev set every 250 steps, ending with the best of those six
        # (the best of one length grid). The lengths each row needs differ by far: an earlier grid's N = 1
        # BERT scored 82.2 on sentiment after 538 steps and 79.7 after 5,380 (over-fitted), while
        # MUX-BERT N = 5 / 10 kept 95 / 91 % only after 2,690 / 5,380. Composition consistency is
        # off: it doubles a MUX step.
        # Cost (2-core CPU, two one-thread shards side by side): a step takes 0.86 / 0.47 / 0.27 /
        # 0.20 s at N = 1 / 2 / 5 / 10 (small: 2.6 s at N = 1); ~22 core-hours for the 19 rows of
        # `--models paper`. Not length-grouped batches, though they would cut a step by a fifth: on
        # MUX-BERT N = 2 sentiment they cost 1.8 points and raised the predictions changed by the
        # composition from 11.7 to 15.9 %.
        # All of every task's training data (sentiment 8,607, trec 4,843, pos 51,606, ner 2,155
        # sentences). NER: WNUT-16 entities are rare; at 2e-4 the early probes predicted none.
        # Sentence heads pool each instance's tokens (as TINY_RECIPE's).
        finetune=dict(max_steps=1500, lr=2e-4, batch_size=32, max_train_examples=None, max_eval_examples=1000,
                      consistency_weight=0.0, eval_steps=250, save_steps=250,
                      load_best_at_end=True),
        task_finetune=dict(sentiment=dict(sentence_pooling="mean"), trec=dict(sentence_pooling="mean"),
                           ner=dict(lr=1e-3)),
        # A row of its own size (the larger size's rows) fine-tunes at that size's rate, the rest of the
        # rule unchanged (applied over `finetune`, then over `task_finetune`). At the tiny rate BERT-small
        # (4 layers of 512) never left chance on sentiment (dev 51-65 %, loss 0.69); at 1e-4 it reached
        # 81.6 % in 750 steps and both of its rows train under the full rule; NER keeps the tiny rows'
        # 5x ratio.
        # A size may also set its own `retrieval` and `pretrain` settings. `base` has none yet: its N = 1
        # row's masked-LM pre-training gives every token the same vector (at 250 and 1,500 steps, lr 5e-4
        # or 1e-4) and its fine-tuning stays at chance, so its first setting is a pre-training that
        # keeps the tokens apart, to be found on a GPU. A size's
        # `retrieval` may set `prime_plain_rows` to prime its N = 1 rows as well: 120 such steps took base's
        # output cosine from 0.61 to 0.03, and from there sentiment left chance at BERT's 2e-5 (62.3 % after
        # 100 steps), not at 1e-4. A primed N = 1 row keeps the retrieval term through its masked-LM
        # pre-training, which otherwise gave every token one vector again by step 50.
        sizes=dict(small=dict(finetune=dict(lr=1e-4), task_finetune=dict(ner=dict(lr=5e-4)))),
        warm=dict(retrieval_steps=80, pretrain_steps=80, lr=1e-4, finetune_lr=5e-5, max_train_examples=2000),
        seeds=5, ensemble_models=["mux-bert-2", "mux-bert-5", "mux-bert-10", "mux-electra-2"],
        mixed_precision="no", device="cpu",
        throughput=dict(batch_size=128, seq_length=48, batches=5, trials=3, warmup=2, clock="process",
                        dtype="float32"),
    ),
    # Conversion of the pretrained MiniLM: every row fine-tunes 2,000 examples per task for 20 epochs
    # with the head at 2e-4 and the encoder at 5e-5 (the same for every row: longer fine-tuning lifts
    # the plain and cut rows as much as the multiplexed ones).
    "convert": dict(
        preset="tiny", model_overrides={}, max_length=48, warmup_ratio=0.1, corpus_max_words=400_000,
        corpus_sources=None,
        retrieval=dict(), pretrain=dict(),
        convert=dict(),  # the conversion recipe (CONVERT_RECIPE above) unchanged
        finetune=dict(num_epochs=20.0, min_steps=1, lr=2e-4, encoder_lr=5e-5, batch_size=32, max_train_examples=2000,
                      max_eval_examples=1000, sentence_pooling="mean"),
        # The encoder at 1e-4 for sentence tasks too: a converted encoder must adapt further than
        # a plain one (N = 2 trec 87.0 vs 80.3 at 5e-5, sentiment 81.6 vs 79.3).
        task_finetune=dict(ner=dict(lr=5e-4, encoder_lr=1e-4), sentiment=dict(encoder_lr=1e-4),
                           trec=dict(encoder_lr=1e-4)),
        warm=dict(finetune_lr=None, max_train_examples=None),  # every row is warm: the finetune section rules
        seeds=5, ensemble_models=[], mixed_precision="no", device="cpu",
        throughput=dict(batch_size=128, seq_length=48, batches=5, trials=3, warmup=2, clock="process",
                        dtype="float32"),
    ),
}

# ``gpu``: the full rule on one GPU (several rows side by side), in fp32 as measured, with every
# fine-tuning three times as long: on an H200 the tiny MUX-BERT N = 5 / 10 rows kept 96.3 / 93.0 % of
# BERT's sentence score after 4,500 steps where the 1,500 of the CPU table gave 89.1 / 77.6 %, six of
# their eight dev curves still rising, while BERT peaked inside the grid. A tiny row's step takes ~25 ms
# there with four runs sharing the GPU. The larger size is `small` at its own rate (`sizes`); `base`
# needs its own pre-training first (`sizes` above). Timed by the wall clock: a GPU's work is not the
# process's CPU time.
REPRODUCTION_PRESETS["gpu"] = copy.deepcopy(REPRODUCTION_PRESETS["full"])
REPRODUCTION_PRESETS["gpu"].update(
    finetune={**REPRODUCTION_PRESETS["full"]["finetune"], "max_steps": 4500, "eval_steps": 750, "save_steps": 750},
    device="cuda",
    throughput=dict(batch_size=128, seq_length=48, batches=50, trials=3, warmup=3, clock="wall", dtype="float32"),
)

# ``stable``: the full rule with the two levers that made the predictions stop depending on the
# companions. Each input's first encoder layer runs on it alone (one unmuxed layer): the sentence
# predictions changed by the composition fell from 21-26 / 36-48 % to 4-7 / 3-15 % at N = 2 / 5, the
# token ones to 1-2.4 %, and retention rose to meet every target of the paper's rows at N = 2 / 5 / 10.
# Composition consistency (weight 4) on the sentence tasks then took trec to 5.0 / 3.9 % for MUX-BERT
# (4.1-5.0 % over three data-order seeds at N = 2, where weight 2 spans 4.3-9.3 %) and 3.3 / 4.5 % for
# MUX-ELECTRA, whose N = 2 sentiment went from 5.8 to 3.7 %. The price is a layer per input: 1.8x /
# 2.5x / 3.1x where every layer on the mixture runs at 2.3x / 5.2x / 10x (tiny model, CPU). Rows with
# one input ignore both.
# `--stable` applies to the CPU rule (``stable``) and to the GPU's three times longer one
# (``gpu-stable``: `muxplm reproduce --gpu --stable`; not yet run on a GPU). `--set mixed_precision=bf16`
# took the BERT and ELECTRA rows to 0.66 of the time on a CPU with AVX-512 BF16, with the same
# multiplexed scores.
# On the CPU the stable rule fine-tunes 900 steps, not 1,500, so that the whole table fits 4 hours on
# two cores (every stage in bf16). The shorter grid needs two changes: consistency weight 8, without
# which MUX-ELECTRA N = 2's trec churn rose to 6.3 % over three data-order seeds (4.8 % with 8), and
# the 1,500-step grid's 150 warm-up steps (with 90, MUX-ELECTRA N = 10's NER reached F1 0.0 / 8.5 /
# 21.7 over three data-order seeds, every token O at the first; with 150, 22.0 / 20.7).
STABLE_CPU_FINETUNE = dict(max_steps=900, warmup_steps=150)
STABLE_CPU_CONSISTENCY_WEIGHT = 8.0
# The larger size (4 layers of 512, at its own rate) takes weight 12 on trec: at 8, 5.4 % of its
# answers changed with the composition (4.8-6.0 % over three data-order seeds), at 12 3.5 % (2.8-4.7)
# for 0.6 of a point (82.9 against 83.5, within the seeds' spread); 16 cost 2.7 points, two of its
# three dev curves still rising at 900 steps.
STABLE_CPU_SIZE_CONSISTENCY = dict(small=dict(trec=12.0))


def _with_stable_levers(preset: dict[str, Any], consistency_weight: float, finetune: dict[str, Any] | None = None,
                        size_consistency: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    stable = copy.deepcopy(preset)
    stable["retrieval"]["num_unmuxed_layers"] = 1
    stable["finetune"].update(finetune or {})
    stable["task_finetune"].update({task: {**preset["task_finetune"][task], "consistency_weight": consistency_weight}
                                    for task in ("sentiment", "trec")})
    for size, weights in (size_consistency or {}).items():
        tasks = stable["sizes"].setdefault(size, {}).setdefault("task_finetune", {})
        for task, weight in weights.items():
            tasks[task] = {**tasks.get(task, {}), "consistency_weight": weight}
    return stable


REPRODUCTION_PRESETS["stable"] = _with_stable_levers(REPRODUCTION_PRESETS["full"], STABLE_CPU_CONSISTENCY_WEIGHT,
                                                     STABLE_CPU_FINETUNE, STABLE_CPU_SIZE_CONSISTENCY)
REPRODUCTION_PRESETS["gpu-stable"] = _with_stable_levers(REPRODUCTION_PRESETS["gpu"], CONSISTENCY_WEIGHT)
# The preset that `--stable` makes of each base preset it applies to.
STABLE_PRESETS = {"full": "stable", "gpu": "gpu-stable"}

# --------------------------------------------------------------------------- experiment grids

# Fine-tuning a warm-started encoder in the recipe sweeps: the fresh head and mux/demux modules at 2e-4,
# the pretrained layers at 5e-5; 2,000 sentences, mean pooling, 48 tokens (the sweep sets the epochs: 3,
# or N x 3 for MUX models).
SWEEP_WARM_FINETUNE: dict[str, Any] = dict(
    stage="finetune", task="sentiment", lr=2e-4, encoder_lr=5e-5, batch_size=32, max_length=48,
    max_train_examples=2000, max_eval_examples=1000, sentence_pooling="mean", min_steps=1, warmup_ratio=0.1,
    eval_steps=10**9, save_steps=10**9, logging_steps=10,
)

# The conversion grids: the reproduction's fine-tuning of converted MiniLM (the ``convert`` preset)
# without composition consistency, 3 epochs for N = 1 rows and as many more for a MUX row as give it
# its N = 1 model's encoder compute (at most 20) unless a row fixes its epochs; conversions at 5e-4
# for the fresh modules and 1e-4 for the encoder with a 10 % warm-up, 64 groups of 32-token blocks a
# step (the grids' CPU rows ask for 32).
CONVERT_GRID: dict[str, Any] = dict(
    convert=dict(batch_groups=64, lr=5e-4, encoder_lr=1e-4, warmup_ratio=0.1, max_length=32),
    finetune=dict(lr=2e-4, encoder_lr=1e-4, max_train_examples=2000, max_eval_examples=1000, batch_size=32,
                  max_length=48, sentence_pooling="mean", warmup_ratio=0.1, min_steps=1),
    task_finetune=dict(pos=dict(encoder_lr=5e-5), ner=dict(lr=5e-4, encoder_lr=1e-4)),
    epochs=3.0, task_epochs=dict(ner=5.0), epochs_cap=20.0,
)

# `muxplm frontier`: every candidate fine-tunes by one rule, so that their scores compare, the
# conversion grids' rule above (the one the Pareto tables of converted MiniLM were measured with):
# the fresh modules at 2e-4, the encoder at 1e-4, 32 examples a step, a 10 % warm-up, sentence
# heads pooling each instance's tokens, no composition consistency (it doubles a MUX step), 3
# epochs for a plain or cut model and, for a MUX model, as many more as give it the encoder
# compute of its plain model (at most 20). Conversions run the convert recipe (CONVERT_RECIPE) as
# it is. A budget too small for the whole plan first drops the optional candidates, then trains
# the kept ones on `scales` of the training examples and of the priming steps, never fewer than
# the floors. Timing: the throughput benchmark's batch of 128, three round-robin trials.
FRONTIER: dict[str, Any] = dict(
    finetune=dict(lr=2e-4, encoder_lr=1e-4, batch_size=32, warmup_ratio=0.1, min_steps=1, consistency_weight=0.0),
    sentence_finetune=dict(sentence_pooling="mean"),
    epochs=CONVERT_GRID["epochs"], epochs_cap=CONVERT_GRID["epochs_cap"],
    scales=(1.0, 0.5, 0.25, 0.125, 0.0625), min_train_examples=64, min_priming_steps=20,
    seeds=5, eval_batch_size=64,
    timing=dict(batch_size=128, batches=5, trials=3, warmup=3, clock="wall"),
)


RECIPES: dict[str, Any] = {
    "stages/paper": PAPER_RECIPE,
    "stages/tiny": TINY_RECIPE,
    "convert": CONVERT_RECIPE,
    "convert/gpu": GPU_CONVERT_RECIPE,
    "demo": DEMO_FULL,
    "demo/quick": DEMO_QUICK,
    **{f"reproduce/{name}": preset for name, preset in REPRODUCTION_PRESETS.items()},
    "experiments/sweep-finetune": SWEEP_WARM_FINETUNE,
    "experiments/convert-grid": CONVERT_GRID,
    "frontier": FRONTIER,
}


def get_recipe(name: str) -> Any:
    """A copy of the recipe ``name`` (see ``RECIPES``), free to change."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}")
    return copy.deepcopy(RECIPES[name])
