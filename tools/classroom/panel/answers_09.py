"""Honest answers to notebook 09's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import torch

from tools.classroom.panel import answer

# --- 09.1: a load-state-dict pre-hook that upgrades a version-1 checkpoint ------------------------------------------


@answer("09.1", right=True)
def upgrade_renaming_in_a_loop(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                               error_msgs):
    if local_metadata.get("version", 1) >= 2:
        return  # already the new format
    for name in ("weight", "bias"):
        old_key, new_key = f"{prefix}fc.{name}", f"{prefix}head.{name}"
        if old_key in state_dict:
            value = state_dict.pop(old_key)
            state_dict[new_key] = value.squeeze(-1) if name == "weight" else value
    state_dict.setdefault(f"{prefix}temperature", torch.ones(()))


@answer("09.1", right=True)
def upgrade_with_explicit_keys(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                               error_msgs):
    version = local_metadata.get("version", 1)
    if version != 1:
        return
    weight_key = prefix + "fc.weight"
    if weight_key in state_dict:
        weight = state_dict.pop(weight_key)                  # (out, in, 1) of the old Conv1d
        state_dict[prefix + "head.weight"] = weight.reshape(weight.shape[0], weight.shape[1])
    bias_key = prefix + "fc.bias"
    if bias_key in state_dict:
        state_dict[prefix + "head.bias"] = state_dict.pop(bias_key)
    if prefix + "temperature" not in state_dict:
        state_dict[prefix + "temperature"] = torch.tensor(1.0)


@answer("09.1", mistake="wrong-target", says="builds the keys without `prefix` ('fc.weight', 'head.weight', "
        "'temperature'), so a NewNet nested in another module is not upgraded")
def upgrade_without_prefix(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                           error_msgs):
    if local_metadata.get("version", 1) >= 2:
        return
    if "fc.weight" in state_dict:
        state_dict["head.weight"] = state_dict.pop("fc.weight").squeeze(-1)
    if "fc.bias" in state_dict:
        state_dict["head.bias"] = state_dict.pop("fc.bias")
    state_dict.setdefault("temperature", torch.ones(()))


@answer("09.1", mistake="shape-or-dtype", says="renames fc.weight to head.weight but keeps its (2, 4, 1) Conv1d shape, "
        "so loading fails with a size mismatch")
def upgrade_without_squeeze(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                            error_msgs):
    if local_metadata.get("version", 1) >= 2:
        return
    for name in ("weight", "bias"):
        if f"{prefix}fc.{name}" in state_dict:
            state_dict[f"{prefix}head.{name}"] = state_dict.pop(f"{prefix}fc.{name}")
    state_dict.setdefault(f"{prefix}temperature", torch.ones(()))


@answer("09.1", mistake="logic", says="renames and reshapes the classifier but does not add the missing temperature, "
        "so the strict load reports it as a missing key")
def upgrade_forgetting_temperature(module, state_dict, prefix, local_metadata, strict, missing_keys,
                                   unexpected_keys, error_msgs):
    if local_metadata.get("version", 1) >= 2:
        return
    for name in ("weight", "bias"):
        old_key = f"{prefix}fc.{name}"
        if old_key in state_dict:
            value = state_dict.pop(old_key)
            state_dict[f"{prefix}head.{name}"] = value.squeeze(-1) if name == "weight" else value


@answer("09.1", mistake="shape-or-dtype", says="fills temperature with the Python float 1.0 instead of a tensor, so "
        "load_state_dict refuses the entry")
def upgrade_with_a_float_temperature(module, state_dict, prefix, local_metadata, strict, missing_keys,
                                           unexpected_keys, error_msgs):
    if local_metadata.get("version", 1) >= 2:
        return
    for name in ("weight", "bias"):
        old_key = f"{prefix}fc.{name}"
        if old_key in state_dict:
            value = state_dict.pop(old_key)
            state_dict[f"{prefix}head.{name}"] = value.squeeze(-1) if name == "weight" else value
    state_dict.setdefault(f"{prefix}temperature", 1.0)


@answer("09.1", mistake="logic", says="copies the old entries to the new names without removing fc.weight and "
        "fc.bias, so the strict load reports them as unexpected keys")
def upgrade_copying_instead_of_moving(module, state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs):
    if local_metadata.get("version", 1) >= 2:
        return
    if f"{prefix}fc.weight" in state_dict:
        state_dict[f"{prefix}head.weight"] = state_dict[f"{prefix}fc.weight"].squeeze(-1)
        state_dict[f"{prefix}head.bias"] = state_dict[f"{prefix}fc.bias"]
    state_dict.setdefault(f"{prefix}temperature", torch.ones(()))


@answer("09.1", mistake="logic", says="has no version check and always writes temperature = 1, so loading a "
        "version-2 checkpoint overwrites its saved temperature")
def upgrade_without_a_version_check(module, state_dict, prefix, local_metadata, strict, missing_keys,
                                    unexpected_keys, error_msgs):
    for name in ("weight", "bias"):
        old_key = f"{prefix}fc.{name}"
        if old_key in state_dict:
            value = state_dict.pop(old_key)
            state_dict[f"{prefix}head.{name}"] = value.squeeze(-1) if name == "weight" else value
    state_dict[f"{prefix}temperature"] = torch.ones(())


@answer("09.1", mistake="other", says="builds a new, renamed dict and returns it, but a module's load pre-hook must "
        "edit state_dict in place: its return value is ignored and nothing is renamed")
def upgrade_returning_a_new_dict(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                 error_msgs):
    if local_metadata.get("version", 1) >= 2:
        return None
    upgraded = {}
    for key, value in state_dict.items():
        if key == f"{prefix}fc.weight":
            upgraded[f"{prefix}head.weight"] = value.squeeze(-1)
        elif key == f"{prefix}fc.bias":
            upgraded[f"{prefix}head.bias"] = value
        else:
            upgraded[key] = value
    upgraded.setdefault(f"{prefix}temperature", torch.ones(()))
    return upgraded


# --- 09.2: skip an optimizer step on non-finite gradients ----------------------------------------------------------


@answer("09.2", right=True)
def skip_nonfinite_by_dropping_grads(optimizer):
    def params_with_grad(opt):
        return [p for group in opt.param_groups for p in group["params"] if p.grad is not None]

    def pre_hook(opt, args, kwargs):
        params = params_with_grad(opt)
        if not all(torch.isfinite(p.grad).all() for p in params):
            for p in params:
                p.grad = None  # built-in optimizers skip a parameter without a gradient

    return optimizer.register_step_pre_hook(pre_hook)


@answer("09.2", right=True)
def skip_nonfinite_with_a_callable_class(optimizer):
    class SkipNonFinite:
        def __call__(self, opt, args, kwargs):
            grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
            if grads and not torch.stack([g.isfinite().all() for g in grads]).all():
                opt.zero_grad(set_to_none=True)
            return None

    return optimizer.register_step_pre_hook(SkipNonFinite())


@answer("09.2", mistake="logic", says="zeroes the gradients instead of dropping them, so the step still runs: "
        "momentum and weight decay move the parameters and Adam's step count goes up")
def skip_nonfinite_by_zeroing(optimizer):
    def pre_hook(opt, args, kwargs):
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if not all(torch.isfinite(p.grad).all() for p in params):
            for p in params:
                p.grad.zero_()

    return optimizer.register_step_pre_hook(pre_hook)


@answer("09.2", mistake="returns-input", says="returns False from the pre-hook to skip the step, but a step pre-hook "
        "may only return None or (args, kwargs), so step() raises a RuntimeError")
def skip_nonfinite_by_returning_false(optimizer):
    def pre_hook(opt, args, kwargs):
        for g in opt.param_groups:
            for p in g["params"]:
                if p.grad is not None and not torch.isfinite(p.grad).all():
                    return False
        return None

    return optimizer.register_step_pre_hook(pre_hook)


@answer("09.2", mistake="logic", says="drops only the gradients that hold a NaN or an inf, so every other parameter "
        "is still updated in the bad step")
def skip_nonfinite_only_for_bad_parameters(optimizer):
    def pre_hook(opt, args, kwargs):
        for g in opt.param_groups:
            for p in g["params"]:
                if p.grad is not None and not torch.isfinite(p.grad).all():
                    p.grad = None

    return optimizer.register_step_pre_hook(pre_hook)


@answer("09.2", mistake="logic", says="tests with torch.isnan only, so a gradient holding an inf passes as finite "
        "and the step runs")
def skip_nonfinite_checking_nan_only(optimizer):
    def pre_hook(opt, args, kwargs):
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if any(torch.isnan(p.grad).any() for p in params):
            for p in params:
                p.grad = None

    return optimizer.register_step_pre_hook(pre_hook)


@answer("09.2", mistake="no-return", says="registers the pre-hook but does not return the handle of the registration")
def skip_nonfinite_without_returning_the_handle(optimizer):
    def pre_hook(opt, args, kwargs):
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if not all(torch.isfinite(p.grad).all() for p in params):
            for p in params:
                p.grad = None

    optimizer.register_step_pre_hook(pre_hook)


@answer("09.2", mistake="late-registration", says="registers a step post-hook, which runs after the update has "
        "already changed the parameters and the optimizer state")
def skip_nonfinite_with_a_post_hook(optimizer):
    def post_hook(opt, args, kwargs):
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if not all(torch.isfinite(p.grad).all() for p in params):
            for p in params:
                p.grad = None

    return optimizer.register_step_post_hook(post_hook)


@answer("09.2", mistake="other", says="raises an exception from the pre-hook to skip the step, so the parameters stay "
        "but step() fails and stops the training loop")
def skip_nonfinite_by_raising(optimizer):
    def pre_hook(opt, args, kwargs):
        for g in opt.param_groups:
            for p in g["params"]:
                if p.grad is not None and not torch.isfinite(p.grad).all():
                    raise FloatingPointError("non-finite gradient: step skipped")

    return optimizer.register_step_pre_hook(pre_hook)
