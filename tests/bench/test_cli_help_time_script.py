"""benchmarks/cli_help_time.py: every help screen run in its own process, and its JSON (what it
measures is not checked here: timings belong to the benchmark, not to the tests)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cli_help_time.py"


def _script():
    spec = importlib.util.spec_from_file_location("cli_help_time_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_command_has_a_screen_and_the_json_names_each(tmp_path, monkeypatch):
    from muxplm.cli import COMMANDS

    script = _script()
    assert set(COMMANDS) <= {words[0] for words in script.SCREENS if words}
    monkeypatch.setattr(script, "SCREENS", ((), ("finetune",), ("export", "onnx")))
    monkeypatch.setattr(script, "REFERENCES", {"python3 -c pass": ["-c", "pass"]})
    output = tmp_path / "help.json"
    assert script.main(["--repeats", "1", "--output", str(output)]) == 0
    result = json.loads(output.read_text())
    assert set(result["help_screens_s"]) == {"muxplm --help", "muxplm finetune --help", "muxplm export onnx --help"}
    assert all(value > 0 for value in result["help_screens_s"].values()) and result["repeats"] == 1
    assert result["slowest_s"] == max(result["help_screens_s"].values())
