"""The released forward against muxplm's own, and loading a released folder against safetensors.

Two measurements for the paper's released checkpoints, at the paper's base size:

1. throughput of the same MUX-BERT sentence classifier (N = 5 by default) with
   ``forward_variant="released"`` and with the native forward, timed side by side (round robin,
   one process) on full-length inputs: the released forward must not cost more than 10 %;
2. seconds to ``from_pretrained`` that model from a folder in the hub's layout (the authors'
   config.json and pickle ``pytorch_model.bin``, with their three copies of the demultiplexer's
   tensors) against the same model saved by muxplm (safetensors), each the median of a few loads.

Random weights: a pass costs the same whatever they are. Prints a table and writes JSON::

    python3 benchmarks/released_speed.py --output benchmarks/results/released/speed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from muxplm import MuxBertConfig, MuxBertForSequenceClassification
from muxplm.bench.throughput import environment
from muxplm.timing import side_by_side


def authors_layout(model: MuxBertForSequenceClassification, folder: Path) -> None:
    """``model`` (released RSA demultiplexer, Gaussian keys) written as the authors' code saves
    it: their config fields and weight names, every demultiplexer tensor under their three
    prefixes, their retrieval head, a pickle file."""
    config = model.config
    state = model.state_dict()
    demux = {"demux_instance_embedding": state["bert.demux.keys"], "dense_1.weight": state["bert.demux.first.weight"],
             "dense_1.bias": state["bert.demux.first.bias"]}
    square, vector = state["bert.demux.pre_decoder.weight"], state["bert.demux.pre_decoder.bias"]
    for layer in range(2, config.num_demux_layers + 1):  # layers muxplm does not read are in their files too
        for part, like in (("weight", square), ("bias", vector)):
            demux[f"dense_{layer}.{part}"] = state.get(f"bert.demux.blocks.{layer - 2}.{part}", torch.randn_like(like))
    for layer in range(1, config.num_demux_layers + 1):
        for part, like in (("weight", torch.ones_like(vector)), ("bias", torch.zeros_like(vector))):
            demux[f"layer_norm_{layer}.{part}"] = state.get(f"bert.demux.norms.{layer - 1}.{part}", like)
    legacy = {f"{prefix}demux_module.{key}": value for prefix in ("", "demultiplexer.", "retrieval_head.")
              for key, value in demux.items()}
    legacy.update({key: value for key, value in state.items() if key.startswith(("bert.embeddings", "bert.encoder"))})
    legacy.update({
        "instance_embedding": state["bert.mux.keys"], "classifier.weight": state["classifier.weight"],
        "classifier.bias": state["classifier.bias"],
        "demultiplexer.pre_decoder.weight": state["bert.demux.pre_decoder.weight"],
        "demultiplexer.pre_decoder.bias": state["bert.demux.pre_decoder.bias"],
        "demultiplexer.pre_decoder_layer_norm.weight": state["bert.demux.pre_decoder_norm.weight"],
        "demultiplexer.pre_decoder_layer_norm.bias": state["bert.demux.pre_decoder_norm.bias"],
        "retrieval_head.decoder.weight": state["bert.embeddings.word_embeddings.weight"],
        "retrieval_head.decoder.bias": torch.zeros(config.vocab_size),
        "retrieval_head.pre_decoder.weight": state["bert.demux.pre_decoder.weight"].clone(),
        "retrieval_head.pre_decoder.bias": state["bert.demux.pre_decoder.bias"].clone(),
        "retrieval_head.pre_decoder_layer_norm.weight": state["bert.demux.pre_decoder_norm.weight"].clone(),
        "retrieval_head.pre_decoder_layer_norm.bias": state["bert.demux.pre_decoder_norm.bias"].clone(),
    })
    folder.mkdir(parents=True)
    torch.save(legacy, folder / "pytorch_model.bin")
    plain = {key: value for key, value in config.to_dict().items() if key not in (
        "num_instances", "mux_type", "demux_type", "mux_key_norm", "learn_mux_keys", "num_demux_layers",
        "retrieval_loss_weight", "retrieval_softmax", "sentence_pooling", "num_unmuxed_layers", "forward_variant")}
    plain.update(model_type="bert", architectures=["MuxedBertForSequenceClassification"],
                 num_instances=config.num_instances, muxing_variant="gaussian_hadamard", demuxing_variant="index_pos",
                 num_hidden_demux_layers=config.num_demux_layers, gaussian_hadamard_norm=1, learn_muxing=0,
                 retrieval_percentage=1.0, retrieval_loss_coeff=0.0, task_loss_coeff=1.0, transformers_version="4.4.2")
    (folder / "config.json").write_text(json.dumps(plain, indent=2))


def time_loads(folder: Path, loads: int) -> list[float]:
    seconds = []
    for _ in range(loads):
        start = time.perf_counter()
        MuxBertForSequenceClassification.from_pretrained(folder)
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--num-instances", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=40)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    models = {}
    for variant in ("native", "released"):
        extra = dict(forward_variant="released", num_demux_layers=3) if variant == "released" else {}
        config = MuxBertConfig.from_preset(args.preset, num_instances=args.num_instances, num_labels=2, **extra)
        models[variant] = MuxBertForSequenceClassification(config).eval()
    timed = side_by_side(models, batch_size=args.batch_size, seq_length=args.seq_length, batches=args.batches,
                         trials=args.trials, device="cpu", warmup=1, statistic="median")
    ratio = timed["released"]["samples_per_s"] / timed["native"]["samples_per_s"]
    with tempfile.TemporaryDirectory(prefix="muxplm-released-") as scratch:
        legacy, native = Path(scratch) / "authors-layout", Path(scratch) / "muxplm-layout"
        authors_layout(models["released"], legacy)
        models["released"].save_pretrained(native)
        loaded = MuxBertForSequenceClassification.from_pretrained(legacy).eval()
        same = all(torch.equal(loaded.state_dict()[key], value) for key, value in models["released"].state_dict().items())
        loads = {"authors_layout": time_loads(legacy, args.loads), "muxplm_safetensors": time_loads(native, args.loads)}
        sizes = {"authors_layout": (legacy / "pytorch_model.bin").stat().st_size,
                 "muxplm_safetensors": (native / "model.safetensors").stat().st_size}
    load_seconds = {key: statistics.median(values) for key, values in loads.items()}
    report = {
        "command": "python3 benchmarks/released_speed.py " + " ".join(
            f"--{key.replace('_', '-')} {value}" for key, value in vars(args).items() if key != "output" and value),
        "environment": environment(torch.device("cpu")),
        "settings": {key: value for key, value in vars(args).items() if key != "output"},
        "throughput": {variant: {"samples_per_s": value["samples_per_s"], "trials": value["trials"]}
                       for variant, value in timed.items()},
        "released_over_native": ratio,
        "target": "released forward within 10 % of the native one (ratio >= 0.90)",
        "target_met": ratio >= 0.90,
        "load_seconds": load_seconds, "load_trials": loads, "file_bytes": sizes,
        "loaded_weights_equal": same,
    }
    print(f"{args.preset} N={args.num_instances}, batch {args.batch_size} x {args.seq_length}, CPU")
    for variant, value in timed.items():
        print(f"  {variant:9s} {value['samples_per_s']:8.1f} samples/s")
    print(f"  released / native = {ratio:.3f} ({'met' if ratio >= 0.9 else 'MISSED'}: >= 0.90)")
    for key, value in load_seconds.items():
        print(f"  load {key:20s} {value:6.2f} s  ({sizes[key] / 1e6:.0f} MB)")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
