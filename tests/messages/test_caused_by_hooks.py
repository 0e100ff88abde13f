"""Trigger tests: errors met because of a hook although their words do not say so (the curated messages of
docs/hook_messages.toml that no notebook cell shows)."""
from __future__ import annotations

import copy
import pickle

import torch
from torch import nn

from message_triggers import trigger, triggers_of


@trigger("hook-has-returned-an-incorrect-number-of-values-got-08380e")
def node_hook_returns_fewer_gradients_than_inputs():
    x, w = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    y = x * w
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0],))
    y.sum().backward()


@trigger("can-t-replace-a-none-gradient-with-a-non-62423f")
def node_hook_returns_a_gradient_where_there_was_none():
    x = torch.ones(2, requires_grad=True)
    y = x * torch.ones(2)  # the second input needs no gradient: its grad_input is None
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0], grad_inputs[0]))
    y.sum().backward()


@trigger("element-of-tensors-does-not-require-grad-and-does-704a78")
def forward_hook_returns_a_detached_output():
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: output.detach())
    m(torch.ones(1, 2)).sum().backward()


@trigger("can-t-call-numpy-on-tensor-that-requires-grad-df5829")
def forward_hook_stores_numpy_without_detach():
    store = []
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: store.append(output.numpy()))
    m(torch.ones(1, 2))


@trigger("a-leaf-variable-that-requires-grad-is-being-used-ab8ca3")
def forward_pre_hook_clamps_the_weight_in_place():
    m = nn.Linear(2, 2)
    m.register_forward_pre_hook(lambda module, args: module.weight.clamp_(-0.1, 0.1) and None)
    m(torch.ones(1, 2))


@trigger("only-tensors-created-explicitly-by-the-user-graph-leaves-c0c8cb")
def deepcopy_after_a_hook_stored_its_output_without_detach():
    m = nn.Linear(2, 2)
    m.register_forward_hook(lambda module, args, output: setattr(module, "last_output", output))
    m(torch.ones(1, 2))
    copy.deepcopy(m)  # the stored output is a non-leaf tensor that carries the graph


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


test_trigger = triggers_of(__name__)
