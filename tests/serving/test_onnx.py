"""ONNX export: dynamic batch and length axes (batch sizes other than the example's, including
ones that are not multiples of N), parity with PyTorch to 1e-4, and the ONNX Runtime predictor."""

from __future__ import annotations

import pytest
import torch

from muxplm.cli import main
from muxplm.serving import Predictor
from muxplm.serving.onnx_export import OnnxPredictor, export_onnx, onnx_session


def onnx_vs_torch(model, path, batch, length, seed):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, model.config.vocab_size, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[::2, length - 3 :] = 0
    types = torch.zeros_like(ids)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    got = onnx_session(path).run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                                        "token_type_ids": types.numpy()})[0]
    got = torch.from_numpy(got)
    assert got.shape == expected.shape
    if expected.dim() == 3:  # token logits: compare real tokens only
        keep = mask.bool()
        return (got[keep] - expected[keep]).abs().max()
    return (got - expected).abs().max()


@pytest.mark.parametrize("fixture", ["sentence_dir", "token_dir", "pooled_dir", "partial_dir"])
def test_export_parity_with_other_batch_sizes(fixture, request, tmp_path):
    model_dir = request.getfixturevalue(fixture)
    result = export_onnx(model_dir, tmp_path, example_batch=4, example_length=12)
    assert result["max_abs_diff"] < 1e-4
    model = Predictor.from_pretrained(model_dir).model
    n = model.config.num_instances
    for batch, length in ((1, 5), (n + 1, 19), (3 * n - 1, 30), (4, 12)):
        assert onnx_vs_torch(model, result["path"], batch, length, seed=batch) < 1e-4
    assert (tmp_path / "config.json").is_file()


def test_cli_export_and_onnx_predictor(sentence_dir, tmp_path, capsys):
    assert main(["export", "onnx", str(sentence_dir), str(tmp_path / "out")]) == 0
    assert "max |onnx - torch|" in capsys.readouterr().out
    texts = ["a gripping film", "dull", "an ordinary day", "bright and sad", "long", "short", "odd"]
    onnx = OnnxPredictor.from_pretrained(sentence_dir, onnx_path=tmp_path / "out" / "model.onnx")
    torch_results = Predictor.from_pretrained(sentence_dir).predict(texts)
    onnx_results = onnx.predict(texts)
    assert [r["label"] for r in onnx_results] == [r["label"] for r in torch_results]
    assert [r["score"] for r in onnx_results] == pytest.approx([r["score"] for r in torch_results], abs=1e-4)
    # Ensembling: the same copy layout as the PyTorch model (7 inputs at N=5: fillers
    # inside the copies), averaged.
    torch_ensemble = Predictor.from_pretrained(sentence_dir).predict(texts, mode="ensemble")
    onnx_ensemble = onnx.predict(texts, mode="ensemble")
    assert [r["label"] for r in onnx_ensemble] == [r["label"] for r in torch_ensemble]
    assert [r["score"] for r in onnx_ensemble] == pytest.approx([r["score"] for r in torch_ensemble], abs=1e-4)
    assert [r["score"] for r in onnx_ensemble] != pytest.approx([r["score"] for r in onnx_results], abs=1e-4)


@pytest.mark.parametrize("fixture", ["token_dir", "prefix_dir", "pooled_dir"])
def test_onnx_ensemble_logits_match_torch(fixture, request, tmp_path):
    model_dir = request.getfixturevalue(fixture)
    export_onnx(model_dir, tmp_path, example_batch=4, example_length=12)
    torch_predictor = Predictor.from_pretrained(model_dir)
    onnx = OnnxPredictor.from_pretrained(model_dir, onnx_path=tmp_path / "model.onnx")
    encoded = torch_predictor.encode(["a gripping film about rivers", "dull", "an ordinary day", "bright"])
    for ensemble in (False, True):
        expected = torch_predictor.run(encoded, ensemble=ensemble)
        got = onnx.run(encoded, ensemble=ensemble)
        assert all(torch.allclose(g, e, atol=1e-4) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize("fixture", ["sentence_dir", "token_dir"])
def test_an_onnx_runtime_classifier_groups_by_the_composition_seed_as_torch(fixture, request, tmp_path):
    """What `muxplm evaluate --runtime onnx` scores: each composition seed's grouping (and the
    ensemble) laid out for the graph gives the PyTorch model's logits for that seed."""
    from muxplm.serving.onnx_export import OnnxRuntimeClassifier, export_graph

    model = Predictor.from_pretrained(request.getfixturevalue(fixture)).model.eval()
    graph = OnnxRuntimeClassifier(export_graph(model, tmp_path / "g.onnx")["path"], model.config, threads=1)
    n = model.config.num_instances
    batch, length = 3 * n + 1, 11  # fillers in the last group
    ids = torch.randint(5, model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[::3, 7:] = 0
    inputs = dict(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))
    keep = mask.bool() if "Token" in type(model).__name__ else slice(None)  # token logits: real tokens
    unseeded = graph(**inputs)
    for seed, ensemble in ((3, False), (4, False), (None, True), (5, True)):
        with torch.no_grad():
            expected = model(**inputs, composition_seed=seed, ensemble=ensemble).logits
        got = graph(**inputs, composition_seed=seed, ensemble=ensemble)
        torch.testing.assert_close(got[keep], expected[keep], atol=1e-4, rtol=1e-4)
        assert not torch.allclose(got[keep], unseeded[keep], atol=1e-3)  # the grouping did change the logits


@pytest.mark.parametrize("fixture", ["sentence_dir", "partial_dir"])
def test_an_all_padding_row_is_a_filler_in_torch_and_onnx(fixture, request, tmp_path):
    """A row whose attention mask is all zero enters no mixture in either runtime: the other
    rows' outputs are what they are without it, and both runtimes agree on every row."""
    model_dir = request.getfixturevalue(fixture)
    result = export_onnx(model_dir, tmp_path, example_batch=4, example_length=12)
    model = Predictor.from_pretrained(model_dir).model
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, model.config.vocab_size, (3, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[2] = 0  # the last row: nothing to attend, so it takes a filler's slot
    types = torch.zeros_like(ids)
    other_ids = ids.clone()
    other_ids[2] = 7
    with torch.no_grad():
        with_empty = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        other_content = model(input_ids=other_ids, attention_mask=mask, token_type_ids=types).logits
        without = model(input_ids=ids[:2], attention_mask=mask[:2], token_type_ids=types[:2]).logits
    assert torch.isfinite(with_empty).all()
    assert torch.allclose(with_empty[:2], without, atol=1e-5)
    assert torch.allclose(with_empty, other_content, atol=1e-5)
    got = torch.from_numpy(onnx_session(result["path"]).run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()})[0])
    assert torch.allclose(got, with_empty, atol=1e-4)


def test_a_failed_export_leaves_no_graph(sentence_dir, tmp_path, monkeypatch):
    from muxplm.serving import onnx_export

    monkeypatch.setattr(onnx_export, "check_parity", lambda *args, **kwargs: 1.0)
    with pytest.raises(RuntimeError, match="differ"):
        export_onnx(sentence_dir, tmp_path, example_batch=4, example_length=12)
    assert not (tmp_path / "model.onnx").exists()
    assert not list(tmp_path.glob("*.tmp")) and not (tmp_path / "muxplm_onnx.json").exists()


def test_a_retrained_checkpoint_is_re_exported(tmp_path):
    from muxplm import MuxBertConfig, MuxBertForSequenceClassification
    from muxplm.serving.onnx_export import checkpoint_hash

    small = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=30522)
    config = MuxBertConfig(**small, num_instances=2, num_labels=2)
    folder = tmp_path / "model"
    torch.manual_seed(0)
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    first = OnnxPredictor.from_pretrained(folder)
    recorded = (folder / "onnx" / "muxplm_onnx.json").read_text()
    assert checkpoint_hash(folder) in recorded
    OnnxPredictor.from_pretrained(folder)  # unchanged checkpoint: the export is reused
    assert (folder / "onnx" / "muxplm_onnx.json").read_text() == recorded
    torch.manual_seed(1)  # retrained in place: the old export stays next to the new weights
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    second = OnnxPredictor.from_pretrained(folder)
    assert (folder / "onnx" / "muxplm_onnx.json").read_text() != recorded
    texts = ["a calm request", "another text", "the third"]
    assert [p["score"] for p in second.predict(texts)] == pytest.approx(
        [p["score"] for p in Predictor.from_pretrained(folder).predict(texts)], abs=1e-4)
    assert [p["score"] for p in second.predict(texts)] != pytest.approx([p["score"] for p in first.predict(texts)])


@pytest.mark.parametrize("fixture", ["sentence_dir", "token_dir", "pooled_dir"])
def test_the_export_runs_the_models_own_head(fixture, request, monkeypatch):
    """One head computation: the exported graph calls the model's ``slot_logits``, as the
    PyTorch forward does (a head changed in the model cannot drift from its export)."""
    from muxplm.serving.onnx_export import ExportableMuxClassifier

    model = Predictor.from_pretrained(request.getfixturevalue(fixture)).model
    calls = []
    original = model.slot_logits
    monkeypatch.setattr(model, "slot_logits", lambda *args: calls.append(1) or original(*args) + 1.0)
    ids = torch.randint(5, model.config.vocab_size, (3, 7))
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    with torch.no_grad():
        exported = ExportableMuxClassifier(model).eval()(ids, mask, types)
        forward = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    assert len(calls) == 2
    torch.testing.assert_close(exported, forward, atol=1e-5, rtol=1e-5)  # both shifted by the patched head
