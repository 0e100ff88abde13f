"""Honest answers to notebook 17's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

from tools.classroom.panel import answer

# ---------------------------------------------------------------- 17.1: the silent cells


@answer("17.1", right=True)
def silent_cells_with_a_comprehension(cells):
    return sorted(key for key, cell in cells.items()
                  if cell["status"] == "observed" and cell["calls"] == 0 and not cell["error"])


@answer("17.1", right=True)
def silent_cells_with_a_loop(cells):
    silent = []
    for key, cell in cells.items():
        if cell.get("status") != "observed":
            continue  # n/a cells carry no calls at all
        if cell.get("calls", 0) == 0 and cell.get("error") in (None, ""):
            silent.append(key)
    silent.sort()
    return silent


@answer("17.1", mistake="logic",
        says="does not check that the cell was observed: it reads calls and error with .get defaults, so the n/a "
             "cells, which have neither, count as silent")
def silent_cells_without_the_status(cells):
    return sorted(key for key, cell in cells.items() if cell.get("calls", 0) == 0 and not cell.get("error"))


@answer("17.1", mistake="logic",
        says="forgets the error condition, so the cells whose run raised before the hook was called count as silent")
def silent_cells_including_the_ones_that_raised(cells):
    return sorted(key for key, cell in cells.items() if cell["status"] == "observed" and cell["calls"] == 0)


@answer("17.1", mistake="other",
        says="returns the keys in the order of the dict instead of sorted")
def silent_cells_unsorted(cells):
    return [key for key, cell in cells.items()
            if cell["status"] == "observed" and cell["calls"] == 0 and not cell["error"]]


@answer("17.1", mistake="shape-or-dtype",
        says="returns a set of keys instead of a sorted list")
def silent_cells_as_a_set(cells):
    return {key for key, cell in cells.items()
            if cell["status"] == "observed" and cell["calls"] == 0 and not cell["error"]}


# ---------------------------------------------------------------- 17.2: a new context


@answer("17.2", right=True)
def remove_before_backward_as_in_section_5(h):
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    for handle in rig.handles:
        handle.remove()
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


@answer("17.2", right=True)
def remove_before_backward_popping_the_handles(h):
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    loss_input = rig.net(rig.x)
    while rig.handles:  # every handle the install made, removed after forward and before backward
        rig.handles.pop().remove()
    h.phase("backward")
    loss_input.sum().backward()
    h.fact(loss_input, rig.x.grad, *h.grads(rig))


@answer("17.2", mistake="other",
        says="removes the handles after the backward instead of between the forward and the backward, so the "
             "context is the plain eager run")
def remove_before_backward_removing_after(h):
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    h.phase("backward")
    out.sum().backward()
    for handle in rig.handles:
        handle.remove()
    h.fact(out, rig.x.grad, *h.grads(rig))


@answer("17.2", mistake="handle-left",
        says="removes only the first handle in rig.handles, so a family that registers several hooks keeps the "
             "others through the backward")
def remove_before_backward_first_handle_only(h):
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    rig.handles[0].remove()
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


@answer("17.2", mistake="handle-left",
        says="clears the subject's forward-hook dict instead of removing the handles in rig.handles, so hooks of "
             "other kinds (on parameters, backward hooks) stay registered through the backward")
def remove_before_backward_clearing_the_dict(h):
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    rig.subject._forward_hooks.clear()
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


@answer("17.2", mistake="logic",
        says="records the facts right after removing the handles, before running the backward, so x.grad and the "
             "gradients it keeps are not yet computed")
def remove_before_backward_recording_too_early(h):
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    for handle in rig.handles:
        handle.remove()
    h.fact(out, rig.x.grad, *h.grads(rig))
    h.phase("backward")
    out.sum().backward()


@answer("17.2", mistake="other",
        says="never calls h.install(rig), taking h.rig() to register the hook already, so there is no hook at all "
             "and nothing to remove")
def remove_before_backward_without_installing(h):
    rig = h.rig()
    h.phase("forward")
    out = rig.net(rig.x)
    for handle in rig.handles:
        handle.remove()
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


# ---------------------------------------------------------------- 17.3: predict four cells


@answer("17.3", right=True, built=True)
def my_calls_read_back_and_worked_out():
    return {
        "param-hook@used-twice": 1,          # one AccumulateGrad: both uses' gradients summed first
        "full-backward-hook@used-twice": 2,  # once per call of the module
        "forward-hook@apply": 2,             # apply reaches the shared subject along two paths
        "forward-hook@checkpoint": 2,        # forward, then the recomputation (the subject is not the region's last)
    }


@answer("17.3", mistake="count", built=True,
        says="predicts that the hook on a weight used twice fires once per use, though both uses' gradients are "
             "summed before the weight's one AccumulateGrad Node")
def my_calls_param_hook_per_use():
    return {"param-hook@used-twice": 2, "full-backward-hook@used-twice": 2, "forward-hook@apply": 2,
            "forward-hook@checkpoint": 2}


@answer("17.3", mistake="count", built=True,
        says="predicts that the checkpoint's recomputation does not run module forward hooks again, so one call "
             "under checkpoint")
def my_calls_no_hooks_in_recomputation():
    return {"param-hook@used-twice": 1, "full-backward-hook@used-twice": 2, "forward-hook@apply": 2,
            "forward-hook@checkpoint": 1}


@answer("17.3", mistake="count", built=True,
        says="predicts that model.apply visits the shared module once, as named_modules() does, so one call")
def my_calls_apply_deduplicates():
    return {"param-hook@used-twice": 1, "full-backward-hook@used-twice": 2, "forward-hook@apply": 1,
            "forward-hook@checkpoint": 2}


@answer("17.3", mistake="count", built=True,
        says="predicts one full backward hook call for a module used twice, as for the parameter hook, though a "
             "module's full backward hook runs once per call")
def my_calls_full_backward_hook_once():
    return {"param-hook@used-twice": 1, "full-backward-hook@used-twice": 1, "forward-hook@apply": 2,
            "forward-hook@checkpoint": 2}
