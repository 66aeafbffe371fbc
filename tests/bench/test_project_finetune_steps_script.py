"""benchmarks/experiments/project_finetune_steps.py: a run's wall time with a shorter fine-tuning grid."""

import json

import pytest

from script_testing import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("project_finetune_steps")


def _stage(minutes, steps=1500):
    return {"train_seconds": 60.0 * minutes, "final_step": steps}


def _run():
    training = {
        # 30 of its 40 wall minutes fine-tuning at 1,500 steps: at 1,000, 10 fewer
        "bert": {"mlm": _stage(5, 250), "finetune-sentiment": _stage(12), "finetune-ner": _stage(18),
                 "wall_seconds": 2400.0},
        # a task already as short as the projection is left as it ran
        "mux-bert-2": {"retrieval": _stage(4, 400), "finetune-sentiment": _stage(15), "finetune-ner": _stage(5, 900)},
        "tmux-2": {"finetune-sentiment": _stage(9)},
    }
    rows = {"bert": {"label": "BERT", "wall_minutes": 40.0}, "mux-bert-2": {"label": "MUX-BERT N=2", "wall_minutes": 26.0},
            "tmux-2": {"label": "T-MUX N=2", "wall_minutes": None}}  # its stages reused: no wall minutes
    return {"rows": rows, "training": training, "merged_from": ["shard-0", "shard-1"], "wall_seconds": 300.0}


def test_fine_tuning_minutes_scale_with_the_steps_and_the_rest_stays_as_measured(script):
    rows = script.projected_rows(_run(), 1000)
    assert [row["label"] for row in rows] == ["BERT", "MUX-BERT N=2"]  # the row without wall minutes is left out
    assert rows[0]["finetune"] == pytest.approx(30.0)
    assert rows[0]["projected"] == pytest.approx(40.0 - 30.0 / 3)
    assert rows[1]["projected"] == pytest.approx(26.0 - 15.0 / 3)  # the 900-step NER is not lengthened
    assert script.projected_rows(_run(), 1500)[0]["projected"] == pytest.approx(40.0)


def test_the_schedule_on_two_lanes_adds_the_merge(script, tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_run()))
    script.main([str(path), "--steps", "1000", "--output", str(tmp_path / "p.md")])
    text = (tmp_path / "p.md").read_text()
    assert text == capsys.readouterr().out
    assert "| BERT | 40 | 30 | 30 |" in text and "| MUX-BERT N=2 | 26 | 20 | 21 |" in text
    # two lanes, a row each: the longer row and the 5-minute merge
    assert "2 rows as measured, on 2 shards side by side + 5 min of merge: 0.75 h" in text
    assert "2 rows at 1000 fine-tuning steps, on 2 shards side by side + 5 min of merge: 0.58 h" in text
    assert "Left out, without wall minutes (their stages reused): 1 of the run's rows." in text
    with pytest.raises(SystemExit):
        script.main([str(path), "--steps", "0"])
