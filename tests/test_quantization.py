"""Int8 dynamic quantisation: the quantised copy, its agreement with float32 in the Predictor,
the ONNX predictor and evaluation, and its refusal off the CPU.

Tolerances. A randomly initialised classifier's logits all lie near zero, where any noise flips
the label, so the test models scale their classifier weights by 20: their logits then spread
like a fine-tuned model's (mean top probability about 0.9). On these models int8 agrees with
float32 on 100 % of 100 texts, with the largest probability difference 0.016-0.058 (torch) and
0.016-0.030 (ONNX Runtime) over three seeds. The tests ask for >= 95 % agreement and
<= 0.15; another random model, i.e. a quantisation that returned garbage, agrees on 1-50 %
with differences of 0.8 and more.
"""

from __future__ import annotations

import csv
import json
import os
import random

import pytest
import torch
from torch import nn
from transformers import AutoTokenizer

from muxplm import MuxBertConfig, MuxBertForSequenceClassification
from muxplm.cli import main
from muxplm.quantization import check_quantize, int8_onnx_path, is_quantized, quantize_dynamic_int8
from muxplm.serving import Predictor
from muxplm.serving.predictor import default_tokenizer_path

MIN_LABEL_AGREEMENT = 0.95
MAX_PROB_DIFFERENCE = 0.15
TINY = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=30522)
WORDS = ("apple river stone cloud tiger piano garden window bridge candle forest rocket silver winter summer "
         "castle doctor engine planet violin harbor island jacket ladder market needle orange pencil").split()


def confident_classifier(num_instances: int, seed: int) -> MuxBertForSequenceClassification:
    torch.manual_seed(seed)
    config = MuxBertConfig.from_preset("tiny", **TINY, num_instances=num_instances, num_labels=3,
                                       demux_type="unbind" if num_instances > 1 else "identity",
                                       id2label={0: "neg", 1: "neu", 2: "pos"}, label2id={"neg": 0, "neu": 1, "pos": 2})
    model = MuxBertForSequenceClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(20)  # spread the logits like a fine-tuned model's (see the module docstring)
    return model


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(default_tokenizer_path())


@pytest.fixture(scope="module")
def mux_dir(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("mux2")
    confident_classifier(2, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def texts():
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(100)]


def probabilities(predictor, texts) -> torch.Tensor:
    chunks = [texts[start : start + 32] for start in range(0, len(texts), 32)]
    return torch.stack([out for chunk in chunks for out in predictor.run(predictor.encode(chunk))]).softmax(-1)


def assert_agree(reference: torch.Tensor, quantized: torch.Tensor) -> None:
    agreement = (reference.argmax(-1) == quantized.argmax(-1)).float().mean().item()
    difference = (reference - quantized).abs().max().item()
    assert agreement >= MIN_LABEL_AGREEMENT, f"int8 agrees with float32 on {agreement:.0%} of the inputs"
    assert difference <= MAX_PROB_DIFFERENCE, f"int8 probabilities differ from float32 by up to {difference:.3f}"


def test_quantized_copy_keeps_the_model_and_its_config():
    model = confident_classifier(2, seed=0).train()
    quantized = quantize_dynamic_int8(model)
    assert is_quantized(quantized) and not is_quantized(model)
    assert model.training and not quantized.training  # a copy in eval mode; the original untouched
    assert isinstance(model.classifier, nn.Linear)
    assert quantized.config.num_instances == 2 and quantized.config.id2label[2] == "pos"


def test_quantization_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="runs on the CPU"):
        quantize_dynamic_int8(confident_classifier(1, seed=0).to("meta"))  # any non-CPU device
    with pytest.raises(ValueError, match="float32"):
        quantize_dynamic_int8(confident_classifier(1, seed=0).to(torch.bfloat16))
    assert check_quantize(None) == "none" and check_quantize("int8", "cpu", torch.float32) == "int8"
    with pytest.raises(ValueError, match="runs on the CPU, not on cuda:1"):
        check_quantize("int8", "cuda:1")
    with pytest.raises(ValueError, match="unknown quantize 'int4'"):
        check_quantize("int4")


def test_int8_predictor_agrees_with_float32(mux_dir, texts):
    reference = Predictor.from_pretrained(mux_dir)
    quantized = Predictor.from_pretrained(mux_dir, quantize="int8")
    assert is_quantized(quantized.model) and quantized.describe()["quantize"] == "int8"
    assert_agree(probabilities(reference, texts), probabilities(quantized, texts))
    ensembled = quantized.predict(texts[:5], mode="ensemble")
    assert [r["label"] for r in ensembled] == [r["label"] for r in reference.predict(texts[:5], mode="ensemble")]


def test_int8_is_refused_on_a_gpu(mux_dir, tmp_path, monkeypatch, capsys, native_bf16):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as if this machine had a GPU
    with pytest.raises(ValueError, match="int8 dynamic quantisation runs on the CPU"):
        Predictor.from_pretrained(mux_dir, device="cuda", quantize="int8")
    with pytest.raises(ValueError, match="float32"):
        Predictor.from_pretrained(mux_dir, dtype="bfloat16", quantize="int8")
    assert main(["serve", str(mux_dir), "--device", "cuda", "--quantize", "int8"]) == 2
    assert "int8 dynamic quantisation runs on the CPU" in capsys.readouterr().err
    out = tmp_path / "eval.json"
    code = main(["evaluate", str(mux_dir), "--validation-file", str(tmp_path / "unread.csv"), "--device", "cuda",
                 "--quantize", "int8", "--output", str(out)])
    assert code == 2 and "int8 dynamic quantisation runs on the CPU" in capsys.readouterr().err
    assert not out.exists()


def test_evaluate_int8_records_it_and_scores_like_float32(tmp_path, tokenizer, texts):
    """Labelled with the float32 model's own predictions, float32 scores 1.0 and int8 its
    agreement with float32 (N = 1: the labels do not depend on how inputs are grouped)."""
    from muxplm.training import evaluate_checkpoint

    folder = tmp_path / "plain"
    confident_classifier(1, seed=1).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    labels = [r["label"] for r in Predictor.from_pretrained(folder).predict(texts)]
    data = tmp_path / "dev.csv"
    with open(data, "w", newline="") as handle:
        csv.writer(handle).writerows([("text", "label"), *zip(texts, labels)])
    common = dict(validation_file=str(data), task_kind="sentence", seeds=1, batch_size=32)
    reference = evaluate_checkpoint(folder, **common)
    assert reference["quantize"] == "none" and reference["summary"]["accuracy"]["mean"] == 1.0
    out = tmp_path / "eval_int8.json"
    assert main(["evaluate", str(folder), "--validation-file", str(data), "--task-kind", "sentence", "--seeds", "1",
                 "--batch-size", "32", "--quantize", "int8", "--output", str(out)]) == 0
    quantized = json.loads(out.read_text())
    assert quantized["quantize"] == "int8" and quantized["num_examples"] == len(texts)
    assert quantized["summary"]["accuracy"]["mean"] >= MIN_LABEL_AGREEMENT


def test_evaluate_in_onnx_runtime_scores_every_composition_as_pytorch(tmp_path, mux_dir, tokenizer, texts):
    """`--runtime onnx`: the exported graph scores each composition seed as the PyTorch model
    does (labels here are random, so the per-seed scores and the predictions that change with the
    composition differ from seed to seed); `--quantize int8` then scores ONNX Runtime's int8
    graph, which agrees with float32 as the int8 tests above ask."""
    from muxplm.training import evaluate_checkpoint

    rng = random.Random(1)
    data = tmp_path / "dev.csv"
    with open(data, "w", newline="") as handle:
        csv.writer(handle).writerows([("text", "label"), *((t, rng.choice(["neg", "neu", "pos"])) for t in texts)])
    common = dict(validation_file=str(data), task_kind="sentence", seeds=3, batch_size=16, ensemble=True)
    graphs_before = sorted(mux_dir.glob("**/*.onnx"))
    reference = evaluate_checkpoint(mux_dir, **common)
    graph = evaluate_checkpoint(mux_dir, runtime="onnx", **common)
    assert graph["runtime"] == "onnx" and reference["runtime"] == "torch"
    assert graph["per_seed"] == pytest.approx(reference["per_seed"], abs=1e-9)
    assert graph["changed_across_seeds"] == reference["changed_across_seeds"] > 0
    assert graph["ensemble"] == pytest.approx(reference["ensemble"], abs=1e-9)
    assert sorted(mux_dir.glob("**/*.onnx")) == graphs_before  # exported into a temporary folder
    with pytest.raises(ValueError, match="runtime must be one of torch, onnx"):
        evaluate_checkpoint(mux_dir, runtime="tensorrt", **common)

    # int8 (N = 1, labelled with the float32 model's predictions: the grouping plays no part)
    plain = tmp_path / "plain"
    confident_classifier(1, seed=1).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    labels = [r["label"] for r in Predictor.from_pretrained(plain).predict(texts)]
    with open(data, "w", newline="") as handle:
        csv.writer(handle).writerows([("text", "label"), *zip(texts, labels)])
    out = tmp_path / "eval_onnx_int8.json"
    assert main(["evaluate", str(plain), "--validation-file", str(data), "--task-kind", "sentence", "--seeds", "1",
                 "--runtime", "onnx", "--quantize", "int8", "--output", str(out)]) == 0
    quantized = json.loads(out.read_text())
    assert quantized["runtime"] == "onnx" and quantized["quantize"] == "int8"
    assert quantized["summary"]["accuracy"]["mean"] >= MIN_LABEL_AGREEMENT


def test_onnx_int8_predictor_agrees_with_onnx_float32(mux_dir, texts, tmp_path, capsys):
    import onnx

    from muxplm.serving.onnx_export import OnnxPredictor, int8_graph

    reference = OnnxPredictor.from_pretrained(mux_dir)  # exports into mux_dir/onnx
    quantized = OnnxPredictor.from_pretrained(mux_dir, quantize="int8")
    graph = mux_dir / "onnx" / "model.int8.onnx"
    assert quantized.describe()["quantize"] == "int8" and graph.is_file()
    assert "MatMulInteger" in {node.op_type for node in onnx.load(str(graph)).graph.node}
    assert_agree(probabilities(reference, texts), probabilities(quantized, texts))

    # A graph re-exported since is quantised again; a current one is reused.
    made = graph.stat().st_mtime_ns
    assert int8_graph(mux_dir / "onnx" / "model.onnx") == graph and graph.stat().st_mtime_ns == made
    older = (mux_dir / "onnx" / "model.onnx").stat().st_mtime_ns - 10**9
    os.utime(graph, ns=(older, older))  # as if model.onnx had been written after it
    int8_graph(mux_dir / "onnx" / "model.onnx")
    assert graph.stat().st_mtime_ns > older

    assert main(["export", "onnx", str(mux_dir), str(tmp_path / "out"), "--quantize", "int8"]) == 0
    assert "max |int8 onnx - torch|" in capsys.readouterr().out
    assert int8_onnx_path(tmp_path / "out" / "model.onnx").is_file()
