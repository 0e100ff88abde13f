import functools

import pytest
import torch
from torch import nn

from hooklab import HookEntry, HookScope, hook_inventory, hook_name, show_hooks


def print_shape(module, args, output):
    return None


@pytest.fixture
def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU())


def test_every_module_hook_kind_is_listed(model):
    lin = model[0]
    with HookScope() as scope:
        scope.add(lin.register_forward_pre_hook(print_shape))
        scope.add(lin.register_forward_hook(print_shape))
        scope.add(lin.register_full_backward_pre_hook(print_shape))
        scope.add(lin.register_full_backward_hook(print_shape))
        scope.add(lin.register_state_dict_pre_hook(print_shape))
        scope.add(lin._register_state_dict_hook(print_shape))
        scope.add(lin.register_load_state_dict_post_hook(print_shape))
        kinds = [e.kind for e in hook_inventory(model) if e.where == "0"]
    assert kinds == ["forward_pre", "forward", "backward_pre", "backward",
                     "state_dict_pre", "state_dict", "load_state_dict_post"]


def test_old_style_backward_hook_is_marked(model):
    with HookScope() as scope:
        scope.add(model[0].register_backward_hook(print_shape))
        assert hook_inventory(model) == [HookEntry("0", "backward (old-style)", "print_shape")]


def test_parameter_and_tensor_hooks(model):
    with HookScope() as scope:
        scope.add(model[0].bias.register_hook(lambda g: g))
        scope.add(model[0].weight.register_post_accumulate_grad_hook(print_shape))
        entries = hook_inventory(model)
    assert [(e.where, e.kind) for e in entries] == [("0.weight", "post_accumulate_grad"), ("0.bias", "tensor")]

    x = torch.randn(2, requires_grad=True)
    y = x * 2
    y.retain_grad()
    with HookScope() as scope:
        scope.add(y.register_hook(lambda g: g))
        assert [e.kind for e in hook_inventory(y, name="y")] == ["tensor", "retain_grad"]


def test_global_hooks_are_listed_and_can_be_left_out(model):
    with HookScope() as scope:
        scope.add(nn.modules.module.register_module_forward_pre_hook(print_shape))
        scope.add(nn.modules.module.register_module_full_backward_hook(print_shape))
        assert [(e.where, e.kind) for e in hook_inventory(model)] == [
            ("(global)", "forward_pre"), ("(global)", "backward")]
        assert hook_inventory(model, include_global=False) == []


def test_prepend_order_is_firing_order(model):
    def first(m, a):
        return None

    def second(m, a):
        return None

    with HookScope() as scope:
        scope.add(model[0].register_forward_pre_hook(second))
        scope.add(model[0].register_forward_pre_hook(first, prepend=True))
        assert [e.hook.split(".")[-1] for e in hook_inventory(model)] == ["first", "second"]


def test_names_are_stable_and_address_free():
    class Hooker:
        def method(self, *a):
            return None

        def __call__(self, *a):
            return None

    def outer():
        def inner():
            return None
        return inner

    assert hook_name(print_shape) == "print_shape"
    assert hook_name(lambda: None) == "test_names_are_stable_and_address_free.<lambda>"
    assert hook_name(outer()) == "test_names_are_stable_and_address_free.outer.inner"
    assert hook_name(Hooker().method).endswith("Hooker.method")
    assert hook_name(Hooker()) == "Hooker"
    assert hook_name(functools.partial(print_shape, 1)) == "partial(print_shape)"


def test_show_hooks_prints_a_table_or_none(model, capsys):
    assert show_hooks(model) == []
    assert capsys.readouterr().out == "no hooks registered\n"
    with HookScope() as scope:
        scope.add(model[1].register_forward_hook(print_shape))
        show_hooks(model, name="net")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["where", "kind", "hook"]
    assert lines[1].split() == ["net.1", "forward", "print_shape"]


def test_bad_input():
    with pytest.raises(TypeError, match="nn.Module, a tensor, an optimizer or None"):
        hook_inventory("model")


def test_no_hooks_left_behind_passes_clean_code_and_names_a_leak():
    from torch import nn

    from hooklab import HooksLeftBehind, no_hooks_left_behind
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    kept = model[0].register_forward_hook(lambda m, a, o: None)   # there before: allowed
    with no_hooks_left_behind(model):
        with HookScope() as scope:
            scope.add(model[1].register_forward_pre_hook(lambda m, a: None))
    with pytest.raises(HooksLeftBehind, match=r"1 hook\(s\) left registered") as info:
        with no_hooks_left_behind(model):
            leaked = model[1].register_full_backward_hook(lambda m, gi, go: None)
    assert [(e.where, e.kind, e.hook.split(".")[-1]) for e in info.value.entries] == [("1", "backward", "<lambda>")]
    leaked.remove()
    kept.remove()


def test_no_hooks_left_behind_sees_global_and_tensor_hooks_and_keeps_the_block_error():
    import torch
    from torch.nn.modules.module import register_module_forward_hook

    from hooklab import HooksLeftBehind, no_hooks_left_behind
    t = torch.ones(2, requires_grad=True)
    with pytest.raises(HooksLeftBehind) as info:
        with no_hooks_left_behind(t):
            g = register_module_forward_hook(lambda m, a, o: None)
            h = t.register_hook(lambda grad: None)
            raise ValueError("the block failed")
    assert len(info.value.entries) == 2
    assert isinstance(info.value.__context__, ValueError)
    g.remove()
    h.remove()
    with pytest.raises(TypeError, match="watches modules, tensors and optimizers"):
        with no_hooks_left_behind("model"):
            pass


def test_optimizer_hooks_are_listed_and_a_leaked_one_is_caught():
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from hooklab import HooksLeftBehind, no_hooks_left_behind
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    assert hook_inventory(opt, include_global=False) == []
    pre = opt.register_step_pre_hook(lambda o, args, kwargs: None)
    sd = opt.register_state_dict_post_hook(lambda o, state: None)
    g = register_optimizer_step_post_hook(lambda o, args, kwargs: None)
    try:
        kinds = [(e.where, e.kind) for e in hook_inventory(opt)]
        assert ("optimizer", "step_pre") in kinds and ("optimizer", "state_dict") in kinds
        assert ("(global)", "optimizer_step_post") in kinds
        assert ("(global)", "optimizer_step_post") not in [(e.where, e.kind) for e in hook_inventory(opt, include_global=False)]
    finally:
        pre.remove()
        sd.remove()
        g.remove()
    with pytest.raises(HooksLeftBehind):
        with no_hooks_left_behind(opt):
            leaked = opt.register_step_post_hook(lambda o, args, kwargs: None)
    leaked.remove()
    with pytest.raises(HooksLeftBehind):
        with no_hooks_left_behind():
            leaked = register_optimizer_step_post_hook(lambda o, args, kwargs: None)
    leaked.remove()
    with pytest.raises(TypeError, match="an optimizer"):
        hook_inventory("opt")
