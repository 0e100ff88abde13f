"""Wrong uses of hooklab's library tools (reliability review, section 3): each gives a clear error
naming what was wrong and what to do, and leaves nothing behind.

Row numbers refer to the review's 141-case table. Every case is checked for leftovers the same
way: module and tensor hooks (hook_inventory), global module hooks, the saved-tensor hook stack,
grad mode, and the model's train flags.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import hooklab
from gc_survivors import only_new_objects_collected  # noqa: F401 (a fixture)
from hooklab import _torch_internals as internals


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def state(model):
    return (hooklab.hook_inventory(model), internals.top_saved_tensors_hooks(), torch.is_grad_enabled(),
            [m.training for m in model.modules()])


def _capture_run(m, **kw):
    with hooklab.capture(m, "0", **kw) as st:
        m(torch.randn(2, 3))
    return st


def _capture_grads_after_block(m):
    with pytest.warns(RuntimeWarning, match="recorded no gradient: run backward inside the `with` block"):
        with hooklab.capture(m, "2", grads=True) as st:
            out = m(torch.randn(2, 3))
    out.sum().backward()
    return st.grads["2"]


def _capture_grads_under_no_grad(m):
    with torch.no_grad(), hooklab.capture(m, "2", grads=True) as st:
        m(torch.randn(2, 3))
    return st.grads["2"]


def _tracer(fn):
    def run(m):
        with hooklab.Tracer() as tr:
            fn(tr, m)
    return run


def _monitor_norms(norm_type):
    def run(m):
        with hooklab.GradientMonitor(m, norm_type=norm_type) as gm:
            m(torch.randn(2, 3)).sum().backward()
        return gm.norms()
    return run


def _ledger_twice(m):
    ledger = hooklab.SavedTensorLedger(m)
    with ledger:
        m(torch.randn(2, 3))
    with ledger:
        pass


def _stats_on_tuple(m):
    class Pair(nn.Module):
        def forward(self, x):
            return x, x
    pair = nn.Sequential(Pair())
    with hooklab.ActivationStats(pair, "0"):
        pair(torch.ones(2))


CASES = [
    # (review row, what, call, exception, message pattern)
    (14, "hook_inventory name not a string", lambda m: hooklab.hook_inventory(m, name=123),
     TypeError, r"name is a prefix .* got 123"),
    (18, "capture unknown name", lambda m: hooklab.capture(m, "nope"),
     hooklab.UnknownModuleError, r"no submodule 'nope'.*Names that exist"),
    (21, "capture names not iterable", lambda m: hooklab.capture(m, 42),
     TypeError, r"names must be a module name or an iterable"),
    (23, "reading a name before the model ran", lambda m: hooklab.capture(m, "0").store["0"],
     KeyError, r"has not run yet\. Possible causes: the model was not called inside the block"),
    (25, "capture grads read after backward outside the block", _capture_grads_after_block,
     KeyError, r"no gradient reached '2': .*run backward inside the block"),
    (26, "capture grads under no_grad", _capture_grads_under_no_grad,
     KeyError, r"no gradient reached '2'.*torch.no_grad\(\)"),
    (27, "capture grads on a tuple output", lambda m: _stats_on_tuple(m),
     TypeError, r"needs a tensor output.*output="),
    (None, "capture output selector that selects nothing", lambda m: _capture_run(m, output=5),
     TypeError, r"output=5 does not select anything from what '0' returned \(Tensor\)"),
    (43, "Tracer.modules on a string", _tracer(lambda tr, m: tr.modules("model")),
     TypeError, r"Tracer.modules\(\) takes an nn.Module \(a model or one of its submodules\), got str"),
    (None, "Tracer.modules names not strings", _tracer(lambda tr, m: tr.modules(m, [0])),
     TypeError, r"module names are strings like 'layer1.0.conv1', got 0"),
    (None, "Tracer used outside its block", lambda m: hooklab.Tracer().modules(m),
     RuntimeError, r"inside the Tracer's `with` block \(its block has not been entered\)"),
    (None, "GradientMonitor read before its block", lambda m: hooklab.GradientMonitor(m).norms(),
     RuntimeError, r"has recorded nothing: it registers its hooks when its `with` block is entered"),
    (None, "Tracer.module backward option", _tracer(lambda tr, m: tr.module(m, backward="some")),
     ValueError, r"backward must be True, False, 'full' or 'outputs'"),
    (51, "GradientMonitor norm_type 'fro'", _monitor_norms("fro"),
     TypeError, r"norm_type must be a number"),
    (52, "GradientMonitor norm_type -1", _monitor_norms(-1),
     ValueError, r"norm_type must be > 0"),
    (53, "GradientMonitor norm_type 0", _monitor_norms(0),
     ValueError, r"norm_type must be > 0"),
    (57, "ActivationStats eps 'x'", lambda m: hooklab.ActivationStats(m, "0", eps="x"),
     TypeError, r"eps must be a finite number >= 0"),
    (57, "ActivationStats eps -1", lambda m: hooklab.ActivationStats(m, "0", eps=-1),
     ValueError, r"eps must be a finite number >= 0"),
    (58, "ActivationStats on a tuple output", _stats_on_tuple,
     TypeError, r"needs a tensor output, but '0' returned tuple; choose the tensor with output="),
    (69, "ledger entered again after it exited", _ledger_twice,
     RuntimeError, r"already recorded its block; make a new one for another block"),
    (74, "MemoryMeter ignore of non-tensors", lambda m: hooklab.MemoryMeter(ignore=[1, 2]),
     TypeError, r"ignore=.*takes tensors.*got int"),
    (None, "get_modules with a non-string name", lambda m: hooklab.lookup.get_modules(m, ["0", 1]),
     TypeError, r"module names are strings"),
]


@pytest.mark.parametrize("row, what, call, exc, pattern", CASES, ids=[c[1] for c in CASES])
def test_wrong_use_gives_a_clear_error_and_leaves_nothing(row, what, call, exc, pattern):
    model = make_model()
    before = state(model)
    with pytest.raises(exc, match=pattern):
        call(model)
    assert state(model) == before


def test_ledger_and_another_context_exited_out_of_order_warns():
    if not hasattr(torch._C._autograd, "_top_saved_tensors_default_hooks"):
        pytest.skip(f"torch {torch.__version__} cannot show the top of the saved-tensor hook stack: hooklab falls "
                    "back to no warning")
    model = make_model()
    ledger = hooklab.SavedTensorLedger(model)
    other = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    ledger.__enter__()
    other.__enter__()
    try:
        with pytest.warns(RuntimeWarning, match="exit them in reverse order"):
            ledger.__exit__(None, None, None)
    finally:  # two pops whatever happened: nothing stays on the stack for the tests that follow
        other.__exit__(None, None, None)
    assert internals.top_saved_tensors_hooks() is None
    assert hooklab.hook_inventory(model, include_global=False) == []  # the ledger's module hooks went too


@pytest.mark.parametrize("tool", ["capture", "stats", "tracer", "monitor", "ledger"])
def test_body_raising_leaves_nothing(tool):
    model = make_model()
    before = state(model)
    with pytest.raises(ZeroDivisionError):
        if tool == "capture":
            with hooklab.capture(model, ["0", "2"], grads=True):
                model(torch.randn(2, 3))
                1 / 0
        elif tool == "stats":
            with hooklab.ActivationStats(model, ["0"]):
                model(torch.randn(2, 3))
                1 / 0
        elif tool == "tracer":
            with hooklab.Tracer() as tr:
                tr.modules(model)
                with tr.saved_tensors():
                    model(torch.randn(2, 3))
                    1 / 0
        elif tool == "monitor":
            with hooklab.GradientMonitor(model):
                model(torch.randn(2, 3)).sum().backward()
                1 / 0
        else:
            with hooklab.SavedTensorLedger(model):
                model(torch.randn(2, 3))
                1 / 0
    assert state(model) == before


# ---------------------------------------------------------------- offloading faults (offload.py)
def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())


def test_save_on_disk_removes_folders_left_by_a_killed_process(tmp_path):
    import subprocess
    import sys

    from patience import hang_guard
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True, timeout=hang_guard(60))
    stale = tmp_path / f"hooklab-saved-{int(dead.stdout)}-abc"
    stale.mkdir()
    (stale / "000001.pt").write_bytes(b"x")
    mine = tmp_path / f"hooklab-saved-{__import__('os').getpid()}-live"  # this process's: still in use
    mine.mkdir()
    other = tmp_path / "hooklab-saved-notapid"
    other.mkdir()
    net, x = _net(), torch.randn(8, 64)
    with hooklab.SaveOnDisk(directory=tmp_path, keep=[net, x]):
        loss = net(x).sum()
    loss.backward()
    assert not stale.exists() and mine.exists() and other.exists()


def test_save_on_disk_full_disk_names_the_folder_and_cleans_up(tmp_path, monkeypatch):
    from collections import namedtuple

    from hooklab.offload import disk as offload

    def full(obj, path):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(offload.torch, "save", full)
    monkeypatch.setattr(offload.shutil, "disk_usage", lambda p: namedtuple("u", "total used free")(1, 1, 100))
    net, x = _net(), torch.randn(8, 64)
    with pytest.raises(OSError, match=r"SaveOnDisk could not write .* to .*hooklab-saved-.*the disk is full") as info:
        with hooklab.SaveOnDisk(directory=tmp_path, keep=[net, x]):
            net(x).sum()
    assert info.value.errno == __import__("errno").ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_save_on_disk_out_of_inodes_says_so(tmp_path, monkeypatch):
    """Bytes to spare but no inode left (review round 3): the message names the inodes, not a full disk."""
    from collections import namedtuple

    from hooklab.offload import disk as offload

    def no_inode(obj, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(offload.torch, "save", no_inode)
    monkeypatch.setattr(offload.shutil, "disk_usage", lambda p: namedtuple("u", "total used free")(1 << 40, 0, 1 << 40))
    monkeypatch.setattr(offload.os, "statvfs", lambda p: namedtuple("v", "f_favail")(0))
    net, x = _net(), torch.randn(8, 64)
    with pytest.raises(OSError, match=r"no file can be created there: the file system has no free inodes") as info:
        with hooklab.SaveOnDisk(directory=tmp_path, keep=[net, x]):
            net(x).sum()
    assert info.value.errno == __import__("errno").ENOSPC
    assert list(tmp_path.iterdir()) == []


# a finalizer cannot raise: SaveOnDisk's unraisable hook delivers the interrupt again, outside the finalizer (D2)
@pytest.mark.usefixtures("only_new_objects_collected")  # its gc.collect() looks at what it made
def test_interrupt_while_deleting_a_file_does_not_leave_the_folder(tmp_path, monkeypatch):
    import gc
    import os
    import threading

    from hooklab.offload import _store as offload
    from patience import hang_guard

    class FakeOs:  # os.remove raises KeyboardInterrupt on its 2nd call (review B6)
        calls = 0

        def remove(self, path):
            FakeOs.calls += 1
            if FakeOs.calls == 2:
                raise KeyboardInterrupt
            os.remove(path)

        def __getattr__(self, name):
            return getattr(os, name)

    net, x = _net(), torch.randn(32, 64)
    monkeypatch.setattr(offload, "os", FakeOs())
    with hooklab.SaveOnDisk(directory=tmp_path, keep=[net, x]) as disk:
        loss = net(x).sum()
    with pytest.raises(KeyboardInterrupt):  # not swallowed as "Exception ignored in: <finalize object>"
        loss.backward()
        del loss
        gc.collect()
        # the interrupt comes back outside the finalizer, as a signal: it ends this wait (a hang guard bounds it)
        threading.Event().wait(hang_guard(60))
        pytest.fail("hang guard: the KeyboardInterrupt lost in the finalizer was not delivered again")
    assert disk._store.live == 0
    assert not os.path.isdir(disk.directory)


@pytest.mark.parametrize("step", ["non-scalar", "raises"])
def test_gradient_error_restores_batch_norm_statistics_when_step_fails(step):
    torch.manual_seed(0)
    net, x = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), torch.randn(8, 4)
    before = net[1].running_mean.clone()

    def run():
        out = net(x)
        if step == "raises":
            raise ValueError("boom")
        return out

    with pytest.raises(ValueError):
        hooklab.gradient_error(net, run, lambda: hooklab.CompressSaved("bf16"))
    assert torch.equal(before, net[1].running_mean)
