"""Trigger tests: the messages of tensor, Node, node-creation, module, state_dict and optimizer hooks.

Each function makes one message appear on the pinned PyTorch (``message_triggers``: the test checks the exact text).
"""
from __future__ import annotations

import gc
import pickle

import torch
from torch import nn
from torch.autograd import graph

from message_triggers import fix, fixes_of, no_fix, trigger, triggers_of


def _leaf() -> torch.Tensor:
    return torch.ones(2, requires_grad=True)


# --- tensor and Node hooks ----------------------------------------------------------------------------------

@trigger("cannot-register-a-hook-on-a-tensor-that-doesn-2b88aa")
def tensor_hook_on_a_tensor_without_grad():
    torch.ones(2).register_hook(lambda g: g)


@fix("cannot-register-a-hook-on-a-tensor-that-doesn-2b88aa",
     en="a hook sees gradients: register it on a tensor that requires grad",
     zh="钩子看到的是梯度：把它注册在 requires_grad 的张量上")
def tensor_hook_on_a_tensor_that_requires_grad():
    x = torch.ones(2, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(tuple(g.shape)))
    x.sum().backward()
    return seen


@trigger("post-accumulate-grad-hooks-cannot-be-registered-on-non-926399")
def post_accumulate_grad_hook_on_a_non_leaf():
    (_leaf() * 2).register_post_accumulate_grad_hook(lambda p: None)


@fix("post-accumulate-grad-hooks-cannot-be-registered-on-non-926399",
     en="register the post-accumulate-grad hook on the leaf (the parameter) whose .grad it reads",
     zh="把 post-accumulate-grad 钩子注册在叶子张量（参数）上，它读的是叶子的 .grad")
def post_accumulate_grad_hook_on_the_leaf():
    x = _leaf()
    seen = []
    x.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.tolist()))
    (x * 2).sum().backward()
    return seen


@trigger("expected-variable-but-hook-returned-c98dcb")
def tensor_hook_returns_a_tuple():
    y = _leaf() * 2
    y.register_hook(lambda g: (g, g))
    y.sum().backward()


@fix("expected-variable-but-hook-returned-c98dcb",
     en="a tensor hook returns one tensor (the new gradient) or None",
     zh="张量钩子返回一个张量（新的梯度）或 None")
def tensor_hook_returns_a_tensor():
    x = _leaf()
    y = x * 2
    y.register_hook(lambda g: g * 2)
    y.sum().backward()
    return x.grad.tolist()


@trigger("expected-tuple-but-hook-returned-b40289")
def node_hook_returns_a_tensor():
    y = _leaf() * 2
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: grad_inputs[0])
    y.sum().backward()


@fix("expected-tuple-but-hook-returned-b40289",
     en="a Node hook returns a tuple with one entry per grad_input (or None)",
     zh="Node 钩子返回元组，每个 grad_input 对应一项（或返回 None）")
def node_hook_returns_a_tuple():
    x = _leaf()
    y = x * 2
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] * 2, *grad_inputs[1:]))
    y.sum().backward()
    return x.grad.tolist()


@trigger("deletion-of-backwards-hooks-not-allowed-05d045")
def deleting_backward_hooks():
    del _leaf()._backward_hooks


@fix("deletion-of-backwards-hooks-not-allowed-05d045",
     en="remove a tensor hook with the handle register_hook returned",
     zh="用 register_hook 返回的句柄移除张量钩子")
def removing_a_tensor_hook_by_its_handle():
    x = _leaf()
    seen = []
    handle = x.register_hook(lambda g: seen.append(g))
    handle.remove()
    x.sum().backward()
    return len(seen), x.grad.tolist()


@trigger("deletion-of-post-accumulate-grad-hooks-not-allowed-7da2ac")
def deleting_post_accumulate_grad_hooks():
    del _leaf()._post_accumulate_grad_hooks


@fix("deletion-of-post-accumulate-grad-hooks-not-allowed-7da2ac",
     en="remove a post-accumulate-grad hook with the handle its registration returned",
     zh="用注册时返回的句柄移除 post-accumulate-grad 钩子")
def removing_a_post_accumulate_grad_hook_by_its_handle():
    x = _leaf()
    seen = []
    handle = x.register_post_accumulate_grad_hook(lambda p: seen.append(p))
    handle.remove()
    x.sum().backward()
    return len(seen), x.grad.tolist()


no_fix("register-hook-dict-expected-a-variable-95e586",
       why="Node._register_hook_dict is autograd's private plumbing (a tensor's hooks onto its Node); "
           "a user registers tensor hooks with Tensor.register_hook",
       zh="Node._register_hook_dict 是 autograd 的内部机制（把张量的钩子挂到它的 Node 上）；"
          "用户注册张量钩子用 Tensor.register_hook")


@trigger("register-hook-dict-expected-a-variable-95e586")
def node_register_hook_dict_with_no_tensor():
    (_leaf() * 2).grad_fn._register_hook_dict(1)


@trigger("expects-mode-to-be-one-of-but-got-20807a")
def multi_grad_hook_with_an_unknown_mode():
    graph.register_multi_grad_hook((_leaf(), _leaf()), lambda grads: None, mode="some")


@fix("expects-mode-to-be-one-of-but-got-20807a",
     en="mode is \"all\" (the hook gets every gradient, None where none was computed) or \"any\" (the first one)",
     zh="mode 只能是 \"all\"（钩子拿到全部梯度，没算的为 None）或 \"any\"（拿到第一个）")
def multi_grad_hook_with_mode_any():
    a, b = _leaf(), _leaf()
    seen = []
    graph.register_multi_grad_hook((a, b), lambda grad: seen.append(grad.tolist()), mode="any")
    (a * 3).sum().backward()
    return seen


@trigger("it-is-not-possible-to-get-the-gradient-edge-d53f26")
def gradient_edge_of_a_tensor_without_grad():
    graph.get_gradient_edge(torch.ones(2))


@fix("it-is-not-possible-to-get-the-gradient-edge-d53f26",
     en="ask for the gradient edge of a tensor that is part of the graph (it requires grad)",
     zh="只对计算图里的张量（requires_grad 的）取梯度边")
def gradient_edge_of_a_tensor_in_the_graph():
    edge = graph.get_gradient_edge(_leaf() * 2)
    return edge.node.name(), edge.output_nr


@trigger("node-creation-hook-must-return-none-got-721e8b")
def node_creation_hook_returns_the_node():
    with graph.node_creation_hook(lambda node: node):
        _leaf() * 2


@fix("node-creation-hook-must-return-none-got-721e8b",
     en="a node-creation hook observes the node and returns None",
     zh="节点创建钩子只观察节点，返回 None")
def node_creation_hook_records_the_node():
    names = []
    with graph.node_creation_hook(lambda node: names.append(node.name())):
        _leaf() * 2
    return names


@trigger("creating-a-new-autograd-node-from-inside-a-node-952cca")
def node_creation_hook_creates_a_node():
    with graph.node_creation_hook(lambda node: torch.ones(1, requires_grad=True) * 2):
        _leaf() * 2


@fix("creating-a-new-autograd-node-from-inside-a-node-952cca",
     en="a node-creation hook records what it needs without running autograd operations",
     zh="节点创建钩子只记录需要的信息，不在里面执行会建图的运算")
def node_creation_hook_without_autograd_ops():
    names = []
    with graph.node_creation_hook(lambda node: names.append(node.name())):
        _leaf() * 2
    return names


# --- module forward hooks -----------------------------------------------------------------------------------

@trigger("forward-pre-hook-must-return-none-or-a-tuple-167fec")
def with_kwargs_pre_hook_returns_args_only():
    m = nn.Linear(2, 2)
    m.register_forward_pre_hook(lambda module, args, kwargs: (args,), with_kwargs=True)
    m(torch.ones(1, 2))


@fix("forward-pre-hook-must-return-none-or-a-tuple-167fec",
     en="a with_kwargs=True pre-hook returns None or the pair (args, kwargs)",
     zh="with_kwargs=True 的前向预钩子返回 None 或 (args, kwargs) 二元组")
def with_kwargs_pre_hook_returns_args_and_kwargs():
    m = nn.Linear(2, 2)
    m.register_forward_pre_hook(lambda module, args, kwargs: ((args[0] * 2,), kwargs), with_kwargs=True)
    return tuple(m(torch.ones(1, 2)).shape)


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


@fix("module-forward-hook-with-always-call-true-raised-an-5c79d6",
     en="an always_call=True hook runs after a failed forward too: it must not raise, so the forward's error is seen",
     zh="always_call=True 的钩子在前向失败时也会运行：它自己不能再抛异常，前向的错误才不会被掩盖")
def always_call_hook_that_does_not_raise():
    calls = []
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda *args: calls.append("hook"), always_call=True)
    m.forward = _failing_forward
    try:
        m(torch.ones(2))
    except KeyError as error:
        return calls, f"{type(error).__name__}: {error}"


@trigger("global-module-forward-hook-with-always-call-true-raised-aae593")
def global_always_call_hook_raises_after_forward_raised():
    m = nn.Linear(2, 2)
    m.forward = _failing_forward
    handle = nn.modules.module.register_module_forward_hook(_failing_hook, always_call=True)
    try:
        m(torch.ones(2))
    finally:
        handle.remove()


@fix("global-module-forward-hook-with-always-call-true-raised-aae593",
     en="a global always_call=True hook must not raise: it runs after a failed forward, whose error is then seen",
     zh="全局 always_call=True 钩子不能抛异常：前向失败后它仍会运行，前向的错误才能被看到")
def global_always_call_hook_that_does_not_raise():
    calls = []
    m = nn.Linear(2, 2)
    m.forward = _failing_forward
    handle = nn.modules.module.register_module_forward_hook(lambda *args: calls.append("hook"), always_call=True)
    try:
        m(torch.ones(2))
    except KeyError as error:
        return calls, f"{type(error).__name__}: {error}"
    finally:
        handle.remove()


no_fix("you-are-trying-to-call-the-hook-of-a-17fd4b",
       why="_WrappedHook is nn.Module's private wrapper of a hook that holds its module weakly; no public API "
           "calls it after its module is gone",
       zh="_WrappedHook 是 nn.Module 内部用来弱引用模块的钩子包装；模块销毁之后，没有公开接口会再调用它")
no_fix("you-are-trying-to-revive-the-hook-of-a-88ebda",
       why="_WrappedHook is nn.Module's private wrapper of a hook that holds its module weakly; no public API "
           "unpickles it after its module is gone",
       zh="_WrappedHook 是 nn.Module 内部用来弱引用模块的钩子包装；模块销毁之后，没有公开接口会再反序列化它")


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


@fix("backward-hook-returned-an-invalid-number-of-grad-input-7524f2",
     en="a full backward hook returns a tuple as long as grad_input (or None)",
     zh="完整反向钩子返回的元组长度要和 grad_input 一样（或返回 None）")
def full_backward_hook_returns_one_gradient_per_input():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda module, grad_input, grad_output: (torch.zeros_like(grad_input[0]),))
    x = torch.ones(1, 2, requires_grad=True)
    m(x).sum().backward()
    return x.grad.tolist()


@trigger("backward-pre-hook-returned-an-invalid-number-of-grad-b9e709")
def full_backward_pre_hook_returns_too_many_gradients():
    m = nn.Linear(2, 2)
    m.register_full_backward_pre_hook(lambda module, grad_output: (grad_output[0], grad_output[0]))
    m(torch.ones(1, 2, requires_grad=True)).sum().backward()


@fix("backward-pre-hook-returned-an-invalid-number-of-grad-b9e709",
     en="a full backward pre-hook returns a tuple as long as grad_output (or None)",
     zh="完整反向预钩子返回的元组长度要和 grad_output 一样（或返回 None）")
def full_backward_pre_hook_returns_one_gradient_per_output():
    m = nn.Linear(2, 2)
    m.register_full_backward_pre_hook(lambda module, grad_output: (torch.zeros_like(grad_output[0]),))
    x = torch.ones(1, 2, requires_grad=True)
    m(x).sum().backward()
    return x.grad.abs().sum().item()


@trigger("backward-hook-for-modules-where-no-input-requires-gradie-6d8fad")
def full_backward_hook_returns_a_gradient_when_no_input_requires_grad():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda module, grad_input, grad_output: (torch.ones(1, 2),))
    m(torch.ones(1, 2)).sum().backward()


@fix("backward-hook-for-modules-where-no-input-requires-gradie-6d8fad",
     en="a hook can replace grad_input only when an input requires grad: make it require grad (or return None)",
     zh="只有输入需要梯度时，钩子才能替换 grad_input：让输入 requires_grad（否则返回 None）")
def full_backward_hook_replaces_the_gradient_of_an_input_that_requires_grad():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda module, grad_input, grad_output: (torch.ones(1, 2),))
    x = torch.ones(1, 2, requires_grad=True)
    m(x).sum().backward()
    return x.grad.tolist()


@trigger("full-backward-hook-is-firing-when-gradients-are-computed-37661b")
def full_backward_hook_when_no_input_requires_grad():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda module, grad_input, grad_output: None)
    m(torch.ones(1, 2)).sum().backward()


@fix("full-backward-hook-is-firing-when-gradients-are-computed-37661b",
     en="give the module an input that requires grad, so the hook sees a grad_input",
     zh="给模块一个 requires_grad 的输入，钩子才看得到 grad_input")
def full_backward_hook_when_an_input_requires_grad():
    seen = []
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda module, grad_input, grad_output: seen.append(
        [g is None for g in grad_input]))
    m(torch.ones(1, 2, requires_grad=True)).sum().backward()
    return seen


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


class _TupleOutput(nn.Module):
    def forward(self, x):
        return (x * 2,)


@fix("for-backward-hooks-to-be-called-module-output-should-7dc9ec",
     en="a module with backward hooks returns a tensor or a tuple of tensors (build the dict outside it)",
     zh="带反向钩子的模块要返回张量或张量元组（字典在模块外面组装）")
def full_backward_hook_on_a_module_returning_a_tuple():
    seen = []
    m = _TupleOutput()
    m.register_full_backward_hook(lambda module, grad_input, grad_output: seen.append(len(grad_output)))
    out = {"y": m(_leaf())[0]}
    out["y"].sum().backward()
    return seen


@trigger("using-non-full-backward-hooks-on-a-module-that-ae4258")
def old_backward_hook_on_a_module_returning_a_dict():
    m = _DictOutput()
    m.register_backward_hook(lambda *args: None)
    m(_leaf())


class _TensorOutput(nn.Module):
    def forward(self, x):
        return x * 2


@fix("using-non-full-backward-hooks-on-a-module-that-ae4258",
     en="use register_full_backward_hook, on a module that returns a tensor or a tuple of tensors",
     zh="改用 register_full_backward_hook，模块返回张量或张量元组")
def full_backward_hook_on_a_module_returning_a_tensor():
    seen = []
    m = _TensorOutput()
    m.register_full_backward_hook(lambda module, grad_input, grad_output: seen.append(len(grad_output)))
    m(_leaf()).sum().backward()
    return seen


@trigger("using-non-full-backward-hooks-on-a-module-that-aa606b")
def old_backward_hook_on_a_module_taking_a_list():
    m = _ListInput()
    m.register_backward_hook(lambda *args: None)
    m([_leaf()])


class _TensorInput(nn.Module):
    def forward(self, x):
        return x * 2


@fix("using-non-full-backward-hooks-on-a-module-that-aa606b",
     en="use register_full_backward_hook, on a module that takes its tensors as positional arguments",
     zh="改用 register_full_backward_hook，模块的张量以位置参数传入")
def full_backward_hook_on_a_module_taking_a_tensor():
    seen = []
    m = _TensorInput()
    m.register_full_backward_hook(lambda module, grad_input, grad_output: seen.append(len(grad_input)))
    m(_leaf()).sum().backward()
    return seen


@trigger("using-a-non-full-backward-hook-when-outputs-are-c05164")
def old_backward_hook_on_outputs_from_two_nodes():
    m = _TwoOutputs()
    m.register_backward_hook(lambda *args: None)
    m(_leaf())


@fix("using-a-non-full-backward-hook-when-outputs-are-c05164",
     en="use register_full_backward_hook: it sees the gradients of every output",
     zh="改用 register_full_backward_hook：它能看到所有输出的梯度")
def full_backward_hook_on_outputs_from_two_nodes():
    seen = []
    m = _TwoOutputs()
    m.register_full_backward_hook(lambda module, grad_input, grad_output: seen.append(len(grad_output)))
    a, b = m(_leaf())
    (a + b).sum().backward()
    return seen


@trigger("using-a-non-full-backward-hook-when-the-forward-26d2b3")
def old_backward_hook_on_a_forward_of_two_nodes():
    m = _TwoNodes()
    m.register_backward_hook(lambda *args: None)
    m(_leaf()).sum().backward()


@fix("using-a-non-full-backward-hook-when-the-forward-26d2b3",
     en="use register_full_backward_hook: it sees the module's inputs and outputs, however many nodes the forward makes",
     zh="改用 register_full_backward_hook：不管前向生成多少个节点，它看到的都是模块的输入和输出")
def full_backward_hook_on_a_forward_of_two_nodes():
    seen = []
    m = _TwoNodes()
    m.register_full_backward_hook(lambda module, grad_input, grad_output: seen.append(tuple(grad_input[0].shape)))
    m(_leaf()).sum().backward()
    return seen


@trigger("cannot-use-both-regular-backward-hooks-and-full-backward-882bba")
def old_and_full_backward_hooks_on_one_module():
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda *args: None)
    m.register_backward_hook(lambda *args: None)


@fix("cannot-use-both-regular-backward-hooks-and-full-backward-882bba",
     en="use full backward hooks only (register_backward_hook is the deprecated kind)",
     zh="只用完整反向钩子（register_backward_hook 是已弃用的旧接口）")
def full_backward_hooks_only_on_one_module():
    seen = []
    m = nn.Linear(2, 2)
    m.register_full_backward_hook(lambda *args: seen.append("first"))
    m.register_full_backward_hook(lambda *args: seen.append("second"))
    m(torch.ones(1, 2, requires_grad=True)).sum().backward()
    return seen


@trigger("cannot-use-both-regular-backward-hooks-and-full-backward-622eca")
def old_and_full_global_backward_hooks():
    handle = nn.modules.module.register_module_full_backward_hook(lambda *args: None)
    try:
        nn.modules.module.register_module_backward_hook(lambda *args: None).remove()
    finally:
        handle.remove()


@fix("cannot-use-both-regular-backward-hooks-and-full-backward-622eca",
     en="use global full backward hooks only (register_module_full_backward_hook)",
     zh="全局钩子也只用完整反向钩子（register_module_full_backward_hook）")
def global_full_backward_hooks_only():
    seen = []
    handles = [nn.modules.module.register_module_full_backward_hook(lambda *args, name=name: seen.append(name))
               for name in ("first", "second")]
    try:
        nn.Linear(2, 2)(torch.ones(1, 2, requires_grad=True)).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return seen


@trigger("backward-hook-on-tensor-will-not-be-serialized-if-fd6c54")
def tensor_with_a_hook_checked_for_serialization():
    x = _leaf()
    x.register_hook(lambda g: g)
    torch.utils.hooks.warn_if_has_hooks(x)


@fix("backward-hook-on-tensor-will-not-be-serialized-if-fd6c54",
     en="a hook that need not be serialized says so with @torch.utils.hooks.unserializable_hook",
     zh="不需要序列化的钩子用 @torch.utils.hooks.unserializable_hook 标明")
def tensor_with_an_unserializable_hook_checked_for_serialization():
    @torch.utils.hooks.unserializable_hook
    def hook(g):
        return g
    x = _leaf()
    x.register_hook(hook)
    torch.utils.hooks.warn_if_has_hooks(x)
    return len(x._backward_hooks)


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


@fix("trying-to-execute-accumulategrad-node-that-was-poisoned-4ebe31",
     en="convert the module (m.double()) before the forward, or after the backward, never in between",
     zh="在前向之前（或反向之后）转换模块（m.double()），不要夹在前向和反向之间")
def module_converted_before_the_forward_with_swapped_parameters():
    m = nn.Linear(2, 2)
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        m.double()
        m(torch.ones(2, dtype=torch.float64)).sum().backward()
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    return str(m.weight.grad.dtype)


# --- state_dict and optimizer hooks -------------------------------------------------------------------------

@trigger("state-dict-post-hook-must-return-none-df0a56")
def state_dict_post_hook_returns_a_value():
    m = nn.Linear(2, 2)
    m.register_state_dict_post_hook(lambda module, state_dict, prefix, local_metadata: {})
    m.state_dict()


@fix("state-dict-post-hook-must-return-none-df0a56",
     en="a state_dict post-hook edits the state_dict in place and returns None",
     zh="state_dict 后置钩子原地修改 state_dict，返回 None")
def state_dict_post_hook_edits_in_place():
    def drop_bias(module, state_dict, prefix, local_metadata):
        state_dict.pop(f"{prefix}bias")
    m = nn.Linear(2, 2)
    m.register_state_dict_post_hook(drop_bias)
    return sorted(m.state_dict())


@trigger("cannot-register-the-same-function-as-the-state-dict-5bf49a")
def one_function_as_public_and_private_state_dict_hook():
    m = nn.Linear(2, 2)

    def hook(*args):
        return None
    m.register_state_dict_post_hook(hook)
    m._register_state_dict_hook(hook)


@fix("cannot-register-the-same-function-as-the-state-dict-5bf49a",
     en="register the function once, with the public register_state_dict_post_hook",
     zh="同一个函数只用公开的 register_state_dict_post_hook 注册一次")
def one_function_as_the_public_state_dict_hook():
    calls = []

    def hook(module, state_dict, prefix, local_metadata):
        calls.append(sorted(state_dict))
    m = nn.Linear(2, 2)
    m.register_state_dict_post_hook(hook)
    m.state_dict()
    return calls


@trigger("hooks-registered-with-register-load-state-dict-post-hook-3a7297")
def load_state_dict_post_hook_returns_a_value():
    m = nn.Linear(2, 2)
    m.register_load_state_dict_post_hook(lambda module, incompatible_keys: incompatible_keys)
    m.load_state_dict(m.state_dict())


@fix("hooks-registered-with-register-load-state-dict-post-hook-3a7297",
     en="a load_state_dict post-hook edits incompatible_keys in place and returns None",
     zh="load_state_dict 后置钩子原地修改 incompatible_keys，返回 None")
def load_state_dict_post_hook_returns_none():
    seen = []
    m = nn.Linear(2, 2)
    m.register_load_state_dict_post_hook(lambda module, incompatible_keys: seen.append(
        len(incompatible_keys.missing_keys)))
    result = m.load_state_dict(m.state_dict())
    return seen, result


@trigger("must-return-none-or-a-tuple-of-new-args-afff20")
def optimizer_step_pre_hook_returns_a_value():
    opt = torch.optim.SGD([nn.Parameter(torch.ones(2))], lr=0.1)
    opt.register_step_pre_hook(lambda optimizer, args, kwargs: 1)
    opt.step()


@fix("must-return-none-or-a-tuple-of-new-args-afff20",
     en="an optimizer step pre-hook returns None (or a new (args, kwargs) pair)",
     zh="优化器 step 预钩子返回 None（或新的 (args, kwargs) 二元组）")
def optimizer_step_pre_hook_returns_none():
    calls = []
    p = nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    opt = torch.optim.SGD([p], lr=0.5)
    opt.register_step_pre_hook(lambda optimizer, args, kwargs: calls.append("pre-step"))
    opt.step()
    return calls, p.detach().tolist()


# --- DebugMode's dispatch hooks ------------------------------------------------------------------------------

@trigger("hook-must-return-none-or-dict-got-d39de6")
def debug_mode_log_hook_returns_a_string():
    from torch.utils._debug_mode import DebugMode

    def log_norm(func, types, args, kwargs, result):
        return f"norm={result.norm():.3f}"  # a string where a dict is expected
    with DebugMode(), DebugMode.dispatch_hooks(log_hook=log_norm):
        torch.ones(2) + 1


@fix("hook-must-return-none-or-dict-got-d39de6",
     en="a DebugMode log_hook returns a dict (or None); DebugMode prints it next to the op",
     zh="DebugMode 的 log_hook 返回字典（或 None）；DebugMode 把它打印在运算旁边")
def debug_mode_log_hook_returns_a_dict():
    from torch.utils._debug_mode import DebugMode

    def log_norm(func, types, args, kwargs, result):
        return {"norm": round(float(result.norm()), 3)}
    with DebugMode() as mode, DebugMode.dispatch_hooks(log_hook=log_norm):
        torch.ones(2) + 1
    return mode.debug_string()


test_trigger = triggers_of(__name__)
test_fix = fixes_of(__name__)
