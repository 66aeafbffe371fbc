"""The names that settings and command-line options choose from, in a module that imports
nothing heavy: ``muxplm COMMAND --help`` lists them without importing PyTorch or Transformers
(seconds on a small CPU). The modules that implement each name import it from here, and
``tests/test_choices.py`` holds every table to the registry or mapping it names.
"""

from __future__ import annotations

# The built-in multiplexers and demultiplexers (muxplm.mux.MUX_REGISTRY, muxplm.demux.DEMUX_REGISTRY).
# A config accepts whatever is registered: these and any registered later by user code.
MUX_TYPES = ("gaussian_hadamard", "contextual", "adapter", "binary_hadamard", "random_ortho", "identity")
DEMUX_TYPES = ("rsa", "unbind", "prefix", "identity")

# Encoder sizes. small/base/large are the paper's (Section 4); tiny is for CPU work and tests.
SIZE_PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024),
    "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=2048),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
    "large": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, intermediate_size=4096),
}

SENTENCE_POOLING = ("first", "mean")
RETRIEVAL_SOFTMAX = ("full", "in_batch")

# The encoder families (muxplm.families.FAMILIES): name -> (its MUX model_type, its config class).
FAMILY_CONFIGS: dict[str, tuple[str, str]] = {
    "bert": ("mux_bert", "MuxBertConfig"),
    "electra": ("mux_electra", "MuxElectraConfig"),
    "roberta": ("mux_roberta", "MuxRobertaConfig"),
    "distilbert": ("mux_distilbert", "MuxDistilBertConfig"),
    "mpnet": ("mux_mpnet", "MuxMPNetConfig"),
}
FAMILY_NAMES = tuple(FAMILY_CONFIGS)

QUANTIZE_CHOICES = ("none", "int8")  # muxplm.quantization
RUNTIMES = ("torch", "onnx")  # where a model runs: PyTorch or its exported graph in ONNX Runtime
COMPILE_MODES = ("none", "default", "reduce-overhead")  # torch.compile's; reduce-overhead replays CUDA graphs
CLOCKS = ("wall", "process")  # muxplm.timing
DTYPE_NAMES = ("float32", "bfloat16", "float16")  # muxplm.devices.DTYPES
ON_BAD_ROW = ("skip", "truncate", "fail")  # muxplm.predict.labelling: what `predict` does with a bad row

# `muxplm bench throughput` (muxplm.bench.throughput): the heads timed and the speed-ups stacked.
BENCH_HEADS = ("sentence", "token")
BENCH_VARIANTS = ("default", "eager", "int8", "compile", "graphs", "bfloat16", "float16")
