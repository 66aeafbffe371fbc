import pytest
import torch

from muxplm import plan_groups


@pytest.mark.parametrize("batch_size", [1, 4, 7, 10, 13])
@pytest.mark.parametrize("n", [1, 2, 5, 10])
@pytest.mark.parametrize("seed", [None, 0, 3])
def test_group_then_ungroup_is_the_identity(batch_size, n, seed):
    plan = plan_groups(batch_size, n, seed=seed)
    x = torch.arange(batch_size) * 10 + 1
    slots = plan.group(x, fill_value=-1)
    assert plan.num_slots == -(-batch_size // n) * n
    assert (slots == -1).sum() == plan.num_slots - batch_size  # fillers, and only fillers
    assert torch.equal(plan.ungroup(slots), x)


def test_seed_decides_the_composition_and_is_reproducible():
    a, b, c = (plan_groups(20, 5, seed=s).order for s in (1, 1, 2))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.equal(plan_groups(20, 5).order, torch.arange(20))


@pytest.mark.parametrize("batch_size, n", [(6, 2), (7, 5), (23, 10), (3, 5)])
def test_ensemble_puts_every_copy_in_a_different_slot(batch_size, n):
    plan = plan_groups(batch_size, n, seed=4, ensemble=True)
    assert plan.num_copies == n
    slots = plan.slot_of.view(n, batch_size)
    for instance in range(batch_size):
        positions = slots[:, instance] % n
        assert sorted(positions.tolist()) == list(range(n))
        assert torch.equal(plan.order[slots[:, instance]], torch.full((n,), instance))
    # Every slot holds at most one (copy, instance); fillers fill the rest.
    assert len(set(plan.slot_of.tolist())) == n * batch_size
    assert int(plan.is_real.sum()) == n * batch_size


def test_reduce_copies_averages():
    plan = plan_groups(3, 2, ensemble=True)
    rows = torch.tensor([[1.0], [2.0], [3.0], [3.0], [4.0], [5.0]])
    assert torch.equal(plan.reduce_copies(rows), torch.tensor([[2.0], [3.0], [4.0]]))


def test_empty_batch_is_refused():
    with pytest.raises(ValueError, match="empty batch"):
        plan_groups(0, 2)


def test_a_plan_built_in_inference_mode_serves_autograd():
    with torch.inference_mode():
        plan_groups(3, 2, seed=123)
    x = torch.randn(3, 4, requires_grad=True)
    plan = plan_groups(3, 2, seed=123)  # the cached plan
    plan.ungroup(plan.group(x) * 2).sum().backward()
    assert torch.equal(x.grad, torch.full((3, 4), 2.0))
