"""Trigger tests: the messages of saved-tensor hooks and of activation checkpointing (which is built from them)."""
from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn
from torch.autograd import graph
from torch.utils import checkpoint as cp

from message_triggers import fix, fixes_of, trigger, triggers_of


def _leaf() -> torch.Tensor:
    return torch.ones(2, requires_grad=True)


# --- saved-tensor hooks -------------------------------------------------------------------------------------

@trigger("allow-mutation-on-saved-tensors-contexts-cannot-be-neste-03bc66")
def nested_allow_mutation_on_saved_tensors():
    with graph.allow_mutation_on_saved_tensors(), graph.allow_mutation_on_saved_tensors():
        pass


@fix("allow-mutation-on-saved-tensors-contexts-cannot-be-neste-03bc66",
     en="one allow_mutation_on_saved_tensors context around the forward, the in-place change and the backward",
     zh="只用一层 allow_mutation_on_saved_tensors，把前向、原地修改和反向都放在里面")
def one_allow_mutation_on_saved_tensors():
    x = _leaf()
    with graph.allow_mutation_on_saved_tensors():
        a = x * 1
        y = a.sin()
        a.mul_(2)
        y.sum().backward()
    return [round(v, 4) for v in x.grad.tolist()]


@trigger("trying-to-backward-outside-of-the-allow-mutation-on-c34b1d")
def backward_after_leaving_allow_mutation_on_saved_tensors():
    with graph.allow_mutation_on_saved_tensors():
        y = (_leaf() * 1).sin()
    y.sum().backward()


@fix("trying-to-backward-outside-of-the-allow-mutation-on-c34b1d",
     en="run the backward inside the allow_mutation_on_saved_tensors context that ran the forward",
     zh="反向传播放在执行前向的那个 allow_mutation_on_saved_tensors 上下文之内")
def backward_inside_allow_mutation_on_saved_tensors():
    x = _leaf()
    with graph.allow_mutation_on_saved_tensors():
        y = (x * 1).sin()
        y.sum().backward()
    return [round(v, 4) for v in x.grad.tolist()]


@trigger("output-of-saved-tensor-unpack-hook-expected-to-be-730ad9")
def unpack_hook_returns_no_tensor():
    with graph.saved_tensors_hooks(lambda x: x, lambda packed: 1):
        y = _leaf().sin()
    y.sum().backward()


@fix("output-of-saved-tensor-unpack-hook-expected-to-be-730ad9",
     en="the unpack hook returns a tensor: what pack stored, turned back into the saved tensor",
     zh="解包钩子要返回张量：把打包时存下的东西还原成保存的张量")
def unpack_hook_returns_the_tensor():
    x = _leaf()
    with graph.saved_tensors_hooks(lambda t: t, lambda packed: packed):
        y = x.sin()
    y.sum().backward()
    return [round(v, 4) for v in x.grad.tolist()]


@trigger("calling-register-hooks-on-a-saved-tensor-whose-hooks-9c9389")
def saved_tensor_hooks_registered_twice():
    y = _leaf().sin()  # kept alive: a SavedTensor does not keep its Node (a dangling one crashes the process)
    saved = y.grad_fn._raw_saved_self
    saved.register_hooks(lambda x: x, lambda x: x)
    saved.register_hooks(lambda x: x, lambda x: x)


@fix("calling-register-hooks-on-a-saved-tensor-whose-hooks-9c9389",
     en="register one pair of hooks per saved tensor (one pack and one unpack that do all the work)",
     zh="每个保存的张量只注册一对钩子（一个 pack、一个 unpack，把要做的事都放进去）")
def saved_tensor_hooks_registered_once():
    calls = []

    def pack(t):
        calls.append("pack")
        return t

    def unpack(t):
        calls.append("unpack")
        return t
    x = _leaf()
    y = x.sin()
    y.grad_fn._raw_saved_self.register_hooks(pack, unpack)
    y.sum().backward()
    return calls


@trigger("calling-register-hooks-on-a-saved-tensor-after-it-eb6631")
def saved_tensor_hooks_registered_after_backward():
    y = _leaf().sin()
    saved = y.grad_fn._raw_saved_self
    y.sum().backward()
    saved.register_hooks(lambda x: x, lambda x: x)


@fix("calling-register-hooks-on-a-saved-tensor-after-it-eb6631",
     en="register the saved tensor's hooks before the backward that frees it",
     zh="在反向传播释放保存的张量之前注册它的钩子")
def saved_tensor_hooks_registered_before_backward():
    calls = []
    y = _leaf().sin()
    y.grad_fn._raw_saved_self.register_hooks(lambda t: calls.append("pack") or t,
                                             lambda t: calls.append("unpack") or t)
    y.sum().backward()
    return calls


@trigger("calling-register-hooks-on-a-saved-tensor-with-value-6fb7ca")
def saved_tensor_hooks_on_a_saved_none():
    y = torch.nn.functional.batch_norm(torch.ones(2, 3, requires_grad=True), None, None, training=True)
    y.grad_fn._raw_saved_running_mean.register_hooks(lambda x: x, lambda x: x)  # no running stats: None saved


@fix("calling-register-hooks-on-a-saved-tensor-with-value-6fb7ca",
     en="register hooks only on a saved tensor that holds one: here batch_norm with running statistics",
     zh="只给确实存了张量的槽位注册钩子：这里给 batch_norm 传入 running 统计量")
def saved_tensor_hooks_on_saved_running_stats():
    calls = []
    mean, var = torch.zeros(3), torch.ones(3)
    y = torch.nn.functional.batch_norm(torch.ones(2, 3, requires_grad=True), mean, var, training=True)
    y.grad_fn._raw_saved_running_mean.register_hooks(lambda t: calls.append("pack") or t, lambda t: t)
    return calls, tuple(y.shape)


# --- activation checkpointing -------------------------------------------------------------------------------

def _block() -> nn.Module:
    return nn.Linear(2, 2)


@trigger("torch-utils-checkpoint-the-use-reentrant-parameter-shoul-5f5e72")
def checkpoint_without_use_reentrant():
    cp.checkpoint(_block(), _leaf())


@fix("torch-utils-checkpoint-the-use-reentrant-parameter-shoul-5f5e72",
     en="pass use_reentrant explicitly; False is the recommended variant",
     zh="显式传入 use_reentrant；推荐 False")
def checkpoint_with_use_reentrant_false():
    x = _leaf()
    cp.checkpoint(_block(), x, use_reentrant=False).sum().backward()
    return tuple(x.grad.shape)


@trigger("torch-utils-checkpoint-checkpoint-sequential-the-use-ree-e7f97a")
def checkpoint_sequential_without_use_reentrant():
    cp.checkpoint_sequential(nn.Sequential(_block(), _block()), 2, _leaf())


@fix("torch-utils-checkpoint-checkpoint-sequential-the-use-ree-e7f97a",
     en="pass use_reentrant explicitly to checkpoint_sequential; False is the recommended variant",
     zh="给 checkpoint_sequential 显式传入 use_reentrant；推荐 False")
def checkpoint_sequential_with_use_reentrant_false():
    x = _leaf()
    cp.checkpoint_sequential(nn.Sequential(_block(), _block()), 2, x, use_reentrant=False).sum().backward()
    return tuple(x.grad.shape)


@trigger("passing-context-fn-debug-or-respect-saved-tensors-hooks-a0aeef")
def reentrant_checkpoint_with_debug():
    cp.checkpoint(_block(), _leaf(), use_reentrant=True, debug=True)


@fix("passing-context-fn-debug-or-respect-saved-tensors-hooks-a0aeef",
     en="debug=True (like context_fn) works with the non-reentrant checkpoint: use_reentrant=False",
     zh="debug=True（以及 context_fn）只适用于非重入式 checkpoint：use_reentrant=False")
def non_reentrant_checkpoint_with_debug():
    x = _leaf()
    cp.checkpoint(_block(), x, use_reentrant=False, debug=True).sum().backward()
    return tuple(x.grad.shape)


@trigger("debug-true-is-incompatible-with-non-default-context-fn-69dc33")
def checkpoint_with_debug_and_a_context_fn():
    cp.checkpoint(_block(), _leaf(), use_reentrant=False, debug=True,
                  context_fn=lambda: (contextlib.nullcontext(), contextlib.nullcontext()))


@fix("debug-true-is-incompatible-with-non-default-context-fn-69dc33",
     en="use debug=True or a custom context_fn, not both: here the context_fn alone",
     zh="debug=True 与自定义 context_fn 二选一：这里只保留 context_fn")
def checkpoint_with_a_context_fn_only():
    x = _leaf()
    cp.checkpoint(_block(), x, use_reentrant=False,
                  context_fn=lambda: (contextlib.nullcontext(), contextlib.nullcontext())).sum().backward()
    return tuple(x.grad.shape)


@trigger("determinism-check-should-be-one-of-but-got-7e77cf")
def checkpoint_with_an_unknown_determinism_check():
    cp.checkpoint(_block(), _leaf(), use_reentrant=False, determinism_check="strict")


@fix("determinism-check-should-be-one-of-but-got-7e77cf",
     en="determinism_check takes \"default\" or \"none\"",
     zh="determinism_check 只接受 \"default\" 或 \"none\"")
def checkpoint_with_the_default_determinism_check():
    x = _leaf()
    cp.checkpoint(_block(), x, use_reentrant=False, determinism_check="default").sum().backward()
    return tuple(x.grad.shape)


@trigger("only-tuple-of-tensors-is-supported-got-unsupported-input-c1fe8b")
def detach_variable_of_a_tensor():
    cp.detach_variable(torch.ones(2))


@fix("only-tuple-of-tensors-is-supported-got-unsupported-input-c1fe8b",
     en="detach_variable takes a tuple of tensors",
     zh="detach_variable 接受的是张量元组")
def detach_variable_of_a_tuple():
    (x,) = cp.detach_variable((_leaf(),))
    return x.requires_grad, x.is_leaf


@trigger("graphexecgroup-contexts-cannot-be-nested-already-inside-aa8801")
def nested_graph_exec_groups():
    with cp.GraphExecGroup(), cp.GraphExecGroup():
        pass


@fix("graphexecgroup-contexts-cannot-be-nested-already-inside-aa8801",
     en="one GraphExecGroup around the backward calls that share a checkpointed region's recomputation",
     zh="用一个 GraphExecGroup 包住共享同一次重算的几次反向调用，不要嵌套")
def one_graph_exec_group_for_two_backward_calls():
    x = _leaf()
    a, b = cp.checkpoint(lambda t: ((t[:1] * 2).exp(), (t[1:] * 3).exp()), x, use_reentrant=False)
    with cp.GraphExecGroup():
        a.sum().backward(retain_graph=True)
        b.sum().backward()
    return [round(v, 2) for v in x.grad.tolist()]


@trigger("none-of-output-has-requires-grad-true-this-checkpoint-6226b0")
def reentrant_checkpoint_of_a_detached_output():
    out = cp.checkpoint(lambda x: x.detach() * 2, _leaf(), use_reentrant=True)
    torch.autograd.backward(out, torch.ones(2))


@fix("none-of-output-has-requires-grad-true-this-checkpoint-6226b0",
     en="keep the checkpointed function's output in the graph (no detach), so gradients reach its input",
     zh="被 checkpoint 的函数不要 detach 输出，梯度才能传回输入")
def reentrant_checkpoint_of_an_attached_output():
    x = _leaf()
    out = cp.checkpoint(lambda t: t * 2, x, use_reentrant=True)
    torch.autograd.backward(out, torch.ones(2))
    return x.grad.tolist()


@trigger("when-use-reentrant-true-torch-utils-checkpoint-is-incomp-3a2602")
def reentrant_checkpoint_under_autograd_grad():
    x = _leaf()
    out = cp.checkpoint(lambda t: t.sin(), x, use_reentrant=True)
    torch.autograd.grad(out.sum(), x)


@fix("when-use-reentrant-true-torch-utils-checkpoint-is-incomp-3a2602",
     en="torch.autograd.grad works with the non-reentrant checkpoint: use_reentrant=False",
     zh="torch.autograd.grad 要配合非重入式 checkpoint：use_reentrant=False")
def non_reentrant_checkpoint_under_autograd_grad():
    x = _leaf()
    out = cp.checkpoint(lambda t: t.sin(), x, use_reentrant=False)
    (grad,) = torch.autograd.grad(out.sum(), x)
    return [round(v, 4) for v in grad.tolist()]


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


@fix("torch-utils-checkpoint-the-forward-context-provided-by-c-3764f1",
     en="a context_fn's forward context lets exceptions through (__exit__ returns False)",
     zh="context_fn 给出的前向上下文不能吞掉异常（__exit__ 返回 False）")
def checkpoint_context_that_lets_errors_through():
    entered = []

    class Recorded:
        def __enter__(self):
            entered.append("forward")
            return self

        def __exit__(self, *exc):
            return False
    x = _leaf()
    cp.checkpoint(lambda t: t.sin(), x, use_reentrant=False,
                  context_fn=lambda: (Recorded(), contextlib.nullcontext())).sum().backward()
    return entered, [round(v, 4) for v in x.grad.tolist()]


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


@fix("torch-utils-checkpoint-trying-to-save-more-tensors-durin-80cfd1",
     en="the checkpointed function computes the same ops when it is recomputed (no state that changes between runs)",
     zh="被 checkpoint 的函数在重算时要执行同样的运算（不依赖会在两次运行间改变的状态）")
def recomputation_runs_the_same_ops_without_early_stop():
    x = _leaf()
    with cp.set_checkpoint_early_stop(False):
        cp.checkpoint(lambda t: t.sin(), x, use_reentrant=False).sum().backward()
    return [round(v, 4) for v in x.grad.tolist()]


@trigger("an-error-happened-while-unpacking-tensors-dumping-logs-o-2780f8", head=True)  # it prints stack traces
def checkpoint_with_debug_whose_recomputation_differs():
    fn = _changes_on_recomputation(lambda x: x.sin().cos(), lambda x: x.sin())
    cp.checkpoint(fn, _leaf(), use_reentrant=False, debug=True).sum().backward()


@fix("an-error-happened-while-unpacking-tensors-dumping-logs-o-2780f8",
     en="the checkpointed function computes the same ops when it is recomputed; debug=True then has nothing to report",
     zh="被 checkpoint 的函数重算时执行同样的运算；这样 debug=True 也就没有可报告的差异")
def checkpoint_with_debug_whose_recomputation_matches():
    x = _leaf()
    cp.checkpoint(lambda t: t.sin().cos(), x, use_reentrant=False, debug=True).sum().backward()
    return [round(v, 4) for v in x.grad.tolist()]


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


class _SavesOnceReads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2


@fix("torch-utils-checkpoint-unpack-is-being-triggered-for-a-9618bf",
     en="read ctx.saved_tensors once in backward and keep the tensors in a local",
     zh="在 backward 里只读一次 ctx.saved_tensors，结果存在局部变量里")
def saved_tensors_read_once_in_a_checkpointed_function():
    x = _leaf()
    cp.checkpoint(_SavesOnceReads.apply, x * 1, use_reentrant=False).sum().backward()
    return x.grad.tolist()


# --- selective activation checkpointing (SAC) ---------------------------------------------------------------

def _save_sin():
    def policy(ctx, op, *args, **kwargs):
        return cp.CheckpointPolicy.MUST_SAVE if op is torch.ops.aten.sin.default else \
            cp.CheckpointPolicy.PREFER_RECOMPUTE
    return functools.partial(cp.create_selective_checkpoint_contexts, policy)


@trigger("expected-op-in-op-list-to-be-an-opoverload-1851b0")
def sac_op_list_with_a_python_function():
    cp.create_selective_checkpoint_contexts([torch.sin])


@fix("expected-op-in-op-list-to-be-an-opoverload-1851b0",
     en="list ops as OpOverloads (torch.ops.aten.sin.default), not Python functions",
     zh="op 列表要写 OpOverload（torch.ops.aten.sin.default），不是 Python 函数")
def sac_op_list_of_op_overloads():
    x = _leaf()
    context_fn = functools.partial(cp.create_selective_checkpoint_contexts, [torch.ops.aten.sin.default])
    cp.checkpoint(lambda t: t.sin().exp(), x, use_reentrant=False, context_fn=context_fn).sum().backward()
    return [round(v, 3) for v in x.grad.tolist()]


@trigger("policy-fn-or-list-must-be-either-a-function-94390d")
def sac_policy_of_the_wrong_type():
    cp.create_selective_checkpoint_contexts(3)


@fix("policy-fn-or-list-must-be-either-a-function-94390d",
     en="pass a policy function (ctx, op, *args, **kwargs) -> CheckpointPolicy, or a list of ops",
     zh="传入策略函数 (ctx, op, *args, **kwargs) -> CheckpointPolicy，或 op 列表")
def sac_policy_function():
    x = _leaf()
    cp.checkpoint(lambda t: t.sin().exp(), x, use_reentrant=False, context_fn=_save_sin()).sum().backward()
    return [round(v, 3) for v in x.grad.tolist()]


@trigger("encountered-during-backward-but-not-found-in-storage-thi-37ee0f")
def sac_recomputation_runs_another_op():
    fn = _changes_on_recomputation(lambda x: x.sin().exp(), lambda x: x.cos().exp())
    cp.checkpoint(fn, _leaf(), use_reentrant=False, context_fn=_save_sin()).sum().backward()


@fix("encountered-during-backward-but-not-found-in-storage-thi-37ee0f",
     en="the function under SAC runs the same ops when it is recomputed",
     zh="SAC 下的函数在重算时执行同样的运算")
def sac_recomputation_runs_the_same_ops():
    x = _leaf()
    cp.checkpoint(lambda t: t.sin().exp(), x, use_reentrant=False, context_fn=_save_sin()).sum().backward()
    return [round(v, 3) for v in x.grad.tolist()]


@trigger("invocation-index-encountered-during-backward-but-not-fou-f8fbdc")
def sac_recomputation_runs_an_op_once_more():
    fn = _changes_on_recomputation(lambda x: x.sin().exp(), lambda x: x.sin().sin().exp())
    with cp.set_checkpoint_early_stop(False):
        cp.checkpoint(fn, _leaf(), use_reentrant=False, context_fn=_save_sin()).sum().backward()


@fix("invocation-index-encountered-during-backward-but-not-fou-f8fbdc",
     en="the function under SAC runs each op as many times when it is recomputed",
     zh="SAC 下的函数在重算时每个运算执行的次数要和前向一样")
def sac_recomputation_runs_each_op_as_often():
    x = _leaf()
    with cp.set_checkpoint_early_stop(False):
        cp.checkpoint(lambda t: t.sin().exp(), x, use_reentrant=False, context_fn=_save_sin()).sum().backward()
    return [round(v, 3) for v in x.grad.tolist()]


@trigger("trying-to-backward-an-extra-time-you-are-only-871484")
def sac_region_backward_twice():
    out = cp.checkpoint(lambda x: x.sin().exp(), _leaf(), use_reentrant=False, context_fn=_save_sin())
    out.sum().backward(retain_graph=True)
    out.sum().backward()


@fix("trying-to-backward-an-extra-time-you-are-only-871484",
     en="backward once through a SAC region: add the losses first (or run the region's forward again)",
     zh="SAC 区域只能反向一次：先把两个损失加起来再反向（或重新跑一遍前向）")
def sac_region_backward_once():
    x = _leaf()
    out = cp.checkpoint(lambda t: t.sin().exp(), x, use_reentrant=False, context_fn=_save_sin())
    (out.sum() + out.sum()).backward()
    return [round(v, 3) for v in x.grad.tolist()]


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


@fix("tensor-cached-during-selective-activation-checkpoint-has-6d84b9",
     en="change a copy of a tensor SAC saved, not the tensor itself",
     zh="要修改 SAC 缓存的张量时，改它的副本，不要原地改它")
def sac_saved_output_copied_before_the_change():
    box = {}

    def fn(t):
        box["y"] = t.sin()
        return box["y"].exp()
    x = _leaf()
    out = cp.checkpoint(fn, x, use_reentrant=False, context_fn=_save_sin())
    with torch.no_grad():
        doubled = box["y"].clone().mul_(2)
    out.sum().backward()
    return [round(v, 3) for v in x.grad.tolist()], [round(v, 3) for v in doubled.tolist()]


@trigger("a-saved-tensors-hooks-context-e-g-save-on-6244ad")
def sac_inside_save_on_cpu():
    with graph.save_on_cpu():
        cp.checkpoint(lambda x: x.sin().exp(), _leaf(), use_reentrant=False, context_fn=_save_sin())


@fix("a-saved-tensors-hooks-context-e-g-save-on-6244ad",
     en="say whether SAC's saved tensors go through the active saved-tensor hooks: respect_saved_tensors_hooks=True",
     zh="显式说明 SAC 保存的张量是否经过外层的保存张量钩子：respect_saved_tensors_hooks=True")
def sac_inside_save_on_cpu_said_explicitly():
    x = _leaf()
    with graph.save_on_cpu():
        out = cp.checkpoint(lambda t: t.sin().exp(), x, use_reentrant=False, context_fn=_save_sin(),
                            respect_saved_tensors_hooks=True)
    out.sum().backward()
    return [round(v, 3) for v in x.grad.tolist()]


# --- the distributed wrappers of checkpointing --------------------------------------------------------------

@trigger("use-reentrant-true-is-not-supported-in-composable-checkp-fbf234")
def composable_checkpoint_with_use_reentrant():
    from torch.distributed._composable import checkpoint
    checkpoint(_block(), use_reentrant=True)


@fix("use-reentrant-true-is-not-supported-in-composable-checkp-fbf234",
     en="the composable checkpoint is non-reentrant: apply it without use_reentrant",
     zh="可组合的 checkpoint 本来就是非重入式的：不要传 use_reentrant")
def composable_checkpoint_without_use_reentrant():
    from torch.distributed._composable import checkpoint
    m = checkpoint(_block())
    x = _leaf()
    m(x).sum().backward()
    return tuple(x.grad.shape)


@trigger("subclasses-should-implement-forward-8aac07")
def activation_wrapper_subclass_without_forward():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import ActivationWrapper

    class Wrapper(ActivationWrapper):
        def forward(self, *args, **kwargs):
            return super().forward(*args, **kwargs)
    Wrapper(_block())(torch.ones(2))


@fix("subclasses-should-implement-forward-8aac07",
     en="wrap with checkpoint_wrapper (an ActivationWrapper that implements forward), or implement forward yourself",
     zh="用 checkpoint_wrapper（它实现了 forward），或在子类里自己实现 forward")
def checkpoint_wrapper_of_a_block():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    x = _leaf()
    checkpoint_wrapper(_block())(x).sum().backward()
    return tuple(x.grad.shape)


@trigger("expected-to-be-callable-or-be-a-pre-defined-6635d0")
def apply_activation_checkpointing_with_a_bad_policy():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
    apply_activation_checkpointing(nn.Sequential(_block()), auto_wrap_policy=3)


@fix("expected-to-be-callable-or-be-a-pre-defined-6635d0",
     en="auto_wrap_policy is a callable (or a predefined policy); check_fn=... picks modules by a test",
     zh="auto_wrap_policy 要是可调用对象（或预定义策略）；按条件挑模块用 check_fn=...")
def apply_activation_checkpointing_with_a_check_fn():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointWrapper,
        apply_activation_checkpointing,
    )
    model = nn.Sequential(_block(), nn.ReLU(), _block())
    apply_activation_checkpointing(model, check_fn=lambda module: isinstance(module, nn.Linear))
    return sum(isinstance(module, CheckpointWrapper) for module in model.modules())


# --- the compiler's activation-memory budget (torch.autograd.graph) ----------------------------------------

@trigger("torch-autograd-graph-region-activation-memory-budget-can-84d3db")
def activation_memory_budget_in_eager_mode():
    with graph.region_activation_memory_budget(0.5):
        pass


@fix("torch-autograd-graph-region-activation-memory-budget-can-84d3db",
     en="use region_activation_memory_budget inside a function compiled with torch.compile",
     zh="region_activation_memory_budget 要放在 torch.compile 编译的函数里用")
def activation_memory_budget_under_compile():
    def f(t):
        with graph.region_activation_memory_budget(0.5):
            return t.sin().cos()
    x = _leaf()
    torch.compile(f, backend="aot_eager", fullgraph=True)(x).sum().backward()
    return [round(v, 3) for v in x.grad.tolist()]


@trigger("torch-autograd-graph-region-activation-memory-budget-exp-414fe1")
def activation_memory_budget_not_a_float():
    graph.region_activation_memory_budget("half")


@fix("torch-autograd-graph-region-activation-memory-budget-exp-414fe1",
     en="the budget is a float ratio in [0, 1], used under torch.compile",
     zh="预算是 [0, 1] 之间的浮点比例，在 torch.compile 下使用")
def activation_memory_budget_as_a_float():
    def f(t):
        with graph.region_activation_memory_budget(0.5):
            return t.sin().cos()
    x = _leaf()
    torch.compile(f, backend="aot_eager", fullgraph=True)(x).sum().backward()
    return [round(v, 3) for v in x.grad.tolist()]


@trigger("torch-autograd-graph-region-activation-memory-budget-mus-63d47a")
def activation_memory_budget_above_one():
    graph.region_activation_memory_budget(2.0)


@fix("torch-autograd-graph-region-activation-memory-budget-mus-63d47a",
     en="the budget is a ratio in [0, 1] (1.0: the default strategy), used under torch.compile",
     zh="预算是 [0, 1] 之间的比例（1.0 即默认策略），在 torch.compile 下使用")
def activation_memory_budget_of_one():
    def f(t):
        with graph.region_activation_memory_budget(1.0):
            return t.sin().cos()
    x = _leaf()
    torch.compile(f, backend="aot_eager", fullgraph=True)(x).sum().backward()
    return [round(v, 3) for v in x.grad.tolist()]


# --- saved tensors: messages that do not say "hook" ---------------------------------------------------------

@trigger("trying-to-use-a-saved-tensor-that-has-been-039c08")
def saved_input_detached_in_place_before_backward():
    w = torch.ones(3, requires_grad=True)
    a = w * 2
    b = a.sin()  # saves a
    a.detach_()
    b.sum().backward()


@fix("trying-to-use-a-saved-tensor-that-has-been-039c08",
     en="take a detached copy with detach() (out of place) and leave the saved tensor in the graph",
     zh="用 detach()（非原地）取一个分离的副本，保存的张量留在计算图里")
def saved_input_detached_out_of_place():
    w = torch.ones(3, requires_grad=True)
    a = w * 2
    b = a.sin()
    a_value = a.detach()
    b.sum().backward()
    return [round(v, 4) for v in w.grad.tolist()], a_value.requires_grad


@trigger("trying-to-create-a-savedtensor-object-from-python-is-cf93b6")
def saved_tensor_object_made_from_python():
    torch._C._autograd.SavedTensor()


@fix("trying-to-create-a-savedtensor-object-from-python-is-cf93b6",
     en="a SavedTensor comes from the node that saved it (grad_fn._raw_saved_<name>), never from its constructor",
     zh="SavedTensor 从保存它的节点取得（grad_fn._raw_saved_<name>），不能直接构造")
def saved_tensor_object_from_its_node():
    y = _leaf().sin()
    return type(y.grad_fn._raw_saved_self).__name__


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


class _ReadsSavedTensorsOnce(torch.autograd.Function):
    clear_saved_tensors_on_access = True

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2


@fix("saved-tensors-can-only-be-accessed-once-when-clear-a836b8",
     en="with clear_saved_tensors_on_access, read ctx.saved_tensors once and keep the result",
     zh="设置了 clear_saved_tensors_on_access 时，ctx.saved_tensors 只读一次并保留结果")
def saved_tensors_read_once_with_clear_on_access():
    x = torch.ones(2, requires_grad=True)
    _ReadsSavedTensorsOnce.apply(x).sum().backward()
    return x.grad.tolist()


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


class _ReadsSavedTensors(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2


@fix("saved-variables-is-deprecated-use-saved-tensors-2f2153",
     en="read ctx.saved_tensors (saved_variables is its deprecated name)",
     zh="读 ctx.saved_tensors（saved_variables 是已弃用的旧名）")
def saved_tensors_read_in_backward():
    x = torch.ones(2, requires_grad=True)
    _ReadsSavedTensors.apply(x).sum().backward()
    return x.grad.tolist()


test_trigger = triggers_of(__name__)
test_fix = fixes_of(__name__)
