"""Every command that takes a checkpoint takes a folder released with the paper (the hub layout:
the authors' config.json and pickle weights, no tokenizer: BERT's uncased vocabulary is used):
``finetune --init`` (with the paper's recipe), ``evaluate``, ``serve``, ``bench throughput
--model`` and ``export onnx``. The inputs of a released model are padded to 128 tokens by the
input path they share."""

from __future__ import annotations

import json

import pytest
import torch
from training_utils import run_cli

from muxplm.data import PaddingCollator, TaskSpec, load_tokenizer
from muxplm.serving import Predictor, create_app
from muxplm.training.evaluate import _check_compatible
from released_testing import BERT_VOCABULARY, released_folder
from serving_testing import run_app

SEQUENCE = "bert-sequence-hadamard-indexpos-2"
PRETRAINED = "bert-mlm-hadamard-indexpos-2"


@pytest.fixture(scope="module")
def hub_folders(tmp_path_factory):
    """Released folders with BERT's vocabulary and 512 positions, as the hub's are."""
    root = tmp_path_factory.mktemp("released")
    return {name: released_folder(root, name, BERT_VOCABULARY) for name in (SEQUENCE, PRETRAINED)}


@pytest.fixture(scope="module")
def dev_file(tmp_path_factory):
    rows = [("a wonderful , moving film", 2), ("dull and far too long", 0), ("it was fine", 1)] * 5
    path = tmp_path_factory.mktemp("data") / "dev.csv"
    path.write_text("text,label\n" + "".join(f'"{text}",{label}\n' for text, label in rows))
    return path


def test_finetune_init_a_released_pretrained_model_with_the_paper_recipe(hub_folders, dev_file, tmp_path):
    done = run_cli("finetune", "--init", str(hub_folders[PRETRAINED]), "--train-file", str(dev_file),
                   "--validation-file", str(dev_file), "--max-steps", "2", "--output-dir", str(tmp_path / "run"),
                   "--no-progress")
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["model_type"] == "mux_bert" and config["forward_variant"] == "released"
    assert config["architectures"] == ["MuxBertForSequenceClassification"] and config["num_instances"] == 2
    settings = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert settings["recipe"] == "paper"
    assert (settings["lr"], settings["adam_eps"], settings["batch_size"], settings["max_length"]) == (5e-5, 1e-8, 64, 128)
    assert settings["load_best_at_end"] and settings["max_steps"] == 2  # a flag given wins over the recipe


def test_the_paper_recipe_takes_its_steps_from_the_glue_task():
    from muxplm.training.recipes import paper_finetune

    assert paper_finetune("glue/qnli")["max_steps"] == 20_000 and paper_finetune("glue/mnli")["max_steps"] == 100_000
    assert paper_finetune("glue/rte")["eval_steps"] == 100 and "max_steps" not in paper_finetune("my-task")


def test_evaluate_a_released_classifier(hub_folders, dev_file, tmp_path):
    done = run_cli("evaluate", str(hub_folders[SEQUENCE]), "--validation-file", str(dev_file), "--seeds", "2",
                   "--output", str(tmp_path / "eval.json"))
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["num_instances"] == 2 and result["num_examples"] == 15
    assert 0.0 <= result["summary"]["accuracy"]["mean"] <= 1.0


def test_unnamed_labels_map_by_index_to_the_tasks_labels():
    qnli = TaskSpec("glue/qnli", "sentence", ["entailment", "not_entailment"])
    _check_compatible(qnli, "sentence", ["LABEL_0", "LABEL_1"], "released")
    with pytest.raises(ValueError, match="trained with labels"):
        _check_compatible(qnli, "sentence", ["LABEL_0", "LABEL_1", "LABEL_2"], "released")
    with pytest.raises(ValueError, match="trained with labels"):
        _check_compatible(qnli, "sentence", ["yes", "no"], "released")


def test_serve_a_released_classifier_with_inputs_padded_to_128(hub_folders):
    predictor = Predictor.from_pretrained(hub_folders[SEQUENCE])
    encoded = predictor.encode(["a gripping film", "dull"])
    assert predictor.collate(encoded)["input_ids"].shape == (2, 128)
    app = create_app(predictor, max_batch=8, max_wait_ms=2)

    async def scenario(client):
        return await client.post("/predict", json={"text": ["a gripping film", "dull and overlong", "fine"]})

    answer = run_app(app, scenario)
    assert answer.status_code == 200
    assert [p["label"] for p in answer.json()["predictions"]] == \
        [p["label"] for p in predictor.predict(["a gripping film", "dull and overlong", "fine"])]
    assert {p["label"] for p in answer.json()["predictions"]} <= {"LABEL_0", "LABEL_1", "LABEL_2"}


def test_the_collator_pads_released_models_to_a_fixed_length(hub_folders):
    tokenizer = load_tokenizer()
    rows = [dict(tokenizer("a short text"), labels=0), dict(tokenizer("and another, a little longer"), labels=1)]
    assert PaddingCollator(tokenizer)(rows)["input_ids"].shape[1] < 16
    batch = PaddingCollator(tokenizer, pad_to_length=128)(rows)
    assert batch["input_ids"].shape == (2, 128) and batch["attention_mask"][:, 20:].sum() == 0


def test_bench_throughput_times_a_released_checkpoint(hub_folders, tmp_path):
    out = tmp_path / "throughput.json"
    done = run_cli("bench", "throughput", "--model", str(hub_folders[SEQUENCE]), "--batch-size", "8", "--seq-len", "16",
                   "--trials", "1", "--batches", "1", "--output", str(out))
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["results"]
    assert row["checkpoint"] == str(hub_folders[SEQUENCE]) and row["samples_per_s"] > 0


def test_export_a_released_classifier_to_onnx(hub_folders, tmp_path):
    done = run_cli("export", "onnx", str(hub_folders[SEQUENCE]), str(tmp_path / "onnx"))
    assert done.returncode == 0, done.stderr
    exported = json.loads((tmp_path / "onnx" / "muxplm_onnx.json").read_text())
    assert exported["max_abs_diff"] < 1e-4
    config = json.loads((tmp_path / "onnx" / "config.json").read_text())  # muxplm's config, not the authors'
    assert config["model_type"] == "mux_bert" and config["forward_variant"] == "released"


def test_a_released_classifier_runs_in_onnx_runtime_like_pytorch(hub_folders):
    from muxplm.serving.onnx_export import OnnxPredictor

    texts = ["a gripping film", "dull and overlong", "fine", "what a mess"]
    onnx = OnnxPredictor.from_pretrained(hub_folders[SEQUENCE])
    torch_scores = [p["score"] for p in Predictor.from_pretrained(hub_folders[SEQUENCE]).predict(texts)]
    assert torch.allclose(torch.tensor([p["score"] for p in onnx.predict(texts)]), torch.tensor(torch_scores),
                          atol=1e-4)


def test_a_hub_name_on_the_command_line_is_downloaded_first(hub_folders, dev_file, tmp_path, monkeypatch):
    import huggingface_hub

    asked = []

    def snapshot_download(repo, **kwargs):
        asked.append((repo, tuple(kwargs.get("allow_patterns") or ())))
        return str(hub_folders[SEQUENCE])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    hub_id = "princeton-nlp/muxbert_base_qnli_gaussian_hadamard_index_pos_2"
    done = run_cli("evaluate", hub_id, "--validation-file", str(dev_file), "--seeds", "1",
                   "--output", str(tmp_path / "eval.json"))
    assert done.returncode == 0, done.stderr
    (repo, patterns), = asked
    assert repo == hub_id and {"config.json", "pytorch_model.bin", "vocab.txt"} <= set(patterns)
