"""The command line with encoder families beyond BERT: a tiny random RoBERTa and MPNet through
``muxplm convert`` -> ``muxplm finetune`` -> ``muxplm evaluate`` -> the predictor, each with
the tokenizer saved beside the plain checkpoint; ``--init-encoder`` dispatching on the plain
checkpoint's model_type; and the refusals that list the supported families."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer, DebertaV2Config, DebertaV2Model

from muxplm import FAMILIES
from muxplm.cli import main
from muxplm.data import load_tokenizer
from muxplm.serving import Predictor, create_app
from muxplm.training.config import build_config
from muxplm.training.models import build_model

from family_testing import mpnet_tokenizer, roberta_tokenizer, save_plain
from serving_testing import run_app
from training_utils import MICRO_MODEL

CORPUS = ["--max-length", "32", "--corpus-sources", "moby_dick", "--corpus-max-words", "6000", "--logging-steps", "1",
          "--no-progress"]
CLASSIFIER = {"roberta": "MuxRobertaForSequenceClassification", "mpnet": "MuxMPNetForSequenceClassification"}
ROWS = [("a wonderful , moving film", "pos"), ("dull and far too long", "neg"), ("a joy to watch", "pos"),
        ("the plot makes no sense", "neg")]


@pytest.fixture
def sentiment_csv(tmp_path):
    train, valid = tmp_path / "train.csv", tmp_path / "valid.csv"
    train.write_text("text,label\n" + "".join(f'"{text}",{label}\n' for text, label in ROWS * 6))
    valid.write_text("text,label\n" + "".join(f'"{text}",{label}\n' for text, label in ROWS * 2))
    return str(train), str(valid)


def _run(capsys, argv) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize("model_type, make_tokenizer", [("roberta", roberta_tokenizer), ("mpnet", mpnet_tokenizer)])
def test_convert_finetune_evaluate_and_serve(model_type, make_tokenizer, sentiment_csv, tmp_path, capsys):
    tokenizer = make_tokenizer()
    plain, mux, tuned = tmp_path / "plain", tmp_path / "mux", tmp_path / "tuned"
    save_plain(model_type, plain, tokenizer=tokenizer, num_hidden_layers=2, max_position_embeddings=66)
    out = _run(capsys, ["convert", str(plain), "--num-instances", "2", "--output-dir", str(mux), "--max-steps", "2",
                        "--batch-groups", "4", "--eval-steps", "2", "--save-steps", "2", *CORPUS])
    assert "muxplm finetune --init" in out
    saved = json.loads((mux / "config.json").read_text())
    assert saved["model_type"] == f"mux_{model_type}" and saved["num_instances"] == 2
    assert saved["num_unmuxed_layers"] == 1 and saved["vocab_size"] == len(tokenizer)
    # The run trained and saved with the plain checkpoint's own tokenizer, not the default (BERT's).
    assert AutoTokenizer.from_pretrained(mux).get_vocab() == tokenizer.get_vocab()

    train, valid = sentiment_csv
    _run(capsys, ["finetune", "--init", str(mux), "--train-file", train, "--validation-file", valid, "--output-dir",
                  str(tuned), "--max-steps", "2", "--eval-steps", "2", "--batch-size", "8", "--max-length", "32",
                  "--no-progress"])
    assert json.loads((tuned / "config.json").read_text())["architectures"] == [CLASSIFIER[model_type]]
    _run(capsys, ["evaluate", str(tuned), "--validation-file", valid, "--seeds", "2", "--max-length", "32"])
    result = json.loads((tuned / "eval_results.json").read_text())
    assert result["num_instances"] == 2 and result["num_examples"] == 8 and len(result["per_seed"]) == 2

    predictor = Predictor.from_pretrained(tuned, max_length=32)
    assert predictor.tokenizer.get_vocab() == tokenizer.get_vocab()
    assert {r["label"] for r in predictor.predict([text for text, _ in ROWS])} <= {"pos", "neg"}
    app = create_app(predictor, max_batch=4, max_wait_ms=2)
    answer = run_app(app, lambda client: client.post("/predict", json={"text": ["a joy", "dull"]}))
    assert answer.status_code == 200 and len(answer.json()["predictions"]) == 2


def test_finetune_init_encoder_dispatches_on_the_plain_model_type(sentiment_csv, tmp_path, capsys):
    """A plain DistilBERT (BERT's vocabulary: the default tokenizer stands in) fine-tunes as
    MUX-DistilBERT, its layers cut; a plain RoBERTa without its tokenizer is refused."""
    save_plain("distilbert", tmp_path / "distil", vocab_size=30522, max_position_embeddings=64)
    train, valid = sentiment_csv
    out = tmp_path / "tuned"
    _run(capsys, ["finetune", "--init-encoder", str(tmp_path / "distil"), "--keep-layers", "2", "--num-instances", "2",
                  "--num-unmuxed-layers", "1", "--train-file", train, "--validation-file", valid, "--output-dir",
                  str(out), "--max-steps", "1", "--eval-steps", "1", "--batch-size", "8", "--max-length", "32",
                  "--no-progress"])
    saved = json.loads((out / "config.json").read_text())
    assert saved["model_type"] == "mux_distilbert" and saved["n_layers"] == 2 and saved["num_unmuxed_layers"] == 1
    assert saved["architectures"] == ["MuxDistilBertForSequenceClassification"]

    save_plain("roberta", tmp_path / "roberta", vocab_size=300)
    assert main(["finetune", "--init-encoder", str(tmp_path / "roberta"), "--train-file", train, "--output-dir",
                 str(tmp_path / "x"), "--max-steps", "1", "--no-progress"]) == 2
    assert "no tokenizer, and the default tokenizer" in capsys.readouterr().err


def test_unsupported_encoders_are_refused_with_the_supported_families(sentiment_csv, tmp_path, capsys):
    torch.manual_seed(0)
    DebertaV2Model(DebertaV2Config(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=64)).save_pretrained(tmp_path / "deberta")
    supported = "bert, electra, roberta (roberta / xlm-roberta / camembert), distilbert, mpnet"
    refused = main(["convert", str(tmp_path / "deberta"), "--num-instances", "2", "--output-dir", str(tmp_path / "x")])
    assert refused == 2
    err = capsys.readouterr().err
    assert "'deberta-v2' model" in err and supported in err
    train, _ = sentiment_csv
    assert main(["finetune", "--init-encoder", str(tmp_path / "deberta"), "--train-file", train, "--output-dir",
                 str(tmp_path / "y"), "--max-length", "32", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "'deberta-v2' model" in err and supported in err


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_fresh_preset_model_of_every_family_and_its_pretraining_stage(family):
    tokenizer = load_tokenizer()
    settings = dict(preset="tiny", family=family, model_overrides=MICRO_MODEL, num_instances=2, output_dir="unused")
    model = build_model(build_config(stage="retrieval", **settings), "retrieval", tokenizer, {}, None)
    assert type(model) is FAMILIES[family].models["retrieval"]
    assert (model.config.hidden_size, model.config.num_hidden_layers, model.config.intermediate_size) == (64, 2, 128)
    assert model.config.vocab_size == len(tokenizer) and model.config.demux_type == "unbind"
    stage = FAMILIES[family].pretraining_stage
    assert type(build_model(build_config(stage=stage, **settings), stage, tokenizer, {}, None)) is \
        FAMILIES[family].models[stage]
    other = "electra" if stage == "mlm" else "mlm"
    with pytest.raises(ValueError, match=f"MUX-{family.upper()} pre-trains with --stage {stage}"):
        build_model(build_config(stage=other, **settings), other, tokenizer, {}, None)
