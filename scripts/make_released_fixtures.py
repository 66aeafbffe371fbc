"""Make the test fixtures of the paper's released checkpoints with the authors' own code.

The released MUX-PLMs were saved by the authors' research code under Transformers 4.4.2. This
script builds small random-weight models of every released kind with *their* classes, saves
them with *their* ``save_pretrained`` (config.json + pickle pytorch_model.bin, the layout of the
hub folders) and records *their* logits on fixed inputs, so that muxplm's loader and its
``forward_variant="released"`` can be checked against the real computation, not a guess of it.
Nothing of their code is copied into muxplm: this script imports it from a checkout.

For every kind it also records how far the logits move when each quirk of that computation is
undone (the encoder given the padding mask, the embeddings applied once, ...): the tests
require every move to be at least 100 times their tolerance, so that a loader skipping any
quirk fails them.

Run it in a side environment (their code does not run under today's Transformers)::

    git clone https://github.com/princeton-nlp/datamux-pretraining /tmp/datamux
    git -C /tmp/datamux checkout 072989a
    python3 -m venv /tmp/venv442 && . /tmp/venv442/bin/activate
    pip install torch==2.13.0 && pip install --no-deps transformers==4.4.2 safetensors
    pip install numpy regex requests filelock packaging tqdm "setuptools<70" sacremoses scipy
    python scripts/make_released_fixtures.py --authors-repo /tmp/datamux --output tests/fixtures/released
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

# Small enough for a few MB of fixtures in all; every id the released forward hard-codes (the
# [CLS] id 101, the prefix ids 669..680) lies inside the vocabulary; two heads of 16 dimensions
# (1/sqrt(16) is exact, so the attention scaling rounds alike in any implementation).
SIZES = dict(vocab_size=700, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=48, type_vocab_size=2, pad_token_id=0)
LENGTH = 16
NUM_LABELS = 3
CLS_ID = 101
# Weights are drawn at this scale (LayerNorm gains around 1): at Transformers' default of 0.02 the
# logits are so small that undoing a quirk moves them less than the tolerance allows to notice.
WEIGHT_SCALE = 0.3


@dataclass(frozen=True)
class Kind:
    name: str
    family: str  # bert | electra
    head: str  # mlm | pretraining | sequence | token
    muxing: str  # gaussian_hadamard | gaussian_attention_v2 | none (the plain N = 1 baseline)
    demuxing: str  # index_pos | index
    num_instances: int


KINDS = [
    Kind("bert-mlm-hadamard-indexpos-2", "bert", "mlm", "gaussian_hadamard", "index_pos", 2),
    Kind("bert-mlm-hadamard-indexpos-5", "bert", "mlm", "gaussian_hadamard", "index_pos", 5),
    Kind("bert-mlm-hadamard-indexpos-10", "bert", "mlm", "gaussian_hadamard", "index_pos", 10),
    Kind("bert-sequence-hadamard-indexpos-2", "bert", "sequence", "gaussian_hadamard", "index_pos", 2),
    Kind("bert-sequence-hadamard-indexpos-10", "bert", "sequence", "gaussian_hadamard", "index_pos", 10),
    Kind("bert-token-hadamard-indexpos-5", "bert", "token", "gaussian_hadamard", "index_pos", 5),
    Kind("bert-mlm-attention-indexpos-2", "bert", "mlm", "gaussian_attention_v2", "index_pos", 2),
    Kind("bert-sequence-attention-indexpos-2", "bert", "sequence", "gaussian_attention_v2", "index_pos", 2),
    Kind("bert-token-attention-indexpos-2", "bert", "token", "gaussian_attention_v2", "index_pos", 2),
    Kind("bert-mlm-hadamard-index-2", "bert", "mlm", "gaussian_hadamard", "index", 2),
    Kind("bert-sequence-hadamard-index-5", "bert", "sequence", "gaussian_hadamard", "index", 5),
    Kind("bert-token-hadamard-index-2", "bert", "token", "gaussian_hadamard", "index", 2),
    Kind("electra-pretraining-hadamard-indexpos-2", "electra", "pretraining", "gaussian_hadamard", "index_pos", 2),
    Kind("electra-pretraining-hadamard-indexpos-10", "electra", "pretraining", "gaussian_hadamard", "index_pos", 10),
    Kind("electra-sequence-hadamard-indexpos-2", "electra", "sequence", "gaussian_hadamard", "index_pos", 2),
    Kind("electra-token-hadamard-indexpos-2", "electra", "token", "gaussian_hadamard", "index_pos", 2),
    Kind("bert-mlm-plain-1", "bert", "mlm", "none", "index_pos", 1),
    Kind("electra-pretraining-plain-1", "electra", "pretraining", "none", "index_pos", 1),
]


def authors_classes(repo: Path) -> dict:
    sys.path.insert(0, str(repo))
    from datamux_pretraining.models import multiplexing_pretraining_bert as bert
    from datamux_pretraining.models import multiplexing_pretraining_electra as electra
    from transformers import BertForMaskedLM, ElectraForPreTraining

    return {
        ("bert", "mlm"): bert.MuxedBertForMaskedLM, ("bert", "sequence"): bert.MuxedBertForSequenceClassification,
        ("bert", "token"): bert.MuxedBertForTokenClassification,
        ("electra", "pretraining"): electra.MuxedElectraForPreTraining,
        ("electra", "sequence"): electra.MuxedElectraForSequenceClassification,
        ("electra", "token"): electra.MuxedElectraForTokenClassification,
        ("bert", "plain"): BertForMaskedLM, ("electra", "plain"): ElectraForPreTraining,
    }


def make_config(kind: Kind):
    from transformers import BertConfig, ElectraConfig

    sizes = dict(SIZES, embedding_size=SIZES["hidden_size"]) if kind.family == "electra" else dict(SIZES)
    config = (ElectraConfig if kind.family == "electra" else BertConfig)(**sizes, num_labels=NUM_LABELS)
    # The multiplexing fields, as the authors' training scripts set them (the N = 1 baselines
    # carry them too, with N = 1).
    config.num_instances = kind.num_instances
    config.muxing_variant = "gaussian_hadamard" if kind.muxing == "none" else kind.muxing
    config.demuxing_variant = kind.demuxing
    config.retrieval_percentage = 1.0
    config.gaussian_hadamard_norm = 1.0
    config.binary_hadamard_epsilon = 0.0
    config.retrieval_loss_coeff = 0.1 if kind.head in ("mlm", "pretraining") else 0.0
    config.task_loss_coeff = 0.9 if kind.head in ("mlm", "pretraining") else 1.0
    config.learn_muxing = 0
    config.num_hidden_demux_layers = 3
    return config


def randomize(model, generator: torch.Generator) -> None:
    """Every weight drawn anew: LayerNorm gains near 1, everything else at ``WEIGHT_SCALE``."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if "LayerNorm.weight" in name or "layer_norm" in name and name.endswith("weight"):
                parameter.copy_(1.0 + 0.2 * noise)
            else:
                parameter.copy_(WEIGHT_SCALE * noise)
        if hasattr(model, "instance_embedding"):  # the fixed keys: unit vectors, as the authors draw them
            keys = torch.randn(model.instance_embedding.shape, generator=generator)
            model.instance_embedding.copy_(keys / keys.norm(dim=1, keepdim=True))


def make_inputs(kind: Kind, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Several groups of N rows, padded (pad id 0, mask 0), with a second segment in most rows
    and a first token other than [CLS] in some. The last group is padded in every row at the
    end, so that some positions hold padding in every instance of a group."""
    groups = 2 if kind.num_instances >= 10 else 3
    rows = groups * kind.num_instances
    lengths = torch.randint(4, LENGTH + 1, (rows,), generator=generator)
    lengths[-kind.num_instances:] = torch.randint(4, LENGTH - 2, (kind.num_instances,), generator=generator)
    lengths[0] = LENGTH
    ids = torch.randint(1, SIZES["vocab_size"], (rows, LENGTH), generator=generator)
    ids[:, 0] = CLS_ID
    ids[1::3, 0] = torch.randint(200, 600, (len(range(1, rows, 3)),), generator=generator)
    mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    types = torch.zeros_like(ids)
    for row in range(rows):
        split = int(torch.randint(2, int(lengths[row]), (1,), generator=generator))
        types[row, split:lengths[row]] = 1
    if kind.demuxing == "index" and kind.head == "mlm":
        # Their prefix MLM drops the last N + 1 tokens but not their token types, which stay
        # aligned with the prefixed sequence: the dropped tail's types are 0 here (as padding's
        # are), so that muxplm, given the tokens their model kept, sees the same types.
        types[:, LENGTH - (kind.num_instances + 1):] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def mlm_positions(kind: Kind, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The positions (of the input) whose masked-LM logits are kept: a quarter of them, to keep
    the fixtures small. The prefix demultiplexer's MLM shifts the input right by N + 1 and drops
    its last N + 1 tokens, which then have no logits."""
    rows, length = inputs["input_ids"].shape
    chosen = (torch.arange(rows)[:, None] * 7 + torch.arange(length)[None, :]) % 4 == 0
    if kind.demuxing == "index":
        chosen[:, length - (kind.num_instances + 1):] = False
    return chosen


def their_logits(model, kind: Kind, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Their logits; for masked LM only at :func:`mlm_positions`, ``[M, V]`` in row-major order."""
    args = {key: value.clone() for key, value in inputs.items()}  # their forward writes into input_ids
    if kind.head == "mlm" and kind.muxing != "none":
        # Logits come only where a label is given.
        chosen = mlm_positions(kind, inputs)
        args["labels"] = torch.where(chosen, inputs["input_ids"], torch.full_like(inputs["input_ids"], -100))
    with torch.no_grad():
        logits = model(**args, return_dict=True).logits.detach().clone()
    if kind.head != "mlm":
        return logits
    chosen = mlm_positions(kind, inputs)
    if kind.demuxing == "index":  # their position t is the input's t - (N + 1)
        chosen = torch.cat([torch.zeros_like(chosen[:, : kind.num_instances + 1]),
                            chosen[:, : chosen.shape[1] - kind.num_instances - 1]], dim=1)
    return logits[chosen]


class Undo:
    """Patches one of the authors' model instances so that its forward computes without one of
    its quirks; used to measure how much each quirk matters on the fixture."""

    def __init__(self, model, kind: Kind, inputs: dict[str, torch.Tensor]):
        self.model, self.kind, self.inputs = model, kind, inputs
        self.base = getattr(model, "electra" if kind.family == "electra" else "bert")
        self.n = kind.num_instances

    def _prefixed(self, tensor: torch.Tensor, value: int) -> torch.Tensor:
        """Rows as they enter the embeddings: with the prefix of the prefix demultiplexer."""
        if self.kind.demuxing != "index":
            return tensor
        prefix = torch.full((tensor.shape[0], self.n + 1), value, dtype=tensor.dtype)
        body = tensor[:, : -(self.n + 1)] if self.kind.head == "mlm" else tensor
        return torch.cat([prefix, body], dim=1)

    def first_embedding(self, change):
        """Wrap the first (per-instance) embedding call; ``change(kwargs)`` edits its arguments,
        and may return a function applied to its output."""
        original = self.base.embeddings.forward

        def embed(input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None,
                  past_key_values_length=0):
            after = None
            if input_ids is not None:
                arguments = dict(input_ids=input_ids, token_type_ids=token_type_ids)
                after = change(arguments)
                input_ids, token_type_ids = arguments["input_ids"], arguments["token_type_ids"]
            out = original(input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids,
                           inputs_embeds=inputs_embeds, past_key_values_length=past_key_values_length)
            return after(out) if after is not None else out

        self.base.embeddings.forward = embed

    def embed_once(self):
        original = self.base.embeddings.forward

        def embed(input_ids=None, inputs_embeds=None, **kwargs):
            if input_ids is None:
                return inputs_embeds
            return original(input_ids=input_ids, inputs_embeds=inputs_embeds, **kwargs)

        self.base.embeddings.forward = embed

    def encoder_mask(self):
        original = self.base.forward
        grouped = self._prefixed(self.inputs["attention_mask"], 1).view(-1, self.n, self._length()).amax(1)

        def encode(*args, attention_mask=None, inputs_embeds=None, **kwargs):
            if inputs_embeds is not None and attention_mask is None:
                attention_mask = grouped
            return original(*args, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)

        self.base.forward = encode

    def _length(self) -> int:
        grows = self.kind.demuxing == "index" and self.kind.head != "mlm"
        return LENGTH + (self.n + 1 if grows else 0)

    def token_types(self):
        types = self._prefixed(self.inputs["token_type_ids"], 0)

        def change(arguments):
            arguments["token_type_ids"] = types

        self.first_embedding(change)

    def first_token(self):
        first = self.inputs["input_ids"][:, :1]

        def change(arguments):
            arguments["input_ids"] = torch.cat([first, arguments["input_ids"][:, 1:]], dim=1)

        self.first_embedding(change)

    def padding_in_mixture(self):
        mask = self._prefixed(self.inputs["attention_mask"], 1)

        def change(arguments):
            return lambda out: out * mask[..., None].to(out.dtype)

        self.first_embedding(change)

    def demux_layer_norms(self):
        demux = self.model.demux_module
        for index in range(1, demux_layers(self.model)):
            setattr(demux, f"dropout_{index}", getattr(demux, f"layer_norm_{index}"))

    def mask_value(self):
        model = self.model

        def extended(attention_mask, input_shape, device):
            mask = attention_mask[:, None, None, :].to(torch.float32)
            return (1.0 - mask) * torch.finfo(torch.float32).min

        model.get_extended_attention_mask = extended

    def sentence_position(self):
        demultiplexer = self.model.demultiplexer
        original = demultiplexer.forward

        def demux(features, **kwargs):  # read position N + 1 (the input's own [CLS]) instead of N
            out = original(features, **kwargs)
            return torch.cat([out[:, 1:], out[:, :1]], dim=1)

        demultiplexer.forward = demux


def demux_layers(model) -> int:
    return model.config.num_hidden_demux_layers


def quirks_of(kind: Kind) -> list[str]:
    """The quirks of the authors' forward that change this kind's logits on the fixture."""
    if kind.muxing == "none":
        return []
    quirks = ["embed_once", "encoder_mask"]
    classifier = kind.head in ("sequence", "token")
    if classifier:
        quirks.append("token_types")
    forces_cls = kind.demuxing == "index_pos" and (kind.family == "bert" or kind.head == "pretraining")
    if forces_cls:
        quirks.append("first_token")
    if kind.muxing == "gaussian_hadamard":
        quirks.append("padding_in_mixture")
    if kind.demuxing == "index_pos" and kind.head != "mlm":
        quirks.append("demux_layer_norms")
    if kind.muxing == "gaussian_attention_v2" and kind.head == "sequence":
        quirks.append("mask_value")
    if kind.demuxing == "index" and kind.head == "sequence":
        quirks.append("sentence_position")
    return quirks


def build(kind: Kind, classes: dict, seed: int):
    torch.manual_seed(seed)
    config = make_config(kind)
    cls = classes[(kind.family, "plain" if kind.muxing == "none" else kind.head)]
    model = cls(config).eval()
    randomize(model, torch.Generator().manual_seed(seed))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--authors-repo", required=True, type=Path, help="checkout of their repository at 072989a")
    parser.add_argument("--output", required=True, type=Path, help="fixture folder (replaced)")
    args = parser.parse_args()
    from safetensors.torch import save_file

    classes = authors_classes(args.authors_repo)
    if args.output.exists():
        shutil.rmtree(args.output)
    summary = {}
    for seed, kind in enumerate(KINDS):
        model = build(kind, classes, seed)
        inputs = make_inputs(kind, torch.Generator().manual_seed(1000 + seed))
        logits = their_logits(model, kind, inputs)
        folder = args.output / kind.name
        model.save_pretrained(folder)
        expected = {**inputs, "logits": logits.contiguous()}
        if kind.head == "mlm":
            expected["mlm_positions"] = mlm_positions(kind, inputs).to(torch.uint8)
        save_file(expected, str(folder / "expected.safetensors"))
        moves = {}
        for quirk in quirks_of(kind):
            undone = build(kind, classes, seed)
            getattr(Undo(undone, kind, inputs), quirk)()
            moves[quirk] = float((their_logits(undone, kind, inputs) - logits).abs().max())
        (folder / "quirks.json").write_text(json.dumps(moves, indent=1) + "\n")
        summary[kind.name] = {"logits": list(logits.shape), "max_abs_logit": float(logits.abs().max()), **moves}
        print(kind.name, json.dumps(summary[kind.name]))
    (args.output / "kinds.json").write_text(json.dumps(
        {"made_by": "scripts/make_released_fixtures.py", "authors_commit": "072989a",
         "transformers": __import__("transformers").__version__, "torch": torch.__version__,
         "kinds": {kind.name: {"family": kind.family, "head": kind.head, "muxing": kind.muxing,
                               "demuxing": kind.demuxing, "num_instances": kind.num_instances} for kind in KINDS}},
        indent=1) + "\n")


if __name__ == "__main__":
    main()
