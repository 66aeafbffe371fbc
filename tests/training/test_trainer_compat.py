"""MUX models under transformers' own Trainer: the loss it reports and steps on is the model's
mean loss, whatever the gradient accumulation (the forwards take ``**kwargs`` but no
``num_items_in_batch``); and MuxTrainer used from Python as docs/training.md shows."""

from __future__ import annotations

import json
import shutil

import torch
from datasets import Dataset
from transformers import Trainer, TrainingArguments

from muxplm import MuxBertForSequenceClassification
from mux_testing import micro_config


def test_the_trainer_averages_a_mux_models_loss_over_accumulated_micro_batches(tmp_path):
    torch.manual_seed(0)
    # One instance per group and no dropout: a row's loss does not depend on its batch.
    config = micro_config(num_instances=1, mux_type="identity", demux_type="identity", num_labels=2,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = MuxBertForSequenceClassification(config)
    rows = Dataset.from_dict({"input_ids": torch.randint(5, 100, (8, 12)).tolist(), "labels": [0, 1] * 4})
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=2,
                             max_steps=1, learning_rate=0.0, report_to=[], use_cpu=True, save_strategy="no",
                             logging_steps=1, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    assert trainer.model_accepts_loss_kwargs is False
    trainer.train()
    with torch.no_grad():  # the step's two micro-batches hold all 8 rows: the mean over them
        expected = model(input_ids=torch.tensor(rows["input_ids"]), labels=torch.tensor(rows["labels"])).loss
    assert abs(trainer.state.log_history[0]["loss"] - float(expected)) < 1e-4


def _python_run(output_dir, max_steps, resume=None, arguments=None):
    """MuxTrainer as docs/training.md shows it: a tokenized datasets.Dataset (a text column left
    in), muxplm's collator, a loss module, the user's own TrainingArguments."""
    from transformers import BertTokenizerFast

    from muxplm.data import PaddingCollator
    from muxplm.training import MuxTrainer
    from muxplm.training.consistency import CompositionConsistency

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(95)]
    (output_dir.parent / "vocab.txt").write_text("\n".join(vocab))
    tokenizer = BertTokenizerFast(str(output_dir.parent / "vocab.txt"))
    texts = [" ".join(f"w{(i * 7 + j) % 95}" for j in range(3 + i % 6)) for i in range(48)]
    rows = Dataset.from_dict({"text": texts, "labels": [i % 2 for i in range(48)]})
    rows = rows.map(lambda batch: tokenizer(batch["text"]), batched=True)
    torch.manual_seed(0)
    model = MuxBertForSequenceClassification(micro_config(num_instances=2, num_labels=2, hidden_dropout_prob=0.1))
    args = (arguments or TrainingArguments)(
        output_dir=str(output_dir), per_device_train_batch_size=8, max_steps=max_steps, learning_rate=1e-3,
        warmup_steps=2, save_steps=3, logging_steps=1, report_to=[], use_cpu=True, seed=3, disable_tqdm=True)
    trainer = MuxTrainer(model=model, args=args, train_dataset=rows, data_collator=PaddingCollator(tokenizer),
                         processing_class=tokenizer, loss=CompositionConsistency(4.0))
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def test_mux_trainer_from_python_with_the_users_own_arguments(tmp_path):
    """The Trainer's own checkpoints (trainer_state.json with global_step and log_history, rotated
    as asked), no pickle of the arguments, the loss module's curve logged, and
    resume_from_checkpoint=True continuing to the same weights as an uninterrupted run."""
    whole = _python_run(tmp_path / "whole", max_steps=8)
    checkpoint = tmp_path / "whole" / "checkpoint-6"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["global_step"] == 6 and [r["step"] for r in state["log_history"] if "loss" in r] == list(range(1, 7))
    assert all("disagreement" in r for r in state["log_history"] if "loss" in r)  # the loss module's curve
    assert (checkpoint / "training_args.json").is_file() and not list(tmp_path.glob("**/training_args.bin"))
    assert json.loads((checkpoint / "training_args.json").read_text())["learning_rate"] == 1e-3

    stopped = tmp_path / "stopped"
    _python_run(stopped, max_steps=8)
    for later in ("checkpoint-8",):
        shutil.rmtree(stopped / later)
    resumed = _python_run(stopped, max_steps=8, resume=True)  # from checkpoint-6
    assert resumed.state.global_step == 8
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    losses = lambda trainer: [r["loss"] for r in trainer.state.log_history if "loss" in r and "train_runtime" not in r]
    assert losses(resumed)[-2:] == losses(whole)[-2:]
