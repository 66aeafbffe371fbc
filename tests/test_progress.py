"""Progress bars: redrawn in a terminal, a line every few percent into a file or a pipe."""

from __future__ import annotations

import io

from muxplm.progress import LineProgress, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(stream, steps: int = 1000, initial: int = 0) -> str:
    bar = progress_bar(steps, initial=initial, desc="mlm", file=stream)
    for step in range(initial, steps):
        if step % 10 == 0:
            bar.set_postfix(loss=f"{1 / (step + 1):.4f}")
        bar.update(1)
    bar.close()
    return stream.getvalue()


def test_into_a_file_a_line_every_few_percent_and_no_carriage_returns():
    log = _run(io.StringIO())
    lines = log.splitlines()
    assert "\r" not in log and 15 <= len(lines) <= 25, lines
    assert lines[0].startswith("mlm:   0%") and "1000/1000" in lines[-1]
    assert "loss=" in lines[-1] and all(line.startswith("mlm:") for line in lines)
    resumed = _run(io.StringIO(), initial=600).splitlines()  # a resumed run starts at its step
    assert "600/1000" in resumed[0] and "1000/1000" in resumed[-1] and len(resumed) <= 12


def test_a_slow_run_into_a_file_stays_at_a_line_every_few_percent(monkeypatch):
    # tqdm's monitor thread would print every step of a run with more than 10 s between lines.
    bar = progress_bar(100, file=io.StringIO())
    assert isinstance(bar, LineProgress) and bar.miniters == 5 and bar.maxinterval == float("inf")
    bar.close()


def test_in_a_terminal_the_bar_redraws_in_place():
    screen = _run(_Terminal(), steps=50)
    assert screen.count("\r") > 2 and screen.count("\n") <= 1
