"""Stage 1 learns: a tiny MUX-BERT (N=2) overfits a handful of sentences under the
token-retrieval objective within a few hundred CPU steps."""

from __future__ import annotations

import torch

from muxplm import MuxBertConfig, MuxBertForRetrieval

from mux_testing import random_batch


def test_retrieval_accuracy_rises_far_above_chance():
    torch.manual_seed(0)
    vocab = 1000
    batch = random_batch(8, length=12, vocab=vocab, seed=3)
    config = MuxBertConfig(
        vocab_size=vocab, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=256, max_position_embeddings=16, num_instances=2,
    )
    model = MuxBertForRetrieval(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    first = model(**batch).accuracy.item()
    for step in range(200):
        loss = model(**batch, composition_seed=step).loss  # a new composition every step
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        reconstructed = model.reconstruct(**batch, composition_seed=999)
    real = batch["attention_mask"].bool()
    accuracy = (reconstructed[real] == batch["input_ids"][real]).float().mean().item()
    assert first < 0.05  # chance is 1/1000
    assert accuracy > 0.6, accuracy
