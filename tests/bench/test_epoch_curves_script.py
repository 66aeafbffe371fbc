"""benchmarks/experiments/plot_epoch_curves.py: series read by fine-tuning length across result
folders, each MUX series judged against the best length of the cut that runs as fast."""

import io
import json
import tarfile
from pathlib import Path

import pytest

from script_testing import load_script


@pytest.fixture(scope="module")
def curves():
    return load_script("plot_epoch_curves")


def entry(row, mean, num_instances=1, task="sentiment", precision="fp32"):
    return dict(row=row, task=task, precision=precision, num_instances=num_instances, mean=mean,
                std=1.0 if num_instances > 1 else 0.0)


def write_rows(folder: Path, entries) -> Path:
    folder.mkdir(parents=True)
    (folder / "rows.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    return folder


def write_log(folder: Path, run: str, losses) -> None:
    """A logs.tar.gz holding one run's training log, as convert_grid.py archives them."""
    log = "".join(json.dumps(dict(kind="train", epoch=float(epoch), loss=loss)) + "\n" for epoch, loss in losses)
    log += json.dumps(dict(kind="eval", epoch=1.0, loss=0.0)) + "\n"  # evaluations are not training losses
    with tarfile.open(folder / "logs.tar.gz", "w:gz") as archive:
        info = tarfile.TarInfo(f"{run}/sentiment/log.jsonl")
        info.size = len(log.encode())
        archive.addfile(info, io.BytesIO(log.encode()))


def test_the_trend_of_the_last_two_lengths_is_extrapolated_to_the_target(curves):
    rising = {20: dict(mean=66.0), 40: dict(mean=70.0), 80: dict(mean=74.0)}
    per_doubling, reach = curves.crossing(rising, 82.0)
    assert per_doubling == pytest.approx(4.0)
    assert reach == pytest.approx(320.0)  # two more doublings after 80
    assert curves.crossing({20: dict(mean=80.0), 40: dict(mean=79.0)}, 82.0) == (pytest.approx(-1.0), None)
    assert curves.left_chance([(1.0, 0.7), (5.0, 0.65), (9.0, 0.5)], 0.6) == 9.0
    assert curves.left_chance([(1.0, 0.7)], 0.6) is None


def test_series_span_folders_and_mux_rows_meet_their_matched_cut(curves, tmp_path):
    first = write_rows(tmp_path / "ep20", [entry("minilm-cut1-ep20", 81.0), entry("minilm-cut2-ep20", 83.0),
                                           entry("n5-k0-ep20", 70.0, 5), entry("n5-k0-ep20", 90.0, 5, task="trec"),
                                           entry("n5-k0-ep20", 99.0, 5, precision="int8")])
    second = write_rows(tmp_path / "ep40", [entry("minilm-cut1-ep40", 80.0), entry("n5-k0-ep40", 73.0, 5),
                                            entry("n2-k3-ep40", 84.0, 2)])  # not a K = 0 row: left out
    write_log(first, "n5-k0-ep40", [(1, 0.70), (12, 0.59)])  # archived by another grid mid-run: not the log
    write_log(second, "n5-k0-ep40", [(1, 0.70), (12, 0.69), (17, 0.55), (30, 0.40)])
    assert curves.main([str(tmp_path / "out"), str(first), str(second)]) == 0
    table = (tmp_path / "out" / "epochs.md").read_text()
    assert (tmp_path / "out" / "epochs.png").stat().st_size > 0
    n5 = next(line for line in table.splitlines() if line.startswith("| n5-k0 |"))
    # +3 a doubling from 73 at 40 epochs meets the 1-layer cut's best (81.0, at 20 epochs) at 40 * 2^(8/3)
    assert "70.0 ± 1.0 | 73.0 ± 1.0 | 17 | +3.0 | minilm-cut1-ep20: ~254 |" in n5  # left chance at epoch 17
    assert "n2-k3" not in table and "99.0" not in table and "90.0" not in table
    assert "N = 5: minilm-cut1-ep20 81.0" in table
