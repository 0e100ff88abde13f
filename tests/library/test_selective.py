"""Tests of selective_checkpoint_modules (hooklab.checkpoint) and OpCounter (hooklab.meter)."""
from __future__ import annotations

import contextlib
import doctest

import pytest
import torch
import torch.utils.checkpoint
from torch import nn

CheckpointPolicy = getattr(torch.utils.checkpoint, "CheckpointPolicy", None)
if CheckpointPolicy is None:
    pytest.skip(f"selective checkpointing needs torch >= 2.4; this is torch {torch.__version__}",
                allow_module_level=True)

import hooklab  # noqa: E402 (after the module-level skip for torch < 2.4)
import hooklab.checkpoint  # noqa: E402 (after the module-level skip for torch < 2.4)
import hooklab.meter  # noqa: E402 (after the module-level skip for torch < 2.4)
from hooklab import MemoryMeter, OpCounter, UnknownModuleError, no_hooks_left_behind, selective_checkpoint_modules  # noqa: E402

aten = torch.ops.aten
MATMULS = [aten.mm, aten.addmm, aten.bmm]


def matmul_policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op.overloadpacket in MATMULS else CheckpointPolicy.PREFER_RECOMPUTE


def mlp(seed: int = 0):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU()),
                        nn.Linear(64, 4))
    return net, torch.randn(8, 16)


def step(net, x, context):
    """Gradients, bytes kept after forward, and the ops run in backward."""
    net.zero_grad(set_to_none=True)
    with MemoryMeter(ignore=[*net.parameters(), x]) as meter:
        with context:
            loss = net(x).square().sum()
        kept = meter.mark()
        with OpCounter() as ran:
            loss.backward()
    return [p.grad.clone() for p in net.parameters()], kept, ran.counts


def saved_tensor_hooks_active() -> bool:
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def test_doctests_run():
    assert doctest.testmod(hooklab.checkpoint).failed == 0 and doctest.testmod(hooklab.meter).failed == 0


@pytest.mark.parametrize("policy", [matmul_policy, [aten.addmm], [aten.addmm.default, aten.mm]],
                         ids=["function", "packet", "overload"])
def test_same_gradients_less_memory_and_policy_respected(policy):
    net, x = mlp()
    plain_grads, plain_kept, plain_ops = step(net, x, contextlib.nullcontext())
    full_grads, full_kept, full_ops = step(net, x, hooklab.checkpoint_modules(net, ["0"]))
    with no_hooks_left_behind(net):
        sac_grads, sac_kept, sac_ops = step(net, x, selective_checkpoint_modules(net, ["0"], policy=policy))
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, sac_grads))
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, full_grads))
    # plain keeps 2 Linear outputs + 2 GELU outputs (8 x 64 floats each), the head output and the loss
    assert plain_kept == 4 * 8 * 64 * 4 + 8 * 4 * 4 + 4
    # full keeps the block's output (the head saves it), the head output and the loss; SAC keeps the
    # two Linear (addmm) outputs as well and recomputes the GELUs
    assert full_kept == 8 * 64 * 4 + 8 * 4 * 4 + 4
    assert sac_kept == full_kept + 2 * 8 * 64 * 4
    # policy respected: no matmul of forward runs again in backward; the first GELU (whose output
    # the second Linear saved) does. Early stop ends the recomputation before the second GELU runs.
    assert plain_ops["addmm"] == 0 and plain_ops["gelu"] == 0
    assert full_ops["addmm"] == 2 and full_ops["gelu"] == 1
    assert sac_ops["addmm"] == 0 and sac_ops["gelu"] == 1
    assert "forward" not in net[0].__dict__
    assert not saved_tensor_hooks_active()


def test_save_everything_policy_recomputes_nothing():
    net, x = mlp()
    _, _, ops = step(net, x, selective_checkpoint_modules(
        net, ["0"], policy=lambda ctx, op, *a, **k: CheckpointPolicy.MUST_SAVE))
    assert ops["addmm"] == 0 and ops["gelu"] == 0


def test_restored_after_an_exception_and_names_checked():
    net, _ = mlp()
    with no_hooks_left_behind(net), pytest.raises(RuntimeError):
        with selective_checkpoint_modules(net, ["0"], policy=[aten.addmm]):
            net(torch.randn(2, 5))  # wrong width
    assert "forward" not in net[0].__dict__
    assert not saved_tensor_hooks_active()
    with pytest.raises(UnknownModuleError, match="Names that exist: 0, 0.0, 0.1"):
        with selective_checkpoint_modules(net, ["block"], policy=[aten.addmm]):
            pass
    with pytest.raises(ValueError, match="'0.0' is inside '0'"):
        with selective_checkpoint_modules(net, ["0", "0.0"], policy=[aten.addmm]):
            pass
    assert all("forward" not in m.__dict__ for m in net.modules())


def test_a_policy_returning_the_wrong_type_names_the_op_and_restores():
    net, x = mlp()
    with pytest.raises(TypeError, match="must return a torch.utils.checkpoint.CheckpointPolicy"):
        with selective_checkpoint_modules(net, ["0"], policy=lambda ctx, op, *a, **k: "save"):
            net(x)
    assert "forward" not in net[0].__dict__ and not saved_tensor_hooks_active()


@pytest.mark.parametrize("policy, message", [
    (aten.addmm, "single op"),
    ("addmm", "policy must be a function"),
    (["addmm"], "ATen ops such as"),
    (3, "policy must be a function"),
])
def test_bad_policies(policy, message):
    net, _ = mlp()
    with pytest.raises(TypeError, match=message):
        with selective_checkpoint_modules(net, ["0"], policy=policy):
            pass
    assert "forward" not in net[0].__dict__


def test_options_it_sets_itself_are_refused_and_others_pass_through():
    net, x = mlp()
    for key in ("context_fn", "use_reentrant"):
        with pytest.raises(TypeError, match=f"sets {key} itself"):
            with selective_checkpoint_modules(net, ["0"], policy=[aten.addmm], **{key: None}):
                pass
    with pytest.raises(ValueError, match="determinism_check should be one of"):
        with selective_checkpoint_modules(net, ["0"], policy=[aten.addmm], determinism_check="values"):
            net(x)
    assert "forward" not in net[0].__dict__


def test_policy_is_keyword_only():
    net, _ = mlp()
    with pytest.raises(TypeError):
        selective_checkpoint_modules(net, ["0"], [aten.addmm])  # the block is refused when made


def test_op_counter_counts_what_runs_and_leaves_no_mode():
    with OpCounter() as ran:
        torch.tanh(torch.ones(3) + 1)
    assert ran.counts == {"ones": 1, "add": 1, "tanh": 1}
    with OpCounter() as outer:
        with pytest.raises(RuntimeError):
            torch.ones(2) @ torch.ones(3)
    assert outer.counts["ones"] == 2
    assert not torch._C._len_torch_dispatch_stack()
