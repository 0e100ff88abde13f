"""Notebook 09's exercise checkers accept right answers written differently and reject the typical wrong ones."""
import pytest
import torch
import torch.optim.optimizer as optim_globals

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict


@pytest.fixture(autouse=True)
def no_global_optimizer_hooks_leak():
    """A checker must clean up the global optimizer hooks a wrong answer leaves behind."""
    before = (len(optim_globals._global_optimizer_pre_hooks), len(optim_globals._global_optimizer_post_hooks))
    yield
    assert (len(optim_globals._global_optimizer_pre_hooks), len(optim_globals._global_optimizer_post_hooks)) == before


# ---- 09.1 upgrade a version-1 checkpoint --------------------------------------------------

def upgrade_by_rebuilding(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    if local_metadata.get("version", 1) < 2:
        old = {k: state_dict.pop(k) for k in list(state_dict) if k.startswith(prefix + "fc.")}
        for k, v in old.items():
            state_dict[k.replace(prefix + "fc.", prefix + "head.", 1)] = v.reshape(2, 4) if k.endswith("weight") else v
        if prefix + "temperature" not in state_dict:
            state_dict[prefix + "temperature"] = torch.tensor(1.0)


def upgrade_by_key_test(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    # no version check, but it only acts when the old keys are there
    if prefix + "fc.weight" in state_dict:
        state_dict[prefix + "head.weight"] = state_dict.pop(prefix + "fc.weight")[..., 0]
        state_dict[prefix + "head.bias"] = state_dict.pop(prefix + "fc.bias")
        state_dict[prefix + "temperature"] = torch.ones(())


def upgrade_ignoring_prefix(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    if "fc.weight" in state_dict:
        state_dict["head.weight"] = state_dict.pop("fc.weight").squeeze(-1)
        state_dict["head.bias"] = state_dict.pop("fc.bias")
        state_dict["temperature"] = torch.ones(())


def upgrade_without_squeeze(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    if local_metadata.get("version", 1) < 2:
        state_dict[prefix + "head.weight"] = state_dict.pop(prefix + "fc.weight")
        state_dict[prefix + "head.bias"] = state_dict.pop(prefix + "fc.bias")
        state_dict[prefix + "temperature"] = torch.ones(())


def upgrade_forgets_temperature(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                error_msgs):
    if local_metadata.get("version", 1) < 2:
        state_dict[prefix + "head.weight"] = state_dict.pop(prefix + "fc.weight").squeeze(-1)
        state_dict[prefix + "head.bias"] = state_dict.pop(prefix + "fc.bias")


def upgrade_always_resets_temperature(module, state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs):
    if prefix + "fc.weight" in state_dict:
        state_dict[prefix + "head.weight"] = state_dict.pop(prefix + "fc.weight").squeeze(-1)
        state_dict[prefix + "head.bias"] = state_dict.pop(prefix + "fc.bias")
    state_dict[prefix + "temperature"] = torch.ones(())  # also overwrites a version-2 temperature


def upgrade_swapping_weight_dims(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                 error_msgs):
    if local_metadata.get("version", 1) < 2:
        w = state_dict.pop(prefix + "fc.weight").squeeze(-1)
        state_dict[prefix + "head.weight"] = w.flip(0)  # right shape, wrong values
        state_dict[prefix + "head.bias"] = state_dict.pop(prefix + "fc.bias")
        state_dict[prefix + "temperature"] = torch.ones(())


def upgrade_that_raises(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    state_dict[prefix + "head.weight"] = state_dict.pop(prefix + "fc.weight").squeeze(-1)  # KeyError on version 2


def upgrade_without_version_check(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                  error_msgs):
    state_dict[prefix + "head.weight"] = state_dict.pop(prefix + "fc.weight").squeeze(-1)  # KeyError on version 2
    state_dict[prefix + "head.bias"] = state_dict.pop(prefix + "fc.bias")
    state_dict.setdefault(prefix + "temperature", torch.ones(()))


def upgrade_squeezing_in_place(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                               error_msgs):
    if local_metadata.get("version", 1) < 2:
        state_dict[prefix + "head.weight"] = state_dict.pop(prefix + "fc.weight").squeeze_(-1)  # the caller's tensor
        state_dict[prefix + "head.bias"] = state_dict.pop(prefix + "fc.bias")
        state_dict.setdefault(prefix + "temperature", torch.ones(()))


def upgrade_with_temperature_two(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                 error_msgs):
    if local_metadata.get("version", 1) < 2:
        state_dict[prefix + "head.weight"] = state_dict.pop(prefix + "fc.weight").squeeze(-1)
        state_dict[prefix + "head.bias"] = state_dict.pop(prefix + "fc.bias")
        state_dict[prefix + "temperature"] = torch.full((), 2.0)


def upgrade_only_renaming_later(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                error_msgs):
    if local_metadata.get("version", 1) < 2:  # changes state_dict, but not in a way that loads
        state_dict[prefix + "temperature"] = torch.ones(())
        state_dict["unrelated"] = torch.zeros(())
        del state_dict["unrelated"]


def upgrade_into_a_copy(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    if local_metadata.get("version", 1) >= 2:
        return None
    upgraded = dict(state_dict)  # the copy is upgraded; the dict load_state_dict reads is not
    upgraded[prefix + "head.weight"] = upgraded.pop(prefix + "fc.weight").squeeze(-1)
    upgraded[prefix + "head.bias"] = upgraded.pop(prefix + "fc.bias")
    upgraded[prefix + "temperature"] = torch.tensor(1.0)
    return upgraded


@pytest.mark.parametrize("answer", [run_solution("09.1")["upgrade"], upgrade_by_rebuilding, upgrade_by_key_test])
def test_09_1_accepts_right_answers(answer):
    assert verdict("09.1", answer) == "correct"


@pytest.mark.parametrize("answer, reason", [
    (upgrade_ignoring_prefix, "load-failed"), (upgrade_without_squeeze, "load-failed"),
    (upgrade_forgets_temperature, "load-failed"), (upgrade_always_resets_temperature, "version-2-changed"),
    (upgrade_swapping_weight_dims, "predictions-differ"), (upgrade_that_raises, "load-failed"), ("upgrade", "not-a-function"),
    (upgrade_without_version_check, "hook-raised"), (upgrade_squeezing_in_place, "checkpoint-changed"),
    (upgrade_with_temperature_two, "temperature"), (upgrade_only_renaming_later, "load-failed"),
    (upgrade_into_a_copy, "returned-new-dict"),
])
def test_09_1_rejects_wrong_answers(answer, reason):
    assert judged("09.1", answer) == ("wrong", reason)


def test_09_1_a_hook_that_changes_nothing_is_wrong_once_written():
    def upgrade(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        print(prefix)
    assert judged("09.1", upgrade) == ("wrong", "state-dict-unchanged")


def test_09_1_explains_prefix_and_version():
    assert "prefix" in hooklab.course.exercises.verdict("09.1", upgrade_ignoring_prefix)[2]
    assert "version" in hooklab.course.exercises.verdict("09.1", upgrade_always_resets_temperature)[2]


def test_09_1_blank_start_is_not_solved():
    def upgrade(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        pass
    assert verdict("09.1", upgrade) == "not solved"
    assert verdict("09.1", None) == "not solved"


# ---- 09.2 skip a step with non-finite gradients ------------------------------------------

def skip_with_any_nonfinite_check(optimizer):
    def hook(opt, args, kwargs):
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if any(not bool(torch.isfinite(g).all()) for g in grads):
            for g in opt.param_groups:
                for p in g["params"]:
                    p.grad = None
        return None
    return optimizer.register_step_pre_hook(hook)


def skip_by_zeroing(optimizer):
    def hook(opt, args, kwargs):
        if any(not torch.isfinite(p.grad).all() for g in opt.param_groups for p in g["params"] if p.grad is not None):
            for g in opt.param_groups:
                for p in g["params"]:
                    if p.grad is not None:
                        p.grad.zero_()
    return optimizer.register_step_pre_hook(hook)


def skip_by_returning_false(optimizer):
    def hook(opt, args, kwargs):
        if any(not torch.isfinite(p.grad).all() for g in opt.param_groups for p in g["params"] if p.grad is not None):
            return False
    return optimizer.register_step_pre_hook(hook)


def skip_by_raising(optimizer):
    def hook(opt, args, kwargs):
        if any(not torch.isfinite(p.grad).all() for g in opt.param_groups for p in g["params"] if p.grad is not None):
            raise FloatingPointError("bad step")
    return optimizer.register_step_pre_hook(hook)


def skip_checks_only_nan(optimizer):
    def hook(opt, args, kwargs):
        if any(torch.isnan(p.grad).any() for g in opt.param_groups for p in g["params"] if p.grad is not None):
            for g in opt.param_groups:
                for p in g["params"]:
                    p.grad = None
    return optimizer.register_step_pre_hook(hook)


def skip_drops_only_bad_tensor(optimizer):
    def hook(opt, args, kwargs):
        for g in opt.param_groups:
            for p in g["params"]:
                if p.grad is not None and not torch.isfinite(p.grad).all():
                    p.grad = None  # the other parameters still step
    return optimizer.register_step_pre_hook(hook)


def skip_always(optimizer):
    def hook(opt, args, kwargs):
        for g in opt.param_groups:
            for p in g["params"]:
                p.grad = None
    return optimizer.register_step_pre_hook(hook)


def skip_returning_the_hook(optimizer):
    def hook(opt, args, kwargs):
        if any(not torch.isfinite(p.grad).all() for g in opt.param_groups for p in g["params"] if p.grad is not None):
            for g in opt.param_groups:
                for p in g["params"]:
                    p.grad = None
    optimizer.register_step_pre_hook(hook)
    return hook


def skip_with_global_hook(optimizer):
    def hook(opt, args, kwargs):
        if any(not torch.isfinite(p.grad).all() for g in opt.param_groups for p in g["params"] if p.grad is not None):
            for g in opt.param_groups:
                for p in g["params"]:
                    p.grad = None
    return optim_globals.register_optimizer_step_pre_hook(hook)


@pytest.mark.parametrize("answer", [run_solution("09.2")["skip_nonfinite"], skip_with_any_nonfinite_check])
def test_09_2_accepts_right_answers(answer):
    assert verdict("09.2", answer) == "correct"


def skip_and_reset_state(optimizer):
    def hook(opt, args, kwargs):
        if any(not torch.isfinite(p.grad).all() for g in opt.param_groups for p in g["params"] if p.grad is not None):
            for g in opt.param_groups:
                for p in g["params"]:
                    p.grad = None
            opt.state.clear()  # "a bad batch should leave no trace in the momentum": the state is lost instead
    return optimizer.register_step_pre_hook(hook)


def skip_and_clip(optimizer):
    def hook(opt, args, kwargs):
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if not all(torch.isfinite(p.grad).all() for p in params):
            for p in params:
                p.grad = None
        else:
            torch.nn.utils.clip_grad_norm_(params, 0.1)  # also changes every finite step
    return optimizer.register_step_pre_hook(hook)


def skip_registered_twice(optimizer):
    hook = run_solution("09.2")["skip_nonfinite"]
    hook(optimizer)  # a second hook whose handle is lost
    return hook(optimizer)


def skip_after_the_step(optimizer):
    def hook(opt, args, kwargs):  # a post-hook: the update has already happened
        if any(not bool(torch.isfinite(p.grad).all()) for g in opt.param_groups for p in g["params"]
               if p.grad is not None):
            opt.zero_grad(set_to_none=True)
    return optimizer.register_step_post_hook(hook)


def skip_forgets_the_return(optimizer):
    run_solution("09.2")["skip_nonfinite"](optimizer)


@pytest.mark.parametrize("answer, reason", [
    (skip_by_zeroing, "zeroed-not-skipped"), (skip_by_returning_false, "pre-hook-returned-value"),
    (skip_by_raising, "step-raised"), (skip_checks_only_nan, "nonfinite-reached-params"),
    (skip_drops_only_bad_tensor, "only-bad-dropped"), (skip_always, "skipped-finite-step"),
    (skip_returning_the_hook, "not-a-handle"), (skip_with_global_hook, "global-hook"),
    ("skip_nonfinite", "not-a-function"), (skip_and_reset_state, "state-changed"),
    (skip_and_clip, "finite-step-differs"), (skip_registered_twice, "hook-left-after-remove"),
    (skip_forgets_the_return, "returned-none"), (skip_after_the_step, "post-hook-not-pre-hook"),
])
def test_09_2_rejects_wrong_answers(answer, reason):
    assert judged("09.2", answer) == ("wrong", reason)


@pytest.mark.parametrize("answer, expected", [
    (skip_by_zeroing, "Zeroing is not skipping"),
    (skip_by_returning_false, "returned something other than None or (args, kwargs)"),
    (skip_by_raising, "your hook made `step()` raise FloatingPointError: bad step; raising stops the training loop"),
    (skip_checks_only_nan, "`isnan` alone misses an inf"),
    (skip_drops_only_bad_tensor, "Drop **every** gradient, not only the bad one"),
    (skip_always, "your hook skipped a step whose gradients were all finite"),
    (skip_returning_the_hook, "return the handle `register_step_pre_hook` gives you, not a function"),
    (skip_with_global_hook, "you registered a global optimizer hook"),
])
def test_09_2_names_what_is_wrong_with_each_answer(answer, expected):
    """Each typical wrong answer gets the message about ITS mistake (not a generic or another answer's one)."""
    status, zh, en, _ = hooklab.course.exercises.verdict("09.2", answer, strict=True)
    assert status == "wrong"
    assert expected in en, en
    assert zh and zh != en
    others = {"Zeroing is not skipping", "Drop **every** gradient", "`isnan` alone misses", "skipped a step whose"}
    assert not [o for o in others if o in en and o not in expected], en


def test_09_2_blank_start_is_not_solved():
    def skip_nonfinite(optimizer):
        pass
    assert verdict("09.2", skip_nonfinite) == "not solved"
    assert verdict("09.2", None) == "not solved"
