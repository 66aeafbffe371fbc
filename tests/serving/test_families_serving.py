"""MUX classifiers of the RoBERTa and MPNet families served like MUX-BERT: their own tokenizer
found beside the checkpoint, ONNX export at parity with PyTorch, the ONNX predictor and the HTTP
app; and a checkpoint of theirs without its tokenizer refused rather than read with BERT's."""

from __future__ import annotations

import shutil

import pytest
import torch

from muxplm import FAMILIES
from muxplm.serving import Predictor, create_app
from muxplm.serving.onnx_export import OnnxPredictor, export_onnx, graph_feeds, onnx_session

from family_testing import mpnet_tokenizer, roberta_tokenizer, save_plain
from serving_testing import run_app

TEXTS = ["a gripping film", "dull", "an ordinary day", "bright and sad", "long", "short", "odd"]
LABELS = {0: "neg", 1: "neu", 2: "pos"}


@pytest.fixture(scope="module", params=["roberta", "mpnet"])
def classifier_dir(request, tmp_path_factory):
    """An N=2 sentence classifier warm-started from a random plain checkpoint of the family (its
    first layer unmuxed), saved with the family's tokenizer."""
    model_type = request.param
    tokenizer = roberta_tokenizer() if model_type == "roberta" else mpnet_tokenizer()
    plain = tmp_path_factory.mktemp(f"plain-{model_type}")
    # 130 positions: room for the predictor's default 128 tokens after the two RoBERTa/MPNet reserve.
    save_plain(model_type, plain, tokenizer=tokenizer, num_hidden_layers=2, max_position_embeddings=130)
    torch.manual_seed(0)
    model = FAMILIES[model_type].models["sentence"].from_encoder(
        plain, num_instances=2, demux_type="unbind", num_unmuxed_layers=1, num_labels=3, id2label=LABELS,
        label2id={name: index for index, name in LABELS.items()},
    )
    folder = tmp_path_factory.mktemp(f"classifier-{model_type}")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def onnx_vs_torch(model, path, batch, length, pad_id, seed):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, model.config.vocab_size, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[::2, length - 3 :] = 0
    ids = ids.masked_fill(mask == 0, pad_id)  # as the tokenizer pads: RoBERTa and MPNet number positions by it
    types = torch.zeros_like(ids)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    session = onnx_session(path)
    feeds = graph_feeds(session, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    got = session.run(None, feeds)[0]
    return float((torch.from_numpy(got) - expected).abs().max())


def test_the_predictor_uses_the_familys_own_tokenizer(classifier_dir):
    predictor = Predictor.from_pretrained(classifier_dir)
    family = predictor.model.config.model_type.removeprefix("mux_")
    assert type(predictor.model) is FAMILIES[family].models["sentence"]
    assert type(predictor.tokenizer).__name__ == {"roberta": "RobertaTokenizer", "mpnet": "MPNetTokenizer"}[family]
    assert predictor.pad_token_id == 1
    results = predictor.predict(TEXTS)
    assert len(results) == len(TEXTS) and all(r["label"] in LABELS.values() for r in results)
    ensembled = predictor.predict(TEXTS, mode="ensemble")
    assert [r["score"] for r in ensembled] != pytest.approx([r["score"] for r in results], abs=1e-6)


def test_onnx_export_matches_torch_and_serves(classifier_dir, tmp_path):
    result = export_onnx(classifier_dir, tmp_path, example_batch=4, example_length=12)
    assert result["max_abs_diff"] < 1e-4
    torch_predictor = Predictor.from_pretrained(classifier_dir)
    model = torch_predictor.model
    for batch, length in ((1, 5), (3, 19), (5, 30)):
        assert onnx_vs_torch(model, result["path"], batch, length, pad_id=1, seed=batch) < 1e-4
    # The tokenizer travels with the graph.
    assert (tmp_path / "tokenizer.json").is_file()
    onnx = OnnxPredictor.from_pretrained(classifier_dir, onnx_path=tmp_path / "model.onnx")
    expected, got = torch_predictor.predict(TEXTS), onnx.predict(TEXTS)
    assert [r["label"] for r in got] == [r["label"] for r in expected]
    assert [r["score"] for r in got] == pytest.approx([r["score"] for r in expected], abs=1e-4)


def test_the_http_app_serves_the_family(classifier_dir):
    app = create_app(Predictor.from_pretrained(classifier_dir, max_length=32), max_batch=8, max_wait_ms=2)

    async def scenario(client):
        return await client.post("/predict", json={"text": TEXTS[:3]}), await client.get("/health")

    answer, health = run_app(app, scenario)
    assert answer.status_code == 200 and len(answer.json()["predictions"]) == 3
    assert answer.json()["num_instances"] == 2
    assert health.json()["model"]["labels"] == ["neg", "neu", "pos"]


def test_a_checkpoint_without_its_tokenizer_is_refused(classifier_dir, tmp_path):
    for name in ("config.json", "model.safetensors"):
        shutil.copy(classifier_dir / name, tmp_path / name)
    with pytest.raises(ValueError, match="no tokenizer, and the default tokenizer .* is not that family's"):
        Predictor.from_pretrained(tmp_path)
    assert Predictor.from_pretrained(tmp_path, tokenizer_path=classifier_dir).predict("fine")[0]["label"]
