"""Sub-commands ``serve``, ``export onnx`` and ``serve-bench`` (see :mod:`muxplm.cli`).

``add_serve_bench(bench_subparsers)`` lets the ``bench`` command mount the load benchmark as
``muxplm bench serve`` too.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    serve = subparsers.add_parser(
        "serve", help="serve a checkpoint over HTTP with dynamic multiplexed batching",
        description="Serve MODEL_DIR with FastAPI + uvicorn: POST /predict, GET /health, GET /metrics.",
    )
    serve.add_argument("model_dir", help="checkpoint folder (config.json, model.safetensors, tokenizer files)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max-batch", type=int, default=64, help="most instances per forward pass and per request")
    serve.add_argument("--max-wait-ms", type=float, default=5.0, help="longest wait for a batch to fill")
    serve.add_argument("--max-queue", type=int, default=1024, help="most queued instances before answering 429")
    serve.add_argument("--max-length", type=int, default=128, help="most tokens per input (longer: 413)")
    serve.add_argument("--no-fill-slots", dest="fill_slots", action="store_false",
                       help="leave a part-filled group's empty slots as fillers (no companions, no copies)")
    serve.add_argument("--companions", type=int, default=64,
                       help="recent requests kept to share a part-filled group (outputs discarded); 0: copies")
    serve.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    serve.add_argument("--backend", choices=("torch", "onnx"), default="torch",
                       help="onnx: export the model and run it with ONNX Runtime")
    serve.add_argument("--device", default="cpu", help="cpu, cuda or cuda:K (torch backend)")
    serve.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                       help="weights and activations (float16: CUDA only)")
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(func=_serve)

    export = subparsers.add_parser("export", help="export a checkpoint to another format")
    formats = export.add_subparsers(dest="format", metavar="FORMAT", required=True)
    onnx = formats.add_parser(
        "onnx", help="ONNX with dynamic batch and length axes",
        description="Export a sequence- or token-classification checkpoint to OUT_DIR/model.onnx "
        "(plus config and tokenizer) and check parity with PyTorch.",
    )
    onnx.add_argument("model_dir")
    onnx.add_argument("out_dir")
    onnx.add_argument("--opset", type=int, default=17)
    onnx.add_argument("--no-check", dest="check", action="store_false", help="skip the parity check")
    onnx.set_defaults(func=_export_onnx)

    bench = subparsers.add_parser("serve-bench", help="loopback load benchmark of the server for N = 1, 2, 5, 10")
    _bench_arguments(bench)


def add_serve_bench(bench_subparsers, name: str = "serve") -> None:
    """Mount the load benchmark under another command's sub-parsers (``muxplm bench serve``)."""
    _bench_arguments(bench_subparsers.add_parser(name, help="loopback load benchmark of the server"))


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _bench_arguments(parser) -> None:
    parser.add_argument("--out-dir", default="benchmarks/results/serve")
    parser.add_argument("--num-instances", type=_ints, default=(1, 2, 5, 10), help="e.g. 1,2,5,10")
    parser.add_argument("--concurrency", type=_ints, default=(1, 16, 64, 256), help="e.g. 1,16,64,256")
    parser.add_argument("--requests", type=int, default=3000, help="requests per concurrency level")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per concurrency level at most")
    parser.add_argument("--words", type=int, default=40, help="words per request text")
    parser.add_argument("--preset", default="tiny", help="model size preset (tiny/small/base/large)")
    parser.add_argument("--layers", type=int, default=4, help="encoder layers of the benchmarked models")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each server")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--backends", default="torch", help="torch,onnx")
    parser.add_argument("--tag", default="serve_bench", help="file name stem of the JSON and PNG")
    parser.set_defaults(func=_serve_bench)


def _serve(args) -> int:
    from .server import serve

    serve(args.model_dir, host=args.host, port=args.port, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
          max_queue=args.max_queue, max_length=args.max_length, fill_slots=args.fill_slots, companions=args.companions,
          threads=args.threads,
          backend=args.backend, log_level=args.log_level, device=args.device, dtype=args.dtype)
    return 0


def _export_onnx(args) -> int:
    from .onnx_export import export_onnx

    result = export_onnx(args.model_dir, args.out_dir, opset=args.opset, check=args.check)
    print(f"wrote {result['path']}" + (f" (max |onnx - torch| = {result['max_abs_diff']:.2e})" if args.check else ""))
    return 0


def _serve_bench(args) -> int:
    from .loadgen import run_serve_bench

    report = run_serve_bench(
        args.out_dir, num_instances=args.num_instances, concurrency=args.concurrency,
        requests_per_level=args.requests, time_limit=args.time_limit, words=args.words, preset=args.preset,
        num_layers=args.layers, threads=args.threads, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
        backends=tuple(args.backends.split(",")), tag=args.tag,
    )
    for backend, summary in report["summary"].items():
        for n, row in summary["by_num_instances"].items():
            print(f"{backend} N={n}: {row['requests_per_s']:.1f} req/s ({row['speedup_vs_n1']:.2f}x N=1), "
                  f"p99 {row['p99_ms']:.0f} ms ({row['p99_ratio_vs_n1']:.2f}x N=1); peak "
                  f"{row['peak_requests_per_s']:.1f} req/s ({row['peak_speedup_vs_n1']:.2f}x N=1)")
    return 0
