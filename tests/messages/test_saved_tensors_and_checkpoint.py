"""Trigger tests: the messages of saved-tensor hooks and of activation checkpointing (which is built from them)."""
from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn
from torch.autograd import graph
from torch.utils import checkpoint as cp

from message_triggers import trigger, triggers_of


def _leaf() -> torch.Tensor:
    return torch.ones(2, requires_grad=True)


# --- saved-tensor hooks -------------------------------------------------------------------------------------

@trigger("allow-mutation-on-saved-tensors-contexts-cannot-be-neste-03bc66")
def nested_allow_mutation_on_saved_tensors():
    with graph.allow_mutation_on_saved_tensors(), graph.allow_mutation_on_saved_tensors():
        pass


@trigger("trying-to-backward-outside-of-the-allow-mutation-on-c34b1d")
def backward_after_leaving_allow_mutation_on_saved_tensors():
    with graph.allow_mutation_on_saved_tensors():
        y = (_leaf() * 1).sin()
    y.sum().backward()


@trigger("output-of-saved-tensor-unpack-hook-expected-to-be-730ad9")
def unpack_hook_returns_no_tensor():
    with graph.saved_tensors_hooks(lambda x: x, lambda packed: 1):
        y = _leaf().sin()
    y.sum().backward()


@trigger("calling-register-hooks-on-a-saved-tensor-whose-hooks-9c9389")
def saved_tensor_hooks_registered_twice():
    y = _leaf().sin()  # kept alive: a SavedTensor does not keep its Node (a dangling one crashes the process)
    saved = y.grad_fn._raw_saved_self
    saved.register_hooks(lambda x: x, lambda x: x)
    saved.register_hooks(lambda x: x, lambda x: x)


@trigger("calling-register-hooks-on-a-saved-tensor-after-it-eb6631")
def saved_tensor_hooks_registered_after_backward():
    y = _leaf().sin()
    saved = y.grad_fn._raw_saved_self
    y.sum().backward()
    saved.register_hooks(lambda x: x, lambda x: x)


@trigger("calling-register-hooks-on-a-saved-tensor-with-value-6fb7ca")
def saved_tensor_hooks_on_a_saved_none():
    y = torch.nn.functional.batch_norm(torch.ones(2, 3, requires_grad=True), None, None, training=True)
    y.grad_fn._raw_saved_running_mean.register_hooks(lambda x: x, lambda x: x)  # no running stats: None saved


# --- activation checkpointing -------------------------------------------------------------------------------

def _block() -> nn.Module:
    return nn.Linear(2, 2)


@trigger("torch-utils-checkpoint-the-use-reentrant-parameter-shoul-5f5e72")
def checkpoint_without_use_reentrant():
    cp.checkpoint(_block(), _leaf())


@trigger("torch-utils-checkpoint-checkpoint-sequential-the-use-ree-e7f97a")
def checkpoint_sequential_without_use_reentrant():
    cp.checkpoint_sequential(nn.Sequential(_block(), _block()), 2, _leaf())


@trigger("passing-context-fn-debug-or-respect-saved-tensors-hooks-a0aeef")
def reentrant_checkpoint_with_debug():
    cp.checkpoint(_block(), _leaf(), use_reentrant=True, debug=True)


@trigger("debug-true-is-incompatible-with-non-default-context-fn-69dc33")
def checkpoint_with_debug_and_a_context_fn():
    cp.checkpoint(_block(), _leaf(), use_reentrant=False, debug=True,
                  context_fn=lambda: (contextlib.nullcontext(), contextlib.nullcontext()))


@trigger("determinism-check-should-be-one-of-but-got-7e77cf")
def checkpoint_with_an_unknown_determinism_check():
    cp.checkpoint(_block(), _leaf(), use_reentrant=False, determinism_check="strict")


@trigger("only-tuple-of-tensors-is-supported-got-unsupported-input-c1fe8b")
def detach_variable_of_a_tensor():
    cp.detach_variable(torch.ones(2))


@trigger("graphexecgroup-contexts-cannot-be-nested-already-inside-aa8801")
def nested_graph_exec_groups():
    with cp.GraphExecGroup(), cp.GraphExecGroup():
        pass


@trigger("none-of-output-has-requires-grad-true-this-checkpoint-6226b0")
def reentrant_checkpoint_of_a_detached_output():
    out = cp.checkpoint(lambda x: x.detach() * 2, _leaf(), use_reentrant=True)
    torch.autograd.backward(out, torch.ones(2))


@trigger("when-use-reentrant-true-torch-utils-checkpoint-is-incomp-3a2602")
def reentrant_checkpoint_under_autograd_grad():
    x = _leaf()
    out = cp.checkpoint(lambda t: t.sin(), x, use_reentrant=True)
    torch.autograd.grad(out.sum(), x)


class _Swallow:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True  # suppresses the exception of the forward


def _raises(x):
    raise ValueError("forward failed")


@trigger("torch-utils-checkpoint-the-forward-context-provided-by-c-3764f1")
def checkpoint_context_that_swallows_the_forward_error():
    cp.checkpoint(_raises, _leaf(), use_reentrant=False, context_fn=lambda: (_Swallow(), contextlib.nullcontext()))


def _changes_on_recomputation(first, again):
    calls = {"n": 0}

    def fn(x):
        calls["n"] += 1
        return first(x) if calls["n"] == 1 else again(x)
    return fn


@trigger("torch-utils-checkpoint-trying-to-save-more-tensors-durin-80cfd1")
def recomputation_saves_more_without_early_stop():
    fn = _changes_on_recomputation(lambda x: x.sin(), lambda x: x.sin().cos().sin())
    with cp.set_checkpoint_early_stop(False):
        cp.checkpoint(fn, _leaf(), use_reentrant=False).sum().backward()


@trigger("an-error-happened-while-unpacking-tensors-dumping-logs-o-2780f8", head=True)  # it prints stack traces
def checkpoint_with_debug_whose_recomputation_differs():
    fn = _changes_on_recomputation(lambda x: x.sin().cos(), lambda x: x.sin())
    cp.checkpoint(fn, _leaf(), use_reentrant=False, debug=True).sum().backward()


class _SavesTwiceReads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors  # noqa: B018 (the first read)
        ctx.saved_tensors  # noqa: B018 (the second read fails)
        return grad * 2


@trigger("torch-utils-checkpoint-unpack-is-being-triggered-for-a-9618bf")
def saved_tensors_read_twice_in_a_checkpointed_function():
    cp.checkpoint(_SavesTwiceReads.apply, _leaf() * 1, use_reentrant=False).sum().backward()


# --- selective activation checkpointing (SAC) ---------------------------------------------------------------

def _save_sin():
    def policy(ctx, op, *args, **kwargs):
        return cp.CheckpointPolicy.MUST_SAVE if op is torch.ops.aten.sin.default else \
            cp.CheckpointPolicy.PREFER_RECOMPUTE
    return functools.partial(cp.create_selective_checkpoint_contexts, policy)


@trigger("expected-op-in-op-list-to-be-an-opoverload-1851b0")
def sac_op_list_with_a_python_function():
    cp.create_selective_checkpoint_contexts([torch.sin])


@trigger("policy-fn-or-list-must-be-either-a-function-94390d")
def sac_policy_of_the_wrong_type():
    cp.create_selective_checkpoint_contexts(3)


@trigger("encountered-during-backward-but-not-found-in-storage-thi-37ee0f")
def sac_recomputation_runs_another_op():
    fn = _changes_on_recomputation(lambda x: x.sin().exp(), lambda x: x.cos().exp())
    cp.checkpoint(fn, _leaf(), use_reentrant=False, context_fn=_save_sin()).sum().backward()


@trigger("invocation-index-encountered-during-backward-but-not-fou-f8fbdc")
def sac_recomputation_runs_an_op_once_more():
    fn = _changes_on_recomputation(lambda x: x.sin().exp(), lambda x: x.sin().sin().exp())
    with cp.set_checkpoint_early_stop(False):
        cp.checkpoint(fn, _leaf(), use_reentrant=False, context_fn=_save_sin()).sum().backward()


@trigger("trying-to-backward-an-extra-time-you-are-only-871484")
def sac_region_backward_twice():
    out = cp.checkpoint(lambda x: x.sin().exp(), _leaf(), use_reentrant=False, context_fn=_save_sin())
    out.sum().backward(retain_graph=True)
    out.sum().backward()


@trigger("tensor-cached-during-selective-activation-checkpoint-has-6d84b9")
def sac_saved_output_changed_in_place():
    box = {}

    def fn(x):
        box["y"] = x.sin()
        return box["y"].exp()
    out = cp.checkpoint(fn, _leaf(), use_reentrant=False, context_fn=_save_sin())
    with torch.no_grad():
        box["y"].mul_(2)
    out.sum().backward()


@trigger("a-saved-tensors-hooks-context-e-g-save-on-6244ad")
def sac_inside_save_on_cpu():
    with graph.save_on_cpu():
        cp.checkpoint(lambda x: x.sin().exp(), _leaf(), use_reentrant=False, context_fn=_save_sin())


# --- the distributed wrappers of checkpointing --------------------------------------------------------------

@trigger("use-reentrant-true-is-not-supported-in-composable-checkp-fbf234")
def composable_checkpoint_with_use_reentrant():
    from torch.distributed._composable import checkpoint
    checkpoint(_block(), use_reentrant=True)


@trigger("subclasses-should-implement-forward-8aac07")
def activation_wrapper_subclass_without_forward():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import ActivationWrapper

    class Wrapper(ActivationWrapper):
        def forward(self, *args, **kwargs):
            return super().forward(*args, **kwargs)
    Wrapper(_block())(torch.ones(2))


@trigger("expected-to-be-callable-or-be-a-pre-defined-6635d0")
def apply_activation_checkpointing_with_a_bad_policy():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
    apply_activation_checkpointing(nn.Sequential(_block()), auto_wrap_policy=3)


# --- the compiler's activation-memory budget (torch.autograd.graph) ----------------------------------------

@trigger("torch-autograd-graph-region-activation-memory-budget-can-84d3db")
def activation_memory_budget_in_eager_mode():
    with graph.region_activation_memory_budget(0.5):
        pass


@trigger("torch-autograd-graph-region-activation-memory-budget-exp-414fe1")
def activation_memory_budget_not_a_float():
    graph.region_activation_memory_budget("half")


@trigger("torch-autograd-graph-region-activation-memory-budget-mus-63d47a")
def activation_memory_budget_above_one():
    graph.region_activation_memory_budget(2.0)


# --- saved tensors: messages that do not say "hook" ---------------------------------------------------------

@trigger("trying-to-use-a-saved-tensor-that-has-been-039c08")
def saved_input_detached_in_place_before_backward():
    w = torch.ones(3, requires_grad=True)
    a = w * 2
    b = a.sin()  # saves a
    a.detach_()
    b.sum().backward()


@trigger("trying-to-create-a-savedtensor-object-from-python-is-cf93b6")
def saved_tensor_object_made_from_python():
    torch._C._autograd.SavedTensor()


class _ReadsSavedTensorsTwice(torch.autograd.Function):
    clear_saved_tensors_on_access = True

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors  # noqa: B018 (the first read frees them)
        (x,) = ctx.saved_tensors
        return grad * 2


@trigger("saved-tensors-can-only-be-accessed-once-when-clear-a836b8")
def saved_tensors_read_twice_with_clear_on_access():
    _ReadsSavedTensorsTwice.apply(torch.ones(2, requires_grad=True)).sum().backward()


class _ReadsSavedVariables(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_variables
        return grad * 2


@trigger("saved-variables-is-deprecated-use-saved-tensors-2f2153")
def saved_variables_read_in_backward():
    _ReadsSavedVariables.apply(torch.ones(2, requires_grad=True)).sum().backward()


test_trigger = triggers_of(__name__)
