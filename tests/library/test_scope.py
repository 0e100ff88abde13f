import pytest
import torch
from torch import nn

from hooklab import HookScope, hook_inventory, named_scope, no_hooks_left_behind


def noop(*args, **kwargs):
    return None


@pytest.fixture
def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def test_scope_removes_its_hooks_on_exit(model):
    with no_hooks_left_behind(model), HookScope() as scope:
        scope.add(model[0].register_forward_hook(noop))
        scope.add(model[2].weight.register_hook(noop))
        assert len(scope) == 2
        assert len(hook_inventory(model)) == 2
    assert len(scope) == 0


def test_scope_removes_hooks_when_body_raises(model):
    with no_hooks_left_behind(model), pytest.raises(RuntimeError, match="boom"):
        with HookScope() as scope:
            scope.add(model[0].register_forward_pre_hook(noop))
            scope.add(model.register_full_backward_hook(noop))
            raise RuntimeError("boom")


def test_removed_hooks_no_longer_fire(model):
    calls = []
    with HookScope() as scope:
        scope.add(model[0].register_forward_hook(lambda m, i, o: calls.append("fired")))
        model(torch.randn(1, 3))
    model(torch.randn(1, 3))
    assert calls == ["fired"]


def test_nested_scopes_remove_only_their_own(model):
    with no_hooks_left_behind(model), HookScope() as outer:
        outer.add(model[0].register_forward_hook(noop))
        with HookScope() as inner:
            inner.add(model[2].register_forward_hook(noop))
            assert len(hook_inventory(model)) == 2
        remaining = hook_inventory(model)
        assert [(e.where, e.kind) for e in remaining] == [("0", "forward")]


def test_add_returns_the_handle_and_remove_counts(model):
    scope = HookScope()
    handle = model[0].register_forward_hook(noop)
    assert scope.add(handle) is handle
    scope.add(model[1].register_forward_hook(noop))
    assert scope.remove() == 2
    assert scope.remove() == 0


def test_scope_owns_node_and_global_hooks():
    x = torch.randn(3, requires_grad=True)
    y = (x * 2).sum()
    seen = []
    with no_hooks_left_behind(), HookScope() as scope:  # no owner: the global hooks
        scope.add(y.grad_fn.register_prehook(lambda grad_outputs: seen.append("node")))
        scope.add(nn.modules.module.register_module_forward_hook(noop))
        assert len(hook_inventory(None)) == 1
    y.backward()  # the Node hook is gone too (hook_inventory cannot list Node hooks): it does not fire
    assert seen == []


def test_add_rejects_a_function_with_a_hint(model):
    with pytest.raises(TypeError, match="register it first"):
        HookScope().add(noop)
    with pytest.raises(TypeError, match="got int"):
        HookScope().add(3)


def test_add_rejects_a_collection_of_handles_and_keeps_nothing(model):
    with no_hooks_left_behind(model):
        handles = [model[0].register_forward_hook(noop), model[2].register_forward_hook(noop)]
        scope = HookScope()
        with pytest.raises(TypeError, match="add each handle on its own"):
            scope.add(handles)  # a list has .remove, but .remove(value) is not a handle's remove()
        with pytest.raises(TypeError, match="got set"):
            scope.add(set())
        assert len(scope) == 0
        for handle in handles:
            handle.remove()


class FailingHandle:
    def remove(self):
        raise RuntimeError("this handle cannot be removed")


def test_a_failing_handle_does_not_stop_the_others_from_being_removed(model):
    with no_hooks_left_behind(model):  # both real hooks are gone
        scope = HookScope()
        scope.add(model[0].register_forward_hook(noop))
        scope.add(FailingHandle())
        scope.add(model[2].register_forward_hook(noop))
        with pytest.raises(RuntimeError, match="cannot be removed"):
            scope.remove()
    assert len(scope) == 0 and scope.remove() == 0  # and nothing is retried later


def test_named_scope_rerun_replaces_instead_of_stacking(model):
    calls = []

    def cell():  # what a notebook cell would run, twice
        scope = named_scope("test-cell")
        scope.add(model[0].register_forward_hook(lambda m, i, o: calls.append(1)))

    with no_hooks_left_behind(model):
        cell()
        cell()
        model(torch.randn(1, 3))
        assert calls == [1]
        assert len(hook_inventory(model)) == 1
        assert named_scope("test-cell") is named_scope("test-cell")  # asked for again: emptied


def test_named_scope_needs_a_name():
    with pytest.raises(TypeError, match="non-empty string"):
        named_scope("")


def test_repr_has_no_address(model):
    scope = HookScope("demo")
    scope.add(model[0].register_forward_hook(noop))
    assert repr(scope) == "HookScope 'demo'(1 hooks)"
    scope.remove()


def test_a_scope_registered_before_its_block_is_spent_after_it():
    """S8: a clip or offload scope entered a second time used to run a block in which nothing happened."""
    import hooklab

    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    with no_hooks_left_behind(lin):
        scope = hooklab.clip_grad_value_hooks(lin, 0.01)
        with scope:
            lin(torch.randn(8, 4) * 100).sum().backward()
        assert lin.weight.grad.abs().max().item() <= 0.01  # clipped in the first block (plain truth: the bound)
        with pytest.raises(RuntimeError, match="already been removed .* make a new one"):
            with scope:
                pass
        offload = hooklab.offload_module(lin, lambda: hooklab.SaveOnCpu())
        offload.remove()
        with pytest.raises(RuntimeError, match="make a new one"):
            with offload:
                pass


def test_a_scope_filled_inside_its_block_or_refilled_can_be_entered_again(model):
    with no_hooks_left_behind(model):
        scope = HookScope()
        for _ in range(2):  # filled inside each block: the caller adds the hooks every time
            with scope:
                scope.add(model[0].register_forward_hook(noop))
        scope.add(model[0].register_forward_hook(noop))  # refilled after removal: live again
        with scope:
            assert len(hook_inventory(model)) == 1
        for _ in range(2):  # named scopes are refilled by design
            with named_scope("test-spent") as named:
                named.add(model[0].register_forward_hook(noop))


def test_adding_under_a_key_replaces_and_removes_the_previous_handle(model):
    fired = []
    scope = HookScope()
    scope.add(model[0].register_forward_hook(lambda m, a, o: fired.append("old")), key="fc")
    scope.add(model[0].register_forward_hook(lambda m, a, o: fired.append("new")), key="fc")
    scope.add(model[2].register_forward_hook(noop))
    model(torch.randn(1, 3))
    assert fired == ["new"] and len(scope) == 2 and scope.get("fc") is not None and scope.get("other") is None
    assert scope.remove() == 2 and hook_inventory(model) == []


def test_prune_forgets_the_hooks_of_freed_tensors_and_keeps_the_rest(model):
    scope = HookScope()
    scope.add(model[0].register_forward_hook(noop))
    kept = torch.ones(2, requires_grad=True) * 2
    scope.add(kept.register_hook(noop))
    for _ in range(100):  # tensors freed right away: their hook dicts go with them
        scope.add((torch.ones(2, requires_grad=True) * 2).register_hook(noop))
    assert len(scope) == 102
    assert scope.prune() == 2  # the module hook and the hook of the tensor still alive
    assert len(kept._backward_hooks) == 1 and len(model[0]._forward_hooks) == 1
    scope.remove()


def test_prune_walks_only_once_the_handles_have_doubled(model):
    scope = HookScope()
    for _ in range(10):
        scope.add((torch.ones(2, requires_grad=True) * 2).register_hook(noop))
    assert scope.prune() == 10  # under 64 handles: not walked yet (cheap to call at every step)


def test_repr_names_the_subclass():
    class ClipScope(HookScope):
        pass

    assert repr(ClipScope("clip")) == "ClipScope 'clip'(0 hooks)" and repr(HookScope()) == "HookScope(0 hooks)"


def test_a_copy_of_a_local_hook_is_inert_and_picklable(model):
    import copy
    import pickle

    from hooklab.scope import InertHook, LocalHook

    calls = []
    model[0].register_forward_hook(LocalHook(lambda m, a, o: calls.append(m), "tool", model[0]))
    twin = copy.deepcopy(model)
    hook = next(iter(twin[0]._forward_hooks.values()))
    assert isinstance(hook, InertHook) and hook_inventory(twin)[0].hook == "inert copy of test_a_copy_of_a_local_hook_" \
        "is_inert_and_picklable.<lambda>"
    twin(torch.randn(1, 3))
    model(torch.randn(1, 3))
    assert calls == [model[0]]
    again = pickle.loads(pickle.dumps(twin))
    assert isinstance(next(iter(again[0]._forward_hooks.values())), InertHook)
    model[0]._forward_hooks.clear()
