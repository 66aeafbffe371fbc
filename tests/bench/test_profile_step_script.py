"""benchmarks/experiments/profile_step.py: a muxplm command's CPU time by PyTorch operator."""

import json

import pytest
import torch

from script_testing import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("profile_step")


def _matmuls():
    a = torch.randn(256, 256)
    for _ in range(20):
        a = torch.mm(a, a).tanh()


def test_the_operators_are_ranked_by_their_share_of_the_cpu_time(script):
    shares, table = script.operator_shares(_matmuls, top=5)
    assert list(shares)[0] == "aten::mm"
    assert list(shares.values()) == sorted(shares.values(), reverse=True)
    assert 0 < sum(shares.values()) <= 100.0 + 1e-6 and "aten::mm" in table


def test_work_without_operators_is_refused(script):
    with pytest.raises(ValueError, match="no PyTorch operator"):
        script.operator_shares(lambda: None)


def test_the_command_after_the_separator_is_profiled_and_both_files_written(script, tmp_path, monkeypatch):
    import muxplm.cli

    seen = []
    monkeypatch.setattr(muxplm.cli, "main", lambda argv: (seen.append(argv), _matmuls()))
    script.main(["--output", str(tmp_path / "prof"), "--top", "3", "--", "finetune", "--max_steps", "2"])
    assert seen == [["finetune", "--max_steps", "2"]]
    saved = json.loads((tmp_path / "prof.json").read_text())
    assert saved["command"] == ["finetune", "--max_steps", "2"] and len(saved["self_cpu_percent"]) == 3
    assert (tmp_path / "prof.txt").read_text().startswith("muxplm finetune --max_steps 2")
    with pytest.raises(SystemExit):
        script.main(["--output", str(tmp_path / "none")])
