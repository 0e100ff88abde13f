"""Trigger tests: the messages of tensor, Node, node-creation, module, state_dict and optimizer hooks.

Each function makes one message appear on the pinned PyTorch (``message_triggers``: the test checks the exact text).
"""
from __future__ import annotations

import gc
import pickle

import torch
from torch import nn
from torch.autograd import graph

from message_triggers import fix, fixes_of, trigger, triggers_of


def _leaf() -> torch.Tensor:
    return torch.ones(2, requires_grad=True)


# --- tensor and Node hooks ----------------------------------------------------------------------------------

@trigger("cannot-register-a-hook-on-a-tensor-that-doesn-2b88aa")
def tensor_hook_on_a_tensor_without_grad():
    torch.ones(2).register_hook(lambda g: g)


@fix("cannot-register-a-hook-on-a-tensor-that-doesn-2b88aa")
def tensor_hook_on_a_tensor_that_requires_grad():
    x = torch.ones(2, requires_grad=True)  # a hook sees gradients: the tensor must require them
    seen = []
    x.register_hook(lambda g: seen.append(tuple(g.shape)))
    x.sum().backward()
    return seen


@trigger("post-accumulate-grad-hooks-cannot-be-registered-on-non-926399")
def post_accumulate_grad_hook_on_a_non_leaf():
    (_leaf() * 2).register_post_accumulate_grad_hook(lambda p: None)


@trigger("expected-variable-but-hook-returned-c98dcb")
def tensor_hook_returns_a_tuple():
    y = _leaf() * 2
    y.register_hook(lambda g: (g, g))
    y.sum().backward()


@trigger("expected-tuple-but-hook-returned-b40289")
def node_hook_returns_a_tensor():
    y = _leaf() * 2
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: grad_inputs[0])
    y.sum().backward()


@trigger("deletion-of-backwards-hooks-not-allowed-05d045")
def deleting_backward_hooks():
    del _leaf()._backward_hooks


@trigger("deletion-of-post-accumulate-grad-hooks-not-allowed-7da2ac")
def deleting_post_accumulate_grad_hooks():
    del _leaf()._post_accumulate_grad_hooks


@trigger("register-hook-dict-expected-a-variable-95e586")
def node_register_hook_dict_with_no_tensor():
    (_leaf() * 2).grad_fn._register_hook_dict(1)


@trigger("expects-mode-to-be-one-of-but-got-20807a")
def multi_grad_hook_with_an_unknown_mode():
    graph.register_multi_grad_hook((_leaf(), _leaf()), lambda grads: None, mode="some")


@trigger("it-is-not-possible-to-get-the-gradient-edge-d53f26")
def gradient_edge_of_a_tensor_without_grad():
    graph.get_gradient_edge(torch.ones(2))


@trigger("node-creation-hook-must-return-none-got-721e8b")
def node_creation_hook_returns_the_node():
    with graph.node_creation_hook(lambda node: node):
        _leaf() * 2


@trigger("creating-a-new-autograd-node-from-inside-a-node-952cca")
def node_creation_hook_creates_a_node():
    with graph.node_creation_hook(lambda node: torch.ones(1, requires_grad=True) * 2):
        _leaf() * 2


# --- module forward hooks -----------------------------------------------------------------------------------

@trigger("forward-pre-hook-must-return-none-or-a-tuple-167fec")
def with_kwargs_pre_hook_returns_args_only():
    m = nn.Linear(2, 2)
    m.register_forward_pre_hook(lambda module, args, kwargs: (args,), with_kwargs=True)
    m(torch.ones(1, 2))


def _failing_forward(x):
    raise KeyError("forward failed")


def _failing_hook(*args):
    raise ValueError("hook failed")


@trigger("module-forward-hook-with-always-call-true-raised-an-5c79d6")
def always_call_hook_raises_after_forward_raised():
    m = nn.Linear(2, 2)
    m.register_forward_hook(_failing_hook, always_call=True)
    m.forward = _failing_forward
    m(torch.ones(2))


@trigger("global-module-forward-hook-with-always-call-true-raised-aae593")
def global_always_call_hook_raises_after_forward_raised():
    m = nn.Linear(2, 2)
    m.forward = _failing_forward
    handle = nn.modules.module.register_module_forward_hook(_failing_hook, always_call=True)
    try:
        m(torch.ones(2))
    finally:
        handle.remove()


@trigger("you-are-trying-to-call-the-hook-of-a-17fd4b")
def wrapped_hook_of_a_deleted_module_called():
    m = nn.Linear(2, 2)
    hook = nn.modules.module._WrappedHook(lambda module: None, m)
    del m
    gc.collect()
    hook()


@trigger("you-are-trying-to-revive-the-hook-of-a-88ebda")
def wrapped_hook_of_a_deleted_module_unpickled():
    m = nn.Linear(2, 2)
    hook = nn.modules.module._WrappedHook(print, m)
    del m
    gc.collect()
    pickle.loads(pickle.dumps(hook))


# --- module backward hooks ----------------------------------------------------------------------------------

@trigger("backward-hook-returned-an-invalid-number-of-grad-input-7524f2")
def full_backward_hook_returns_too_many_gradients():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda module, grad_input, grad_output: (grad_input[0], grad_input[0]))
    m(torch.ones(1, 2, requires_grad=True)).sum().backward()


@trigger("backward-pre-hook-returned-an-invalid-number-of-grad-b9e709")
def full_backward_pre_hook_returns_too_many_gradients():
    m = nn.Linear(2, 2)
    m.register_full_backward_pre_hook(lambda module, grad_output: (grad_output[0], grad_output[0]))
    m(torch.ones(1, 2, requires_grad=True)).sum().backward()


@trigger("backward-hook-for-modules-where-no-input-requires-gradie-6d8fad")
def full_backward_hook_returns_a_gradient_when_no_input_requires_grad():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda module, grad_input, grad_output: (torch.ones(1, 2),))
    m(torch.ones(1, 2)).sum().backward()


@trigger("full-backward-hook-is-firing-when-gradients-are-computed-37661b")
def full_backward_hook_when_no_input_requires_grad():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda module, grad_input, grad_output: None)
    m(torch.ones(1, 2)).sum().backward()


class _KeywordInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x=None):
        return self.lin(x)


@trigger("full-backward-hook-is-firing-when-gradients-are-computed-37661b")
def full_backward_hook_when_the_input_is_passed_by_keyword():
    m = _KeywordInput()  # the input requires grad, but only positional arguments are wrapped: it is not seen
    m.register_full_backward_hook(lambda module, grad_input, grad_output: None)
    m(x=torch.ones(1, 2, requires_grad=True)).sum().backward()


class _DictOutput(nn.Module):
    def forward(self, x):
        return {"y": x * 2}


class _ListInput(nn.Module):
    def forward(self, xs):
        return xs[0] * 2


class _TwoOutputs(nn.Module):
    def forward(self, x):
        return x * 2, x * 3


class _TwoNodes(nn.Module):
    def forward(self, x):
        return (x * 2).exp()


class _NestedOutput(nn.Module):
    def forward(self, x):
        return (x.exp(), [x * 3])


@trigger("for-backward-hooks-to-be-called-module-output-should-7dc9ec")
def full_backward_hook_on_a_module_returning_a_dict():
    m = _DictOutput()
    m.register_full_backward_hook(lambda *args: None)
    m(_leaf())


@trigger("using-non-full-backward-hooks-on-a-module-that-ae4258")
def old_backward_hook_on_a_module_returning_a_dict():
    m = _DictOutput()
    m.register_backward_hook(lambda *args: None)
    m(_leaf())


@trigger("using-non-full-backward-hooks-on-a-module-that-aa606b")
def old_backward_hook_on_a_module_taking_a_list():
    m = _ListInput()
    m.register_backward_hook(lambda *args: None)
    m([_leaf()])


@trigger("using-a-non-full-backward-hook-when-outputs-are-c05164")
def old_backward_hook_on_outputs_from_two_nodes():
    m = _TwoOutputs()
    m.register_backward_hook(lambda *args: None)
    m(_leaf())


@trigger("using-a-non-full-backward-hook-when-the-forward-26d2b3")
def old_backward_hook_on_a_forward_of_two_nodes():
    m = _TwoNodes()
    m.register_backward_hook(lambda *args: None)
    m(_leaf()).sum().backward()


@trigger("cannot-use-both-regular-backward-hooks-and-full-backward-882bba")
def old_and_full_backward_hooks_on_one_module():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda *args: None)
    m.register_backward_hook(lambda *args: None)


@trigger("cannot-use-both-regular-backward-hooks-and-full-backward-622eca")
def old_and_full_global_backward_hooks():
    handle = nn.modules.module.register_module_full_backward_hook(lambda *args: None)
    try:
        nn.modules.module.register_module_backward_hook(lambda *args: None).remove()
    finally:
        handle.remove()


@trigger("backward-hook-on-tensor-will-not-be-serialized-if-fd6c54")
def tensor_with_a_hook_checked_for_serialization():
    x = _leaf()
    x.register_hook(lambda g: g)
    torch.utils.hooks.warn_if_has_hooks(x)


@trigger("trying-to-execute-accumulategrad-node-that-was-poisoned-4ebe31")
def module_converted_between_forward_and_backward_with_swapped_parameters():
    m = nn.Linear(2, 2)
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        loss = m(torch.ones(2)).sum()
        m.double()
        loss.backward()
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)


# --- state_dict and optimizer hooks -------------------------------------------------------------------------

@trigger("state-dict-post-hook-must-return-none-df0a56")
def state_dict_post_hook_returns_a_value():
    m = nn.Linear(2, 2)
    m.register_state_dict_post_hook(lambda module, state_dict, prefix, local_metadata: {})
    m.state_dict()


@trigger("cannot-register-the-same-function-as-the-state-dict-5bf49a")
def one_function_as_public_and_private_state_dict_hook():
    m = nn.Linear(2, 2)

    def hook(*args):
        return None
    m.register_state_dict_post_hook(hook)
    m._register_state_dict_hook(hook)


@trigger("hooks-registered-with-register-load-state-dict-post-hook-3a7297")
def load_state_dict_post_hook_returns_a_value():
    m = nn.Linear(2, 2)
    m.register_load_state_dict_post_hook(lambda module, incompatible_keys: incompatible_keys)
    m.load_state_dict(m.state_dict())


@trigger("must-return-none-or-a-tuple-of-new-args-afff20")
def optimizer_step_pre_hook_returns_a_value():
    opt = torch.optim.SGD([nn.Parameter(torch.ones(2))], lr=0.1)
    opt.register_step_pre_hook(lambda optimizer, args, kwargs: 1)
    opt.step()


# --- DebugMode's dispatch hooks ------------------------------------------------------------------------------

@trigger("hook-must-return-none-or-dict-got-d39de6")
def debug_mode_log_hook_returns_a_string():
    from torch.utils._debug_mode import DebugMode

    def log_norm(func, types, args, kwargs, result):
        return f"norm={result.norm():.3f}"  # a string where a dict is expected
    with DebugMode(), DebugMode.dispatch_hooks(log_hook=log_norm):
        torch.ones(2) + 1


test_trigger = triggers_of(__name__)
test_fix = fixes_of(__name__)
