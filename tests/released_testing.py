"""The fixtures of the paper's released checkpoints (made by ``scripts/make_released_fixtures.py``
with the authors' own code): small random-weight models of every released kind, in the layout of
the hub folders, with the authors' logits on fixed inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file

FIXTURES = Path(__file__).parent / "fixtures" / "released"
TOLERANCE = 1e-5
BERT_VOCABULARY = 30522

KINDS: dict[str, dict] = json.loads((FIXTURES / "kinds.json").read_text())["kinds"]


def model_class(kind: dict) -> type:
    import muxplm

    name = {("bert", "mlm"): "MuxBertForMaskedLM", ("bert", "sequence"): "MuxBertForSequenceClassification",
            ("bert", "token"): "MuxBertForTokenClassification", ("electra", "pretraining"): "MuxElectraForPreTraining",
            ("electra", "sequence"): "MuxElectraForSequenceClassification",
            ("electra", "token"): "MuxElectraForTokenClassification"}[(kind["family"], kind["head"])]
    return getattr(muxplm, name)


def expected(name: str) -> dict[str, torch.Tensor]:
    return load_file(str(FIXTURES / name / "expected.safetensors"))


def quirk_moves(name: str) -> dict[str, float]:
    return json.loads((FIXTURES / name / "quirks.json").read_text())


def our_logits(model, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ours, theirs)`` on the fixture's inputs, over the same outputs: every logit, or the
    masked-LM positions the fixture kept. Their prefix masked LM drops the last N + 1 tokens of
    its input; ours is given only the tokens theirs kept."""
    kind, data = KINDS[name], expected(name)
    n = kind["num_instances"]
    keep = data["input_ids"].shape[1]
    if kind["head"] == "mlm" and kind["demuxing"] == "index":
        keep -= n + 1
    inputs = {key: data[key][:, :keep] for key in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        logits = model(**inputs).logits
    theirs = data["logits"]
    if kind["head"] == "mlm":
        logits = logits[data["mlm_positions"].bool()[:, :keep]]
    elif kind["head"] == "token" and kind["demuxing"] == "index":
        theirs = theirs[:, n + 1:]  # their token logits include the prefix positions
    return logits, theirs


def released_folder(root: Path, name: str, vocab_size: int | None = None, max_positions: int = 512) -> Path:
    """A copy of fixture ``name`` as a hub folder holds it (config.json, pytorch_model.bin),
    optionally with the vocabulary grown to ``vocab_size`` rows and the position table to
    ``max_positions`` (new rows random), so that a real tokenizer's ids and 128-token inputs fit."""
    folder = root / name
    folder.mkdir(parents=True)
    for file in ("config.json", "pytorch_model.bin"):
        shutil.copy(FIXTURES / name / file, folder / file)
    if vocab_size is None:
        return folder
    config = json.loads((folder / "config.json").read_text())
    sizes = {config["vocab_size"]: vocab_size, config["max_position_embeddings"]: max_positions}
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    generator = torch.Generator().manual_seed(0)
    grown = {}
    for key, tensor in state.items():
        if tensor.dim() >= 1 and tensor.shape[0] in sizes and "embeddings.token_type" not in key:
            extra = 0.3 * torch.randn((sizes[tensor.shape[0]] - tensor.shape[0], *tensor.shape[1:]), generator=generator)
            tensor = torch.cat([tensor, extra.to(tensor.dtype)])
        grown[key] = tensor
    torch.save(grown, folder / "pytorch_model.bin")
    config.update(vocab_size=vocab_size, max_position_embeddings=max_positions)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder
