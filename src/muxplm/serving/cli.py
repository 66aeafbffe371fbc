"""Sub-commands ``serve``, ``export onnx`` and ``serve-bench`` (see :mod:`muxplm.cli`).

``add_serve_bench(bench_subparsers)`` lets the ``bench`` command mount the load benchmark as
``muxplm bench serve`` too.
"""

from __future__ import annotations

import argparse
import shlex

from ..choices import COMPILE_MODES, QUANTIZE_CHOICES
from . import limits


def add_command(subparsers, name: str, help: str) -> None:
    """The parser of command ``name`` (``muxplm.cli.COMMANDS`` lists which are this module's)."""
    {"serve": _add_serve, "export": _add_export, "serve-bench": _add_serve_bench}[name](subparsers, name, help)


def _add_serve(subparsers, name: str, help: str) -> None:
    serve = subparsers.add_parser(
        name, help=help,
        description="Serve MODEL_DIR with FastAPI + uvicorn: POST /predict, GET /health, GET /metrics.",
    )
    serve.add_argument("model_dir", help="checkpoint folder (config.json, model.safetensors, tokenizer files)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default: 127.0.0.1, this machine only)")
    serve.add_argument("--port", type=limits.port, default=8000, help="0..65535 (0: any free port)")
    serve.add_argument("--max-batch", type=limits.positive_int, default=None,
                       help="most instances per forward pass and per request (default: 64 on a CPU, "
                       "N x 128 on a GPU)")
    serve.add_argument("--max-wait-ms", type=limits.wait_ms, default=5.0,
                       help="longest wait for a batch to fill (0..60000)")
    serve.add_argument("--max-queue", type=limits.positive_int, default=None,
                       help="most queued instances before answering 429 (at least --max-batch; default: "
                       "1024 or four batches, whichever is more)")
    serve.add_argument("--max-length", type=limits.positive_int, default=128, help="most tokens per input (longer: 413)")
    serve.add_argument("--no-fill-slots", dest="fill_slots", action="store_false",
                       help="leave a part-filled group's empty slots as fillers (no companions, no copies)")
    serve.add_argument("--companions", type=limits.non_negative_int, default=0,
                       help="opt-in: fill a part-filled group with the N most recently served inputs (outputs "
                       "discarded): answers then depend on other clients' earlier requests; 0 (default): copies")
    serve.add_argument("--companion-texts", metavar="FILE", default=None,
                       help="fill part-filled groups with these fixed texts (UTF-8, one per line) instead of copies")
    serve.add_argument("--isolate-tenants", action="store_true",
                       help="multiplex a request only with requests of the same X-Muxplm-Tenant header value "
                       "(a request without it only with itself); the default when --host is not loopback")
    serve.add_argument("--share-groups", action="store_true",
                       help="let every client's requests share multiplexed groups even when --host is not loopback "
                       "(faster under load; an answer then depends on other clients' concurrent texts)")
    serve.add_argument("--deterministic", action="store_true",
                       help="each text in a group of its own with fixed companions: the same text always gets "
                       "the same answer (no multiplexing speed-up: one text per group, in small fixed-shape passes; "
                       "see docs/serving.md)")
    serve.add_argument("--threads", type=limits.threads, default=None,
                       help="torch intra-op threads (1 up to this machine's CPUs)")
    serve.add_argument("--backend", choices=("torch", "onnx"), default="torch",
                       help="onnx: export the model and run it with ONNX Runtime")
    serve.add_argument("--device", type=limits.serve_device, default=None,
                       help="cpu, cuda or cuda:K (default: cuda when there is a GPU, except with --backend onnx or "
                       "--quantize int8, which run on the CPU)")
    serve.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                       help="weights and activations (float16: CUDA only)")
    serve.add_argument("--quantize", choices=QUANTIZE_CHOICES, default="none",
                       help="int8: dynamic int8 quantisation of the linear layers (CPU only; with --backend onnx, "
                       "ONNX Runtime's quantisation of the exported graph)")
    serve.add_argument("--compile", choices=COMPILE_MODES, default="none",
                       help="torch.compile the forward pass (reduce-overhead: and replay it as CUDA graphs, "
                       "CUDA only); inputs are padded to few shapes, each compiled on first use")
    serve.add_argument("--log-level", choices=limits.LOG_LEVELS, default="info",
                       help="uvicorn's and the server's logging (default: info)")
    limits.add_limit_arguments(serve)
    serve.set_defaults(func=_serve)


def _add_export(subparsers, name: str, help: str) -> None:
    export = subparsers.add_parser(name, help=help, description="Export a checkpoint to another format.")
    formats = export.add_subparsers(dest="format", metavar="FORMAT", required=True)
    onnx = formats.add_parser(
        "onnx", help="ONNX with dynamic batch and length axes",
        description="Export a sequence- or token-classification checkpoint to OUT_DIR/model.onnx "
        "(plus config and tokenizer) and check parity with PyTorch.",
    )
    onnx.add_argument("model_dir", help="a sequence- or token-classification checkpoint folder")
    onnx.add_argument("out_dir", help="where model.onnx, its config and tokenizer go")
    onnx.add_argument("--opset", type=int, default=17, metavar="N", help="ONNX opset version (default: 17)")
    onnx.add_argument("--no-check", dest="check", action="store_false", help="skip the parity check")
    onnx.add_argument("--quantize", choices=QUANTIZE_CHOICES, default="none",
                      help="int8: also write OUT_DIR/model.int8.onnx, quantised by ONNX Runtime (int8 weights)")
    onnx.set_defaults(func=_export_onnx)


def _add_serve_bench(subparsers, name: str, help: str) -> None:
    _bench_arguments(subparsers.add_parser(name, help=help, description="Servers of fresh models at each N on "
                                           "loopback, loaded by concurrent clients: requests/s and latency."))


def add_serve_bench(bench_subparsers, name: str = "serve") -> None:
    """Mount the load benchmark under another command's sub-parsers (``muxplm bench serve``)."""
    _bench_arguments(bench_subparsers.add_parser(name, help="loopback load benchmark of the server"))


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _batch_or_auto(text: str) -> int | None:
    return None if text == "auto" else limits.positive_int(text)


def _bench_arguments(parser) -> None:
    parser.add_argument("--out-dir", default="runs/serve-bench", metavar="DIR",
                        help="where the JSON and PNG go (default: runs/serve-bench)")
    parser.add_argument("--num-instances", type=_ints, default=(1, 2, 5, 10), help="e.g. 1,2,5,10")
    parser.add_argument("--concurrency", type=_ints, default=(1, 16, 64, 256), help="e.g. 1,16,64,256")
    parser.add_argument("--requests", type=int, default=3000, help="requests per concurrency level")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per concurrency level at most")
    parser.add_argument("--words", type=int, default=40, help="words per request text")
    parser.add_argument("--preset", default="tiny", help="model size preset (tiny/small/base/large)")
    parser.add_argument("--layers", type=int, default=4, help="encoder layers of the benchmarked models")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each server")
    parser.add_argument("--max-batch", type=_batch_or_auto, default=64,
                        help="every server's --max-batch, or auto: each server's default (N x 128 on a GPU)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0,
                        help="every server's --max-wait-ms: longest wait for a batch to fill (default: 5)")
    parser.add_argument("--backends", default="torch",
                        help="comma list of the servers' backends, from torch,onnx (default: torch)")
    parser.add_argument("--server-flags", type=shlex.split, default=[],
                        help='more `muxplm serve` flags for every server, e.g. "--device cuda --dtype bfloat16 '
                        '--compile reduce-overhead"')
    parser.add_argument("--tag", default="serve_bench", help="file name stem of the JSON and PNG")
    parser.set_defaults(func=_serve_bench)


def _serve(args) -> int:
    from ..devices import default_device
    from .server import serve

    serve(args.model_dir, host=args.host, port=args.port, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
          max_queue=args.max_queue, max_length=args.max_length, fill_slots=args.fill_slots, companions=args.companions,
          threads=args.threads,
          backend=args.backend, log_level=args.log_level, device=args.device or default_device(args.backend, args.quantize),
          dtype=args.dtype, quantize=args.quantize,
          compile=args.compile,
          companion_texts=args.companion_texts, isolate_tenants=args.isolate_tenants, deterministic=args.deterministic,
          share_groups=args.share_groups,
          **limits.limit_kwargs(args))
    return 0


def _export_onnx(args) -> int:
    from .onnx_export import export_onnx

    result = export_onnx(args.model_dir, args.out_dir, opset=args.opset, check=args.check, quantize=args.quantize)
    print(f"wrote {result['path']}" + (f" (max |onnx - torch| = {result['max_abs_diff']:.2e})" if args.check else ""))
    if "int8_path" in result:
        print(f"wrote {result['int8_path']}"
              + (f" (max |int8 onnx - torch| = {result['int8_max_abs_diff']:.2e})" if args.check else ""))
    return 0


def _serve_bench(args) -> int:
    from .loadgen import run_serve_bench

    report = run_serve_bench(
        args.out_dir, num_instances=args.num_instances, concurrency=args.concurrency,
        requests_per_level=args.requests, time_limit=args.time_limit, words=args.words, preset=args.preset,
        num_layers=args.layers, threads=args.threads, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
        backends=tuple(args.backends.split(",")), tag=args.tag, server_flags=tuple(args.server_flags),
    )
    for backend, summary in report["summary"].items():
        for n, row in summary["by_num_instances"].items():
            print(f"{backend} N={n}: {row['requests_per_s']:.1f} req/s ({row['speedup_vs_n1']:.2f}x N=1), "
                  f"p99 {row['p99_ms']:.0f} ms ({row['p99_ratio_vs_n1']:.2f}x N=1); peak "
                  f"{row['peak_requests_per_s']:.1f} req/s ({row['peak_speedup_vs_n1']:.2f}x N=1)")
    return 0
