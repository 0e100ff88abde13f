"""Trigger tests: the messages of ``torch.compile`` (Dynamo, compiled autograd, AOT compile), CUDA / XPU graphs and
TorchScript about hooks. Compiled with the ``eager`` backend (no code generation), so each costs little after the
first."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from message_triggers import fix, fixes_of, trigger, triggers_of


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


@fix("register-post-accumulate-grad-hook-on-an-intermediate-te-77f661",
     en="register the post-accumulate-grad hook on the leaf (a parameter or an input), here outside the region",
     zh="把 post-accumulate-grad 钩子注册在叶子张量（参数或输入）上，这里放在编译区域之外")
def compiled_function_with_a_post_accumulate_grad_hook_on_the_leaf():
    seen = []
    x = _leaf()
    x.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.tolist()))
    _compiled(lambda t: t * 2)(x).sum().backward()
    return seen


@trigger("register-hook-with-stride-dependent-code-e1fe66")
def compiled_tensor_hook_that_reads_the_gradient_strides():
    def fn(x):
        y = x * 2
        y.register_hook(lambda g: g * 2 if g.stride()[0] == 1 else g)
        return y
    _compiled(fn)(_leaf()).sum().backward()


@fix("register-hook-with-stride-dependent-code-e1fe66",
     en="a tensor hook in a compiled region does not branch on the gradient's strides",
     zh="编译区域里的张量钩子不要根据梯度的 stride 分支")
def compiled_tensor_hook_without_stride_checks():
    def fn(x):
        y = x * 2
        y.register_hook(lambda g: g * 2)
        return y
    x = _leaf()
    _compiled(fn)(x).sum().backward()
    return x.grad.tolist()


HANDLE = None


@trigger("storing-tensor-hook-handle-in-globals-b80308")
def compiled_function_stores_a_hook_handle_in_a_global():
    def fn(x):
        global HANDLE
        y = x * 2
        HANDLE = y.register_hook(lambda g: g)
        return y
    _compiled(fn)(_leaf())


@fix("storing-tensor-hook-handle-in-globals-b80308",
     en="register the hook and keep its handle outside the compiled region",
     zh="在编译区域之外注册钩子并保存句柄")
def hook_handle_kept_outside_the_compiled_function():
    seen = []
    x = _leaf()
    y = _compiled(lambda t: t * 2)(x)
    handle = y.register_hook(lambda g: seen.append(g.tolist()))
    y.sum().backward()
    handle.remove()
    return seen, x.grad.tolist()


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


@fix("storing-tensor-hook-handle-in-globals-inline-call-b00f31",
     en="call the function that stores the handle outside the compiled region",
     zh="把保存句柄的那个函数放到编译区域之外调用")
def hook_handle_stored_by_a_call_outside_the_compiled_function():
    x = _leaf()
    y = _compiled(lambda t: t * 2)(x)
    _store_handle(y)
    y.sum().backward()
    return x.grad.tolist()


@trigger("attempted-to-represent-unregistered-removablehandle-602ee2")
def compiled_function_given_a_hook_handle():
    handle = _leaf().register_hook(lambda g: g)
    _compiled(lambda x, h: (x * 2, h))(_leaf(), handle)


@fix("attempted-to-represent-unregistered-removablehandle-602ee2",
     en="keep a RemovableHandle (and its remove()) outside the compiled function; pass it tensors only",
     zh="RemovableHandle 及其 remove() 留在编译函数之外；只给编译函数传张量")
def hook_handle_kept_out_of_the_compiled_function():
    x = _leaf()
    handle = x.register_hook(lambda g: g * 3)
    _compiled(lambda t: t * 2)(x).sum().backward()
    handle.remove()
    return x.grad.tolist()


@trigger("tensor-post-accumulate-grad-hooks-should-return-none-0a9f53")
def post_accumulate_grad_hook_returns_a_value_under_compiled_autograd():
    from torch._dynamo import compiled_autograd

    w = nn.Parameter(torch.ones(2))
    w.register_post_accumulate_grad_hook(lambda p: 1)
    with compiled_autograd._enable(torch.compile(backend="eager")):
        (w * 2).sum().backward()


@fix("tensor-post-accumulate-grad-hooks-should-return-none-0a9f53",
     en="a post-accumulate-grad hook returns None and changes param.grad in place",
     zh="post-accumulate-grad 钩子返回 None，要改梯度就原地修改 param.grad")
def post_accumulate_grad_hook_returns_none_under_compiled_autograd():
    from torch._dynamo import compiled_autograd

    w = nn.Parameter(torch.ones(2))
    def halve_grad(p):
        p.grad.mul_(0.5)
    w.register_post_accumulate_grad_hook(halve_grad)
    with compiled_autograd._enable(torch.compile(backend="eager")):
        (w * 2).sum().backward()
    return w.grad.tolist()


def _aot_compile_a_module_with(register):
    from torch._dynamo.aot_compile import ModelInput

    m = nn.Linear(2, 2)
    register(m)
    with torch._dynamo.config.patch(enable_aot_compile=True):
        torch.compile(m, fullgraph=True, backend="eager")._aot_compile([ModelInput((torch.ones(1, 2),), {}, [])])


@trigger("has-registered-the-aot-compiled-forward-calls-forward-di-534229")
def aot_compile_of_a_module_with_a_forward_hook():
    _aot_compile_a_module_with(lambda m: m.register_forward_hook(lambda *args: None))


@fix("has-registered-the-aot-compiled-forward-calls-forward-di-534229",
     en="AOT-compile torch.compile(model).forward, which traces __call__ and so runs the forward hooks",
     zh="对 torch.compile(model).forward 做 AOT 编译：它追踪的是 __call__，前向钩子会运行")
def aot_compile_of_the_compiled_modules_forward():
    calls = []
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda *args: calls.append("hook"))
    with torch._dynamo.config.patch(enable_aot_compile=True):
        compiled = torch.compile(m, fullgraph=True, backend="eager").forward.aot_compile(((torch.ones(1, 2),), {}))
    out = compiled(torch.ones(1, 2))
    return calls, tuple(out.shape)


@trigger("has-registered-the-aot-compiled-forward-calls-forward-di-5ee928")
def aot_compile_of_a_module_with_a_backward_hook():
    _aot_compile_a_module_with(lambda m: m.register_full_backward_hook(lambda *args: None))


@fix("has-registered-the-aot-compiled-forward-calls-forward-di-5ee928",
     en="AOT-compile torch.compile(model).forward with compiled autograd enabled around the capture",
     zh="在开启 compiled autograd 的情况下对 torch.compile(model).forward 做 AOT 编译")
def aot_compile_of_the_compiled_modules_forward_with_compiled_autograd():
    from torch._dynamo import compiled_autograd

    calls = []
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda *args: calls.append("hook"))
    example = torch.ones(1, 2, requires_grad=True)
    with torch._dynamo.config.patch(enable_aot_compile=True), \
            compiled_autograd._enable(torch.compile(backend="eager")):
        compiled = torch.compile(m, fullgraph=True, backend="eager").forward.aot_compile(((example,), {}))
    x = torch.ones(1, 2, requires_grad=True)
    compiled(x).sum().backward()
    return calls, tuple(x.grad.shape)


# --- CUDA graphs (the check comes before any device is used; torch.xpu's copy has the same words) ----------------------------------------

def _hooked_linear() -> nn.Module:
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda *args: None)
    return m


@trigger("modules-must-not-have-hooks-registered-at-the-time-90b0f9")
def cuda_graphed_callable_with_a_hook():
    torch.cuda.make_graphed_callables(_hooked_linear(), (torch.ones(1, 2),))


@fix("modules-must-not-have-hooks-registered-at-the-time-90b0f9",
     en="graph the module first, register its hooks afterwards",
     zh="先把模块交给 make_graphed_callables，之后再注册钩子", needs=("cuda",))
def cuda_graphed_callable_then_a_hook():
    calls = []
    m = nn.Linear(2, 2).cuda()
    graphed = torch.cuda.make_graphed_callables(m, (torch.ones(1, 2, device="cuda"),))
    graphed.register_forward_hook(lambda *args: calls.append("hook"))
    out = graphed(torch.ones(1, 2, device="cuda"))
    return calls, tuple(out.shape)


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


def _log_input(module, inp: tuple[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    return out


def _log_output(module, inp: tuple[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    return out


@fix("hook-on-has-at-least-two-different-python-definitions-669c39",
     en="give each hook of a module to be scripted its own name",
     zh="要 script 的模块上，每个钩子用各自不同的名字")
def scripting_two_forward_hooks_with_their_own_names():
    m = _Double()
    m.register_forward_hook(_log_input)
    m.register_forward_hook(_log_output)
    scripted = torch.jit.script(m)
    return scripted(torch.ones(2)).tolist()


@trigger("pre-hook-on-has-at-least-two-different-python-c1a6c8")
def scripting_two_forward_pre_hooks_with_one_name():
    _script_with(_two_hooks_named_h("register_forward_pre_hook"))


def _check_input(module, inp: tuple[torch.Tensor]) -> None:
    return None


def _count_input(module, inp: tuple[torch.Tensor]) -> None:
    return None


@fix("pre-hook-on-has-at-least-two-different-python-c1a6c8",
     en="give each pre-hook of a module to be scripted its own name",
     zh="要 script 的模块上，每个前向预钩子用各自不同的名字")
def scripting_two_forward_pre_hooks_with_their_own_names():
    m = _Double()
    m.register_forward_pre_hook(_check_input)
    m.register_forward_pre_hook(_count_input)
    scripted = torch.jit.script(m)
    return scripted(torch.ones(2)).tolist()


@trigger("modules-that-have-backward-hooks-assigned-can-t-be-fd2fb1")
def tracing_a_module_with_a_backward_hook():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda *args: None)
    torch.jit.trace(m, torch.ones(1, 2))


@fix("modules-that-have-backward-hooks-assigned-can-t-be-fd2fb1",
     en="remove the backward hooks before tracing (a trace cannot keep them); register them again on the eager module",
     zh="trace 之前先移除反向钩子（trace 保存不了它们）；需要时再在即时模块上注册")
def tracing_a_module_after_removing_its_backward_hook():
    m = nn.Linear(2, 2)
    handle = m.register_full_backward_hook(lambda *args: None)
    handle.remove()
    traced = torch.jit.trace(m, torch.ones(1, 2))
    return torch.allclose(traced(torch.ones(1, 2)), m(torch.ones(1, 2)))


def _pre_hook_with_a_wrong_signature(module, inp: int):
    return None


def _hook_with_a_wrong_signature(module, inp: int, out):
    return None


def forward(module, inp, out):  # a hook named like the module's method
    return None


@trigger("this-error-occurred-while-scripting-the-forward-pre-hook-3fb629")
def scripting_a_forward_pre_hook_with_a_wrong_signature():
    _script_with(lambda m: m.register_forward_pre_hook(_pre_hook_with_a_wrong_signature))


def _pre_hook_with_a_scriptable_signature(module, inp: tuple[torch.Tensor]) -> None:
    return None


@fix("this-error-occurred-while-scripting-the-forward-pre-hook-3fb629",
     en="a scripted forward pre-hook is typed (module, input: tuple[Tensor]) -> None, like the forward's inputs",
     zh="要 script 的前向预钩子写成 (module, input: tuple[Tensor]) -> None，与 forward 的输入一致")
def scripting_a_forward_pre_hook_with_the_right_signature():
    m = _Double()
    m.register_forward_pre_hook(_pre_hook_with_a_scriptable_signature)
    return torch.jit.script(m)(torch.ones(2)).tolist()


@trigger("this-error-occurred-while-scripting-the-forward-hook-on-0eb305")
def scripting_a_forward_hook_with_a_wrong_signature():
    _script_with(lambda m: m.register_forward_hook(_hook_with_a_wrong_signature))


def _hook_with_a_scriptable_signature(module, inp: tuple[torch.Tensor], out: torch.Tensor) -> None:
    return None


@fix("this-error-occurred-while-scripting-the-forward-hook-on-0eb305",
     en="a scripted forward hook is typed (module, input: tuple[Tensor], output: Tensor) -> None",
     zh="要 script 的前向钩子写成 (module, input: tuple[Tensor], output: Tensor) -> None")
def scripting_a_forward_hook_with_the_right_signature():
    m = _Double()
    m.register_forward_hook(_hook_with_a_scriptable_signature)
    return torch.jit.script(m)(torch.ones(2)).tolist()


@trigger("can-t-define-hook-on-class-because-a-method-313c51")
def scripting_a_hook_named_forward():
    _script_with(lambda m: m.register_forward_hook(forward))


def after_forward(module, inp: tuple[torch.Tensor], out: torch.Tensor) -> None:
    return None


@fix("can-t-define-hook-on-class-because-a-method-313c51",
     en="name a hook differently from the module's methods (forward is taken)",
     zh="钩子的名字不要和模块的方法重名（forward 已被占用）")
def scripting_a_hook_with_its_own_name():
    m = _Double()
    m.register_forward_hook(after_forward)
    return torch.jit.script(m)(torch.ones(2)).tolist()


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


@fix("idx-must-not-be-none-for-hook-removal-5e3a6b",
     en="register and remove the hook outside the compiled region (its handle too)",
     zh="在编译区域之外注册并移除钩子（句柄也在外面）")
def hook_of_an_output_registered_and_removed_outside_the_compiled_function():
    seen = []
    x = torch.ones(3, requires_grad=True)
    torch._dynamo.reset()
    try:
        y = torch.compile(lambda t: (t * 2).sin(), backend="eager")(x)
        handle = y.register_hook(lambda g: seen.append(tuple(g.shape)))
        y.sum().backward()
        handle.remove()
    finally:
        torch._dynamo.reset()
    return seen


test_trigger = triggers_of(__name__)
test_fix = fixes_of(__name__)
