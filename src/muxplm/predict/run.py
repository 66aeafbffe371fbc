"""``muxplm predict``: label files of any size with a MUX checkpoint, part by part.

The input is read as a stream and cut into parts of ``part_size`` rows. In one process, the next
part is read in a thread while the model runs on this one (and tokenized there too when the model
runs on an accelerator), and finished parts are written by another thread. With ``workers > 1``,
each worker process holds its own model and a share of the CPU threads (or a GPU of its own),
labels whole parts and writes them; the main process only reads. Either way, parts go to numbered files that a rerun after a kill skips
(:class:`~muxplm.predict.outputs.PartFiles`), and are joined in order at the end. Memory stays
bounded whatever the input size: a few parts are in flight at a time.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import reprlib
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import (
    FIRST_COMPLETED,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import asdict
from pathlib import Path

from ..devices import default_device
from ..progress import progress_bar
from .labelling import LabelSettings, PartLabeller, load_labeller
from .outputs import PartFiles, output_format
from .sources import Columns, InputRow, Source, check_columns, find_sources, in_parts, read_rows

# Parts read ahead of the model, per worker: enough that a worker never waits, few enough that
# memory does not grow with the input.
PARTS_AHEAD = 2


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def plan_workers(workers: int | None, threads: int | None, device: str = "cpu") -> tuple[int, int | None, list[str]]:
    """``(workers, threads per worker, device per worker)``. By default one worker per GPU on
    ``cuda`` and one on a CPU; threads split the CPUs between the workers, so that workers x
    threads never exceeds them (``None``: PyTorch's own choice, for one worker)."""
    cpus = available_cpus()
    devices = [device]
    if str(device).startswith("cuda"):
        import torch

        gpus = torch.cuda.device_count()
        if str(device) == "cuda" and gpus > 1:
            devices = [f"cuda:{index}" for index in range(gpus)]
    if workers is None:
        # CPU: one process with every thread. Measured on 2 cores, two single-thread workers label a
        # file no faster than one two-thread process, and cost a model copy and a start-up each.
        workers = len(devices) if str(device).startswith("cuda") else 1
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if threads is None and workers > 1:
        threads = max(1, cpus // workers)
    if threads is not None and workers * threads > cpus:
        raise ValueError(f"--workers {workers} x --threads {threads} is more threads than this machine's {cpus} CPUs")
    return workers, threads, [devices[index % len(devices)] for index in range(workers)]


def predict_files(
    model: str | os.PathLike,
    inputs: Iterable[str],
    output: str | os.PathLike,
    *,
    columns: Columns = Columns(),
    input_format: str | None = None,
    settings: LabelSettings = LabelSettings(),
    workers: int | None = None,
    threads: int | None = None,
    backend: str = "torch",
    device: str | None = None,
    dtype: str = "float32",
    quantize: str = "none",
    compile: str = "none",
    max_length: int = 128,
    batch_size: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> dict:
    """Label every row of ``inputs`` (paths or globs of CSV / TSV / JSONL / Parquet / text files,
    of ``input_format`` or as their extensions say) with the checkpoint ``model`` into ``output``
    (``.jsonl`` or ``.parquet``); bad rows are listed in ``OUTPUT_STEM.errors.jsonl``. An interrupted
    run of the same inputs and settings resumes where it stopped. ``backend`` ... ``batch_size``:
    the predictor (:func:`muxplm.serving.load_predictor`; ``device`` ``None``: the GPU when there is one
    and the backend can use it). Returns the run's counts and rate."""
    started = time.perf_counter()
    sources = find_sources(list(inputs), input_format)
    parts = PartFiles(output, output_format(output))
    parts.check_apart(sources)
    check_columns(sources, columns)
    parts.check(overwrite=overwrite)
    device = device or default_device(backend, quantize)
    workers, threads, devices = plan_workers(workers, threads, device)
    loading = dict(backend=backend, device=device, dtype=dtype, quantize=quantize, compile=compile,
                   max_length=max_length, batch_size=batch_size)
    # Checked (and an ONNX graph exported) here once, before any part is read or any worker starts.
    labeller = load_labeller(model, settings, columns, threads=threads if workers == 1 else None, **loading)
    schema = labeller.output_schema() if parts.format == "parquet" else None
    finished = parts.start(_run_description(model, sources, columns, settings, loading), overwrite=overwrite)
    counts = [source.num_rows() for source in sources]
    total = sum(counts) if None not in counts else None
    bar = progress_bar(total, desc="predict", unit=" texts", disable=not progress)
    todo = _PartsToDo(sources, columns, settings.part_size, parts, bar)
    labelling = time.perf_counter()
    try:
        if workers == 1:
            _label_here(labeller, todo, parts, bar)
        else:
            del labeller
            _label_in_workers(todo, parts, bar, workers=workers, threads=threads, devices=devices, model=model,
                              loading=loading, settings=settings, columns=columns)
    finally:
        bar.close()
    summary = parts.finish(todo.parts, schema)
    now = time.perf_counter()
    # The rate counts the rows labelled by this run (not those of parts an earlier run finished),
    # from the first part read to the output joined: the model's loading is not in it.
    return dict(summary, output=str(output), rows=todo.rows, parts=todo.parts, resumed_parts=finished,
                workers=workers, threads_per_worker=threads, seconds=round(now - started, 3),
                texts_per_s=round(todo.rows_labelled_here / (now - labelling), 1))


def _run_description(model, sources: list[Source], columns: Columns, settings: LabelSettings, loading: dict) -> dict:
    """What decides a run's output: a rerun that differs in any of it does not resume it."""
    folder = Path(model)
    model_files = {path.name: [path.stat().st_size, path.stat().st_mtime_ns]
                   for path in sorted(folder.glob("*")) if path.is_file()} if folder.is_dir() else None
    inputs = [[os.path.abspath(source.path), os.stat(source.path).st_size, os.stat(source.path).st_mtime_ns]
              for source in sources]
    return {"model": str(folder.resolve()) if folder.is_dir() else str(model), "model files": model_files,
            "inputs": inputs, "columns": asdict(columns), "settings": asdict(settings), "predictor": loading}


class _PartsToDo:
    """The parts of the input still to label, in order, as ``(index, rows)``; finished ones are read
    past (their rows counted on the progress bar). CSV lines without a row are recorded with the
    part being read when they were met, those after the last row as part ``parts``."""

    def __init__(self, sources, columns, part_size: int, parts: PartFiles, bar):
        self.sources, self.columns, self.part_size, self.files, self.bar = sources, columns, part_size, parts, bar
        self.parts = self.rows = self.rows_labelled_here = 0
        # A Parquet column holds one type: ids of mixed kinds are refused as they are read, naming
        # the row, rather than by Arrow when the part is written or the parts are joined.
        self.check_ids, self.first_id = parts.format == "parquet" and columns.id is not None, None

    def __iter__(self) -> Iterator[tuple[int, list]]:
        for index, rows in enumerate(in_parts(read_rows(self.sources, self.columns), self.part_size)):
            self.parts, self.rows = index + 1, self.rows + len(rows)
            self._record_malformed(index)
            if self.check_ids:
                self._check_id_kinds(rows)
            if self.files.is_done(index):
                self.bar.update(len(rows))
                continue
            self.rows_labelled_here += len(rows)
            yield index, rows
        # Lines met after the last part's rows (or in an input with no row at all) have no part to
        # go with: they are listed after the last one.
        self._record_malformed(self.parts)

    def _check_id_kinds(self, rows: list[InputRow]) -> None:
        for row in rows:
            if row.id is None:
                continue
            if self.first_id is None:
                self.first_id = row
            elif _id_kind(row.id) != _id_kind(self.first_id.id):
                first = self.first_id
                raise ValueError(
                    f"--id-column {self.columns.id}: {row.file}, row {row.row_in_file} of the file has the id "
                    f"{reprlib.repr(row.id)} ({_id_kind(row.id)}) but {first.file}, row {first.row_in_file} has "
                    f"{reprlib.repr(first.id)} ({_id_kind(first.id)}); a Parquet output holds ids of one kind: "
                    "make them one, or write .jsonl")

    def _record_malformed(self, index: int) -> None:
        malformed = [report for source in self.sources for report in source.malformed]
        if malformed:
            self.files.write_malformed(index, malformed)
            for source in self.sources:
                source.malformed.clear()


def _id_kind(value) -> str:
    """What Arrow can hold in one column: numbers (integers and fractions: floats), text, ..."""
    if isinstance(value, bool):  # before int, which it is in Python: Arrow would write True as 1.0
        return "true/false"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "text"
    return type(value).__name__


# ------------------------------------------------------------------ in this process


def _label_here(labeller: PartLabeller, todo: _PartsToDo, parts: PartFiles, bar) -> None:
    if labeller.predictor.device.type == "cpu":
        # The passes take every core: tokenizing beside them would only take cores from them (on 2
        # cores, 66 % of the passes' rate against 90 % tokenizing between them, with the
        # tokenizer's own threads). The next part is still read ahead.
        ahead = _Prefetch(todo, PARTS_AHEAD)
        encoded = (labeller.encode(rows, index) for index, rows in ahead)
    else:  # an accelerator runs the passes: the CPU tokenizes the next part meanwhile
        ahead = encoded = _Prefetch((labeller.encode(rows, index) for index, rows in todo), PARTS_AHEAD)
    writing: deque = deque()
    with ThreadPoolExecutor(1, thread_name_prefix="muxplm-predict-writer") as writer:
        try:
            for part in encoded:
                labelled = labeller.label(part)
                writing.append((writer.submit(parts.write, labelled), labelled.rows))
                while writing and (writing[0][0].done() or len(writing) > PARTS_AHEAD):
                    future, rows = writing.popleft()
                    future.result()
                    bar.update(rows)
            while writing:
                future, rows = writing.popleft()
                future.result()
                bar.update(rows)
        finally:
            ahead.close()


class _Prefetch:
    """The items of ``items`` made in a thread of their own, at most ``depth`` ahead of their use:
    the next part is read (and, beside an accelerator, tokenized) while the model runs on this one."""

    _END = object()

    def __init__(self, items: Iterable, depth: int):
        self._queue: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(iter(items),), name="muxplm-predict-reader",
                                        daemon=True)
        self._thread.start()

    def _fill(self, items: Iterator) -> None:
        try:
            for item in items:
                if not self._put(item):
                    return
        except BaseException as error:  # handed to the consumer, raised there
            self._put(error)
            return
        self._put(self._END)

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self):
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


# ------------------------------------------------------------------ in worker processes

_WORKER: dict = {}


def _start_worker(model, loading: dict, settings: LabelSettings, columns: Columns, threads: int | None,
                  devices: multiprocessing.Queue, parts: PartFiles) -> None:
    # The tokenizer's own thread pool would take every CPU in every worker: the budget is the threads.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    loading = dict(loading, device=devices.get())
    _WORKER.update(labeller=load_labeller(model, settings, columns, threads=threads, **loading), parts=parts)


def _label_part(index: int, rows: list) -> int:
    labelled = _WORKER["labeller"](rows, index)
    _WORKER["parts"].write(labelled)
    return labelled.rows


def _label_in_workers(todo: _PartsToDo, parts: PartFiles, bar, *, workers: int, threads: int | None,
                      devices: list[str], model, loading: dict, settings: LabelSettings, columns: Columns) -> None:
    context = multiprocessing.get_context("spawn")  # a fork would copy this process's threads and model
    assigned = context.Queue()
    for device in devices:
        assigned.put(device)
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                             initargs=(model, loading, settings, columns, threads, assigned, parts)) as pool:
        running: set = set()
        try:
            for index, rows in todo:
                while len(running) >= PARTS_AHEAD * workers:
                    done, running = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        bar.update(future.result())
                running.add(pool.submit(_label_part, index, rows))
            for future in running:
                bar.update(future.result())
        except BaseException:
            for future in running:
                future.cancel()
            raise
