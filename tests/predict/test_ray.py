"""The Ray integration: :class:`MuxPredictor` labels a batch as `muxplm predict` labels a part, and
`muxplm predict --ray` on a local Ray instance with 2 workers gives the single-process predictions."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from predict_testing import make_texts, predict, read_jsonl, run_predict, write_jsonl

from muxplm.integrations.ray import MuxPredictor


@pytest.fixture(scope="module")
def labelled(classifier_dir, tmp_path_factory):
    """Texts with ids and one empty text, and what `muxplm predict --deterministic` makes of them."""
    folder = tmp_path_factory.mktemp("ray-input")
    texts = make_texts(60, seed=20)
    records = [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)] + [{"id": "empty", "text": " "}]
    write_jsonl(folder / "in.jsonl", records)
    expected = predict(classifier_dir, [folder / "in.jsonl"], folder / "local.jsonl", "--id-column", "id",
                       "--deterministic")
    return folder, records, {row["id"]: row for row in expected}


def test_mux_predictor_labels_a_batch_of_any_format_as_predict_does(classifier_dir, labelled):
    _, records, expected = labelled
    predictor = MuxPredictor(str(classifier_dir), id_column="id", deterministic=True)
    table = pa.Table.from_pylist(records)
    for batch in (table, table.to_pandas(), {name: np.array(table[name].to_pylist()) for name in table.column_names}):
        out = predictor(batch).to_pylist()
        assert [row["id"] for row in out] == [record["id"] for record in records]  # one row per input row, in order
        assert out[-1] == {"id": "empty", "label": None, "score": None, "error_kind": "empty", "error": "empty text"}
        assert [{"id": row["id"], "label": row["label"], "score": row["score"]} for row in out[:-1]] == \
            [{k: v for k, v in expected[row["id"]].items() if k != "row"} for row in out[:-1]]


def test_a_seeded_mux_predictor_repeats_itself_and_starts_every_batch_as_a_first_part(classifier_dir, labelled,
                                                                                      tmp_path):
    folder, records, _ = labelled
    seeded = ("--composition-seed", "3", "--batch-size", "8")
    local = predict(classifier_dir, [folder / "in.jsonl"], tmp_path / "seeded.jsonl", "--id-column", "id",
                    "--part-size", "16", *seeded)
    predictor = MuxPredictor(str(classifier_dir), id_column="id", composition_seed=3, batch_size=8)
    table = pa.Table.from_pylist(records)

    def label_in_batches():
        batches = [predictor(table.slice(start, 16)).to_pylist() for start in range(0, table.num_rows, 16)]
        return {row["id"]: (row["label"], row["score"]) for batch in batches for row in batch if row["label"]}

    batches = label_in_batches()
    assert label_in_batches() == batches  # the same batches again: the same output, to the bit
    in_one_process = {row["id"]: (row["label"], row["score"]) for row in local}
    first_part = [f"t{i}" for i in range(16)]
    assert [batches[i] for i in first_part] == [in_one_process[i] for i in first_part]
    # Every batch restarts the composition at pass 0, where a later part of one process goes on from
    # the passes before it: the same rows, other groups, other scores.
    assert [batches[f"t{i}"] for i in range(16, 60)] != [in_one_process[f"t{i}"] for i in range(16, 60)]


def test_ray_with_two_local_workers_predicts_as_one_process(classifier_dir, labelled, tmp_path):
    pytest.importorskip("ray.data", reason='the Ray path needs Ray Data: pip install "muxplm[ray]"')
    folder, _, expected = labelled
    output = tmp_path / "labels.jsonl"
    predict_args = ("--id-column", "id", "--deterministic", "--ray", "--workers", "2", "--part-size", "16")
    status, stdout, stderr = run_predict(str(classifier_dir), "--input", str(folder / "in.jsonl"), "--output",
                                         str(output), *predict_args)
    assert status == 0, stderr[-3000:]
    rows = [json.loads(line) for part in sorted(output.glob("*.json*")) for line in part.read_text().splitlines()]
    assert [row["id"] for row in rows] == [f"t{i}" for i in range(60)]  # in input order
    for row in rows:  # Ray's JSON writer keeps 15 digits
        assert row["label"] == expected[row["id"]]["label"]
        assert row["score"] == pytest.approx(expected[row["id"]]["score"], rel=1e-12)
    errors = [record for part in (tmp_path / "labels.errors.jsonl").glob("*.json*") for record in read_jsonl(part)]
    assert errors == [{"id": "empty", "error_kind": "empty", "error": "empty text"}]
    assert "60 of 61 rows labelled" in stdout


def test_ray_refuses_an_output_among_its_inputs_before_removing_anything(classifier_dir, tmp_path):
    pytest.importorskip("ray.data", reason='the Ray path needs Ray Data: pip install "muxplm[ray]"')
    write_jsonl(tmp_path / "in.jsonl", [{"text": "a fine film"}])
    (tmp_path / "labels.jsonl").mkdir()  # an earlier run's output, in the folder read as input
    (tmp_path / "labels.jsonl" / "0.jsonl").write_text('{"label": "pos"}\n')
    status, _, stderr = run_predict(str(classifier_dir), "--input", str(tmp_path), "--input-format", "jsonl",
                                    "--output", str(tmp_path / "labels.jsonl"), "--ray", "--overwrite")
    assert status == 2 and f"--input {tmp_path} names {tmp_path}, which holds the output folder" in stderr
    assert (tmp_path / "labels.jsonl" / "0.jsonl").read_text() == '{"label": "pos"}\n'
    status, _, stderr = run_predict(str(classifier_dir), "--input", str(tmp_path / "in.jsonl"), "--output",
                                    str(tmp_path / "in.jsonl"), "--ray", "--overwrite")
    assert status == 2 and "which is the output folder" in stderr and (tmp_path / "in.jsonl").is_file()
