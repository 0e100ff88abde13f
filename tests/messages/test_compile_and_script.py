"""Trigger tests: the messages of ``torch.compile`` (Dynamo, compiled autograd, AOT compile), CUDA / XPU graphs and
TorchScript about hooks. Compiled with the ``eager`` backend (no code generation), so each costs little after the
first."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from message_triggers import trigger, triggers_of


@pytest.fixture(scope="module", autouse=True)
def fresh_dynamo():
    """Dynamo's caches and counters as this module found them: empty (the tests that count graphs or recompiles
    after it on the same worker start from nothing)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


def _leaf() -> torch.Tensor:
    return torch.ones(2, requires_grad=True)


def _compiled(fn):
    return torch.compile(fn, backend="eager", fullgraph=True)


# --- Dynamo -----------------------------------------------------------------------------------------------

@trigger("register-post-accumulate-grad-hook-on-an-intermediate-te-77f661")
def compiled_post_accumulate_grad_hook_on_an_intermediate():
    def fn(x):
        y = x * 2
        y.register_post_accumulate_grad_hook(lambda p: None)
        return y
    _compiled(fn)(_leaf())


@trigger("register-hook-with-stride-dependent-code-e1fe66")
def compiled_tensor_hook_that_reads_the_gradient_strides():
    def fn(x):
        y = x * 2
        y.register_hook(lambda g: g * 2 if g.stride()[0] == 1 else g)
        return y
    _compiled(fn)(_leaf()).sum().backward()


HANDLE = None


@trigger("storing-tensor-hook-handle-in-globals-b80308")
def compiled_function_stores_a_hook_handle_in_a_global():
    def fn(x):
        global HANDLE
        y = x * 2
        HANDLE = y.register_hook(lambda g: g)
        return y
    _compiled(fn)(_leaf())


# a function whose globals are not the compiled function's (as if it came from another module)
_OTHER_MODULE: dict = {}
exec("def store_handle(y):\n    global HANDLE\n    HANDLE = y.register_hook(lambda g: g)\n", _OTHER_MODULE)
_store_handle = _OTHER_MODULE["store_handle"]


@trigger("storing-tensor-hook-handle-in-globals-inline-call-b00f31")
def compiled_function_calls_one_that_stores_a_hook_handle_in_a_global():
    def fn(x):
        y = x * 2
        _store_handle(y)
        return y
    _compiled(fn)(_leaf())


@trigger("attempted-to-represent-unregistered-removablehandle-602ee2")
def compiled_function_given_a_hook_handle():
    handle = _leaf().register_hook(lambda g: g)
    _compiled(lambda x, h: (x * 2, h))(_leaf(), handle)


@trigger("tensor-post-accumulate-grad-hooks-should-return-none-0a9f53")
def post_accumulate_grad_hook_returns_a_value_under_compiled_autograd():
    from torch._dynamo import compiled_autograd

    w = nn.Parameter(torch.ones(2))
    w.register_post_accumulate_grad_hook(lambda p: 1)
    with compiled_autograd._enable(torch.compile(backend="eager")):
        (w * 2).sum().backward()


def _aot_compile_a_module_with(register):
    from torch._dynamo.aot_compile import ModelInput

    m = nn.Linear(2, 2)
    register(m)
    with torch._dynamo.config.patch(enable_aot_compile=True):
        torch.compile(m, fullgraph=True, backend="eager")._aot_compile([ModelInput((torch.ones(1, 2),), {}, [])])


@trigger("has-registered-the-aot-compiled-forward-calls-forward-di-534229")
def aot_compile_of_a_module_with_a_forward_hook():
    _aot_compile_a_module_with(lambda m: m.register_forward_hook(lambda *args: None))


@trigger("has-registered-the-aot-compiled-forward-calls-forward-di-5ee928")
def aot_compile_of_a_module_with_a_backward_hook():
    _aot_compile_a_module_with(lambda m: m.register_full_backward_hook(lambda *args: None))


# --- CUDA graphs (the check comes before any device is used; torch.xpu's copy has the same words) ----------------------------------------

def _hooked_linear() -> nn.Module:
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda *args: None)
    return m


@trigger("modules-must-not-have-hooks-registered-at-the-time-90b0f9")
def cuda_graphed_callable_with_a_hook():
    torch.cuda.make_graphed_callables(_hooked_linear(), (torch.ones(1, 2),))


# --- TorchScript --------------------------------------------------------------------------------------------

class _Double(nn.Module):
    def forward(self, x):
        return x * 2


def _script_with(register):
    m = _Double()
    register(m)
    torch.jit.script(m)


def _hook_named_h(pre):
    if pre:
        def h(module, inp):
            return None
    else:
        def h(module, inp, out):
            return None
    return h


def _two_hooks_named_h(kind):
    pre = kind == "register_forward_pre_hook"
    return lambda m: (getattr(m, kind)(_hook_named_h(pre)), getattr(m, kind)(_hook_named_h(pre)))


@trigger("hook-on-has-at-least-two-different-python-definitions-669c39")
def scripting_two_forward_hooks_with_one_name():
    _script_with(_two_hooks_named_h("register_forward_hook"))


@trigger("pre-hook-on-has-at-least-two-different-python-c1a6c8")
def scripting_two_forward_pre_hooks_with_one_name():
    _script_with(_two_hooks_named_h("register_forward_pre_hook"))


@trigger("modules-that-have-backward-hooks-assigned-can-t-be-fd2fb1")
def tracing_a_module_with_a_backward_hook():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda *args: None)
    torch.jit.trace(m, torch.ones(1, 2))


def _pre_hook_with_a_wrong_signature(module, inp: int):
    return None


def _hook_with_a_wrong_signature(module, inp: int, out):
    return None


def forward(module, inp, out):  # a hook named like the module's method
    return None


@trigger("this-error-occurred-while-scripting-the-forward-pre-hook-3fb629")
def scripting_a_forward_pre_hook_with_a_wrong_signature():
    _script_with(lambda m: m.register_forward_pre_hook(_pre_hook_with_a_wrong_signature))


@trigger("this-error-occurred-while-scripting-the-forward-hook-on-0eb305")
def scripting_a_forward_hook_with_a_wrong_signature():
    _script_with(lambda m: m.register_forward_hook(_hook_with_a_wrong_signature))


@trigger("can-t-define-hook-on-class-because-a-method-313c51")
def scripting_a_hook_named_forward():
    _script_with(lambda m: m.register_forward_hook(forward))


@trigger("idx-must-not-be-none-for-hook-removal-5e3a6b")
def handle_of_an_intermediate_hook_removed_inside_a_compiled_function():
    def f(x):
        y = (x * 2).sin()
        handle = y.register_hook(lambda g: g)
        handle.remove()
        return y.sum()
    torch._dynamo.reset()
    try:
        torch.compile(f, backend="eager")(torch.ones(3, requires_grad=True))
    finally:
        torch._dynamo.reset()


test_trigger = triggers_of(__name__)
