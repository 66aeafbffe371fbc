import torch

from muxplm import DEMUX_REGISTRY, build_demux

from mux_testing import micro_config


def test_registry_lists_every_demux_type():
    assert set(DEMUX_REGISTRY) == {"rsa", "unbind", "prefix", "identity"}


def test_rsa_split_first_layer_equals_the_concatenated_mlp():
    """W_k k + W_h h computed in halves must equal Linear(2H -> H) on [k ; h]."""
    torch.manual_seed(0)
    demux = build_demux(micro_config(num_instances=3))
    h = torch.randn(2, 6, 32)
    joint = torch.nn.Linear(64, 32)
    with torch.no_grad():
        joint.weight.copy_(torch.cat([demux.mlp.key_proj.weight, demux.mlp.hidden_proj.weight], dim=1))
        joint.bias.copy_(demux.mlp.hidden_proj.bias)
    dense = demux(h)  # [G, N, L, H]
    for i in range(3):
        concat = torch.cat([demux.keys[i].expand(2, 6, 32), h], dim=-1)
        assert torch.allclose(dense[:, i], demux.mlp.finish(joint(concat)), atol=1e-5)


def test_dense_positions_and_sparse_gather_agree():
    torch.manual_seed(0)
    for demux_type in ("rsa", "prefix"):
        demux = build_demux(micro_config(num_instances=3, demux_type=demux_type))
        prefix = demux.num_prefix_tokens
        h = torch.randn(4, prefix + 6, 32)
        full = demux(h)
        assert full.shape == (4, 3, 6, 32)
        assert torch.allclose(demux(h, torch.tensor([0, 4]))[:, :, 1], full[:, :, 4], atol=1e-6)
        groups, instances, positions = torch.tensor([0, 3, 2]), torch.tensor([2, 0, 1]), torch.tensor([5, 0, 3])
        sparse = demux.gather(h, groups, instances, positions)
        assert torch.allclose(sparse, full[groups, instances, positions], atol=1e-6)


def test_prefix_marks_one_position_per_instance():
    demux = build_demux(micro_config(num_instances=4, demux_type="prefix"))
    ids = demux.prefix_ids
    assert ids.shape == (4, 4)
    for i in range(4):
        assert ids[i, i] == i
        assert all(ids[i, j] == 4 for j in range(4) if j != i)  # the shared filler token
    # Slot index wraps by N: slot 6 of a batch is instance 2 of its group.
    assert torch.equal(demux.prefix_embeddings(torch.tensor([6])), demux.prefix_tokens(ids[2])[None])


def test_num_demux_layers_adds_residual_blocks():
    assert len(build_demux(micro_config(num_demux_layers=1)).mlp.blocks) == 0
    assert len(build_demux(micro_config(num_demux_layers=3)).mlp.blocks) == 2
