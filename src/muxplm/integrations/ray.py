"""Labelling a Ray Dataset with a MUX checkpoint, on a machine or a cluster.

:class:`MuxPredictor` is a callable class for ``ray.data.Dataset.map_batches``: each Ray actor
loads the checkpoint once and labels each batch as ``muxplm predict`` labels one part of a file
(:class:`muxplm.predict.PartLabeller`)::

    import ray
    from muxplm.integrations.ray import MuxPredictor

    ds = ray.data.read_parquet("s3://bucket/reviews/")
    labels = ds.map_batches(
        MuxPredictor, fn_constructor_kwargs={"model": "runs/my-task", "id_column": "id"},
        batch_size=8192, batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=4), num_cpus=1)
    labels.write_parquet("s3://bucket/labels/")

:func:`predict_with_ray` runs ``muxplm predict --ray``: reads with Ray Data's readers, labels on an
actor pool and writes with Ray Data's writers. Ray is an optional extra (``pip install
"muxplm[ray]"``) imported only here.
"""

from __future__ import annotations

import glob
import inspect
import os
import shutil
from dataclasses import asdict, fields

from ..predict.labelling import LabelSettings
from ..predict.outputs import check_inputs_apart, errors_path, output_format
from ..predict.sources import Columns, InputRow, file_format, table_records

ERROR_FIELDS = ("error_kind", "error")


def _import_ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise ImportError('the Ray integration needs Ray Data: pip install "muxplm[ray]"') from None
    return ray


class MuxPredictor:
    """Predictions of a MUX checkpoint over the batches of a Ray Dataset (``map_batches``).

    Args:
        model: the checkpoint folder (reachable from every node) or hub name.
        text_column, text_pair_column, id_column: the batch's columns (as ``muxplm predict``'s flags).
        threads: torch threads of this actor (match ``map_batches``' ``num_cpus``).
        on_bad_row, deterministic, composition_seed, group_by_length, top_k, return_all_scores:
            as :class:`muxplm.predict.LabelSettings` (``part_size`` is the batch itself).
        backend, device, dtype, quantize, compile, max_length, batch_size: the predictor
            (:func:`muxplm.serving.load_predictor`).

    Returns, per batch, a ``pyarrow.Table`` with one row per input row, in order: the id column
    (when named), the prediction fields, and ``error_kind`` / ``error``: null, or why the row
    was not predicted (an empty, unreadable or over-long text). Which texts share a multiplexed
    group is drawn within the batch, each batch labelled as a first part (from the seed's first
    pass): the same batch gives the same output, but only with ``deterministic=True`` does a
    prediction depend on its text alone, however Ray cuts the data into batches, and equal
    ``muxplm predict``'s.
    """

    def __init__(self, model: str, *, text_column: str = "text", text_pair_column: str | None = None,
                 id_column: str | None = None, threads: int | None = None, **options):
        from ..predict.labelling import load_labeller

        settings = {field.name for field in fields(LabelSettings)}
        self.columns = Columns(text_column, text_pair_column, id_column)
        self.labeller = load_labeller(model, LabelSettings(**{k: v for k, v in options.items() if k in settings}),
                                      self.columns, threads=threads,
                                      **{k: v for k, v in options.items() if k not in settings})
        self.fields = (["id"] if id_column else []) + self.labeller.output_fields() + list(ERROR_FIELDS)

    def __call__(self, batch):
        import pyarrow as pa

        table = _as_table(batch)
        rows = [InputRow(index, "", index, *values) for index, values in enumerate(table_records(table, self.columns))]
        part = self.labeller(rows, 0)
        predicted = {record["row"]: record for record in part.records}
        skipped = {report["row"]: report for report in part.bad if report["action"] == "skipped"}
        out = {name: [] for name in self.fields}
        for row in rows:
            record = predicted.get(row.row) or {"id": row.id}
            report = skipped.get(row.row, {})
            for name in self.fields:
                out[name].append(report.get("kind") if name == "error_kind" else report.get(name) if name == "error"
                                 else record.get(name))
        return pa.table(out)


def _as_table(batch):
    """A Ray batch (pyarrow, pandas or numpy format) as a pyarrow table."""
    import pyarrow as pa

    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, dict):
        return pa.table({name: pa.array(list(values)) for name, values in batch.items()})
    return pa.Table.from_pandas(batch, preserve_index=False)


def _paths(inputs) -> list[tuple[str, str]]:
    """``(path, the pattern that named it)``: local globs expanded (sorted, in the order given);
    URIs (``s3://...``) left to Ray Data."""
    paths = []
    for pattern in inputs:
        if "://" in pattern or not glob.has_magic(pattern):
            paths.append((pattern, pattern))
            continue
        matches = sorted(glob.glob(pattern, recursive=True))
        if not matches:
            raise FileNotFoundError(f"no input file matches {pattern}")
        paths.extend((path, pattern) for path in matches)
    return paths


def _read(ray, paths: list[str], format: str, columns: Columns, read_cpus: float):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    reader = {"csv": ray.data.read_csv, "tsv": ray.data.read_csv, "jsonl": ray.data.read_json,
              "parquet": ray.data.read_parquet, "txt": ray.data.read_text}[format]
    # A reader's CPUs: a named argument in recent Ray Data, in ray_remote_args before.
    if "num_cpus" in inspect.signature(reader).parameters:
        options = {"num_cpus": read_cpus}
    else:
        options = {"ray_remote_args": {"num_cpus": read_cpus}}
    if format in ("csv", "tsv"):
        types = {name: pa.string() for name in columns.names}  # ids as written, as the local path reads them
        options.update(parse_options=pcsv.ParseOptions(delimiter="\t" if format == "tsv" else ",",
                                                       newlines_in_values=True),
                       convert_options=pcsv.ConvertOptions(include_columns=columns.names, column_types=types))
    elif format == "jsonl":
        options.update(file_extensions=None)  # Arrow's JSON reader reads a record a line
    elif format == "parquet":
        options.update(columns=columns.names)
    return reader(paths, **options)


def predict_with_ray(model, inputs, output: str, *, columns: Columns = Columns(), input_format: str | None = None,
                     settings: LabelSettings = LabelSettings(), address: str | None = None, workers: int | None = None,
                     threads: int | None = None, overwrite: bool = False, **loading) -> dict:
    """``muxplm predict --ray``: label ``inputs`` on the Ray cluster at ``address`` (``None``:
    ``RAY_ADDRESS``'s, else a local instance; ``"auto"``: the cluster ``ray start`` made here) with
    ``workers`` actors of ``threads`` CPUs each (inputs: files, globs or folders, folders and URIs
    with ``input_format``), into
    the folder ``output`` (JSONL or Parquet files, by its extension) and its bad rows into
    ``OUTPUT_STEM.errors.jsonl/``. Rows keep their input order; ``--id-column`` identifies them
    (Ray Data numbers no rows). ``loading``: the predictor's settings, as :func:`muxplm.predict.predict_files`
    takes them; with no ``device``, the actors run on GPUs when the cluster has any. Returns the run's counts."""
    import pyarrow.compute as pc

    ray = _import_ray()
    format = output_format(output)
    named = _paths(inputs)
    paths = [path for path, _ in named]
    formats = {input_format} if input_format else {file_format(path) for path in paths}
    if len(formats) != 1:
        raise ValueError(f"--ray reads one format at a time; the inputs are {', '.join(sorted(formats))}")
    (input_format,) = formats
    if input_format == "txt":
        if columns.pair or columns.id:
            raise ValueError("a text file has one text a line: no --text-pair-column or --id-column")
        columns = Columns("text")  # Ray Data's name for a line
    errors = errors_path(output)
    # Before the removal below: an input (or a folder of inputs) must not be, hold or sit in either.
    check_inputs_apart(named, {output: "the output folder", errors: "the errors folder"}, output)
    for path in (output, errors):
        if "://" not in path and os.path.exists(path):
            if not overwrite:
                raise ValueError(f"{path} exists; pass --overwrite to replace it")
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    if os.path.isdir(str(model)):
        model = os.path.abspath(model)  # as the actors will find it
    # No --device: the actors' GPUs when the cluster has any (the driver may have none) and the
    # runtime can use them; ONNX Runtime and int8 run on CPUs.
    if loading.get("device") is None and (loading.get("backend", "torch") != "torch"
                                          or (loading.get("quantize") or "none") != "none"):
        loading["device"] = "cpu"
    if loading.get("backend") == "onnx":
        from ..serving.predictor import load_predictor

        load_predictor(model, **loading)  # exported once here, not by every actor at once

    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, logging_level="warning")
        except ConnectionError as error:
            raise ValueError(f"no Ray cluster at {address}: start one with `ray start --head`, or give --ray without "
                             f"an address to start one for this run ({error})") from None
    try:
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True  # output rows in input order
        if loading.get("device") is None:
            loading["device"] = "cuda" if ray.cluster_resources().get("GPU", 0) > 0 else "cpu"
        gpus = 1 if str(loading.get("device", "cpu")).startswith("cuda") else None
        cpus = threads or 1
        if workers is None:
            resources = ray.cluster_resources()
            workers = int(resources.get("GPU", 0)) if gpus else int(resources.get("CPU", 1) // cpus)
        workers = max(1, workers)
        # Reads take a fraction of a CPU: actors that hold every CPU must not starve the reads they wait on.
        ds = _read(ray, paths, input_format, columns, read_cpus=0.1)
        options = dict(asdict(settings), **loading)
        options.pop("part_size")
        labelled = ds.map_batches(
            MuxPredictor, batch_size=settings.part_size, batch_format="pyarrow",
            fn_constructor_kwargs=dict(model=str(model), text_column=columns.text, text_pair_column=columns.pair,
                                       id_column=columns.id, threads=threads, **options),
            compute=ray.data.ActorPoolStrategy(min_size=1, max_size=workers), num_cpus=cpus, num_gpus=gpus,
        ).materialize()  # labelled once, then split into the output and the bad rows
        reported = (["id"] if columns.id else []) + list(ERROR_FIELDS)
        bad = labelled.map_batches(lambda table: table.filter(pc.is_valid(table["error_kind"])).select(reported),
                                   batch_format="pyarrow")
        good = labelled.map_batches(lambda table: table.filter(pc.is_null(table["error_kind"]))
                                    .drop_columns(list(ERROR_FIELDS)), batch_format="pyarrow")
        rows, skipped = labelled.count(), bad.count()
        if format == "jsonl":
            good.write_json(output, double_precision=15)  # pandas' default keeps 10 digits of a score
        else:
            good.write_parquet(output)
        if skipped:
            bad.write_json(errors)
        truncated = 0
        if settings.on_bad_row == "truncate" and rows > skipped:
            truncated = int(good.sum("truncated") or 0)
        kinds = {}
        if skipped:
            for row in bad.groupby("error_kind").count().take_all():
                kinds[row["error_kind"]] = row["count()"]
        return {"output": output, "rows": rows, "labelled": rows - skipped, "skipped": skipped,
                "truncated": truncated, "bad_rows_by_kind": kinds, "errors_file": errors if skipped else None,
                "workers": workers, "threads_per_worker": cpus}
    finally:
        if started_here:
            ray.shutdown()
