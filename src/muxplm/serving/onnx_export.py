"""ONNX export of MUX sequence- and token-classification models, and an ONNX Runtime predictor.

The model's own forward pass plans its groups with Python integers (``plan_groups``), which
an exporter would freeze to the example batch size. The exported graph therefore comes from
:class:`ExportableMuxClassifier`, which performs the same input-order grouping with shape
arithmetic the exporter keeps symbolic: pad the batch with filler rows to a multiple of N,
then the model's own multiplexed pass (``encode_slots``), demultiplex, drop the fillers. Batch and
sequence axes stay dynamic, including batch sizes that are not multiples of N. A row whose
attention mask is all zeros is a filler wherever it sits, which lets :class:`OnnxPredictor`
lay out the ensembling copies (:func:`muxplm.grouping.plan_groups`) outside the graph.
With ``quantize="int8"`` the exported graph is quantised by ONNX Runtime's dynamic quantisation
into ``model.int8.onnx`` next to it (:func:`muxplm.quantization.quantize_onnx_int8`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from ..checkpoints import local_folder
from ..grouping import plan_groups
from ..quantization import check_quantize, int8_onnx_path, quantize_onnx_int8
from ..released import WEIGHT_FILES
from ..vocabulary import TOKENIZER_FILES
from .predictor import Predictor

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


class ExportableMuxClassifier(nn.Module):
    """Throughput-mode forward of a MUX classifier (groups in input order), written so that
    the batch size stays a symbolic dimension when exported. Returns logits ``[B, C]``
    (sentence) or ``[B, L, C]`` (token)."""

    def __init__(self, model):
        super().__init__()
        from .predictor import task_of

        self.task = task_of(model)
        if self.task not in ("sentence", "token"):
            raise ValueError(f"ONNX export covers sequence and token classification models, not {type(model).__name__}")
        self.model = model
        self.num_instances = model.config.num_instances
        pad = model.config.pad_token_id
        self.pad_token_id = 0 if pad is None else int(pad)

    def forward(self, input_ids, attention_mask, token_type_ids):
        n = self.num_instances
        batch = input_ids.shape[0]
        fill = (n - batch % n) % n  # filler rows that complete the last group
        slot_ids = F.pad(input_ids, (0, 0, 0, fill), value=self.pad_token_id)
        slot_mask = F.pad(attention_mask, (0, 0, 0, fill), value=0).bool()
        slot_types = F.pad(token_type_ids, (0, 0, 0, fill), value=0)
        is_real = slot_mask.any(dim=1)  # every real input keeps at least its [CLS]
        hidden, _ = self.model.base_model.encode_slots(slot_ids, slot_mask, slot_types, is_real)
        return self.model.slot_logits(hidden, slot_mask)[:batch]  # the model's own head, fillers dropped


def _example_inputs(batch: int, length: int, vocab_size: int):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab_size, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1:, length // 2 :] = 0  # some padding, so the mask path is traced with real values
    types = torch.zeros(batch, length, dtype=torch.long)
    return ids, mask, types


def export_graph(model, path: str | os.PathLike, *, opset: int = 17, check: bool = True,
                 example_batch: int | None = None, example_length: int = 16) -> dict:
    """Export a loaded MUX classifier's forward (:class:`ExportableMuxClassifier`) to the ONNX
    graph ``path``, batch and sequence axes dynamic. The graph appears only whole and checked:
    it is written under a temporary name and renamed after the parity check.

    With ``check``, compares ONNX Runtime to PyTorch at a batch size other than the example's
    (not a multiple of N) and raises if they differ by more than 1e-4 (``max_abs_diff``).
    Returns ``{"path", "task", "num_instances"[, "max_abs_diff"]}``."""
    model = model.eval()
    wrapper = ExportableMuxClassifier(model).eval()
    path = Path(path)
    # A failed export never leaves a graph that a later server would load.
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    n = model.config.num_instances
    batch = example_batch or 2 * n + 1
    example = _example_inputs(batch, example_length, model.config.vocab_size)
    output_name = "logits"
    dynamic = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    with torch.no_grad():
        torch.onnx.export(
            wrapper, example, str(staging), input_names=list(INPUT_NAMES), output_names=[output_name],
            dynamic_axes={**dynamic, output_name: {0: "batch"} if wrapper.task == "sentence" else {0: "batch", 1: "sequence"}},
            opset_version=opset, dynamo=False,
        )
    result = {"path": str(path), "task": wrapper.task, "num_instances": n}
    try:
        if check:
            result["max_abs_diff"] = check_parity(model, staging, batch=batch + n - 1 if n > 1 else batch + 2)
            if result["max_abs_diff"] > 1e-4:
                raise RuntimeError(f"ONNX and PyTorch outputs differ by {result['max_abs_diff']:.2e} (> 1e-4)")
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
    return result


def export_onnx(
    model_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    opset: int = 17,
    check: bool = True,
    example_batch: int | None = None,
    example_length: int = 16,
    quantize: str = "none",
) -> dict:
    """Export ``model_dir`` to ``out_dir/model.onnx`` (:func:`export_graph`: whole and, with
    ``check``, within 1e-4 of PyTorch), with config.json and tokenizer files beside it, and
    ``muxplm_onnx.json`` recording the checkpoint's hash. ``quantize="int8"`` also writes
    ``out_dir/model.int8.onnx``; with ``check`` its largest logit difference from PyTorch is
    recorded (``int8_max_abs_diff``), not bounded: quantisation error depends on the model.
    """
    quantize = check_quantize(quantize)
    model_dir = local_folder(model_dir)  # a hub name: downloaded first
    model = Predictor.from_pretrained(model_dir).model.eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = export_graph(model, out / "model.onnx", opset=opset, check=check, example_batch=example_batch,
                          example_length=example_length)
    # Keep what a server needs next to the graph: the config (labels; muxplm's, also for a folder
    # released with the paper) and the tokenizer.
    model.config.to_json_file(out / "config.json")
    for name in os.listdir(model_dir):
        if name in TOKENIZER_FILES:
            shutil.copy(Path(model_dir) / name, out / name)
    result["checkpoint"] = checkpoint_hash(model_dir)
    if quantize == "int8":
        result["int8_path"] = str(quantize_onnx_int8(result["path"]))
        if check:
            n = model.config.num_instances
            result["int8_max_abs_diff"] = check_parity(model, result["int8_path"], batch=(example_batch or 2 * n + 1) + 1)
    (out / "muxplm_onnx.json").write_text(json.dumps(result, indent=2))
    return result


def checkpoint_hash(model_dir: str | os.PathLike) -> str:
    """SHA-256 of a checkpoint's config and weights: an export records it, and a server
    re-exports when the checkpoint no longer matches (retrained in place)."""
    digest = hashlib.sha256()
    for name in ("config.json", *WEIGHT_FILES):
        file = Path(model_dir) / name
        if file.is_file():
            with open(file, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def export_is_current(model_dir: str | os.PathLike, onnx_path: str | os.PathLike) -> bool:
    """Whether ``onnx_path`` exists and was exported from ``model_dir`` as it is now."""
    record = Path(onnx_path).parent / "muxplm_onnx.json"
    if not Path(onnx_path).is_file() or not record.is_file():
        return False
    try:
        return json.loads(record.read_text()).get("checkpoint") == checkpoint_hash(model_dir)
    except (OSError, json.JSONDecodeError):
        return False


def onnx_session(path: str | os.PathLike, threads: int | None = None, cpu_only: bool = False):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    # CUDA first when this ONNX Runtime build has it (onnxruntime-gpu), the CPU always.
    wanted = ("CPUExecutionProvider",) if cpu_only else ("CUDAExecutionProvider", "CPUExecutionProvider")
    providers = [p for p in wanted if p in ort.get_available_providers()]
    return ort.InferenceSession(str(path), options, providers=providers)


def graph_feeds(session, inputs: dict) -> dict:
    """The inputs (as numpy arrays) that the graph takes: the exporter drops an input the model
    never reads (``token_type_ids`` of DistilBERT and MPNet)."""
    return {arg.name: inputs[arg.name].cpu().numpy() for arg in session.get_inputs()}


def run_graph(session, batch: dict, num_instances: int, pad_token_id: int = 0, *,
              composition_seed: int | None = None, ensemble: bool = False) -> torch.Tensor:
    """Logits of an exported graph for ``batch`` (keyword tensors, one row per input) grouped as
    the PyTorch model groups them: ``composition_seed`` shuffles which inputs share a group and
    ``ensemble`` runs every input in N copies and averages them (:func:`plan_groups`). The plan's
    slots are laid out here, fillers as all-masked rows, and the graph groups them in order."""
    if composition_seed is None and not (ensemble and num_instances > 1):
        return torch.from_numpy(session.run(None, graph_feeds(session, batch))[0])  # the graph's own order
    plan = plan_groups(batch["input_ids"].shape[0], num_instances, seed=composition_seed, ensemble=ensemble)
    slotted = {key: plan.group(value.cpu(), fill_value=pad_token_id if key == "input_ids" else 0)
               for key, value in batch.items()}
    slots = torch.from_numpy(session.run(None, graph_feeds(session, slotted))[0])
    return plan.reduce_copies(plan.ungroup(slots))


class OnnxRuntimeClassifier:
    """An exported graph in an ONNX Runtime session, called like the PyTorch classifier it came
    from (keyword tensors in; ``composition_seed`` and ``ensemble`` as the model takes them), so
    that :mod:`muxplm.timing` times both alike and the inference path
    (:func:`muxplm.inference.forward_pass`) runs both alike, for evaluation and for the
    :class:`OnnxPredictor`. Returns the logits as a tensor."""

    device = torch.device("cpu")  # inputs are handed to ONNX Runtime from host memory

    def __init__(self, path: str | os.PathLike, config, threads: int | None = None, quantize: str = "none",
                 cpu_only: bool = True):
        # ``quantize="int8"``: the int8 graph quantised from ``path`` (made when missing or stale)
        self.path = int8_graph(path) if check_quantize(quantize) == "int8" else Path(path)
        self.config = config
        # ``cpu_only``: the CPU also where onnxruntime-gpu is installed; else CUDA when there is one
        self.session = onnx_session(self.path, threads, cpu_only=cpu_only)

    def __call__(self, *, composition_seed: int | None = None, ensemble: bool = False, **inputs) -> torch.Tensor:
        return run_graph(self.session, inputs, self.config.num_instances, self.config.pad_token_id or 0,
                         composition_seed=composition_seed, ensemble=ensemble)

    def eval(self) -> "OnnxRuntimeClassifier":
        return self  # a graph has no training mode


def check_parity(model, path, *, batch: int, length: int = 23) -> float:
    """Largest |ONNX Runtime - PyTorch| logit difference on a random batch."""
    ids, mask, types = _example_inputs(batch, length, model.config.vocab_size)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    session = onnx_session(path)
    feeds = graph_feeds(session, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    got = session.run(None, feeds)[0]
    if task_is_token(model):
        keep = mask.bool()
        return float((torch.from_numpy(got)[keep] - expected[keep]).abs().max())
    return float((torch.from_numpy(got) - expected).abs().max())


def int8_graph(onnx_path: str | os.PathLike) -> Path:
    """The int8 graph quantised from ``onnx_path``, quantised again when missing or older than
    ``onnx_path`` (re-exported since)."""
    source, target = Path(onnx_path), int8_onnx_path(onnx_path)
    if not (target.is_file() and source.is_file() and target.stat().st_mtime_ns >= source.stat().st_mtime_ns):
        quantize_onnx_int8(source, target)
    return target


def task_is_token(model) -> bool:
    return type(model).__name__.endswith("ForTokenClassification")


class OnnxPredictor(Predictor):
    """A :class:`Predictor` whose forward pass runs in ONNX Runtime (an
    :class:`OnnxRuntimeClassifier`, through the same inference path as the PyTorch model).
    Ensembling and composition seeds feed the graph the same slot layout as the PyTorch model
    (fillers as all-masked rows); ensembling averages the copies' logits."""

    def __init__(self, model, tokenizer, onnx_path, *, threads: int | None = None, quantize: str = "none",
                 **kwargs):
        # The PyTorch model stays as given (it only describes the task); ``quantize="int8"`` runs
        # the int8 graph quantised from ``onnx_path`` instead of ``onnx_path`` itself.
        super().__init__(model, tokenizer, **kwargs)
        self.quantize = check_quantize(quantize)
        self.graph = OnnxRuntimeClassifier(onnx_path, model.config, threads, quantize=self.quantize, cpu_only=False)
        self.session = self.graph.session

    @classmethod
    def from_pretrained(cls, path, *, onnx_path=None, threads: int | None = None, max_length: int = 128,
                        batch_size: int | None = None, quantize: str = "none", **kwargs) -> "OnnxPredictor":
        """``path``: the PyTorch checkpoint (config, tokenizer); ``onnx_path``: an exported graph
        (default: export into ``path/onnx`` when missing); ``quantize="int8"``: run its int8
        dynamically quantised graph (``model.int8.onnx`` next to it, made when missing or stale)."""
        torch_predictor = Predictor.from_pretrained(path, max_length=max_length, batch_size=batch_size, **kwargs)
        if onnx_path is None:
            onnx_path = Path(path) / "onnx" / "model.onnx"
            if not export_is_current(path, onnx_path):  # missing, or the checkpoint changed since
                export_onnx(path, onnx_path.parent)
        return cls(torch_predictor.model, torch_predictor.tokenizer, onnx_path, threads=threads, quantize=quantize,
                   max_length=max_length, batch_size=torch_predictor.batch_size)

    def _forward(self, eager: bool):
        return self.graph
