"""The tripwire: every private PyTorch name hooklab uses still exists on the installed torch.

After a torch upgrade, run this file first: a failure names the internal that moved, and
hooklab/_torch_internals.py is the one place to adapt.
"""
from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from hooklab import _torch_internals as internals


def older_than_the_pin() -> bool:
    """True on a torch older than the one uv.lock pins (``./course rerun`` checks hooklab's floor there)."""
    from pathlib import Path

    import tomllib
    from torch.torch_version import TorchVersion
    lock = tomllib.loads((Path(__file__).resolve().parents[2] / "uv.lock").read_text(encoding="utf-8"))
    pinned = next(p["version"] for p in lock["package"] if p["name"] == "torch")
    return TorchVersion(torch.__version__.split("+")[0]) < pinned


def test_every_internal_is_listed_with_what_happens_without_it():
    for name, info in internals.INTERNALS.items():
        assert info.kind in ("required", "fallback"), name
        assert info.feature and info.without, name


def test_storage_cdata_exists_and_identifies_a_storage():
    a = torch.ones(4)
    assert isinstance(a.untyped_storage()._cdata, int)
    assert internals.storage_key(a[1:]) == internals.storage_key(a)
    assert internals.storage_key(torch.ones(4)) != internals.storage_key(a)


def test_version_counter_exists_and_counts_in_place_ops():
    a = torch.ones(3)
    assert isinstance(a._version, int)
    before = internals.version(a)
    a.add_(1)
    assert internals.version(a) == before + 1
    with torch.inference_mode():
        assert internals.version(torch.ones(2)) is None


def test_view_base_exists():
    w = nn.Parameter(torch.ones(2, 3))
    assert w.t()._is_view() and w.t()._base is w
    assert internals.is_parameter_like(w.t())
    assert not internals.is_parameter_like(w.detach() * 2)


@pytest.mark.parametrize("module, name", [
    ("torch.multiprocessing.reductions", "StorageWeakRef"),
    ("torch.utils._python_dispatch", "TorchDispatchMode"),
    ("torch.utils._pytree", "tree_flatten"),
    ("torch._dynamo.eval_frame", "OptimizedModule"),
    ("torch._ops", "OpOverload"),
    ("torch._ops", "OpOverloadPacket"),
])
def test_private_imports_exist(module, name):
    assert getattr(importlib.import_module(module), name) is not None


def test_aten_op_types_are_what_torch_ops_aten_gives():
    assert isinstance(torch.ops.aten.mm, internals.ATEN_OP_TYPES)
    assert isinstance(torch.ops.aten.mm.default, internals.ATEN_OP_TYPES)
    assert not isinstance("mm", internals.ATEN_OP_TYPES)


def test_private_imports_are_the_ones_hooklab_uses():
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    assert internals.StorageWeakRef is StorageWeakRef
    assert internals.TorchDispatchMode is TorchDispatchMode
    assert internals.tree_flatten(((torch.ones(1), 2), {"k": 3})) [1:] == [2, 3]


def test_saved_attributes_of_a_node_exist():
    a = torch.ones(3, requires_grad=True)
    y = a * 2
    assert "_saved_self" in internals.saved_tensor_attrs(y.grad_fn) or \
        "_saved_other" in internals.saved_tensor_attrs(y.grad_fn)
    z = a * a
    assert z.grad_fn._saved_self is not None


@pytest.mark.parametrize("attr", [a for a, _ in internals._GLOBAL.items()] + list(internals.GLOBAL_HOOK_FLAGS))
def test_global_hook_dicts_exist(attr):
    if not hasattr(torch.nn.modules.module, attr) and older_than_the_pin():
        pytest.skip(f"torch {torch.__version__} (older than the pin) has no {attr} yet; hooklab reads it as empty")
    assert isinstance(getattr(torch.nn.modules.module, attr), dict)


def test_global_hook_dicts_see_a_registered_hook():
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        found = [kind for _, kind, d in internals.global_hook_dicts() if handle.id in d]
        assert found == ["forward"]
    finally:
        handle.remove()


@pytest.mark.parametrize("attr", list(internals._MODULE))
def test_module_hook_dicts_exist(attr):
    assert isinstance(getattr(nn.Linear(1, 1), attr), dict)


def test_module_full_backward_flag_exists():
    m = nn.Linear(1, 1)
    assert internals.module_full_backward(m) is None
    h = m.register_full_backward_hook(lambda *a: None)
    try:
        assert internals.module_full_backward(m) is True
    finally:
        h.remove()


def test_tensor_hook_dicts_exist():
    w = torch.ones(2, requires_grad=True)
    h1 = w.register_hook(lambda g: None)
    h2 = w.register_post_accumulate_grad_hook(lambda p: None)
    try:
        assert [(kind, len(d)) for kind, d in internals.tensor_hook_dicts(w)] == \
            [("tensor", 1), ("post_accumulate_grad", 1)]
    finally:
        h1.remove(), h2.remove()


def test_graph_task_id_exists_and_is_minus_one_outside_backward():
    assert callable(torch._C._current_graph_task_id)
    assert internals.current_graph_task_id() == -1
    seen = []
    a = torch.ones(1, requires_grad=True)
    y = a * 2
    y.register_hook(lambda g: seen.append(internals.current_graph_task_id()))
    y.sum().backward()
    assert seen and seen[0] != -1


def test_compiled_module_is_recognised():
    net = nn.Linear(2, 2)
    compiled = torch.compile(net, backend="eager")
    assert internals.is_compiled_module(compiled) and not internals.is_compiled_module(net)
    assert internals.unwrap_compiled(compiled) is net and internals.unwrap_compiled(net) is net


def test_a_missing_internal_names_the_torch_version_and_the_feature(monkeypatch):
    class NoCdata:
        pass

    class Fake:
        def untyped_storage(self):
            return NoCdata()

    with pytest.raises(internals.MissingTorchInternal) as info:
        internals.storage_key(Fake())
    assert torch.__version__ in str(info.value) and "Storage._cdata" in str(info.value)
    assert "storage identity" in str(info.value)


def test_fallbacks_when_optional_internals_are_missing(monkeypatch):
    monkeypatch.setattr(internals, "_graph_task_id", None)
    assert internals.current_graph_task_id() is None
    monkeypatch.setattr(internals, "_tree_flatten", None)
    assert internals.tree_flatten(((1, [2]), {"a": 3})) == [1, 2, 3]
    monkeypatch.setattr(internals, "_GLOBAL", {"_global_no_such_dict": "forward"})
    assert internals.global_hook_dicts() == []


def test_engine_callback_runs_at_the_end_of_backward():
    assert hasattr(torch.autograd.Variable._execution_engine, "queue_callback")
    order = []
    w = torch.ones(2, requires_grad=True)

    def hook(p):
        order.append("hook")
        internals.queue_backward_callback(lambda: order.append("end"))

    w.register_post_accumulate_grad_hook(hook)
    (w * 2).sum().backward()
    assert order == ["hook", "end"]
    task = []
    w.register_hook(lambda g: task.append(internals.current_graph_task_id()) or None)
    (w * 3).sum().backward()
    assert task and task[0] is not None and task[0] >= 0 and internals.current_graph_task_id() == -1


def test_removable_handle_knows_when_its_hook_dict_is_gone():
    t = torch.ones(2, requires_grad=True) * 1.0
    handle = t.register_hook(lambda g: None)
    assert getattr(handle, "hooks_dict_ref", None) is not None and internals.handle_alive(handle)
    del t
    assert not internals.handle_alive(handle)


def test_grad_scaler_gives_its_scale_as_a_tensor_without_get_scale():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    assert internals.loss_scale(scaler) == 1024.0  # not used yet: the initial scale
    scaler.scale(torch.ones(1))
    scale = internals.loss_scale(scaler)
    assert callable(getattr(scaler, "_get_scale_async", None))
    assert isinstance(scale, torch.Tensor) and scale.item() == 1024.0
    assert internals.loss_scale(torch.amp.GradScaler("cpu", enabled=False)) == 1.0


def test_saved_tensors_hook_stack_can_be_read_and_popped():
    """The exercise checkers pop a saved-tensor context that an answer entered and never left."""
    if not hasattr(torch._C._autograd, "_top_saved_tensors_default_hooks") and older_than_the_pin():
        pytest.skip(f"torch {torch.__version__} (older than the pin) cannot show the top of the saved-tensor hook "
                    f"stack; hooklab falls back: {internals.INTERNALS['torch._C._autograd._top_saved_tensors_default_hooks'].without}")
    pack, unpack = (lambda t: t), (lambda t: t)
    assert internals.top_saved_tensors_hooks() is None
    hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
    hooks.__enter__()  # left active, as a careless answer does
    popped = False
    try:
        assert internals.top_saved_tensors_hooks() == (pack, unpack)
        popped = internals.pop_saved_tensors_hooks()
        assert popped is True
        assert internals.top_saved_tensors_hooks() is None
    finally:
        if not popped:  # never leave the context active for the tests that follow on this worker
            hooks.__exit__(None, None, None)


def test_print_options_can_be_read_and_given_back():
    before = internals.print_options()
    assert before is not None and {"precision", "threshold", "linewidth"} <= set(before)
    try:
        torch.set_printoptions(precision=2)
        assert internals.print_options()["precision"] == 2
    finally:
        torch.set_printoptions(**before)
    assert internals.print_options() == before


def test_without_checkpoint_policy_selective_checkpointing_says_which_torch_it_needs(monkeypatch):
    import torch.utils.checkpoint

    import hooklab
    monkeypatch.delattr(torch.utils.checkpoint, "CheckpointPolicy", raising=False)
    with pytest.raises(RuntimeError, match=r"selective checkpointing needs torch >= 2.4 .*this is torch"):
        with hooklab.selective_checkpoint_modules(nn.Sequential(nn.Linear(2, 2)), "0", policy=[torch.ops.aten.mm]):
            pass
    with hooklab.checkpoint_modules(nn.Sequential(nn.Linear(2, 2)), "0"):  # full checkpointing still works
        pass


def test_ddp_names_the_module_whose_forward_is_running():
    """GradientMonitor reads it in a forward pre-hook of the inner model (telling no_sync() apart)."""
    from torch.nn.parallel import DistributedDataParallel
    assert hasattr(DistributedDataParallel, "_active_ddp_module")
    assert internals.active_ddp(nn.Linear(2, 2)) is None  # outside a DDP forward


def test_module_call_codes_run_for_every_module_call():
    """explain_hook counts module calls by these code objects (a profile function, no hook registered)."""
    import sys
    call, wrapped = internals.module_call_codes()
    assert call is not None and wrapped is not None
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is call:
            seen.append(frame.f_locals["self"])
    layer = nn.Linear(2, 2)
    sys.setprofile(profile)
    try:
        layer(torch.ones(1, 2))
    finally:
        sys.setprofile(None)
    assert seen == [layer]


def test_parametrize_cache_counter_exists_and_follows_cached():
    import torch.nn.utils.parametrize as parametrize
    assert isinstance(parametrize._cache_enabled, int)
    assert not internals.parametrize_cache_enabled()
    with parametrize.cached():
        assert internals.parametrize_cache_enabled()
        with parametrize.cached():
            assert internals.parametrize_cache_enabled()
    assert not internals.parametrize_cache_enabled()
