"""The reproduction's model table: every row it can train (:data:`MODELS`, each a
:class:`ModelRecipe`), the lists of rows a run takes by default or by group name
(:data:`MODEL_GROUPS`), and the tasks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelRecipe:
    """One row of the table: how the model is built and which N = 1 row it is compared with."""

    label: str
    num_instances: int
    mux_type: str = "identity"
    demux_type: str = "identity"
    family: str = "bert"  # pre-training objective: bert = MLM, electra = replaced-token detection
    warm_start: bool = False  # start from the pretrained MiniLM encoder instead of random weights
    baseline: str = "bert"  # the N = 1 row that retention and throughput gain are measured against
    # False: the DataMUX recipe of T-MUX, fine-tuned straight from the retrieval-primed model
    # (no language-model pre-training; what the MUX-PLMs paper compares against).
    pretrained: bool = True
    converted: bool = False  # warm start through `muxplm convert` (muxplm.training.convert)
    unmuxed_layers: int | None = None  # partial multiplexing (None: the conversion recipe's)
    size: str | None = None  # a size preset of its own (a row of the paper's larger models), else the recipe's


MODELS = {
    "bert": ModelRecipe("BERT", 1),
    "mux-bert-2": ModelRecipe("MUX-BERT N=2", 2, "gaussian_hadamard", "unbind"),
    "mux-bert-5": ModelRecipe("MUX-BERT N=5", 5, "gaussian_hadamard", "unbind"),
    "mux-bert-10": ModelRecipe("MUX-BERT N=10", 10, "gaussian_hadamard", "unbind"),
    "tmux-2": ModelRecipe("T-MUX N=2", 2, "gaussian_hadamard", "prefix", pretrained=False),
    "tmux-5": ModelRecipe("T-MUX N=5", 5, "gaussian_hadamard", "prefix", pretrained=False),
    "electra": ModelRecipe("ELECTRA", 1, family="electra", baseline="electra"),
    # The working recipe's unbinding demultiplexer for every pre-trained MUX row: the contextual
    # row then differs from MUX-BERT by its multiplexer alone (the paper's ablation).
    "mux-electra-2": ModelRecipe("MUX-ELECTRA N=2", 2, "gaussian_hadamard", "unbind", family="electra",
                                 baseline="electra"),
    "contextual-2": ModelRecipe("MUX-BERT contextual N=2", 2, "contextual", "unbind"),
    "minilm": ModelRecipe("MiniLM (warm start)", 1, warm_start=True, baseline="minilm"),
    "mux-minilm-2": ModelRecipe("MUX-MiniLM N=2 (warm start)", 2, "gaussian_hadamard", "rsa", warm_start=True,
                                baseline="minilm"),
}
# The speed-first conversion, two unmuxed layers (faster than the conversion recipe's three, and less
# accurate).
MODELS.update({
    f"convert-minilm-{n}": ModelRecipe(f"MUX-MiniLM N={n} (convert, 2 unmuxed layers)", n, "gaussian_hadamard",
                                       "unbind", warm_start=True, baseline="minilm", converted=True, unmuxed_layers=2)
    for n in (2, 5, 10)
})
# Partial multiplexing points: the paper's model (every layer on the mixture) and more layers alone.
MODELS.update({
    f"convert-minilm-{n}-k{k}": ModelRecipe(f"MUX-MiniLM N={n} (convert, {k} unmuxed layers)", n,
                                            "gaussian_hadamard", "unbind", warm_start=True, baseline="minilm",
                                            converted=True, unmuxed_layers=k)
    for n in (2, 5) for k in (0, 4)
})
# Three unmuxed layers, the conversion recipe's own.
MODELS.update({
    f"convert-minilm-{n}-k3": ModelRecipe(f"MUX-MiniLM N={n} (convert, 3 unmuxed layers)", n, "gaussian_hadamard",
                                          "unbind", warm_start=True, baseline="minilm", converted=True, unmuxed_layers=3)
    for n in (2, 5, 10)
})
# The rest of the paper's Table 1 and its ablations (section 5): T-MUX and MUX-ELECTRA up to
# N = 10, the prefix demultiplexer and the contextual multiplexer in place of the defaults, and a
# larger size (small, at its own rate: the recipe's `sizes`) against its own N = 1 row.
MODELS["tmux-10"] = ModelRecipe("T-MUX N=10", 10, "gaussian_hadamard", "prefix", pretrained=False)
MODELS.update({f"mux-electra-{n}": ModelRecipe(f"MUX-ELECTRA N={n}", n, "gaussian_hadamard", "unbind",
                                                family="electra", baseline="electra") for n in (5, 10)})
MODELS.update({f"contextual-{n}": ModelRecipe(f"MUX-BERT contextual N={n}", n, "contextual", "unbind")
               for n in (5, 10)})
MODELS.update({f"prefix-{n}": ModelRecipe(f"MUX-BERT prefix demux N={n}", n, "gaussian_hadamard", "prefix")
               for n in (2, 5, 10)})
MODELS.update({
    f"bert-{size}": ModelRecipe(f"BERT ({size})", 1, size=size, baseline=f"bert-{size}") for size in ("small", "base")
})
MODELS.update({
    f"mux-bert-{size}-2": ModelRecipe(f"MUX-BERT N=2 ({size})", 2, "gaussian_hadamard", "unbind", size=size,
                                      baseline=f"bert-{size}") for size in ("small", "base")
})
CONVERT_MODELS = ["minilm", "convert-minilm-2", "convert-minilm-5", "convert-minilm-10"]
DEFAULT_MODELS = ["bert", "mux-bert-2", "mux-bert-5", "mux-bert-10", "tmux-2", "tmux-5", "electra",
                  "mux-electra-2", "contextual-2", "minilm", "mux-minilm-2"]
# Every system of the paper at N = 2 / 5 / 10 under one recipe (the larger size at N = 2).
PAPER_MODELS = ["bert", "mux-bert-2", "mux-bert-5", "mux-bert-10", "electra", "mux-electra-2", "mux-electra-5",
                "mux-electra-10", "tmux-2", "tmux-5", "tmux-10", "prefix-2", "prefix-5", "prefix-10",
                "contextual-2", "contextual-5", "contextual-10", "bert-small", "mux-bert-small-2"]
# Names that stand for a list of models in --models.
MODEL_GROUPS = {"default": DEFAULT_MODELS, "convert": CONVERT_MODELS, "paper": PAPER_MODELS}
DEFAULT_TASKS = ["sentiment", "trec", "pos", "ner"]
SENTENCE_TASKS, TOKEN_TASKS = ("sentiment", "trec"), ("pos", "ner")


def resolve_models(models: list[str] | None, preset: str) -> list[str]:
    """The model keys to run: the preset's default list, or the names given with the groups of
    :data:`MODEL_GROUPS` (``paper``, ``default``, ``convert``) expanded, in order, once each."""
    models = list(models or (CONVERT_MODELS if preset == "convert" else DEFAULT_MODELS))
    models = list(dict.fromkeys(name for model in models for name in MODEL_GROUPS.get(model, [model])))
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)} or a group "
                         f"({', '.join(MODEL_GROUPS)})")
    return models
