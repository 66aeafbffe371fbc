import pytest
import torch

from muxplm import MUX_REGISTRY, build_mux

from mux_testing import micro_config


def test_registry_lists_every_mux_type():
    assert set(MUX_REGISTRY) == {"gaussian_hadamard", "contextual", "adapter", "binary_hadamard", "random_ortho",
                                 "identity"}


def test_gaussian_keys_have_the_configured_norm_and_are_frozen():
    mux = build_mux(micro_config(num_instances=5, mux_key_norm=2.0))
    assert torch.allclose(mux.keys.norm(dim=-1), torch.full((5,), 2.0))
    assert not mux.keys.requires_grad
    assert build_mux(micro_config(num_instances=5, learn_mux_keys=True)).keys.requires_grad


def test_gaussian_mux_is_the_mean_of_keyed_instances():
    mux = build_mux(micro_config(num_instances=3))
    x = torch.randn(2, 3, 4, 32)
    expected = (x[:, 0] * mux.keys[0] + x[:, 1] * mux.keys[1] + x[:, 2] * mux.keys[2]) / 3
    assert torch.allclose(mux(x, torch.ones(2, 3, 4, dtype=torch.bool)), expected, atol=1e-6)


def test_keys_are_reproducible_from_the_config():
    a, b = (build_mux(micro_config(num_instances=4)) for _ in range(2))
    assert torch.equal(a.keys, b.keys)


def test_binary_masks_are_disjoint_blocks():
    mux = build_mux(micro_config(num_instances=4))
    binary = build_mux(micro_config(num_instances=4, mux_type="binary_hadamard"))
    support = binary.keys > 0
    assert torch.equal(support.sum(dim=0), torch.ones(32, dtype=torch.long))  # each dim owned once
    assert support.sum(dim=1).tolist() == [8, 8, 8, 8]
    assert not torch.equal(mux.keys, binary.keys)


def test_random_ortho_matrices_are_scaled_orthogonal():
    mux = build_mux(micro_config(num_instances=2, mux_type="random_ortho"))
    q = mux.matrices[0] * (32**0.5)
    assert torch.allclose(q @ q.T, torch.eye(32), atol=1e-5)


def test_contextual_mux_ignores_filler_slots():
    torch.manual_seed(0)
    mux = build_mux(micro_config(num_instances=2, mux_type="contextual")).eval()
    x = torch.randn(1, 2, 5, 32)
    mask = torch.ones(1, 2, 5, dtype=torch.bool)
    mask[0, 1] = False  # slot 1 is a filler: whatever it holds must not matter
    other_filler = x.clone()
    other_filler[0, 1] = torch.randn(5, 32) * 10
    out = mux(x, mask)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, mux(other_filler, mask), atol=1e-6)
    # ...while a real second instance does change the mixture.
    assert not torch.allclose(out, mux(other_filler, torch.ones_like(mask)), atol=1e-3)


def test_contextual_mux_fillers_add_nothing_to_the_mixture():
    """The mixture of a group with fillers is the real instances' terms over N: a filler's
    cross-instance output (which attends to the real instances) is zeroed too."""
    torch.manual_seed(0)
    mux = build_mux(micro_config(num_instances=3, mux_type="contextual")).eval()
    x = torch.randn(2, 3, 5, 32)
    x[0, 2] = 0.0  # group 0: slot 2 is a filler (zero embedding, no tokens)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 2] = False
    with torch.no_grad():
        terms = mux.instance_terms(x, mask)
        mixture = mux(x, mask)
    assert torch.count_nonzero(terms[0, 2]) == 0
    assert terms[0, :2].abs().amax() > 0 and terms[1].abs().amax() > 0
    assert torch.allclose(mixture[0], terms[0, :2].sum(dim=0) / 3, atol=1e-6)


@pytest.mark.parametrize("mux_type", ["gaussian_hadamard", "binary_hadamard", "random_ortho", "contextual"])
def test_output_shape(mux_type):
    mux = build_mux(micro_config(num_instances=5, mux_type=mux_type))
    out = mux(torch.randn(3, 5, 7, 32), torch.ones(3, 5, 7, dtype=torch.bool))
    assert out.shape == (3, 7, 32)


def test_adapter_mux_starts_as_the_gaussian_one_and_trains_its_adapters_only(tmp_path):
    from muxplm import MuxBertForSequenceClassification

    config = micro_config(num_instances=3, mux_type="adapter")
    adapter, gaussian = build_mux(config), build_mux(micro_config(num_instances=3))
    x = torch.randn(2, 3, 5, config.hidden_size)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[1, 2] = False  # a filler slot
    torch.testing.assert_close(adapter(x, mask), gaussian(x, mask))  # zero up-projections: no change yet
    with torch.no_grad():
        adapter.adapters["up"].normal_()
    changed = adapter(x, mask)
    assert not torch.allclose(changed, gaussian(x, mask))
    # Each slot has its own adapter: swapping two instances' adapters changes the mixture.
    with torch.no_grad():
        adapter.adapters["up"][[0, 1]] = adapter.adapters["up"][[1, 0]].clone()
    assert not torch.allclose(adapter(x, mask), changed)
    # Saved and loaded: the keys stay frozen, the adapters train; a new N draws fresh adapters.
    model = MuxBertForSequenceClassification(config)
    model.save_pretrained(tmp_path)
    loaded = MuxBertForSequenceClassification.from_pretrained(tmp_path)
    trainable = {name for name, p in loaded.named_parameters() if p.requires_grad and ".mux." in name}
    assert trainable == {f"bert.mux.adapters.{k}" for k in ("down", "down_bias", "up", "up_bias")}
    regrouped = MuxBertForSequenceClassification.from_pretrained(tmp_path, num_instances=5, regroup=True)
    assert regrouped.bert.mux.adapters["down"].shape[0] == 5
