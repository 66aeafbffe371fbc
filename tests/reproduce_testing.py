"""The reproduction tests' micro recipe: every stage a few steps of a one-layer model."""

MICRO = {
    "model_overrides": {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64},
    "max_length": 16, "corpus_max_words": 3000, "corpus_sources": ["moby_dick"],
    "retrieval": {"max_steps": 2, "lr": 1e-3, "batch_size": 8},
    "pretrain": {"max_steps": 2, "lr": 1e-3, "batch_size": 8},
    "finetune": {"max_steps": 2, "lr": 1e-3, "batch_size": 8, "max_train_examples": 16, "max_eval_examples": 12},
    "throughput": {"batch_size": 8, "seq_length": 16, "batches": 1, "trials": 2, "clock": "process",
                   "dtype": "float32"},
}
