"""A broken checkpoint folder or data file gets an error that names the file, and a failing
command exits non-zero: weights that are not plain tensors, a config.json that does not fit its
weights, unreadable config and tokenizer files, scores that overflow, labels that are not finite."""

from __future__ import annotations

import json
import os

import pytest
import torch
from training_utils import run_cli

from muxplm import MuxBertConfig, MuxBertForSequenceClassification
from muxplm.data import load_local_sentence_task, load_tokenizer
from muxplm.serving import Predictor


@pytest.fixture
def checkpoint(tmp_path):
    """A tiny N = 2 classifier saved from the Python API (two labels: Transformers' default)."""
    config = MuxBertConfig.from_preset("tiny", num_instances=2, num_labels=2, num_hidden_layers=1)
    folder = tmp_path / "model"
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    load_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture
def dev_file(tmp_path):
    path = tmp_path / "dev.csv"
    path.write_text("text,label\n" + "".join(f"text number {i},{i % 2}\n" for i in range(8)))
    return path


def test_labels_are_saved_even_when_they_are_transformers_default(checkpoint):
    saved = json.loads((checkpoint / "config.json").read_text())
    assert saved["id2label"] == {"0": "LABEL_0", "1": "LABEL_1"} and saved["label2id"] == {"LABEL_0": 0, "LABEL_1": 1}


def test_a_weight_file_that_is_not_plain_tensors_is_named(checkpoint, dev_file, tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    (checkpoint / "model.safetensors").unlink()
    torch.save({"bert.mux.keys": Payload()}, checkpoint / "pytorch_model.bin")
    done = run_cli("evaluate", str(checkpoint), "--validation-file", str(dev_file), "--seeds", "1")
    assert done.returncode != 0 and "pytorch_model.bin is not a plain file of tensors" in done.stderr
    assert "Traceback" not in done.stderr and not marker.exists()


def test_a_config_that_does_not_fit_the_weights_is_refused_everywhere(checkpoint, dev_file, tmp_path):
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "num_instances": 5}))
    wanted = "has shape [2, 256] in the weight file but [5, 256] in the model that config.json"
    done = run_cli("finetune", "--init", str(checkpoint), "--train-file", str(dev_file), "--validation-file",
                   str(dev_file), "--max-steps", "1", "--output-dir", str(tmp_path / "run"), "--no-progress")
    assert done.returncode != 0 and wanted in done.stderr and "Traceback" not in done.stderr
    done = run_cli("evaluate", str(checkpoint), "--validation-file", str(dev_file), "--seeds", "1")
    assert done.returncode != 0 and wanted in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(ValueError, match="do not fit its configuration"):
        Predictor.from_pretrained(checkpoint)


def test_unreadable_config_and_tokenizer_files_are_named(checkpoint, dev_file):
    (checkpoint / "tokenizer.json").write_text("{not json")
    done = run_cli("evaluate", str(checkpoint), "--validation-file", str(dev_file), "--seeds", "1")
    assert done.returncode != 0 and f"the tokenizer files in {checkpoint} cannot be read" in done.stderr
    (checkpoint / "config.json").write_text("{not json")
    done = run_cli("evaluate", str(checkpoint), "--validation-file", str(dev_file), "--seeds", "1")
    assert done.returncode != 0 and f"{checkpoint / 'config.json'} is not valid JSON" in done.stderr
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        Predictor.from_pretrained(checkpoint)


def test_evaluate_fails_when_the_scores_overflow(checkpoint, dev_file):
    model = MuxBertForSequenceClassification.from_pretrained(checkpoint)
    with torch.no_grad():
        model.classifier.weight.fill_(3e38)  # finite weights, infinite scores
    model.save_pretrained(checkpoint)
    done = run_cli("evaluate", str(checkpoint), "--validation-file", str(dev_file), "--seeds", "1")
    assert done.returncode != 0 and "outputs are not finite" in done.stderr and "accuracy" not in done.stdout


@pytest.mark.parametrize("label", ["nan", "inf", ""])
def test_a_label_that_is_not_a_finite_number_names_its_row(tmp_path, label):
    path = tmp_path / "train.csv"
    path.write_text(f"text,label\na,1\nb,0\nc,{label}\nd,1\n")
    with pytest.raises(ValueError, match=r"train.csv: row 3(: label .* is not a finite number| has no value in column 'label')"):
        load_local_sentence_task(path)
