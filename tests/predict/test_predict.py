"""`muxplm predict`: every input format, order and ids, resuming, bad rows, the deterministic and
seeded compositions, worker processes, and the predictions of the shared inference path."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from predict_testing import make_texts, predict, read_jsonl, run_predict, write_jsonl

from muxplm.predict import outputs as predict_outputs
from muxplm.predict.run import plan_workers


# ------------------------------------------------------------------ formats, order, ids


def test_every_input_format_gives_the_same_predictions(classifier_dir, tmp_path):
    texts = make_texts(40)
    ids = [f"doc-{i}" for i in range(len(texts))]
    write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t} for i, t in zip(ids, texts)])
    (tmp_path / "in.jsonl.gz").write_bytes(gzip.compress((tmp_path / "in.jsonl").read_bytes()))
    (tmp_path / "in.csv").write_text("id,text\n" + "".join(f'{i},"{t}"\n' for i, t in zip(ids, texts)))
    (tmp_path / "in.tsv").write_text("id\ttext\n" + "".join(f"{i}\t{t}\n" for i, t in zip(ids, texts)))
    pq.write_table(pa.table({"id": ids, "text": texts}), tmp_path / "in.parquet")
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts))

    reference = predict(classifier_dir, [tmp_path / "in.jsonl"], tmp_path / "jsonl.jsonl", "--id-column", "id")
    assert [r["id"] for r in reference] == ids and [r["row"] for r in reference] == list(range(len(texts)))
    assert {r["label"] for r in reference} <= {"neg", "neu", "pos"}
    for name in ("in.jsonl.gz", "in.csv", "in.tsv", "in.parquet"):
        out = predict(classifier_dir, [tmp_path / name], tmp_path / f"{name}.out.jsonl", "--id-column", "id")
        assert out == reference, name
    from_text = predict(classifier_dir, [tmp_path / "in.txt"], tmp_path / "txt.jsonl")
    assert from_text == [{k: v for k, v in r.items() if k != "id"} for r in reference]
    (tmp_path / "in.log").write_bytes((tmp_path / "in.txt").read_bytes())  # an extension that tells nothing
    assert predict(classifier_dir, [tmp_path / "in.log"], tmp_path / "log.jsonl", "--input-format", "txt") == from_text
    as_parquet = predict(classifier_dir, [tmp_path / "in.jsonl"], tmp_path / "out.parquet", "--id-column", "id")
    assert as_parquet == reference


def test_a_parquet_output_without_records_has_the_columns_of_one_with_records(classifier_dir, tagger_dir, tmp_path):
    write_jsonl(tmp_path / "good.jsonl", [{"id": "a", "text": "a fine film"}])
    write_jsonl(tmp_path / "bad.jsonl", [{"id": "b", "text": ""}, {"id": "c", "text": "  "}])
    (tmp_path / "empty.jsonl").write_text("")
    flags = ("--id-column", "id", "--top-k", "2", "--return-all-scores", "--on-bad-row", "truncate")
    predict(classifier_dir, [tmp_path / "good.jsonl"], tmp_path / "good.parquet", *flags)
    expected = pq.read_schema(tmp_path / "good.parquet")
    assert expected.names == ["row", "id", "label", "score", "top_labels", "top_scores", "all_scores", "truncated"]
    for name in ("bad", "empty"):
        assert predict(classifier_dir, [tmp_path / f"{name}.jsonl"], tmp_path / f"{name}.parquet", *flags) == []
        schema = pq.read_schema(tmp_path / f"{name}.parquet")
        assert schema.names == expected.names and schema.field("id").type == pa.null()  # no id to tell its type
        assert [field.type for field in schema if field.name != "id"] == \
            [field.type for field in expected if field.name != "id"], name
    predict(classifier_dir, [tmp_path / "empty.jsonl"], tmp_path / "plain.parquet")
    assert pq.read_schema(tmp_path / "plain.parquet").names == ["row", "label", "score"]
    predict(tagger_dir, [tmp_path / "good.jsonl"], tmp_path / "tags.parquet")
    predict(tagger_dir, [tmp_path / "empty.jsonl"], tmp_path / "no-tags.parquet")
    assert pq.read_schema(tmp_path / "no-tags.parquet") == pq.read_schema(tmp_path / "tags.parquet")


def test_ids_of_mixed_kinds_are_refused_for_parquet_naming_the_row(classifier_dir, tmp_path):
    texts = make_texts(5, seed=14)
    write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts[:4])]
                + [{"id": "x", "text": texts[4]}])  # in the third part of 2 rows
    status, _, stderr = run_predict(str(classifier_dir), "--input", str(tmp_path / "in.jsonl"), "--output",
                                    str(tmp_path / "out.parquet"), "--id-column", "id", "--part-size", "2")
    assert status == 2 and not (tmp_path / "out.parquet").exists()
    assert f"--id-column id: {tmp_path / 'in.jsonl'}, row 4 of the file has the id 'x' (text) but" in stderr
    assert "Parquet output holds ids of one kind" in stderr
    # JSON keeps each id's own type; integers and fractions make one Parquet column of floats.
    assert [r["id"] for r in predict(classifier_dir, [tmp_path / "in.jsonl"], tmp_path / "out.jsonl", "--id-column",
                                     "id")] == [0, 1, 2, 3, "x"]
    write_jsonl(tmp_path / "numbers.jsonl", [{"id": 1, "text": texts[0]}, {"id": 2.5, "text": texts[1]}])
    assert [r["id"] for r in predict(classifier_dir, [tmp_path / "numbers.jsonl"], tmp_path / "numbers.parquet",
                                     "--id-column", "id")] == [1.0, 2.5]


def test_several_files_and_globs_are_read_in_order_and_numbered_across_files(classifier_dir, tmp_path):
    texts = make_texts(30, seed=1)
    for index, start in enumerate((0, 10, 20)):
        write_jsonl(tmp_path / f"shard-{index}.jsonl", [{"text": t} for t in texts[start : start + 10]])
    out = predict(classifier_dir, [tmp_path / "shard-2.jsonl", tmp_path / "shard-[01].jsonl"], tmp_path / "out.jsonl",
                  "--deterministic")
    alone = predict(classifier_dir, [tmp_path / "shard-2.jsonl"], tmp_path / "alone.jsonl", "--deterministic")
    assert [r["row"] for r in out] == list(range(30))
    assert out[:10] == alone  # shard-2 first, as given; the glob's matches follow, sorted
    # A file named twice (by its path, then by a glob, through another path) is read once, where first named.
    twice = predict(classifier_dir, [tmp_path / "shard-2.jsonl", tmp_path / "shard-*.jsonl",
                                     tmp_path / "." / "shard-0.jsonl"], tmp_path / "twice.jsonl", "--deterministic")
    assert twice == out


def test_length_grouping_keeps_each_prediction_with_its_row(tagger_dir, tmp_path):
    # A token classifier returns each row's words: every output row must hold its own text's words.
    texts = make_texts(70, seed=2)
    write_jsonl(tmp_path / "in.jsonl", [{"key": 1000 + i, "sentence": t} for i, t in enumerate(texts)])
    out = predict(tagger_dir, [tmp_path / "in.jsonl"], tmp_path / "out.jsonl", "--text-column", "sentence",
                  "--id-column", "key", "--part-size", "32", "--batch-size", "9")
    assert [r["id"] for r in out] == [1000 + i for i in range(70)]
    assert [r["words"] for r in out] == [t.split() for t in texts]
    assert all(len(r["tags"]) == len(r["words"]) and set(r["tags"]) <= {"O", "B-X", "I-X"} for r in out)


# ------------------------------------------------------------------ resume


def test_a_killed_run_resumes_without_redoing_or_duplicating_rows(classifier_dir, tmp_path, monkeypatch):
    from muxplm.predict import LabelSettings, predict_files
    from muxplm.predict.sources import Columns

    records = [{"id": i, "text": t} for i, t in enumerate(make_texts(111, seed=3))] + [{"id": -1, "text": ""}]
    records[5]["text"] = ""  # a bad row in part 0: its errors file is not a part
    write_jsonl(tmp_path / "in.jsonl", records)
    (tmp_path / "tail.csv").write_text("id,text\n1,a,b\n2,c,d\n")  # lines without a row, after part 6 (7 x 16 rows)
    inputs = [tmp_path / "in.jsonl", tmp_path / "tail.csv"]
    flags = ("--id-column", "id", "--part-size", "16")
    whole = predict(classifier_dir, inputs, tmp_path / "whole.jsonl", *flags)

    written = []
    write = predict_outputs.PartFiles.write

    def dies_after_three_parts(self, part):
        if len(written) == 3:
            raise KeyboardInterrupt  # as a kill would stop it: between two parts
        write(self, part)
        written.append(part.index)

    monkeypatch.setattr(predict_outputs.PartFiles, "write", dies_after_three_parts)
    output = tmp_path / "out.jsonl"
    input_args = ("--input", *map(str, inputs), "--output", str(output))
    with pytest.raises(KeyboardInterrupt):
        run_predict(str(classifier_dir), *input_args, *flags)
    assert not output.exists() and sorted(p.name for p in (tmp_path / "out.jsonl.parts").glob("part-??????.jsonl")) \
        == ["part-000000.jsonl", "part-000001.jsonl", "part-000002.jsonl"]
    assert (tmp_path / "out.jsonl.parts" / "part-000000.errors.jsonl").is_file()

    monkeypatch.setattr(predict_outputs.PartFiles, "write", lambda self, part: (written.append(part.index),
                                                                              write(self, part)))
    status, _, stderr = run_predict(str(classifier_dir), *input_args, *flags, "--composition-seed", "1")
    assert status == 2 and "interrupted run with other settings" in stderr  # not mixed with another seed
    written.clear()
    summary = predict_files(classifier_dir, map(str, inputs), output, columns=Columns(id="id"),
                            settings=LabelSettings(part_size=16), progress=False)
    assert written == [3, 4, 5, 6] and summary["resumed_parts"] == 3  # only the parts the kill left
    assert summary["labelled"] == 110 and summary["parts"] == 7
    assert output.read_bytes() == (tmp_path / "whole.jsonl").read_bytes() and read_jsonl(output) == whole
    assert not (tmp_path / "out.jsonl.parts").exists()
    assert (tmp_path / "out.errors.jsonl").read_bytes() == (tmp_path / "whole.errors.jsonl").read_bytes()
    assert [e.get("line") for e in read_jsonl(tmp_path / "out.errors.jsonl")] == [None, None, 2, 3]
    status, _, stderr = run_predict(str(classifier_dir), *input_args)
    assert status == 2 and "exists; pass --overwrite" in stderr


# ------------------------------------------------------------------ bad rows


def test_bad_rows_are_listed_skipped_truncated_or_fatal_as_asked(classifier_dir, tmp_path):
    good = make_texts(5, seed=4)
    lines = [json.dumps({"id": "a", "text": good[0]}).encode(), json.dumps({"id": "empty", "text": "  "}).encode(),
             b'{"id": "latin-1", "text": "caf\xe9"}', b"this is not JSON", json.dumps({"id": "no text"}).encode(),
             json.dumps({"id": "null", "text": None}).encode(), json.dumps({"id": "number", "text": 7}).encode(),
             json.dumps({"id": "long", "text": " ".join(["word"] * 80)}).encode(),
             json.dumps({"id": "controls", "text": "\u200b\u200b"}).encode(), json.dumps({"id": "b", "text": good[1]}).encode()]
    (tmp_path / "in.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (tmp_path / "in.csv").write_text(f'id,text\nc,"{good[2]}"\nd,"{good[3]}",extra field\ne,"{good[4]}"\n')
    inputs = [str(tmp_path / "in.jsonl"), str(tmp_path / "in.csv")]
    common = ("--id-column", "id", "--max-length", "32")

    status, stdout, _ = run_predict(str(classifier_dir), "--input", *inputs, "--output", str(tmp_path / "skip.jsonl"),
                                    *common)
    assert status == 0
    assert [r["id"] for r in read_jsonl(tmp_path / "skip.jsonl")] == ["a", "b", "c", "e"]
    errors = read_jsonl(tmp_path / "skip.errors.jsonl")
    # A line that is not UTF-8, or not JSON, has no id to read: its row number says which it is.
    rows = [e for e in errors if "kind" in e]
    assert [(e["id"], e["kind"]) for e in rows] == [
        ("empty", "empty"), (None, "unreadable"), (None, "unreadable"), ("no text", "unreadable"),
        ("null", "unreadable"), ("number", "unreadable"), ("long", "too_long"), ("controls", "invalid")]
    assert "not UTF-8" in rows[1]["error"] and "not JSON" in rows[2]["error"]
    assert [e["row"] for e in rows] == [1, 2, 3, 4, 5, 6, 7, 8] and {e["action"] for e in rows} == {"skipped"}
    malformed = [e for e in errors if "line" in e]
    assert len(malformed) == 1 and malformed[0]["file"].endswith("in.csv") and malformed[0]["line"] == 3
    assert "4 of 12 rows labelled" in stdout and "9 bad rows skipped" in stdout and "skip.errors.jsonl" in stdout

    status, stdout, _ = run_predict(str(classifier_dir), "--input", *inputs, "--output",
                                    str(tmp_path / "cut.jsonl"), *common, "--on-bad-row", "truncate")
    cut = {r["id"]: r for r in read_jsonl(tmp_path / "cut.jsonl")}
    assert status == 0 and list(cut) == ["a", "long", "b", "c", "e"] and cut["long"]["truncated"] is True
    assert not cut["a"]["truncated"] and "1 truncated" in stdout
    assert [e["action"] for e in read_jsonl(tmp_path / "cut.errors.jsonl") if e.get("id") == "long"] == ["truncated"]

    status, _, stderr = run_predict(str(classifier_dir), "--input", *inputs, "--output", str(tmp_path / "fail.jsonl"),
                                    *common, "--on-bad-row", "fail")
    assert status == 2 and "row 1 of the file" in stderr and "empty text" in stderr
    assert not (tmp_path / "fail.jsonl").exists()


def test_every_malformed_csv_line_is_listed_even_after_the_last_row(classifier_dir, tmp_path):
    (tmp_path / "bad.csv").write_text("id,text\n" + "".join(f"m{i},x,extra field\n" for i in range(3)))
    status, stdout, stderr = run_predict(str(classifier_dir), "--input", str(tmp_path / "bad.csv"), "--output",
                                         str(tmp_path / "none.jsonl"), "--part-size", "2")
    assert status == 0, stderr
    assert (tmp_path / "none.jsonl").read_text() == ""
    assert [(e["line"], e["file"]) for e in read_jsonl(tmp_path / "none.errors.jsonl")] == \
        [(line, str(tmp_path / "bad.csv")) for line in (2, 3, 4)]
    assert "0 of 0 rows labelled" in stdout and "3 bad rows skipped, 0 truncated (3 malformed)" in stdout

    # Parts of 2 rows end with the good file: the lines of the bad one are read after the last part.
    (tmp_path / "good.csv").write_text("id,text\n" + "".join(f"g{i},{t}\n" for i, t in enumerate(make_texts(4))))
    status, stdout, stderr = run_predict(str(classifier_dir), "--input", str(tmp_path / "good.csv"),
                                         str(tmp_path / "bad.csv"), "--output", str(tmp_path / "out.jsonl"),
                                         "--part-size", "2")
    assert status == 0, stderr
    assert len(read_jsonl(tmp_path / "out.jsonl")) == 4
    assert [e["line"] for e in read_jsonl(tmp_path / "out.errors.jsonl")] == [2, 3, 4]
    assert "4 of 4 rows labelled" in stdout and "3 bad rows skipped" in stdout


def test_a_file_that_cannot_be_read_is_named_in_one_line(classifier_dir, tmp_path):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1xx")
    texts = make_texts(50, seed=15)
    csv = "id,text\n" + "".join(f"{i},{t}\n" for i, t in enumerate(texts))
    (tmp_path / "cut.csv.gz").write_bytes(gzip.compress(csv.encode())[:-20])  # the end of the stream lost
    # No header to probe in JSON Lines: the error comes from reading the rows.
    jsonl = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(jsonl.encode())[:-20])
    for name, error in (("empty.csv", "Empty CSV file"), ("corrupt.parquet", "Parquet file size is 6 bytes"),
                        ("cut.csv.gz", "Truncated compressed stream"), ("cut.jsonl.gz", "Truncated compressed stream")):
        status, _, stderr = run_predict(str(classifier_dir), "--input", str(tmp_path / name), "--output",
                                        str(tmp_path / f"{name}.jsonl"))
        last_line = stderr.strip().splitlines()[-1]  # after the model's loading bar, for a file read after it
        assert status == 2 and "Traceback" not in stderr, stderr
        assert last_line.startswith(f"muxplm predict: error: {tmp_path / name}: cannot read it as")
        assert error in last_line


def test_an_input_of_bad_rows_only_gives_an_empty_output_and_lists_them_all(classifier_dir, tmp_path):
    (tmp_path / "in.jsonl").write_text('{"id": 1, "text": ""}\nnot JSON\n{"id": 3, "text": "  "}\n')
    status, stdout, stderr = run_predict(str(classifier_dir), "--input", str(tmp_path / "in.jsonl"), "--output",
                                         str(tmp_path / "out.jsonl"), "--id-column", "id")
    assert status == 0, stderr
    assert (tmp_path / "out.jsonl").read_text() == ""
    assert [(e["row"], e["kind"]) for e in read_jsonl(tmp_path / "out.errors.jsonl")] == \
        [(0, "empty"), (1, "unreadable"), (2, "empty")]
    assert (f"0 of 3 rows labelled into {tmp_path / 'out.jsonl'}; 3 bad rows skipped, 0 truncated (2 empty, "
            f"1 unreadable), listed in {tmp_path / 'out.errors.jsonl'}") in stdout


def test_text_pairs_come_from_their_column_as_predictor_predicts_them(classifier_dir, tagger_dir, tmp_path):
    from muxplm.serving import Predictor

    pairs = list(zip(make_texts(20, seed=16), make_texts(20, seed=17)))
    write_jsonl(tmp_path / "in.jsonl", [{"a": first, "b": second} for first, second in pairs]
                + [{"a": "a fine film", "b": " "}, {"a": "a fine film"}])
    flags = ("--text-column", "a", "--text-pair-column", "b")
    out = predict(classifier_dir, [tmp_path / "in.jsonl"], tmp_path / "out.jsonl", *flags, "--no-length-grouping",
                  "--composition-seed", "3", "--batch-size", "8")
    expected = Predictor.from_pretrained(classifier_dir, batch_size=8).predict(pairs, composition_seed=3)
    assert [{"label": r["label"], "score": r["score"]} for r in out] == expected
    alone = predict(classifier_dir, [tmp_path / "in.jsonl"], tmp_path / "alone.jsonl", "--text-column", "a",
                    "--no-length-grouping", "--composition-seed", "3", "--batch-size", "8")
    assert [r["score"] for r in alone[:20]] != [r["score"] for r in out]  # the second text was read
    assert [(e["row"], e["kind"], e["error"]) for e in read_jsonl(tmp_path / "out.errors.jsonl")] == \
        [(20, "empty", "empty text pair"), (21, "unreadable", "no field 'b'")]
    status, _, stderr = run_predict(str(tagger_dir), "--input", str(tmp_path / "in.jsonl"), "--output",
                                    str(tmp_path / "tags.jsonl"), *flags)
    assert status == 2 and "text pairs are only supported by sentence tasks" in stderr


def test_a_missing_column_is_refused_before_anything_runs(classifier_dir, tmp_path):
    (tmp_path / "in.csv").write_text("body\nhello\n")
    status, _, stderr = run_predict(str(classifier_dir), "--input", str(tmp_path / "in.csv"), "--output",
                                    str(tmp_path / "out.jsonl"))
    assert status == 2 and "has no column 'text' (its columns: body)" in stderr
    status, _, stderr = run_predict(str(classifier_dir), "--input", str(tmp_path / "none-*.csv"), "--output",
                                    str(tmp_path / "out.jsonl"))
    assert status == 2 and "no input file matches" in stderr


# ------------------------------------------------------------------ composition


def test_deterministic_mode_answers_as_the_server_whatever_the_neighbours(classifier_dir, tmp_path):
    from muxplm.serving import Predictor
    from muxplm.serving.batcher import DynamicBatcher

    texts = make_texts(30, seed=5)
    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in texts])
    write_jsonl(tmp_path / "b.jsonl", [{"text": t} for t in reversed(texts + make_texts(20, seed=6))])
    first = predict(classifier_dir, [tmp_path / "a.jsonl"], tmp_path / "a.out.jsonl", "--deterministic")
    second = predict(classifier_dir, [tmp_path / "b.jsonl"], tmp_path / "b.out.jsonl", "--deterministic",
                     "--part-size", "7")
    assert [r["score"] for r in first] == [r["score"] for r in reversed(second[20:])]  # to the bit

    batcher = DynamicBatcher(Predictor.from_pretrained(classifier_dir), deterministic=True, max_wait_ms=0).start()
    try:
        served = [batcher.submit_texts(texts[start : start + 8]).result(60) for start in range(0, 30, 8)]
    finally:
        batcher.close()
    assert [{"label": r["label"], "score": r["score"]} for r in first] == [p for chunk in served for p in chunk]


def test_seeded_reruns_are_identical_and_the_seed_matters(classifier_dir, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in make_texts(60, seed=7)])
    runs = [(tmp_path / f"{name}.jsonl", seed) for name, seed in (("a", "5"), ("b", "5"), ("c", "6"))]
    for output, seed in runs:
        predict(classifier_dir, [tmp_path / "in.jsonl"], output, "--composition-seed", seed, "--part-size", "20")
    assert runs[0][0].read_bytes() == runs[1][0].read_bytes()
    assert runs[0][0].read_bytes() != runs[2][0].read_bytes()  # the groups, and so the scores, changed


def test_predictions_are_those_of_predictor_predict(classifier_dir, tmp_path):
    from muxplm.serving import Predictor

    texts = make_texts(100, seed=8)
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    out = predict(classifier_dir, [tmp_path / "in.jsonl"], tmp_path / "out.jsonl", "--no-length-grouping",
                  "--composition-seed", "3", "--batch-size", "16", "--part-size", "32")
    expected = Predictor.from_pretrained(classifier_dir, batch_size=16).predict(texts, composition_seed=3)
    assert [{"label": r["label"], "score": r["score"]} for r in out] == expected


def test_top_k_and_all_scores(classifier_dir, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in make_texts(10, seed=9)])
    out = predict(classifier_dir, [tmp_path / "in.jsonl"], tmp_path / "out.parquet", "--top-k", "2",
                  "--return-all-scores")
    for record in out:
        assert record["top_labels"][0] == record["label"] and record["top_scores"][0] == record["score"]
        assert record["top_scores"][0] >= record["top_scores"][1] and len(record["top_labels"]) == 2
        assert set(record["all_scores"]) == {"neg", "neu", "pos"}
        assert sum(record["all_scores"].values()) == pytest.approx(1.0)


def test_int8_runs_through_the_same_path(classifier_dir, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in make_texts(20, seed=10)])
    out = predict(classifier_dir, [tmp_path / "in.jsonl"], tmp_path / "out.jsonl", "--quantize", "int8")
    assert len(out) == 20 and {r["label"] for r in out} <= {"neg", "neu", "pos"}
    fp32 = predict(classifier_dir, [tmp_path / "in.jsonl"], tmp_path / "fp32.jsonl")
    # The int8 weights did run: scores near the float ones, but not all the same.
    assert [r["score"] for r in out] == pytest.approx([r["score"] for r in fp32], abs=0.05)
    assert [r["score"] for r in out] != [r["score"] for r in fp32]


# ------------------------------------------------------------------ workers


def test_worker_threads_never_oversubscribe(monkeypatch):
    from muxplm.predict import run

    monkeypatch.setattr(run, "available_cpus", lambda: 8)
    assert plan_workers(None, None) == (1, None, ["cpu"])
    assert plan_workers(4, None) == (4, 2, ["cpu"] * 4)
    assert plan_workers(3, None) == (3, 2, ["cpu"] * 3)
    with pytest.raises(ValueError, match="more threads than this machine's 8 CPUs"):
        plan_workers(3, 3)


def test_on_gpus_a_worker_per_gpu_by_default(monkeypatch):
    import torch

    from muxplm.predict import run

    monkeypatch.setattr(run, "available_cpus", lambda: 8)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert plan_workers(None, None, "cuda") == (2, 4, ["cuda:0", "cuda:1"])
    assert plan_workers(3, None, "cuda") == (3, 2, ["cuda:0", "cuda:1", "cuda:0"])
    assert plan_workers(None, None, "cuda:1") == (1, None, ["cuda:1"])  # the GPU asked for, alone


def test_two_workers_write_what_one_process_writes(classifier_dir, tmp_path):
    texts = make_texts(95, seed=11)
    write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts)] + [{"id": 95, "text": ""}])
    (tmp_path / "tail.csv").write_text("id,text\n1,a,b\n")  # a line without a row, after the last part (6 x 16 rows)
    inputs = [tmp_path / "in.jsonl", tmp_path / "tail.csv"]
    flags = ("--id-column", "id", "--part-size", "16", "--threads", "1")
    predict(classifier_dir, inputs, tmp_path / "one.jsonl", *flags)
    predict(classifier_dir, inputs, tmp_path / "two.jsonl", *flags, "--workers", "2")
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert (tmp_path / "two.errors.jsonl").read_bytes() == (tmp_path / "one.errors.jsonl").read_bytes()
    assert [e.get("line") for e in read_jsonl(tmp_path / "two.errors.jsonl")] == [None, 2]
