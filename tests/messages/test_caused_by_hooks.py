"""Trigger tests: errors met because of a hook although their words do not say so (the curated messages of
docs/hook_messages.toml that no notebook cell shows)."""
from __future__ import annotations

import collections
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


# --- Python's own errors that a hook pattern causes (where = "Python" in docs/hook_messages.toml) ---------------

@trigger("maximum-recursion-depth-exceeded-28c5b6")
def patched_forward_calls_the_patched_forward():
    m = nn.Linear(2, 2)

    def logged_forward(*args, **kwargs):
        return m.forward(*args, **kwargs)  # m.forward is this function now, not the original
    m.forward = logged_forward
    m(torch.ones(1, 2))


@fix("maximum-recursion-depth-exceeded-28c5b6",
     en="keep the original bound forward before patching and call it (patch once: a second patch wraps the wrapper)",
     zh="替换之前先保存原来的绑定方法 forward，包装函数调用它（只打一次补丁：再打一次就包住了包装函数）")
def patched_forward_calls_the_original_forward():
    calls = []
    m = nn.Linear(2, 2)
    if not hasattr(m, "_original_forward"):  # patching again would wrap the wrapper
        m._original_forward = m.forward

        def logged_forward(*args, **kwargs):
            calls.append("forward")
            return m._original_forward(*args, **kwargs)
        m.forward = logged_forward
    out = m(torch.ones(1, 2))
    return calls, tuple(out.shape)


def _pop_started(stack):
    def stop(module, args, output):  # returns None: the output stays as it is
        stack.pop()
    return stop


@trigger("pop-from-empty-list-705be8")
def post_hook_pops_what_a_removed_pre_hook_did_not_push():
    started = []
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    start = m[0].register_forward_pre_hook(lambda module, args: started.append(type(module).__name__))
    m[0].register_forward_hook(_pop_started(started))
    start.remove()  # the pair removed by halves: the post hook still pops
    m(torch.ones(1, 2))


@fix("pop-from-empty-list-705be8",
     en="a pre-hook and the post hook that pops its push are registered and removed together, as one pair",
     zh="压栈的前置钩子和出栈的后置钩子成对注册、成对移除")
def pre_and_post_hooks_removed_together():
    started = []
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    pair = [m[0].register_forward_pre_hook(lambda module, args: started.append(type(module).__name__)),
            m[0].register_forward_hook(_pop_started(started))]
    m(torch.ones(1, 2))
    for handle in pair:
        handle.remove()
    m(torch.ones(1, 2))
    return len(started)


@trigger("pop-from-an-empty-deque-d991a3")
def backward_hook_pops_more_often_than_forward_pushed():
    pending = collections.deque()
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: pending.append(tuple(output.shape)))

    def consume(module, grad_input, grad_output):
        pending.popleft()
    m.register_full_backward_hook(consume)
    loss = m(torch.ones(1, 2, requires_grad=True)).sum()
    loss.backward(retain_graph=True)
    loss.backward()  # a second backward over one forward: the backward hook pops twice


@fix("pop-from-an-empty-deque-d991a3",
     en="one forward per backward (run forward again instead of retain_graph), so every pop has its push",
     zh="每次反向对应一次前向（重新前向，而不是 retain_graph），每次出队都有对应的入队")
def backward_hook_pops_once_per_forward():
    pending = collections.deque()
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: pending.append(tuple(output.shape)))

    def consume(module, grad_input, grad_output):
        pending.popleft()
    m.register_full_backward_hook(consume)
    for _ in range(2):
        m(torch.ones(1, 2, requires_grad=True)).sum().backward()
    return len(pending)


def _accumulate_main_grad(param):
    param.main_grad.add_(param.grad)


@trigger("parameter-object-has-no-attribute-f482be")
def gradient_hook_reads_an_attribute_of_a_replaced_parameter():
    m = nn.Linear(2, 2)
    for p in m.parameters():
        p.main_grad = torch.zeros_like(p)  # an fp32 gradient buffer, set when the model is built
    m.load_state_dict(nn.Linear(2, 2).state_dict(), assign=True)  # assign=True puts new Parameter objects in
    for p in m.parameters():
        p.register_post_accumulate_grad_hook(_accumulate_main_grad)
    m(torch.ones(1, 2)).sum().backward()


@fix("parameter-object-has-no-attribute-f482be",
     en="load without assign=True (it copies into the same Parameter objects), or set the attribute after loading",
     zh="加载时不用 assign=True（它把值拷进原来的 Parameter 对象），或者加载之后再设置这个属性")
def gradient_hook_reads_an_attribute_of_the_kept_parameter():
    m = nn.Linear(2, 2)
    for p in m.parameters():
        p.main_grad = torch.zeros_like(p)
    m.load_state_dict(nn.Linear(2, 2).state_dict())
    for p in m.parameters():
        p.register_post_accumulate_grad_hook(_accumulate_main_grad)
    m(torch.ones(1, 2)).sum().backward()
    return [bool(p.main_grad.equal(p.grad)) for p in m.parameters()]


def _count_ops(module, args, output):
    module.total_ops += output.numel()


@trigger("object-has-no-attribute-c7b88e")
def hook_left_behind_reads_an_attribute_its_tool_deleted():
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    for layer in m:  # a FLOP counter: a buffer and a hook on each layer
        layer.register_buffer("total_ops", torch.zeros(()))
        layer.register_forward_hook(_count_ops)
    m(torch.ones(1, 2))
    for layer in m:  # its clean-up deletes the buffers and forgets the hooks
        del layer.total_ops
    m(torch.ones(1, 2))


@fix("object-has-no-attribute-c7b88e",
     en="the clean-up removes the hooks (their handles) with the attributes they use",
     zh="清理时把钩子（用句柄）和它们用到的属性一起移除")
def hook_removed_with_the_attribute_it_uses():
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    handles = []
    for layer in m:
        layer.register_buffer("total_ops", torch.zeros(()))
        handles.append(layer.register_forward_hook(_count_ops))
    m(torch.ones(1, 2))
    counted = [int(layer.total_ops) for layer in m]
    for layer, handle in zip(m, handles):
        handle.remove()
        del layer.total_ops
    m(torch.ones(1, 2))
    return counted


@trigger("nonetype-object-is-not-subscriptable-f1c2b1")
def reading_grad_of_an_output_a_forward_hook_stored():
    store = {}
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    m[1].register_forward_hook(lambda module, args, output: store.update(act=output))
    m(torch.ones(1, 2)).sum().backward()
    store["act"].grad[0]  # an intermediate tensor: backward kept no .grad for it


@fix("nonetype-object-is-not-subscriptable-f1c2b1",
     en="the forward hook registers a tensor hook on the output, which receives its gradient in backward",
     zh="前向钩子在输出上注册张量钩子，反向时由它接收梯度")
def forward_hook_registers_a_tensor_hook_for_the_gradient():
    store = {}

    def keep(module, args, output):
        store["act"] = output.detach()
        output.register_hook(lambda grad: store.update(grad=grad))
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    m[1].register_forward_hook(keep)
    m(torch.ones(1, 2)).sum().backward()
    return tuple(store["grad"][0].shape)


def _model_with_an_accelerate_hook(returns_output: bool) -> nn.Module:
    from accelerate.hooks import ModelHook, add_hook_to_module

    class LogShape(ModelHook):
        def post_forward(self, module, output):
            self.shape = tuple(output.shape)
            if returns_output:
                return output  # accelerate's module returns what post_forward returns
    m = nn.Linear(2, 2)
    add_hook_to_module(m, LogShape())
    return m


@trigger("nonetype-object-has-no-attribute-8cd7ca")
def library_hook_that_returns_nothing_where_its_value_is_used():
    out = _model_with_an_accelerate_hook(returns_output=False)(torch.ones(1, 2))
    out.shape


@fix("nonetype-object-has-no-attribute-8cd7ca",
     en="a hook whose value the library uses returns it (post_forward returns the output)",
     zh="库要用钩子的返回值时，钩子必须返回它（post_forward 返回 output）")
def library_hook_that_returns_the_output():
    out = _model_with_an_accelerate_hook(returns_output=True)(torch.ones(1, 2))
    return tuple(out.shape)


@trigger("tuple-object-has-no-attribute-size-f4f051")
def forward_hook_calls_size_on_an_lstm_output():
    shapes = []
    lstm = nn.LSTM(3, 4, batch_first=True)
    lstm.register_forward_hook(lambda module, args, output: shapes.append(list(output.size())))
    lstm(torch.ones(1, 2, 3))


@fix("tuple-object-has-no-attribute-size-f4f051",
     en="a recurrent module returns (output, state): the hook takes output[0] when the output is a tuple",
     zh="循环网络模块返回 (output, state)：输出是元组时，钩子取 output[0]")
def forward_hook_takes_the_tensor_out_of_the_tuple():
    shapes = []

    def record(module, args, output):
        tensor = output[0] if isinstance(output, tuple) else output
        shapes.append(list(tensor.size()))
    lstm = nn.LSTM(3, 4, batch_first=True)
    lstm.register_forward_hook(record)
    lstm(torch.ones(1, 2, 3))
    return shapes


test_trigger = triggers_of(__name__)
test_fix = fixes_of(__name__)
