"""Evaluation and the server predict through one inference path (:mod:`muxplm.inference`): for the
same composition seed and batch size, the predictions that ``evaluate`` scores on a dev file are
the labels the :class:`~muxplm.serving.Predictor` answers for the same texts, for a sentence and a
token classifier (N > 1), in PyTorch and in ONNX Runtime, and for a released model, whose inputs
the shared path pads to a fixed length."""

from __future__ import annotations

import random

import pytest
import torch
from released_testing import BERT_VOCABULARY, released_folder

from muxplm import MuxBertConfig, MuxBertForSequenceClassification, MuxBertForTokenClassification
from muxplm.checkpoints import load_model
from muxplm.data import load_tokenizer
from muxplm.serving import Predictor
from muxplm.training import load_task_features
from muxplm.training.evaluate import dev_predictions, evaluate_model, score

# Weights ten times the usual spread: a random classifier whose labels vary with its input.
SMALL = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128,
         "initializer_range": 0.2}
BATCH = 8  # 22 rows: passes of 8, 8 and 6, none a multiple of N = 3
SEEDS = (0, 1, 2)
WORDS = ["film", "story", "actor", "plot", "scene", "music", "ending", "dull", "moving", "brilliant", "slow",
         "funny", "long", "short", "bright", "dark", "warm", "cold", "quiet", "loud"]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def _sentences(count: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    return [rng.choices(WORDS, k=rng.randint(2, 9)) for _ in range(count)]


def _sentence_file(path, labels: list[str]):
    rows = [(" ".join(words), labels[i % len(labels)]) for i, words in enumerate(_sentences(22))]
    path.write_text("text,label\n" + "".join(f'"{text}",{label}\n' for text, label in rows))
    return path, [text for text, _ in rows]


@pytest.fixture(scope="module")
def sentence_dir(tmp_path_factory, tokenizer):
    """An N = 3 sentence classifier with three named labels."""
    torch.manual_seed(0)
    names = ["neg", "neu", "pos"]
    config = MuxBertConfig.from_preset("tiny", **SMALL, num_instances=3, num_labels=3,
                                       id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    folder = tmp_path_factory.mktemp("sentence")
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def token_dir(tmp_path_factory, tokenizer):
    """An N = 2 token classifier with three tags."""
    torch.manual_seed(1)
    names = ["O", "B-X", "I-X"]
    config = MuxBertConfig.from_preset("tiny", **SMALL, num_instances=2, num_labels=3, demux_type="unbind",
                                       id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    folder = tmp_path_factory.mktemp("token")
    MuxBertForTokenClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _evaluated_labels(model, dev_file, tokenizer, seed: int, kind: str = "sentence") -> list:
    """The labels that evaluation scores for every dev row under ``seed``: one per text (sentence
    tasks) or the list of one per word (token tasks)."""
    label_names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    spec, features = load_task_features(tokenizer, validation_file=str(dev_file), task_kind=kind,
                                        label_names=label_names, splits=("validation",))
    rows = features["validation"]
    predictions, golds = dev_predictions(model, spec, rows, tokenizer, BATCH, composition_seed=seed)
    # What evaluate reports is the score of exactly these predictions.
    assert score(spec, predictions, golds) == evaluate_model(model, spec, rows, tokenizer, BATCH, composition_seed=seed)
    if kind == "token":  # the words' first sub-words: the labelled positions
        return [[label_names[p] for p, g in zip(row, gold) if g != -100] for row, gold in zip(predictions, golds)]
    return [label_names[p] for p in predictions]


def test_evaluate_predicts_what_the_predictor_answers_for_a_sentence_classifier(sentence_dir, tokenizer, tmp_path):
    dev_file, texts = _sentence_file(tmp_path / "dev.csv", ["neg", "neu", "pos"])
    model = load_model(sentence_dir)
    predictor = Predictor.from_pretrained(sentence_dir, batch_size=BATCH)
    served = {seed: [p["label"] for p in predictor.predict(texts, composition_seed=seed)] for seed in SEEDS}
    for seed in SEEDS:
        assert _evaluated_labels(model, dev_file, tokenizer, seed) == served[seed]
    # The comparison means something: the labels vary, and so does the composition with the seed.
    assert len(set(served[0])) > 1
    assert len({tuple(labels) for labels in served.values()}) > 1


def test_evaluate_predicts_what_the_predictor_answers_for_a_token_classifier(token_dir, tokenizer, tmp_path):
    sentences = _sentences(22, seed=1)
    tags = ["O", "B-X", "I-X"]
    dev_file = tmp_path / "dev.conll"
    dev_file.write_text("".join("".join(f"{word}\t{tags[(i + j) % 3]}\n" for j, word in enumerate(words)) + "\n"
                                for i, words in enumerate(sentences)))
    model = load_model(token_dir)
    predictor = Predictor.from_pretrained(token_dir, batch_size=BATCH)
    texts = [" ".join(words) for words in sentences]
    served = {seed: [p["tags"] for p in predictor.predict(texts, composition_seed=seed)] for seed in SEEDS}
    for seed in SEEDS:
        assert _evaluated_labels(model, dev_file, tokenizer, seed, kind="token") == served[seed]
    assert len({tag for row in served[0] for tag in row}) > 1
    assert len({str(labels) for labels in served.values()}) > 1


def test_evaluate_in_onnx_runtime_predicts_what_the_onnx_predictor_answers(sentence_dir, tokenizer, tmp_path):
    from muxplm.serving.onnx_export import OnnxPredictor, OnnxRuntimeClassifier, export_graph

    dev_file, texts = _sentence_file(tmp_path / "dev.csv", ["neg", "neu", "pos"])
    model = load_model(sentence_dir)
    graph = export_graph(model, tmp_path / "model.onnx")["path"]
    served = OnnxPredictor(model, tokenizer, graph, batch_size=BATCH)
    for seed in (0, 1):
        evaluated = _evaluated_labels(OnnxRuntimeClassifier(graph, model.config), dev_file, tokenizer, seed)
        assert evaluated == [p["label"] for p in served.predict(texts, composition_seed=seed)]


def test_a_released_model_is_padded_alike_in_evaluate_and_the_predictor(tmp_path, tokenizer):
    folder = released_folder(tmp_path, "bert-sequence-hadamard-indexpos-2", BERT_VOCABULARY)
    dev_file, texts = _sentence_file(tmp_path / "dev.csv", ["LABEL_0", "LABEL_1", "LABEL_2"])
    model = load_model(folder)
    predictor = Predictor.from_pretrained(folder, batch_size=BATCH)
    assert predictor.collate(predictor.encode(texts[:2]))["input_ids"].shape == (2, 128)
    for seed in (0, 1):
        assert _evaluated_labels(model, dev_file, tokenizer, seed) == \
            [p["label"] for p in predictor.predict(texts, composition_seed=seed)]
