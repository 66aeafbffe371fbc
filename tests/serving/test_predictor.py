"""Predictor: outputs in input order, both modes, pairs, regression, token tags, length
limits, tokenizer fallback, Transformers pipelines; and the batcher's load-adaptive ensembling."""

from __future__ import annotations

import pytest
import torch
from transformers import pipeline

from muxplm.serving import DynamicBatcher, InputTooLongError, Predictor

TEXTS = [
    "a gripping and funny film",
    "the plot drags on forever",
    "an ordinary afternoon",
    "brilliant acting, weak script",
    "i would not watch it again",
    "the soundtrack is lovely",
    "unbelievably tedious",
]


def model_logits(predictor, texts, pairs=None, **kwargs):
    batch = predictor.tokenizer(texts, pairs, padding=True, return_tensors="pt", return_token_type_ids=True)
    with torch.no_grad():
        return predictor.model(**batch, **kwargs).logits


def test_sentence_predictions_match_the_model_in_input_order(sentence_dir):
    predictor = Predictor.from_pretrained(sentence_dir)
    results = predictor.predict(TEXTS)
    probs = model_logits(predictor, TEXTS).softmax(-1)
    assert [r["label"] for r in results] == [["neg", "neu", "pos"][i] for i in probs.argmax(-1).tolist()]
    assert torch.allclose(torch.tensor([r["score"] for r in results]), probs.max(-1).values, atol=1e-5)
    # A single text and a list of one give the same result.
    assert predictor.predict("unbelievably tedious") == predictor.predict(["unbelievably tedious"])


def test_chunking_keeps_order(sentence_dir):
    chunked = Predictor.from_pretrained(sentence_dir, batch_size=3)
    results = chunked.predict(TEXTS)
    expected = torch.cat([model_logits(chunked, TEXTS[i : i + 3]) for i in range(0, len(TEXTS), 3)]).softmax(-1)
    assert torch.allclose(torch.tensor([r["score"] for r in results]), expected.max(-1).values, atol=1e-5)


def test_ensemble_mode_averages_copies_like_the_model(sentence_dir):
    predictor = Predictor.from_pretrained(sentence_dir)
    results = predictor.predict(TEXTS, mode="ensemble")
    expected = model_logits(predictor, TEXTS, ensemble=True).softmax(-1)
    plain = model_logits(predictor, TEXTS).softmax(-1)
    got = torch.tensor([r["score"] for r in results])
    assert torch.allclose(got, expected.max(-1).values, atol=1e-5)
    assert not torch.allclose(got, plain.max(-1).values, atol=1e-4)
    with pytest.raises(ValueError, match="mode"):
        predictor.predict(TEXTS, mode="fast")


def test_pairs_and_regression(regression_dir):
    predictor = Predictor.from_pretrained(regression_dir)
    pairs = [("a man plays a guitar", "someone plays music"), ("a cat sleeps", "the market is busy")]
    results = predictor.predict(pairs)
    expected = model_logits(predictor, [p[0] for p in pairs], [p[1] for p in pairs])[:, 0]
    assert [set(r) for r in results] == [{"score"}, {"score"}]
    assert torch.allclose(torch.tensor([r["score"] for r in results]), expected, atol=1e-5)
    encoded = predictor.encode([pairs[0][0]], [pairs[0][1]])[0]
    assert 1 in encoded.token_type_ids  # the second segment is typed
    with pytest.raises(ValueError, match="pair"):
        predictor.predict([pairs[0], "a lone text"])


def test_token_tags_at_first_subwords(token_dir):
    predictor = Predictor.from_pretrained(token_dir)
    sentences = ["unbelievably tedious screenplays here", "Paris is nice"]
    results = predictor.predict(sentences)
    words = [s.split() for s in sentences]
    batch = predictor.tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = predictor.model(**batch).logits
    for row, result in enumerate(results):
        assert result["words"] == words[row]
        word_ids = batch.word_ids(row)
        firsts = [word_ids.index(w) for w in range(len(words[row]))]
        assert firsts != list(range(1, len(words[row]) + 1)) or row == 1  # row 0 has multi-piece words
        expected = [predictor.model.config.id2label[int(i)] for i in logits[row, firsts].argmax(-1)]
        assert result["tags"] == expected


def test_length_limit_and_truncation(sentence_dir, token_dir):
    predictor = Predictor.from_pretrained(sentence_dir, max_length=16)
    long_text = "word " * 40
    with pytest.raises(InputTooLongError, match="42 tokens"):
        predictor.predict(["short", long_text])
    (result,) = predictor.predict(long_text, truncate=True)
    assert result["label"] in {"neg", "neu", "pos"}
    assert len(predictor.encode([long_text], truncate=True)[0]) == 16
    with pytest.raises(ValueError, match="empty"):
        predictor.predict(["fine", "   "])

    tagger = Predictor.from_pretrained(token_dir, max_length=8)
    (tags,) = tagger.predict("one two three four five six seven eight nine ten", truncate=True)
    assert tags["tags"][:6] != [None] * 6 and tags["tags"][6:] == [None] * 4


def test_default_tokenizer_fallback(sentence_dir):
    assert not (sentence_dir / "tokenizer.json").exists()
    predictor = Predictor.from_pretrained(sentence_dir)
    assert predictor.tokenizer.vocab_size == 30522 and predictor.tokenizer.is_fast


def test_transformers_pipeline(sentence_dir):
    predictor = Predictor.from_pretrained(sentence_dir)
    classify = pipeline("text-classification", model=predictor.model, tokenizer=predictor.tokenizer)
    (piped,) = classify(["a gripping and funny film"])
    (ours,) = predictor.predict("a gripping and funny film")
    assert piped["label"] == ours["label"] and piped["score"] == pytest.approx(ours["score"], abs=1e-5)
    assert predictor.pipeline()("a gripping and funny film")[0]["label"] == ours["label"]


def test_batcher_fills_empty_slots_with_averaged_copies(sentence_dir):
    predictor = Predictor.from_pretrained(sentence_dir)
    assert predictor.num_instances == 5
    encoded = predictor.encode(["a lonely request"])
    batcher = DynamicBatcher(predictor, max_wait_ms=0).start()
    try:
        (output,) = batcher.submit(encoded).result(timeout=30)
    finally:
        batcher.close()
    copies = model_logits(predictor, ["a lonely request"] * 5)
    alone = model_logits(predictor, ["a lonely request"])[0]
    assert torch.allclose(output, copies.mean(0), atol=1e-5)
    assert not torch.allclose(output, alone, atol=1e-4)  # it really used the copies, not fillers
    # The copies sit in different slots, so they disagree: the average is not just one of them.
    assert (copies - copies[0]).abs().max() > 1e-4

    no_fill = DynamicBatcher(predictor, max_wait_ms=0, fill_slots=False).start()
    try:
        (output,) = no_fill.submit(encoded).result(timeout=30)
    finally:
        no_fill.close()
    assert torch.allclose(output, alone, atol=1e-5)


def test_device_and_dtype_are_honoured_or_refused_clearly(sentence_dir, monkeypatch, native_bf16):
    from muxplm import devices
    from muxplm.devices import resolve_device

    full = Predictor.from_pretrained(sentence_dir, max_length=32)
    half = Predictor.from_pretrained(sentence_dir, max_length=32, dtype="bfloat16")
    assert next(half.model.parameters()).dtype == torch.bfloat16 and half.device.type == "cpu"
    texts = ["a calm request", "another one", "a third text"]
    expected = [p["score"] for p in full.predict(texts)]
    got = [p["score"] for p in half.predict(texts)]
    assert all(abs(a - b) < 0.05 for a, b in zip(expected, got))
    with pytest.raises(ValueError, match="float16 inference needs a CUDA device; on CPU use float32 or bfloat16"):
        resolve_device("cpu", "float16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda", "float32")
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu9", "float32")
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_device("cpu", "int8")
    monkeypatch.setattr(devices, "cpu_runs_bf16_natively", lambda: False)
    with pytest.raises(ValueError, match="--dtype bfloat16 on this CPU: it has no native bf16.*use --dtype float32"):
        Predictor.from_pretrained(sentence_dir, max_length=32, dtype="bfloat16")
    with pytest.raises(ValueError, match=r"on CPU use float32 \(this CPU has no native bf16\)"):
        resolve_device("cpu", "float16")  # not pointed at the bfloat16 it would refuse next


def test_without_a_device_a_command_takes_the_gpu_its_runtime_can_use(monkeypatch, tmp_path):
    from muxplm import devices
    from muxplm.cli import main
    from muxplm.predict import run
    from muxplm.serving import server
    from muxplm.training import evaluate

    class Loaded(Exception):
        pass

    placed = {}

    def where(command):
        def load(*args, device=None, **kwargs):
            placed[command] = device
            raise Loaded

        return load

    monkeypatch.setattr(server, "serve", where("serve"))
    monkeypatch.setattr(evaluate, "evaluate_checkpoint", where("evaluate"))
    monkeypatch.setattr(run, "load_labeller", where("predict"))  # after the workers are planned on the device
    (tmp_path / "in.jsonl").write_text('{"text": "a text"}\n')
    commands = {"serve": ["serve", "ckpt"], "evaluate": ["evaluate", "ckpt", "--task", "sentiment"],
                "predict": ["predict", "ckpt", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "o.jsonl")]}
    runtime_flag = {"serve": "--backend", "evaluate": "--runtime", "predict": "--backend"}
    for gpu, expected in ((True, "cuda"), (False, "cpu")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: int(gpu))
        for command, argv in commands.items():
            for extra, device in (([], expected), (["--quantize", "int8"], "cpu"), ([runtime_flag[command], "onnx"], "cpu"),
                                  (["--device", "cpu"], "cpu")):
                placed.clear()
                with pytest.raises(Loaded):
                    main(argv + extra)
                assert placed == {command: device}, (command, extra)
    assert devices.default_device() == "cpu"  # this machine


def test_a_lone_request_shares_its_group_with_recent_traffic(sentence_dir):
    predictor = Predictor.from_pretrained(sentence_dir)  # N = 5
    earlier = ["the first request", "a second one", "and a third"]
    batcher = DynamicBatcher(predictor, max_wait_ms=0, companions=8).start()
    try:
        batcher.submit(predictor.encode(earlier)).result(timeout=30)
        (output,) = batcher.submit(predictor.encode(["a lonely request"])).result(timeout=30)
    finally:
        batcher.close()
    # The newest served instances, newest first, fill the four spare slots (cycling when fewer).
    group = ["a lonely request", "and a third", "a second one", "the first request", "and a third"]
    assert torch.allclose(output, model_logits(predictor, group)[0], atol=1e-5)
    assert not torch.allclose(output, model_logits(predictor, ["a lonely request"] * 5).mean(0), atol=1e-4)


def _eager_graph(monkeypatch):
    """torch.compile as the Predictor calls it, captured whole (fullgraph: any host read or graph
    break fails) and run by the eager backend, so the test takes seconds, not an Inductor build."""
    calls = []
    real = torch.compile

    def capture(model, **kwargs):
        calls.append(kwargs)
        return real(model, fullgraph=True, backend="eager", dynamic=kwargs.get("dynamic"))

    monkeypatch.setattr(torch, "compile", capture)
    return calls


@pytest.mark.parametrize("mode", ["throughput", "ensemble"])
def test_a_compiled_predictor_pads_to_few_shapes_and_predicts_the_same(sentence_dir, token_dir, monkeypatch, mode):
    calls = _eager_graph(monkeypatch)
    for folder, texts in ((sentence_dir, TEXTS), (token_dir, ["the cat sat", "a dog barked at the moon", "hi"])):
        plain = Predictor.from_pretrained(folder, max_length=40)
        compiled = Predictor.from_pretrained(folder, max_length=40, compile="default")
        assert compiled.describe()["compile"] == "default" and calls[-1]["mode"] == "default"
        encoded = compiled.encode(texts)
        rows, length = compiled.pass_shape(encoded, ensemble=mode == "ensemble")
        n = compiled.num_instances
        longest = max(len(item) for item in encoded)
        if mode == "throughput":  # length bucketed, empty rows to a power of two of groups
            assert rows % n == 0 and (rows // n) & (rows // n - 1) == 0 and rows >= len(texts)
            assert length in (16, 32, 40) and length >= longest
        else:  # run eagerly: the copies' layout depends on the number of groups
            assert (rows, length) == (len(texts), longest)
        assert plain.pass_shape(encoded) == (len(texts), longest)
        for want, got in zip(plain.run(plain.encode(texts), ensemble=mode == "ensemble"),
                             compiled.run(encoded, ensemble=mode == "ensemble")):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_compile_modes_are_checked_and_batch_sizes_follow_the_device(sentence_dir):
    from muxplm.devices import default_batch_size

    with pytest.raises(ValueError, match="compile must be one of"):
        Predictor.from_pretrained(sentence_dir, compile="fast")
    with pytest.raises(ValueError, match="CUDA graphs"):
        Predictor.from_pretrained(sentence_dir, compile="reduce-overhead")
    with pytest.raises(ValueError, match="int8"):
        Predictor.from_pretrained(sentence_dir, compile="default", quantize="int8")
    assert Predictor.from_pretrained(sentence_dir).batch_size == 64  # N = 5 on a CPU
    assert Predictor.from_pretrained(sentence_dir, batch_size=10).batch_size == 10
    assert default_batch_size("cuda", 5) == 640 and default_batch_size("cpu", 10) == 64


def test_a_compiled_predictor_runs_through_inductor(sentence_dir):
    """The real compiler once (CPU Inductor): same predictions as the model run eagerly."""
    plain = Predictor.from_pretrained(sentence_dir, max_length=16)
    compiled = Predictor.from_pretrained(sentence_dir, max_length=16, compile="default")
    for want, got in zip(plain.predict(TEXTS), compiled.predict(TEXTS)):
        assert want["label"] == got["label"] and abs(want["score"] - got["score"]) < 1e-4
