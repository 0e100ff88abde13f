"""Trigger tests: errors met because of a hook although their words do not say so (the curated messages of
docs/hook_messages.toml that no notebook cell shows)."""
from __future__ import annotations

import copy
import pickle

import torch
from torch import nn

from message_triggers import fix, fixes_of, trigger, triggers_of


@trigger("hook-has-returned-an-incorrect-number-of-values-got-08380e")
def node_hook_returns_fewer_gradients_than_inputs():
    x, w = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    y = x * w
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0],))
    y.sum().backward()


@fix("hook-has-returned-an-incorrect-number-of-values-got-08380e",
     en="a Node hook returns one gradient per input of the node (grad_inputs has two here)",
     zh="Node 钩子要为节点的每个输入返回一个梯度（这里 grad_inputs 有两项）")
def node_hook_returns_one_gradient_per_input():
    x, w = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    y = x * w
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] * 2, grad_inputs[1]))
    y.sum().backward()
    return x.grad.tolist(), w.grad.tolist()


@trigger("can-t-replace-a-none-gradient-with-a-non-62423f")
def node_hook_returns_a_gradient_where_there_was_none():
    x = torch.ones(2, requires_grad=True)
    y = x * torch.ones(2)  # the second input needs no gradient: its grad_input is None
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0], grad_inputs[0]))
    y.sum().backward()


@fix("can-t-replace-a-none-gradient-with-a-non-62423f",
     en="a Node hook keeps None where the input needs no gradient",
     zh="输入不需要梯度的位置，Node 钩子保持返回 None")
def node_hook_keeps_none_where_there_was_none():
    x = torch.ones(2, requires_grad=True)
    y = x * torch.ones(2)
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] * 2, grad_inputs[1]))
    y.sum().backward()
    return x.grad.tolist()


@trigger("element-of-tensors-does-not-require-grad-and-does-704a78")
def forward_hook_returns_a_detached_output():
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: output.detach())
    m(torch.ones(1, 2)).sum().backward()


@fix("element-of-tensors-does-not-require-grad-and-does-704a78",
     en="a forward hook that records keeps a detached copy and returns None, so the output stays in the graph",
     zh="做记录的前向钩子保存 detach 后的副本并返回 None，输出才留在计算图里")
def forward_hook_records_a_detached_copy():
    store = []
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: store.append(output.detach()))
    m(torch.ones(1, 2)).sum().backward()
    return len(store), tuple(m.weight.grad.shape)


@trigger("can-t-call-numpy-on-tensor-that-requires-grad-df5829")
def forward_hook_stores_numpy_without_detach():
    store = []
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: store.append(output.numpy()))
    m(torch.ones(1, 2))


@fix("can-t-call-numpy-on-tensor-that-requires-grad-df5829",
     en="detach before .numpy(): output.detach().numpy()",
     zh="先 detach 再 .numpy()：output.detach().numpy()")
def forward_hook_stores_numpy_after_detach():
    store = []
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: store.append(output.detach().numpy()))
    m(torch.ones(1, 2))
    return [a.shape for a in store]


@trigger("a-leaf-variable-that-requires-grad-is-being-used-ab8ca3")
def forward_pre_hook_clamps_the_weight_in_place():
    m = nn.Linear(2, 2)
    m.register_forward_pre_hook(lambda module, args: module.weight.clamp_(-0.1, 0.1) and None)
    m(torch.ones(1, 2))


@fix("a-leaf-variable-that-requires-grad-is-being-used-ab8ca3",
     en="change a parameter in place under torch.no_grad()",
     zh="在 torch.no_grad() 下原地修改参数")
def forward_pre_hook_clamps_the_weight_under_no_grad():
    def clamp_weight(module, args):
        with torch.no_grad():
            module.weight.clamp_(-0.1, 0.1)
    m = nn.Linear(2, 2)
    m.register_forward_pre_hook(clamp_weight)
    m(torch.ones(1, 2)).sum().backward()
    return bool(m.weight.abs().max() <= 0.1), tuple(m.weight.grad.shape)


@trigger("only-tensors-created-explicitly-by-the-user-graph-leaves-c0c8cb")
def deepcopy_after_a_hook_stored_its_output_without_detach():
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: setattr(module, "last_output", output))
    m(torch.ones(1, 2))
    copy.deepcopy(m)  # the stored output is a non-leaf tensor that carries the graph


@fix("only-tensors-created-explicitly-by-the-user-graph-leaves-c0c8cb",
     en="a hook that keeps an output stores output.detach(), which carries no graph",
     zh="钩子保存输出时存 output.detach()，它不带计算图")
def deepcopy_after_a_hook_stored_its_output_detached():
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: setattr(module, "last_output", output.detach()))
    m(torch.ones(1, 2))
    twin = copy.deepcopy(m)
    return twin.last_output.requires_grad, tuple(twin.last_output.shape)


@trigger("backward-hook-for-modules-where-no-input-requires-gradie-6d8fad")
def full_backward_hook_returns_a_gradient_for_an_input_passed_by_keyword():
    class KeywordInput(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x=None):
            return self.lin(x)
    m = KeywordInput()
    m.register_full_backward_hook(lambda module, grad_input, grad_output: (torch.ones(1, 2),))
    m(x=torch.ones(1, 2, requires_grad=True)).sum().backward()


def _model_with_a_local_hook() -> nn.Module:
    def log_call(module, args, output):
        return None
    m = nn.Linear(2, 2)
    m.register_forward_hook(log_call)
    return m


@trigger("can-t-pickle-local-object-6252a7")
def pickling_a_model_whose_hook_is_a_local_function():
    pickle.dumps(_model_with_a_local_hook())


def _log_call(module, args, output):
    return None


@fix("can-t-pickle-local-object-6252a7",
     en="a hook that travels with a pickled model is a module-level function (or remove it before pickling)",
     zh="要随模型一起 pickle 的钩子必须是模块级函数（或在 pickle 之前移除它）")
def pickling_a_model_whose_hook_is_a_module_level_function():
    m = nn.Linear(2, 2)
    m.register_forward_hook(_log_call)
    twin = pickle.loads(pickle.dumps(m))
    return len(twin._forward_hooks)


test_trigger = triggers_of(__name__)
test_fix = fixes_of(__name__)
