"""MUX models under transformers' own Trainer: the loss it reports and steps on is the model's
mean loss, whatever the gradient accumulation (the forwards take ``**kwargs`` but no
``num_items_in_batch``)."""

from __future__ import annotations

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
