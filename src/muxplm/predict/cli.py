"""Sub-command ``predict`` (see :mod:`muxplm.cli`): label files with a checkpoint."""

from __future__ import annotations

from ..choices import COMPILE_MODES, DTYPE_NAMES, ON_BAD_ROW, QUANTIZE_CHOICES, RUNTIMES
from ..serving import limits
from .sources import INPUT_FORMATS

LOCAL_RAY = "local"  # --ray without an address: RAY_ADDRESS's cluster, else a Ray instance started here


def add_command(subparsers, name: str, help: str) -> None:
    parser = subparsers.add_parser(
        name, help=help,
        description="Label CSV / TSV / JSONL / Parquet / text files (globs too; .gz, .bz2, .zst, .lz4 read as they "
        "are) with a fine-tuned checkpoint into one JSONL or Parquet file, in input order. The input is read as a "
        "stream, part by part: a rerun of a killed run skips the parts it finished. Bad rows are left out and listed "
        "in OUTPUT_STEM.errors.jsonl.",
    )
    parser.add_argument("model", metavar="MODEL", help="checkpoint folder or hub name (sequence or token classifier)")
    parser.add_argument("--input", "-i", dest="inputs", nargs="+", action="extend", required=True, metavar="PATH",
                        help="input files or globs (quote them), read in the order given")
    parser.add_argument("--output", "-o", required=True, metavar="PATH",
                        help="the output file: .jsonl or .parquet (with --ray: a folder of such files)")
    parser.add_argument("--input-format", choices=INPUT_FORMATS, default=None,
                        help="the inputs' format, where their extensions do not tell it (with --ray: folders, URIs)")
    columns = parser.add_argument_group("columns (CSV, TSV, JSONL, Parquet; a text file holds one text a line)")
    columns.add_argument("--text-column", default="text", metavar="NAME", help="the text (default: text)")
    columns.add_argument("--text-pair-column", default=None, metavar="NAME",
                         help="a second text, for sentence-pair models")
    columns.add_argument("--id-column", default=None, metavar="NAME",
                         help="copied to the output as `id` (every output row also has `row`, its number in the input)")
    output = parser.add_argument_group("what is written")
    output.add_argument("--top-k", type=limits.positive_int, default=1, metavar="K",
                        help="sentence classifiers: also the K best labels and scores (top_labels, top_scores)")
    output.add_argument("--return-all-scores", action="store_true",
                        help="sentence classifiers: also every label's score (all_scores)")
    output.add_argument("--on-bad-row", choices=ON_BAD_ROW, default="skip",
                        help="a row that is empty, not UTF-8, unreadable or over --max-length: skip it (default), "
                        "truncate it when it is only too long (others skipped), or fail; skipped and truncated rows "
                        "are listed")
    output.add_argument("--overwrite", action="store_true", help="replace an existing output (and unfinished parts)")
    grouping = parser.add_argument_group("which texts share a forward pass")
    grouping.add_argument("--deterministic", action="store_true",
                          help="each text in a group of its own copies, as `serve --deterministic`: a prediction "
                          "depends on its text only (each text runs N times, in small fixed-shape passes: several "
                          "times slower than the default: 3.1x for MiniLM at N = 2)")
    grouping.add_argument("--composition-seed", type=int, default=0, metavar="S",
                          help="otherwise which texts share a group is drawn with this seed: reruns give the same "
                          "output (default: 0)")
    grouping.add_argument("--no-length-grouping", dest="group_by_length", action="store_false",
                          help="keep input order within a part instead of sorting it by length (more padding)")
    grouping.add_argument("--part-size", type=limits.positive_int, default=8192, metavar="ROWS",
                          help="rows per part: the window sorted by length, the unit of work and of resuming "
                          "(default: 8192)")
    running = parser.add_argument_group("how it runs")
    running.add_argument("--workers", type=limits.positive_int, default=None, metavar="N",
                         help="processes, each with its own model (default: one per GPU on cuda, else 1); with "
                         "--ray, Ray actors (default: one per GPU, else as many as the cluster's CPUs allow)")
    running.add_argument("--threads", type=limits.positive_int, default=None, metavar="N",
                         help="torch threads per worker (default: the CPUs split between the workers)")
    running.add_argument("--backend", choices=RUNTIMES, default="torch",
                         help="onnx: export the model and run it with ONNX Runtime")
    running.add_argument("--device", default=None,
                         help="cpu, cuda or cuda:K (default: cuda when there is a GPU, except with --backend onnx or "
                         "--quantize int8, which run on the CPU)")
    running.add_argument("--dtype", choices=DTYPE_NAMES, default="float32",
                         help="weights and activations (float16: CUDA only)")
    running.add_argument("--quantize", choices=QUANTIZE_CHOICES, default="none",
                         help="int8: dynamic int8 quantisation of the linear layers (CPU; with --backend onnx, "
                         "ONNX Runtime's)")
    running.add_argument("--compile", choices=COMPILE_MODES, default="none", help="torch.compile the forward pass")
    running.add_argument("--max-length", type=limits.positive_int, default=128, metavar="N",
                         help="most tokens per text (longer: see --on-bad-row)")
    running.add_argument("--batch-size", type=limits.positive_int, default=None, metavar="N",
                         help="texts per forward pass (default: 64 on a CPU, N x 128 on a GPU)")
    running.add_argument("--ray", nargs="?", const=LOCAL_RAY, default=None, metavar="ADDRESS",
                         help="run on a Ray cluster through Ray Data (pip install 'muxplm[ray]'): ADDRESS, or without "
                         "one RAY_ADDRESS's cluster or a local instance")
    running.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.set_defaults(func=_predict)


def _predict(args) -> int:
    from .labelling import LabelSettings
    from .sources import Columns

    columns = Columns(args.text_column, args.text_pair_column, args.id_column)
    settings = LabelSettings(on_bad_row=args.on_bad_row, deterministic=args.deterministic,
                             composition_seed=args.composition_seed, group_by_length=args.group_by_length,
                             top_k=args.top_k, return_all_scores=args.return_all_scores, part_size=args.part_size)
    loading = dict(backend=args.backend, device=args.device, dtype=args.dtype, quantize=args.quantize,
                   compile=args.compile, max_length=args.max_length, batch_size=args.batch_size)
    if args.ray is not None:
        from ..integrations.ray import predict_with_ray

        summary = predict_with_ray(args.model, args.inputs, args.output, columns=columns,
                                   input_format=args.input_format, settings=settings,
                                   address=None if args.ray == LOCAL_RAY else args.ray, workers=args.workers,
                                   threads=args.threads, overwrite=args.overwrite, **loading)
    else:
        from .run import predict_files

        summary = predict_files(args.model, args.inputs, args.output, columns=columns,
                                input_format=args.input_format, settings=settings,
                                workers=args.workers, threads=args.threads, overwrite=args.overwrite,
                                progress=args.progress, **loading)
    print(summary_line(summary))
    return 0


def summary_line(summary: dict) -> str:
    """One line for the end of a run: what was labelled, what was left out, where it is listed."""
    line = f"muxplm predict: {summary['labelled']:,} of {summary['rows']:,} rows labelled into {summary['output']}"
    bad = summary["skipped"] + summary["truncated"]
    if bad:
        kinds = ", ".join(f"{count:,} {kind.replace('_', '-')}" for kind, count in sorted(summary["bad_rows_by_kind"].items()))
        line += (f"; {summary['skipped']:,} bad rows skipped, {summary['truncated']:,} truncated ({kinds}), "
                 f"listed in {summary['errors_file']}")
    if summary.get("texts_per_s"):
        line += f"; {summary['texts_per_s']:,.0f} texts/s"
    return line
