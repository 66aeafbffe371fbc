"""The rows of ``muxplm predict``'s input files, read as a stream: CSV / TSV, JSONL, Parquet and plain
text (one text a line), optionally compressed (``.gz``, ``.bz2``, ``.zst``, ``.lz4``).

Every record of every file becomes one :class:`InputRow`, numbered across all the files in the
order given. A record that cannot be read (bytes that are not UTF-8, a line that is not a JSON
object, a missing or non-text field) still becomes a row, with the reason in ``problem``, so that it
is reported rather than dropped; only a CSV line with the wrong number of fields has no columns to
make a row of, and is reported by its line (:attr:`Source.malformed`).
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, NamedTuple

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet",
           ".txt": "txt"}
INPUT_FORMATS = ("csv", "tsv", "jsonl", "parquet", "txt")
COMPRESSIONS = (".gz", ".bz2", ".zst", ".lz4")  # what pyarrow.input_stream(compression="detect") opens
BLOCK_ROWS = 8192  # rows per record batch read from CSV and Parquet


@dataclass(frozen=True)
class Columns:
    """Which fields of a record hold the text, its optional second text, and its optional id."""

    text: str = "text"
    pair: str | None = None
    id: str | None = None

    @property
    def names(self) -> list[str]:
        return [name for name in (self.text, self.pair, self.id) if name is not None]


class InputRow(NamedTuple):
    """One record of the input. ``row``: its number across all input files (from 0); ``problem``:
    why it could not be read, ``None`` when ``text`` (and ``pair``, if asked for) are strings."""

    row: int
    file: str
    row_in_file: int
    id: Any
    text: str | None
    pair: str | None
    problem: str | None = None


@dataclass
class Source:
    """One input file and its format."""

    path: str
    format: str
    pattern: str = ""  # the --input path or glob that named it, for messages
    malformed: list[dict] = field(default_factory=list)  # CSV lines without the header's fields

    def num_rows(self) -> int | None:
        """The number of records, where the format stores it (Parquet), else ``None``."""
        if self.format != "parquet":
            return None
        import pyarrow.parquet as pq

        with reading(self):
            return pq.ParquetFile(self.path).metadata.num_rows


@contextlib.contextmanager
def reading(source: Source):
    """Errors met reading ``source`` (an empty CSV, a corrupt Parquet file, a truncated ``.gz``)
    raised as a ``ValueError`` that names it, rather than as Arrow's or the OS's message alone."""
    import pyarrow as pa

    try:
        yield
    except (pa.ArrowException, OSError, EOFError) as error:
        raise ValueError(f"{source.path}: cannot read it as {source.format} ({error})") from error


def file_format(path: str) -> str:
    """The format of ``path`` from its extension (a compression suffix looked through)."""
    stem, extension = os.path.splitext(path.lower())
    if extension in COMPRESSIONS:
        extension = os.path.splitext(stem)[1]
    if extension not in FORMATS:
        raise ValueError(f"{path}: cannot tell its format from the extension; use one of "
                         f"{', '.join(sorted(FORMATS))} (optionally compressed: {', '.join(COMPRESSIONS)}), or "
                         "name the format with --input-format")
    return FORMATS[extension]


def find_sources(patterns: Sequence[str], format: str | None = None) -> list[Source]:
    """The files that ``patterns`` (paths or globs) name, each glob's matches sorted, in the order
    given, each file once (where first named); their format is ``format`` when given, else told by
    each one's extension."""
    if format is not None and format not in FORMATS.values():
        raise ValueError(f"the input format must be one of {', '.join(sorted(set(FORMATS.values())))}, got {format!r}")
    sources, seen = [], set()
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        matches = [path for path in matches if os.path.isfile(path)]
        if not matches:
            raise FileNotFoundError(f"no input file matches {pattern}")
        for path in matches:
            # A file named by its path and again by a glob would otherwise be labelled twice.
            resolved = os.path.realpath(path)
            if resolved not in seen:
                seen.add(resolved)
                sources.append(Source(path, format or file_format(path), pattern))
    return sources


def check_columns(sources: Sequence[Source], columns: Columns) -> None:
    """Refuse, before anything runs, a CSV or Parquet file without the columns asked for, and
    plain text with a second text or an id (its line is its only field)."""
    for source in sources:
        if source.format == "txt":
            if columns.pair or columns.id:
                raise ValueError(f"{source.path}: a text file has one text a line: no --text-pair-column or --id-column")
            continue
        names = _column_names(source)
        if names is None:
            continue  # JSONL: each record has its own fields; a missing one is that row's problem
        missing = [name for name in columns.names if name not in names]
        if missing:
            raise ValueError(f"{source.path} has no column {', '.join(map(repr, missing))} (its columns: "
                             f"{', '.join(names)}); name the right ones with --text-column / --text-pair-column / "
                             "--id-column")


def _column_names(source: Source) -> list[str] | None:
    with reading(source):
        return _header(source)


def _header(source: Source) -> list[str] | None:
    if source.format == "parquet":
        import pyarrow.parquet as pq

        return pq.read_schema(source.path).names
    if source.format in ("csv", "tsv"):
        import pyarrow.csv as pcsv

        with _open(source.path) as stream:
            # Only the header is wanted: malformed lines are reported when the rows are read.
            reader = pcsv.open_csv(stream, parse_options=_csv_parse_options(source, report=False),
                                   read_options=pcsv.ReadOptions(block_size=1 << 16, use_threads=False))
            return reader.schema.names
    return None


def read_rows(sources: Sequence[Source], columns: Columns) -> Iterator[InputRow]:
    """Every record of ``sources`` as an :class:`InputRow`, in order, read a block at a time."""
    row = 0
    for source in sources:
        for row_in_file, (id_, text, pair, problem) in enumerate(_records(source, columns)):
            yield InputRow(row, source.path, row_in_file, id_, text, pair, problem)
            row += 1


def in_parts(rows: Iterator[InputRow], part_size: int) -> Iterator[list[InputRow]]:
    """``rows`` in consecutive lists of ``part_size`` (the last one shorter)."""
    while part := list(islice(rows, part_size)):
        yield part


# ------------------------------------------------------------------ formats


def _records(source: Source, columns: Columns) -> Iterator[tuple[Any, str | None, str | None, str | None]]:
    """``(id, text, pair, problem)`` per record of ``source``."""
    with reading(source):
        yield from _format_records(source, columns)


def _format_records(source: Source, columns: Columns):
    if source.format == "txt":
        for line in _lines(source.path):
            text, problem = _decoded(line.rstrip(b"\r\n"), "the line")
            yield None, text, None, problem
    elif source.format == "jsonl":
        yield from _jsonl_records(source.path, columns)
    else:
        for batch in _record_batches(source, columns):
            yield from table_records(batch, columns)


def table_records(table, columns: Columns) -> Iterator[tuple[Any, str | None, str | None, str | None]]:
    """``(id, text, pair, problem)`` per row of a pyarrow table or record batch."""
    values = [table.column(name).to_pylist() if name else [None] * table.num_rows
              for name in (columns.text, columns.pair, columns.id)]
    for text, pair, id_ in zip(*values):
        yield _row_fields(columns, id_, text, pair)


def _jsonl_records(path: str, columns: Columns):
    # Line by line rather than pyarrow's JSON reader, which fails a whole block on one bad line:
    # here a line that is not UTF-8 or not a JSON object is that row's problem only.
    for line in _lines(path):
        line_text, problem = _decoded(line, "the line")
        if problem is None:
            try:
                record = json.loads(line_text)
            except json.JSONDecodeError as error:
                problem = f"not JSON ({error.msg} at character {error.pos})"
            else:
                if not isinstance(record, dict):
                    problem = f"a JSON {type(record).__name__}, not an object"
        if problem is not None:
            yield None, None, None, problem
            continue
        yield _row_fields(columns, record.get(columns.id) if columns.id else None, record.get(columns.text, _MISSING),
                          record.get(columns.pair, _MISSING) if columns.pair else None)


_MISSING = object()


def _row_fields(columns: Columns, id_, text, pair):
    """``(id, text, pair, problem)`` from a record's values (``bytes`` decoded here, so that a row
    whose bytes are not UTF-8 is reported on its own)."""
    problem = None
    for name, value in ((columns.text, text), (columns.pair, pair)):
        if name is None:
            continue
        if isinstance(value, bytes):
            value, problem = _decoded(value, f"field {name!r}")
        elif value is _MISSING:
            value, problem = None, f"no field {name!r}"
        elif value is None:
            problem = f"field {name!r} is null"
        elif not isinstance(value, str):
            value, problem = None, f"field {name!r} is a {type(value).__name__}, not text"
        if name == columns.text:
            text = value
        else:
            pair = value
        if problem:
            break
    return id_, text, pair, problem


def _decoded(data: bytes, what: str) -> tuple[str | None, str | None]:
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as error:
        return None, f"{what} is not UTF-8 ({error.reason} at byte {error.start})"


def _open(path: str):
    """A buffered binary stream of ``path``, decompressed by its extension."""
    import pyarrow as pa

    return io.BufferedReader(pa.input_stream(path, compression="detect"), 1 << 20)


def _lines(path: str) -> Iterator[bytes]:
    with _open(path) as stream:
        first = True
        for line in stream:
            if first and line.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark
                line = line[3:]
            first = False
            yield line


def _csv_parse_options(source: Source, report: bool = True):
    import pyarrow.csv as pcsv

    def skip(row) -> str:
        if report:
            source.malformed.append({"file": source.path, "line": row.number, "error":
                                     f"{row.actual_columns} fields where the header has {row.expected_columns}"})
        return "skip"

    # newlines_in_values: a quoted text may span lines, as in any spreadsheet export.
    return pcsv.ParseOptions(delimiter="\t" if source.format == "tsv" else ",", newlines_in_values=True,
                             invalid_row_handler=skip)


def _record_batches(source: Source, columns: Columns):
    """Record batches of a CSV or Parquet file with the asked-for columns: the texts as raw bytes
    where the format allows (decoded per row), the id as stored (CSV: as written, a string)."""
    import pyarrow as pa

    if source.format == "parquet":
        import pyarrow.parquet as pq

        yield from pq.ParquetFile(source.path).iter_batches(batch_size=BLOCK_ROWS, columns=columns.names)
        return
    import pyarrow.csv as pcsv

    types = {name: pa.binary() for name in (columns.text, columns.pair) if name}
    if columns.id:
        types[columns.id] = pa.string()
    with _open(source.path) as stream:
        # One thread: the malformed-line handler then knows each line's number.
        reader = pcsv.open_csv(stream, read_options=pcsv.ReadOptions(use_threads=False, block_size=1 << 20),
                               parse_options=_csv_parse_options(source),
                               convert_options=pcsv.ConvertOptions(include_columns=columns.names, column_types=types))
        yield from reader
