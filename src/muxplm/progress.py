"""The one way muxplm shows progress: a tqdm bar that redraws in a terminal (or a notebook), and
a line every few percent when the output goes to a file or a pipe, where a redrawn bar would
leave one carriage-return update per step in the log (thousands per training stage)."""

from __future__ import annotations

import math
import sys
from typing import IO

from tqdm import tqdm

# A file or a pipe gets a line at every twentieth of the run.
LINES_PER_RUN = 20


def progress_bar(total: int | None, *, initial: int = 0, desc: str | None = None, file: IO[str] | None = None,
                 disable: bool = False, unit: str = "it") -> tqdm:
    """A progress bar over ``total`` steps (``initial`` of them done) on ``file`` (default:
    standard error): tqdm's own where it can redraw, else :class:`LineProgress`. ``unit`` names a
    step in the rate (``texts/s``)."""
    file = sys.stderr if file is None else file
    if _redraws(file):
        from tqdm.auto import tqdm as redrawn  # the widget in a notebook

        return redrawn(total=total, initial=initial, desc=desc, file=file, dynamic_ncols=True, disable=disable,
                       unit=unit)
    return LineProgress(total=total, initial=initial, desc=desc, file=file, disable=disable, unit=unit)


class LineProgress(tqdm):
    """tqdm for output that cannot be redrawn: each update is a line of its own, made at every
    twentieth of ``total`` steps (every 30 s when the total is unknown) and at the end; a new
    postfix (``set_postfix``) shows on the next line rather than making one."""

    def __init__(self, *args, total: int | None = None, **kwargs):
        steps = math.ceil(total / LINES_PER_RUN) if total else None
        # maxinterval: tqdm's monitor thread would otherwise drop miniters to 1 after 10 s
        # without a line, and print every step from then on.
        pacing = dict(miniters=steps, mininterval=0) if steps else dict(mininterval=30)
        super().__init__(*args, total=total, leave=False, maxinterval=math.inf, **pacing, **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg == "":  # tqdm clearing its line before it moves on: there is no line to clear
            return False
        self.fp.write(f"{self if msg is None else msg}\n")
        self.fp.flush()
        return True

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)

    def close(self) -> None:
        if not self.disable and self.n != self.last_print_n:
            self.display()  # the final count
        super().close()


def _redraws(file: IO[str]) -> bool:
    """Whether ``file`` is a terminal, or the output of a notebook (tqdm.auto's widget)."""
    try:
        if file.isatty():
            return True
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})
