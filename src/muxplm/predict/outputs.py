"""Where ``muxplm predict`` writes: numbered part files while it runs, one output file at the end.

Part ``k`` (rows ``k * part_size`` onwards) goes to ``OUTPUT.parts/part-00000k.jsonl`` (or
``.parquet``), its bad rows to ``part-00000k.errors.jsonl`` and the CSV lines without a row met
while reading it to ``part-00000k.malformed.jsonl``; each file is written under a temporary
name and renamed, so a part file that exists is whole, and a rerun after a kill skips it. The run's
inputs and settings are kept in ``OUTPUT.parts/run.json``: a rerun with other ones is refused rather
than mixed in. When every part is there, they are joined in order into ``OUTPUT`` and
``OUTPUT_STEM.errors.jsonl``, and the parts folder is removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

OUTPUT_FORMATS = {".jsonl": "jsonl", ".parquet": "parquet"}
RUN_FILE = "run.json"


def output_format(path: str | os.PathLike) -> str:
    """``jsonl`` or ``parquet``, from the output's extension."""
    extension = os.path.splitext(str(path).rstrip("/"))[1].lower()
    if extension not in OUTPUT_FORMATS:
        raise ValueError(f"--output {path}: end it in .jsonl or .parquet to choose the format")
    return OUTPUT_FORMATS[extension]


def errors_path(output: str | os.PathLike) -> str:
    """Where the bad rows of ``output`` are listed: ``labels.jsonl`` -> ``labels.errors.jsonl``."""
    return os.path.splitext(str(output).rstrip("/"))[0] + ".errors.jsonl"


def check_inputs_apart(inputs, written: dict[str, str], output) -> None:
    """Refuse, before anything is read or removed, an input that the run would overwrite or delete
    (``--overwrite`` included), or read back as its own output on a rerun. ``inputs``: ``(path,
    the --input pattern that named it)``; ``written``: each file or folder the run writes, and what
    it is. URIs are left alone."""
    for path, pattern in inputs:
        if "://" in path:
            continue
        resolved = os.path.realpath(path)
        for target, what in written.items():
            target = os.path.realpath(target)
            relation = "is" if resolved == target else "is in" if _inside(resolved, target) else \
                "holds" if _inside(target, resolved) else None
            if relation:
                raise ValueError(f"--input {pattern} names {path}, which {relation} {what} of --output {output}; "
                                 "write the output elsewhere, or name inputs that leave it out")


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def _write_atomic(path: Path, write) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    write(temporary)
    os.replace(temporary, path)


def _jsonl(records) -> str:
    # default=str: an id column of dates or decimals is written as text rather than refused.
    return "".join(json.dumps(record, ensure_ascii=False, default=str) + "\n" for record in records)


class PartFiles:
    """The part files of a run writing ``output`` (format ``jsonl`` or ``parquet``)."""

    def __init__(self, output: str | os.PathLike, format: str):
        self.output, self.format = Path(output), format
        self.folder = Path(f"{output}.parts")

    def part(self, index: int) -> Path:
        return self.folder / f"part-{index:06d}.{self.format}"

    def errors(self, index: int) -> Path:
        return self.folder / f"part-{index:06d}.errors.jsonl"

    def malformed(self, index: int) -> Path:
        return self.folder / f"part-{index:06d}.malformed.jsonl"

    def is_done(self, index: int) -> bool:
        return self.part(index).is_file()

    def check_apart(self, sources) -> None:
        """Refuse inputs (:class:`~muxplm.predict.sources.Source`) that are this output, its errors
        file or in its parts folder."""
        check_inputs_apart([(source.path, source.pattern) for source in sources],
                           {str(self.output): "the output file", errors_path(self.output): "the errors file",
                            str(self.folder): "the parts folder"}, self.output)

    def check(self, *, overwrite: bool = False) -> None:
        """Refuse, before anything runs, to replace a finished output unless asked to."""
        if not overwrite and self.output.exists() and not self.folder.exists():
            raise ValueError(f"{self.output} exists; pass --overwrite to replace it")

    def start(self, run: dict, *, overwrite: bool = False) -> int:
        """Make ready to write the run described by ``run`` (its inputs and settings): returns the
        number of parts an earlier, interrupted run of the same one left finished."""
        if overwrite:
            shutil.rmtree(self.folder, ignore_errors=True)
            for path in (self.output, Path(errors_path(self.output))):
                path.unlink(missing_ok=True)
        self.check(overwrite=overwrite)
        saved = self.folder / RUN_FILE
        run = json.loads(json.dumps(run))  # compared as it reads back
        if saved.is_file():
            earlier = json.loads(saved.read_text())
            changed = sorted(key for key in run.keys() | earlier.keys() if run.get(key) != earlier.get(key))
            if changed:
                raise ValueError(f"{self.folder} holds an interrupted run with other {', '.join(changed)}; rerun it as "
                                 "it was to resume, or pass --overwrite to start over")
            # part-K.errors.jsonl and part-K.malformed.jsonl sit beside the parts: only part-K.FORMAT counts.
            return sum(1 for path in self.folder.iterdir() if re.fullmatch(rf"part-\d+\.{self.format}", path.name))
        self.folder.mkdir(parents=True, exist_ok=True)
        _write_atomic(saved, lambda path: path.write_text(json.dumps(run, indent=1)))
        return 0

    def write(self, part) -> None:
        """Write a :class:`~muxplm.predict.labelling.LabelledPart`: its bad rows, then its records
        (the part counts as done once that file exists)."""
        errors = self.errors(part.index)
        if part.bad:
            _write_atomic(errors, lambda path: path.write_text(_jsonl(part.bad), encoding="utf-8"))
        else:
            errors.unlink(missing_ok=True)
        if self.format == "jsonl":
            _write_atomic(self.part(part.index), lambda path: path.write_text(_jsonl(part.records), encoding="utf-8"))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pylist(part.records)
            _write_atomic(self.part(part.index), lambda path: pq.write_table(table, path))

    def write_malformed(self, index: int, reports: list[dict]) -> None:
        """CSV lines that had no row to make, met while reading part ``index`` (or, for ``index`` =
        the number of parts, after the last part's rows)."""
        _write_atomic(self.malformed(index), lambda path: path.write_text(_jsonl(reports), encoding="utf-8"))

    def finish(self, num_parts: int, empty_schema=None) -> dict:
        """Join parts ``0 .. num_parts - 1`` into the output and the bad rows into the errors file
        (written only when there are bad rows), remove the parts folder; returns the counts.
        ``empty_schema``: a Parquet output's columns when no part has a record to tell them."""
        missing = [index for index in range(num_parts) if not self.is_done(index)]
        if missing:
            raise RuntimeError(f"parts {missing[:5]} of {self.folder} are missing")
        records = self._join_records(num_parts, empty_schema)
        kinds, actions, bad = Counter(), Counter(), 0
        errors_file = Path(errors_path(self.output))
        temporary = errors_file.with_name(f".{errors_file.name}.tmp")
        with open(temporary, "w", encoding="utf-8") as joined:
            # Index num_parts: the CSV lines without a row met after the last part's rows.
            for index in range(num_parts + 1):
                for path in (self.malformed(index), self.errors(index)):
                    if not path.is_file():
                        continue
                    for line in path.read_text(encoding="utf-8").splitlines():
                        report = json.loads(line)
                        kinds[report.get("kind", "malformed")] += 1
                        actions[report.get("action", "skipped")] += 1
                        bad += 1
                        joined.write(line + "\n")
        if bad:
            os.replace(temporary, errors_file)
        else:
            temporary.unlink()
            errors_file.unlink(missing_ok=True)
        shutil.rmtree(self.folder)
        return {"labelled": records, "skipped": actions["skipped"], "truncated": actions["truncated"],
                "bad_rows_by_kind": dict(kinds), "errors_file": str(errors_file) if bad else None}

    def _join_records(self, num_parts: int, empty_schema=None) -> int:
        temporary = self.output.with_name(f".{self.output.name}.tmp")
        count = 0
        if self.format == "jsonl":
            with open(temporary, "wb") as joined:
                for index in range(num_parts):
                    with open(self.part(index), "rb") as part:
                        for chunk in iter(lambda: part.read(1 << 20), b""):
                            joined.write(chunk)
                            count += chunk.count(b"\n")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            schemas = [schema for schema in (pq.read_schema(self.part(i)) for i in range(num_parts)) if schema.names]
            # A part whose ids were all null has a null-typed column: the other parts' type wins.
            if schemas:
                schema = pa.unify_schemas(schemas, promote_options="permissive")
            else:  # no record at all (an empty input, or only bad rows): the columns one would have
                schema = empty_schema if empty_schema is not None else pa.schema([])
            with pq.ParquetWriter(temporary, schema) as joined:
                for index in range(num_parts):
                    table = pq.read_table(self.part(index))
                    if table.num_rows:
                        joined.write_table(table.select(schema.names).cast(schema))
                        count += table.num_rows
        os.replace(temporary, self.output)
        return count
