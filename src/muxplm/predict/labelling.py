"""One part of an input labelled: its rows screened, tokenized, run through the shared inference
path (:func:`muxplm.inference.forward_batches` over :meth:`Predictor.run <muxplm.serving.Predictor.run>`,
or the server's fixed-shape deterministic passes) and decoded into output records.

A part is the unit of every way ``muxplm predict`` runs: in this process, in a worker process,
or in a Ray actor (:class:`muxplm.integrations.ray.MuxPredictor`), so they all give the same
predictions for the same part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..choices import ON_BAD_ROW
from ..inference import Encoded, forward_batches
from ..serving.batcher import deterministic_passes, padding_row
from ..serving.predictor import InputTooLongError, Predictor
from .sources import Columns, InputRow


@dataclass(frozen=True)
class LabelSettings:
    """What decides the predictions of a part, besides the model.

    Attributes:
        on_bad_row: ``"skip"`` leaves a bad row out of the output (and reports it);
            ``"truncate"`` cuts an over-long text to ``max_length`` tokens instead (reported too) and
            skips the other bad rows; ``"fail"`` stops at the first bad row.
        deterministic: each text alone in a group of copies of itself, in passes of fixed shape
            (the server's ``--deterministic``): its prediction depends on nothing else in the file.
        composition_seed: otherwise, which texts share a group is shuffled by this seed, per pass:
            a rerun gives the same output.
        group_by_length: sort a part's texts by length before cutting it into passes (less padding).
        top_k: sentence classification: also the ``top_k`` best labels and their scores.
        return_all_scores: sentence classification: also every label's score.
        part_size: rows per part; parts are also the unit of resuming.
    """

    on_bad_row: str = "skip"
    deterministic: bool = False
    composition_seed: int = 0
    group_by_length: bool = True
    top_k: int = 1
    return_all_scores: bool = False
    part_size: int = 8192

    def __post_init__(self):
        if self.on_bad_row not in ON_BAD_ROW:
            raise ValueError(f"on_bad_row must be one of {', '.join(ON_BAD_ROW)}, got {self.on_bad_row!r}")
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.part_size < 1:
            raise ValueError(f"part_size must be >= 1, got {self.part_size}")


class BadRowError(ValueError):
    """A bad row met with ``on_bad_row="fail"``."""


@dataclass
class LabelledPart:
    """The output of one part: records of the rows predicted and reports of the bad ones, in row order."""

    index: int
    rows: int
    records: list[dict] = field(default_factory=list)
    bad: list[dict] = field(default_factory=list)


@dataclass
class EncodedPart:
    """A part tokenized: its readable rows with their instances, and the reports of the others."""

    index: int
    rows: int
    good: list[tuple[InputRow, Encoded]]
    bad: list[dict]


class PartLabeller:
    """Labels parts of rows with ``predictor`` under ``settings``; ``with_ids``: records carry the
    rows' ids (an id column was named)."""

    def __init__(self, predictor: Predictor, settings: LabelSettings, *, with_ids: bool = False,
                 with_pairs: bool = False):
        self.predictor, self.settings, self.with_ids, self.with_pairs = predictor, settings, with_ids, with_pairs
        self.classifies = predictor.task == "sentence" and not predictor.is_regression
        if (settings.top_k > 1 or settings.return_all_scores) and not self.classifies:
            raise ValueError("--top-k and --return-all-scores apply to sentence classifiers; this model is a "
                             + ("regression model" if predictor.task == "sentence" else f"{predictor.task} model"))
        if with_pairs:
            predictor.check_pairs_supported([])
        num_labels = predictor.model.config.num_labels
        self.label_names = [predictor.id2label.get(i, f"LABEL_{i}") for i in range(num_labels)]  # as Predictor names them
        self._pads: dict[int, Encoded] = {}

    def output_fields(self) -> list[str]:
        """The fields of a record besides ``row`` and ``id``, whatever the rows."""
        fields = {"sentence": ["score"] if self.predictor.is_regression else ["label", "score"],
                  "token": ["words", "tags", "scores"], "reconstruct": ["token_ids", "text"]}[self.predictor.task]
        if self.settings.top_k > 1:
            fields += ["top_labels", "top_scores"]
        if self.settings.return_all_scores:
            fields.append("all_scores")
        if self.settings.on_bad_row == "truncate":
            fields.append("truncated")
        return fields

    def output_schema(self):
        """The Arrow schema of a record (``row``, ``id`` with an id column, :meth:`output_fields`),
        for a Parquet output with no record to infer it from. The ids' type is unknown: null."""
        import pyarrow as pa

        texts, scores = pa.list_(pa.string()), pa.list_(pa.float64())
        types = {"label": pa.string(), "score": pa.float64(), "words": texts, "tags": texts, "scores": scores,
                 "token_ids": pa.list_(pa.int64()), "text": pa.string(), "top_labels": texts, "top_scores": scores,
                 "all_scores": pa.struct([(name, pa.float64()) for name in self.label_names]),
                 "truncated": pa.bool_()}
        return pa.schema([("row", pa.int64())] + ([("id", pa.null())] if self.with_ids else [])
                         + [(name, types[name]) for name in self.output_fields()])

    def __call__(self, rows: Sequence[InputRow], index: int) -> LabelledPart:
        return self.label(self.encode(rows, index))

    # ------------------------------------------------------------------ screening and tokenizing

    def encode(self, rows: Sequence[InputRow], index: int) -> EncodedPart:
        """Screen and tokenize the rows of part ``index``: rows the model can read, and reports
        of the others (or :class:`BadRowError` with ``on_bad_row="fail"``)."""
        bad, readable = [], []
        for row in rows:
            problem = self._screen(row)
            if problem:
                bad.append(self._report(row, *problem))
            else:
                readable.append(row)
        good = []
        if readable:
            truncate = self.settings.on_bad_row == "truncate"
            pairs = [row.pair for row in readable] if self.with_pairs else None
            encoded = self.predictor.encode([row.text for row in readable], pairs, truncate=truncate,
                                            raise_too_long=False)
            for row, item in zip(readable, encoded):
                if isinstance(item, Exception):
                    kind = "too_long" if isinstance(item, InputTooLongError) else "invalid"
                    bad.append(self._report(row, kind, _reason(item)))
                    continue
                if item.truncated:
                    bad.append(self._report(row, "too_long", f"cut to {self.predictor.max_length} tokens",
                                            action="truncated"))
                good.append((row, item))
        bad.sort(key=lambda report: report["row"])
        return EncodedPart(index, len(rows), good, bad)

    def _screen(self, row: InputRow) -> tuple[str, str] | None:
        if row.problem:
            return "unreadable", row.problem
        if not row.text.strip():
            return "empty", "empty text"
        if self.with_pairs and not row.pair.strip():
            return "empty", "empty text pair"
        return None

    def _report(self, row: InputRow, kind: str, error: str, action: str = "skipped") -> dict:
        where = f"{row.file}, row {row.row_in_file} of the file (row {row.row} of the input)"
        if action == "skipped" and self.settings.on_bad_row == "fail":
            raise BadRowError(f"{where}: {error}; --on-bad-row skip leaves such rows out and lists them")
        report = {"row": row.row}
        if self.with_ids:
            report["id"] = row.id
        report.update(file=row.file, row_in_file=row.row_in_file, kind=kind, error=error, action=action)
        return report

    # ------------------------------------------------------------------ predicting

    def label(self, part: EncodedPart) -> LabelledPart:
        """The records of an encoded part, in row order."""
        items = [item for _, item in part.good]
        outputs = self._deterministic_outputs(items) if self.settings.deterministic else \
            self._seeded_outputs(items, part.index)
        records = [self._record(row, item, output) for (row, item), output in zip(part.good, outputs)]
        return LabelledPart(part.index, part.rows, records, part.bad)

    def _seeded_outputs(self, items: list[Encoded], index: int) -> list[torch.Tensor]:
        order = sorted(range(len(items)), key=lambda i: len(items[i])) if self.settings.group_by_length else \
            range(len(items))
        batch_size = self.predictor.batch_size
        # Pass numbers run on across parts, so every pass of the file has a composition of its own.
        passes_per_part = -(-self.settings.part_size // batch_size)
        outputs = forward_batches(self.predictor.run, [items[i] for i in order], batch_size=batch_size,
                                  composition_seed=self.settings.composition_seed, first_pass=index * passes_per_part)
        in_order: list[torch.Tensor] = [None] * len(items)  # type: ignore[list-item]
        for position, i in enumerate(order):
            in_order[i] = outputs[position]
        return in_order

    def _deterministic_outputs(self, items: list[Encoded]) -> list[torch.Tensor]:
        """The server's deterministic mode: each text in a group of copies of itself (a retrieval
        model's slots hold fillers instead, as the server leaves them), passes of fixed shape."""
        n = self.predictor.num_instances
        if self.predictor.task == "reconstruct":
            filler = Encoded([], [])
            groups = [([item] + [filler] * (n - 1), [i] + [None] * (n - 1)) for i, item in enumerate(items)]
        else:
            groups = [([item] * n, [i] * n) for i, item in enumerate(items)]
        sums: list[torch.Tensor | None] = [None] * len(items)
        counts = [0] * len(items)
        for rows, owners in deterministic_passes(groups, num_instances=n, max_length=self.predictor.max_length,
                                                 pad_row=self._pad_row):
            for owner, output in zip(owners, self.predictor.run(rows)):
                if owner is not None:
                    sums[owner] = output if sums[owner] is None else sums[owner] + output
                    counts[owner] += 1
        return [total if count == 1 else total / count for total, count in zip(sums, counts)]

    def _pad_row(self, length: int) -> Encoded:
        if length not in self._pads:
            self._pads[length] = padding_row(self.predictor.pad_token_id, length)
        return self._pads[length]

    def _record(self, row: InputRow, item: Encoded, output: torch.Tensor) -> dict:
        record = {"row": row.row}
        if self.with_ids:
            record["id"] = row.id
        record.update(self.predictor.decode(item, output))
        if self.classifies and (self.settings.top_k > 1 or self.settings.return_all_scores):
            probs = output.softmax(-1)
            if self.settings.top_k > 1:
                scores, best = probs.topk(min(self.settings.top_k, probs.numel()))
                record["top_labels"] = [self.label_names[i] for i in best.tolist()]
                record["top_scores"] = scores.tolist()
            if self.settings.return_all_scores:
                record["all_scores"] = dict(zip(self.label_names, probs.tolist()))
        if self.settings.on_bad_row == "truncate":
            record["truncated"] = item.truncated
        return record


def load_labeller(model, settings: LabelSettings, columns: Columns, *, threads: int | None = None,
                  **loading) -> PartLabeller:
    """A :class:`PartLabeller` of the checkpoint ``model``, loaded by :func:`muxplm.serving.load_predictor`
    with ``loading`` (backend, device, dtype, quantize, compile, max_length, batch_size) and, when
    given, ``threads`` torch threads."""
    from ..serving.predictor import load_predictor

    if threads:
        torch.set_num_threads(threads)
    predictor = load_predictor(model, threads=threads, **loading)
    return PartLabeller(predictor, settings, with_ids=columns.id is not None, with_pairs=columns.pair is not None)


def _reason(error: Exception) -> str:
    """An encoding error's message without the position it had in a tokenizer call."""
    if isinstance(error, InputTooLongError):
        if error.num_tokens is None:
            return f"{error.num_chars} characters, more than {error.max_length} tokens allow"
        return f"{error.num_tokens} tokens, more than the maximum of {error.max_length}"
    return getattr(error, "reason", str(error))
