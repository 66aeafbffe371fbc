"""What the README promises a newcomer: its first screen holds the set-up commands and the
convert / fine-tune / evaluate / serve path, it stays short, every results file and page it
names exists, no issue numbers leak into it or into docs/, and the newcomer commands run as
printed (on a tiny random checkpoint and a tiny CSV instead of MiniLM and the user's data)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
FIRST_SCREEN = 60  # lines
MAX_LINES = 250
DEMO_COMMAND = "bash scripts/setup.sh && python3 -m muxplm demo"
TEST_COMMAND = "bash scripts/setup.sh && python3 -m pytest"
NEWCOMER_STEPS = ("convert", "finetune", "evaluate", "serve")


def _lines(path: Path = README) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _first_screen() -> list[str]:
    return _lines()[:FIRST_SCREEN]


def _newcomer_commands() -> dict[str, str]:
    """The first screen's shell lines of the newcomer path, by step: ``convert`` ... ``serve``,
    plus ``model`` (the line that sets the pretrained model's path) and ``curl``."""
    commands = {}
    for line in _first_screen():
        command = line.split("  #")[0].strip()
        words = command.split()
        if len(words) > 1 and words[0] == "muxplm" and words[1] in NEWCOMER_STEPS:
            commands.setdefault(words[1], command)
        elif words and words[0] == "curl":
            commands.setdefault("curl", command)
        elif re.match(r"^[A-Z_]+=", command):
            commands.setdefault("model", command)
    return commands


def test_the_first_screen_holds_the_setup_commands_and_the_newcomer_path():
    screen = "\n".join(_first_screen())
    assert DEMO_COMMAND in screen and TEST_COMMAND in screen
    commands = _newcomer_commands()
    assert set(NEWCOMER_STEPS) <= set(commands), f"missing from the first {FIRST_SCREEN} lines: " \
        f"{set(NEWCOMER_STEPS) - set(commands)}"
    order = [screen.index(commands[step]) for step in NEWCOMER_STEPS]
    assert order == sorted(order)  # convert, then finetune, evaluate, serve
    assert "--train-file" in commands["finetune"] and ".csv" in commands["finetune"]
    csv_format = [line for line in _first_screen() if "CSV" in line and "`text`" in line and "`label`" in line]
    assert len(csv_format) == 1, "the CSV format is stated in one line of the first screen"


def test_ci_runs_the_readmes_test_command():
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    for part in TEST_COMMAND.split("&&"):
        assert part.strip() in ci


def test_the_readme_is_short():
    assert len(_lines()) <= MAX_LINES


def _named_paths(text: str) -> set[str]:
    """Paths under benchmarks/results/ or docs/ that the text names (in links or code)."""
    found = re.findall(r"(?<![\w./-])((?:benchmarks/results|docs)/[\w./-]*)", text)
    return {path.rstrip(".") for path in found}


def test_every_results_file_and_page_the_readme_names_exists():
    paths = _named_paths(README.read_text(encoding="utf-8"))
    assert any(p.startswith("benchmarks/results/") for p in paths) and any(p.startswith("docs/") for p in paths)
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"README.md names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", [*DOCS, ROOT / "benchmarks" / "README.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_results_file_a_page_names_exists(page):
    """A figure quoted in the docs comes from a file in the tree: every results path named exists."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)  # commands may name outputs
    missing = sorted(p for p in _named_paths(text) if not (ROOT / p).exists() and not (page.parent / p).exists())
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


MAX_WORDS = 40  # per sentence and per table cell


def _prose(page: Path) -> list[tuple[int, str]]:
    """A page's sentences and table cells, by line: code blocks, inline code and link targets left out."""
    pieces, fenced, paragraph = [], False, []

    def flush():
        text = " ".join(line for _, line in paragraph)
        pieces.extend((paragraph[0][0], sentence) for sentence in re.split(r"(?<=[.!?])\s+", text) if sentence)
        paragraph.clear()

    for number, line in enumerate(_lines(page), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        line = re.sub(r"\]\([^)]*\)", "]", re.sub(r"`[^`]*`", "code", line)) if not fenced else ""
        if line.lstrip().startswith("|"):
            flush()
            pieces.extend((number, cell) for cell in line.strip().strip("|").split("|"))
        elif not line.strip() or line.startswith("#"):
            flush()
        else:
            paragraph.append((number, line.strip()))
    flush()
    return pieces


@pytest.mark.parametrize("page", [README, ROOT / "docs" / "results.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_sentences_and_table_cells_are_short(page):
    long = [(number, len(text.split()), text[:80]) for number, text in _prose(page) if len(text.split()) > MAX_WORDS]
    assert not long, f"{page.name}: sentences or cells over {MAX_WORDS} words (line, words, start): {long}"


def test_the_word_bound_catches_a_long_sentence(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Short one. " + " ".join(["word"] * 41) + ".\n\n| a | " + " ".join(["w"] * 41) + " |\n"
                    "\n```\n" + " ".join(["code"] * 60) + "\n```\n")
    assert sorted(len(text.split()) for _, text in _prose(page) if len(text.split()) > MAX_WORDS) == [41, 41]


def test_benchmarks_hold_the_commands_and_the_quoted_results_only():
    tracked = subprocess.run(["git", "ls-files", "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    assert len(tracked.stdout.split()) <= 200
    assert len(_lines(ROOT / "benchmarks" / "README.md")) <= 300


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("page", [README, *DOCS, ROOT / "benchmarks" / "README.md",
                                  ROOT / "benchmarks" / "results" / "serve" / "README.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    anchors, fenced = set(), False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#")))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue  # an absolute URL
        path, _, anchor = target.partition("#")
        if not path:
            if anchor not in anchors:
                broken.append(target)
        elif not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


# "#12", "issue 9", "Issue-10"; not a path that holds such a name (benchmarks/results/reproduce/issue9/).
ISSUE_REFERENCE = re.compile(r"(?<![\w/.`-])(?:#\d+\b|issues?[ -]?\d+)", re.IGNORECASE)


@pytest.mark.parametrize("page", [README, *DOCS, ROOT / "benchmarks" / "README.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers_in_user_facing_text(page):
    hits = [(number, line) for number, line in enumerate(_lines(page), 1) if ISSUE_REFERENCE.search(line)]
    assert not hits, f"{page.name}: issue references {hits}"


def test_the_library_cites_no_outside_file_nor_issue():
    """The package speaks of itself: no design notes outside the repository, no issue numbers."""
    hits = [(path.relative_to(ROOT), number, line.strip())
            for path in sorted((ROOT / "src").rglob("*.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if "DESIGN.md" in line or ISSUE_REFERENCE.search(line)]
    assert not hits, hits


def test_the_issue_pattern():
    assert ISSUE_REFERENCE.search("fixed in #21") and ISSUE_REFERENCE.search("before issue 9")
    assert ISSUE_REFERENCE.search("the Issue-10 minimum")
    assert not ISSUE_REFERENCE.search("`benchmarks/results/reproduce/issue9/` and run_cpu_reproduce_issue9.sh")
    assert not ISSUE_REFERENCE.search("(`issue9-first-pooling/`, 2 epochs)")
    assert not ISSUE_REFERENCE.search("[the demo](#results)")


# --- the newcomer path, end to end -------------------------------------------------------------

def _tiny_bert(path: Path) -> None:
    """A random 2-layer BERT with the bert-base-uncased vocabulary size and no tokenizer files
    (muxplm then uses the packaged MiniLM vocabulary). A builder for another family must write
    its tokenizer next to the weights."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64)
    BertModel(config, add_pooling_layer=False).save_pretrained(path)


def _tiny_roberta(path: Path) -> None:
    from family_testing import roberta_tokenizer, save_plain

    save_plain("roberta", path, tokenizer=roberta_tokenizer(), max_position_embeddings=66)


def _tiny_mpnet(path: Path) -> None:
    from family_testing import mpnet_tokenizer, save_plain

    save_plain("mpnet", path, tokenizer=mpnet_tokenizer(), max_position_embeddings=66)


# One builder per model family the README's path supports: each writes a tiny plain checkpoint
# (RoBERTa and MPNet with their own tokenizer beside it, as a user's checkpoint has).
PLAIN_BUILDERS = {"bert": _tiny_bert, "roberta": _tiny_roberta, "mpnet": _tiny_mpnet}

# What the test adds to each printed command so that it runs in seconds (flags given twice: the last wins).
TINY_FLAGS = {
    "convert": ["--max-steps", "2", "--batch-groups", "4", "--eval-steps", "2", "--save-steps", "2",
                "--logging-steps", "1", "--max-length", "32", "--corpus-sources", "moby_dick",
                "--corpus-max-words", "6000", "--no-progress"],
    "finetune": ["--max-steps", "2", "--batch-size", "8", "--eval-steps", "2", "--save-steps", "2",
                 "--logging-steps", "1", "--max-length", "32", "--no-progress"],
    "evaluate": ["--seeds", "2", "--max-length", "32"],
    "serve": ["--threads", "1", "--log-level", "warning", "--max-length", "32"],
}


def _write_csvs(folder: Path) -> None:
    rows = [("a wonderful , moving film", "pos"), ("dull and far too long", "neg"),
            ("a joy to watch", "pos"), ("the plot makes no sense", "neg")]
    for name, repeat in (("train.csv", 6), ("dev.csv", 2)):
        (folder / name).write_text("text,label\n" + "".join(f'"{t}",{y}\n' for t, y in rows * repeat))


def _arguments(command: str, model_dir: Path, variable: str) -> list[str]:
    """A printed ``muxplm ...`` line as the arguments of ``muxplm``: the tiny checkpoint in place
    of ``$VARIABLE``, then the step's tiny-size flags."""
    words = [str(model_dir) if word == f"${variable}" else word for word in shlex.split(command)]
    assert words[0] == "muxplm"
    return [*words[1:], *TINY_FLAGS[words[1]]]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("family", sorted(PLAIN_BUILDERS))
def test_the_newcomer_commands_run_as_printed(family, tmp_path, monkeypatch):
    import httpx

    from muxplm.cli import main

    commands = _newcomer_commands()
    variable = commands["model"].split("=")[0]
    assert f'"${variable}"' in commands["convert"]  # convert reads the model the first line names
    plain = tmp_path / f"plain-{family}"
    PLAIN_BUILDERS[family](plain)
    monkeypatch.chdir(tmp_path)  # the printed train.csv, dev.csv and runs/ are relative paths
    _write_csvs(tmp_path)

    for step in ("convert", "finetune", "evaluate"):  # in this process: no interpreter start-up each
        assert main(_arguments(commands[step], plain, variable)) == 0, commands[step]
    finetune = shlex.split(commands["finetune"])
    model_dir = tmp_path / finetune[finetune.index("--output-dir") + 1]
    config = json.loads((model_dir / "config.json").read_text())
    assert config["num_instances"] >= 2 and set(config["id2label"].values()) == {"neg", "pos"}
    assert (model_dir / "eval_results.json").is_file()

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "muxplm.cli", *_arguments(commands["serve"], plain, variable), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    try:
        curl = shlex.split(commands["curl"])
        url = next(word for word in curl if "/predict" in word).replace(":8000", f":{port}")
        url = url if url.startswith("http") else "http://" + url
        body = json.loads(curl[curl.index("-d") + 1])
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.communicate()[1].decode()[-3000:]
            try:
                if httpx.get(url.replace("/predict", "/health"), timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.2)
        answer = httpx.post(url, json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        predictions = answer.json()["predictions"]
        assert len(predictions) == len(body["text"])
        assert all(p["label"] in {"neg", "pos"} and 0 <= p["score"] <= 1 for p in predictions)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
