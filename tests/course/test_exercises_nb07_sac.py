"""Checker of exercise 07.4 (a selective-checkpointing policy): right answers pass, wrong ones are told why.

Selective checkpointing's API (``torch.utils.checkpoint.CheckpointPolicy``) is public since torch 2.4; on an older
torch (hooklab's declared floor is 2.3) these tests skip.
"""
import collections

import pytest
import torch
import torch.utils.checkpoint

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict
from hooklab.course.exercises import nb07

CheckpointPolicy = getattr(torch.utils.checkpoint, "CheckpointPolicy", None)
if CheckpointPolicy is None:
    pytest.skip(f"selective checkpointing needs torch >= 2.4; this is torch {torch.__version__}",
                allow_module_level=True)

# ---- 07.4 a selective-checkpointing policy ---------------------------------------------------------


aten = torch.ops.aten


def policy_by_packet(ctx, op, *args, **kwargs):
    if op.overloadpacket in (aten.mm, aten.addmm, aten.bmm):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def policy_by_overload_must_recompute(ctx, op, *args, **kwargs):
    saved = [aten.mm.default, aten.addmm.default, aten.bmm.default]
    return CheckpointPolicy.PREFER_SAVE if op in saved else CheckpointPolicy.MUST_RECOMPUTE


def policy_by_name(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if str(op).split(".")[1] in {"mm", "addmm", "bmm"} else CheckpointPolicy.PREFER_RECOMPUTE


def policy_comparing_packets(ctx, op, *args, **kwargs):  # an overload never equals its packet
    return CheckpointPolicy.MUST_SAVE if op in (aten.mm, aten.addmm, aten.bmm) else CheckpointPolicy.PREFER_RECOMPUTE


def policy_without_addmm(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in (aten.mm.default, aten.bmm.default) else CheckpointPolicy.PREFER_RECOMPUTE


def policy_without_bmm(ctx, op, *args, **kwargs):  # right on the MLPs, wrong on attention
    return CheckpointPolicy.MUST_SAVE if op in (aten.mm.default, aten.addmm.default) else CheckpointPolicy.PREFER_RECOMPUTE


def policy_for_composite_ops(ctx, op, *args, **kwargs):  # linear / matmul never reach the policy
    return CheckpointPolicy.MUST_SAVE if op in (aten.linear.default, aten.matmul.default) else CheckpointPolicy.PREFER_RECOMPUTE


def policy_saving_everything(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE


def policy_recomputing_everything(ctx, op, *args, **kwargs):
    return CheckpointPolicy.PREFER_RECOMPUTE


def policy_returning_bools(ctx, op, *args, **kwargs):
    return op.overloadpacket in (aten.mm, aten.addmm, aten.bmm)


def policy_halving_what_it_is_shown(ctx, op, *args, **kwargs):
    # a policy that edits the tensors it is shown: the forward pass (and so the gradients) change
    if op.overloadpacket in (aten.mm, aten.addmm, aten.bmm):
        for t in args:
            if isinstance(t, torch.Tensor) and not t.requires_grad:
                t.mul_(0.5)
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def policy_returning_none_for_the_rest(ctx, op, *args, **kwargs):
    if op.overloadpacket in (aten.mm, aten.addmm, aten.bmm):
        return CheckpointPolicy.MUST_SAVE


@pytest.mark.parametrize("answer", [run_solution("07.4")["keep_matmuls"], policy_by_packet,
                                    policy_by_overload_must_recompute, policy_by_name])
def test_07_4_accepts_right_answers(answer):
    assert verdict("07.4", answer) == "correct"


@pytest.mark.parametrize("answer, reason, says", [
    (policy_comparing_packets, "matmul-recomputed", "`addmm` ×2"),
    (policy_without_addmm, "matmul-recomputed", "`addmm` ×2"),
    (policy_without_bmm, "matmul-recomputed", "`bmm` ×2"),
    (policy_for_composite_ops, "matmul-recomputed", "decomposed"),
    (policy_saving_everything, "kept-bytes", "cheap pointwise ops"),
    (policy_recomputing_everything, "matmul-recomputed", "did not keep their outputs"),
    (policy_returning_bools, "not-a-policy", "returned False"),
    (policy_returning_none_for_the_rest, "not-a-policy", "returned None"),
    (policy_halving_what_it_is_shown, "gradients-differ", "the gradients differ"),
])
def test_07_4_rejects_wrong_answers_and_says_why(answer, reason, says):
    status, _, en, why = hooklab.course.exercises.verdict("07.4", answer, strict=True)
    assert (status, why) == ("wrong", reason)
    assert says in en


def test_07_4_the_cases_use_every_matmul_and_saving_everything_costs_more_than_no_checkpoint():
    seen = collections.Counter()
    for seed, kind in [(1, "mlp"), (2, "nobias"), (3, "attention")]:
        model, x = nb07._case(nb07._POLICY_MODELS, seed, kind)
        with hooklab.OpCounter() as ran:
            model(x)
        seen.update({name: ran.counts[name] for name in ("mm", "addmm", "bmm")})
    assert all(seen[name] > 0 for name in ("mm", "addmm", "bmm"))
    model, x = nb07._case(nb07._POLICY_MODELS, 1, "mlp")
    plain, _, _ = nb07._sac_step(model, x, None)
    everything, _, _ = nb07._sac_step(model, x, policy_saving_everything)
    assert everything > plain


def test_07_4_blank_start_and_errors():
    def keep_matmuls(ctx, op, *args, **kwargs):
        pass
    assert judged("07.4", keep_matmuls) == ("not solved", "blank")
    assert verdict("07.4", None) == "not solved"

    def raises(ctx, op, *args, **kwargs):
        raise KeyError(op)
    status, _, en, reason = hooklab.course.exercises.verdict("07.4", raises, strict=True)
    assert (status, reason) == ("wrong", "policy-raised") and "raised KeyError" in en and "your policy" in en
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert not torch._C._len_torch_dispatch_stack()
