"""Tests of hooklab.offload (CPU / disk / compressed saved tensors, module helpers) and hooklab.gradient_error."""
from __future__ import annotations

import contextlib
import gc
import os

import pytest
import torch
from torch import nn

import hooklab
from gc_survivors import only_new_objects_collected, survivors  # noqa: F401 (a fixture)
from hooklab import CompressSaved, OffloadWrapper, SaveOnCpu, SaveOnDisk, gradient_error, offload_module
from hooklab._torch_internals import is_parameter_like
from patience import hang_guard


def net_and_batch(seed: int = 0):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
    return net, torch.randn(8, 16)


def grads_of(net, x, context=None):
    net.zero_grad(set_to_none=True)
    with context if context is not None else contextlib.nullcontext():
        loss = net(x).square().sum()
    loss.backward()
    return [p.grad.clone() for p in net.parameters()]


def files_in(path) -> list[str]:
    return [f for f in os.listdir(path) if f != ".lock"] if os.path.isdir(path) else []  # .lock: the folder's lock


# ------------------------------------------------------------------ shared rules
@pytest.mark.parametrize("bad", [-1, 1.5, "1k", True])
def test_min_bytes_must_be_a_nonnegative_int(bad):
    for cls in (SaveOnCpu, SaveOnDisk, CompressSaved):
        with pytest.raises(ValueError, match="min_bytes"):
            cls(min_bytes=bad)


def test_is_parameter_like():
    w = nn.Parameter(torch.randn(3, 2))
    assert is_parameter_like(w) and is_parameter_like(w.t())
    assert not is_parameter_like(w.exp()) and not is_parameter_like(torch.randn(2))


def test_parameters_are_kept_unless_asked():
    x = torch.randn(100, requires_grad=True)
    with CompressSaved("bf16", min_bytes=0) as comp:
        (x * x).sum()
    assert comp.stats.offloaded == 0 and comp.stats.kept == 2
    with CompressSaved("bf16", min_bytes=0, include_parameters=True) as comp:
        (x * x).sum()
    assert comp.stats.offloaded == 1 and comp.stats.reused == 1  # x saved twice, packed once


def test_keep_leaves_model_buffers_and_inputs_alone():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32))
    x = torch.randn(8, 16)
    with CompressSaved("bf16", min_bytes=0) as comp:
        net(x)
    # by default the batch and batch norm's running stats are copied too
    assert comp.stats.offloaded_bytes >= x.numel() * 4 + 2 * 32 * 4
    with CompressSaved("bf16", min_bytes=0, keep=[net, x]) as kept:
        net(x)
    assert kept.stats.offloaded_bytes == comp.stats.offloaded_bytes - x.numel() * 4 - 2 * 32 * 4
    with pytest.raises(TypeError, match="keep takes tensors and modules"):
        CompressSaved("bf16", keep=["x"])


def test_shared_storage_is_packed_once():
    x = torch.randn(100, requires_grad=True)
    with CompressSaved("bf16", min_bytes=0) as comp:
        h = torch.relu(x.exp())  # relu saves its output h ...
        (h * 2.0 * h).sum()      # ... and mul saves h again
    assert comp.stats.reused >= 1
    assert comp.stats.offloaded_bytes == comp.stats.stored_bytes * 2


def test_inplace_change_is_not_confused_with_the_old_version():
    x = torch.randn(50, requires_grad=True)
    with CompressSaved("bf16", min_bytes=0) as comp:
        h = x.exp()
        a = h.sin()              # saves h (version 0)
        h.mul_(3)                # h changes: exp's saved output is now stale -> error at backward
        b = h.cos()              # saves h (version 1): must be a fresh packed copy
    assert comp.stats.offloaded == 2 and comp.stats.reused == 1  # sin reused exp's copy, cos did not
    del a, b


# ------------------------------------------------------------------------ CPU
def test_save_on_cpu_on_cpu_moves_nothing_and_keeps_gradients():
    net, x = net_and_batch()
    ref = grads_of(net, x)
    ctx = SaveOnCpu(pin_memory=True)
    got = grads_of(net, x, ctx)
    assert ctx.stats.offloaded == 0 and ctx.stats.kept == ctx.stats.packed > 0
    assert all(torch.equal(a, b) for a, b in zip(ref, got))


# ------------------------------------------------------------------------ disk
def test_disk_files_exist_until_backward_then_everything_is_removed(tmp_path):
    net, x = net_and_batch()
    ref = grads_of(net, x)
    net.zero_grad(set_to_none=True)
    with SaveOnDisk(directory=tmp_path, keep=[x]) as disk:
        loss = net(x).square().sum()
    private = disk.directory
    assert os.path.dirname(private) == str(tmp_path)
    assert disk.files_alive == disk.stats.offloaded > 0
    assert len(files_in(private)) == disk.files_alive
    loss.backward()
    assert disk.files_alive == 0
    assert not os.path.exists(private)
    assert os.listdir(tmp_path) == []
    assert all(torch.equal(a, p.grad) for a, p in zip(ref, net.parameters()))


def test_disk_unpack_twice_works(tmp_path):
    x = torch.ones(5, requires_grad=True)
    with SaveOnDisk(directory=tmp_path):
        h = x.exp()
        y = h.pow(2)
    first = y.grad_fn._saved_self
    second = y.grad_fn._saved_self  # the tutorial's "incorrect version" fails here
    assert torch.equal(first, second) and torch.equal(first, x.exp())
    del first, second, h, y
    assert os.listdir(tmp_path) == []


@pytest.mark.usefixtures("only_new_objects_collected")  # its gc.collect() looks at what it made
def test_disk_graph_freed_without_backward(tmp_path):
    net, x = net_and_batch()
    with SaveOnDisk(directory=tmp_path) as disk:
        loss = net(x).sum()
    assert disk.files_alive > 0
    del loss
    gc.collect()
    assert disk.files_alive == 0
    assert os.listdir(tmp_path) == []


def test_disk_exception_inside_context_removes_files(tmp_path):
    net, x = net_and_batch()
    with pytest.raises(ZeroDivisionError):
        with SaveOnDisk(directory=tmp_path) as disk:
            loss = net(x).sum()
            1 / 0
    assert os.listdir(tmp_path) == []  # even though `loss` (and its graph) is still alive
    assert disk.files_alive == 0
    with pytest.raises(RuntimeError, match="exception left the SaveOnDisk"):
        loss.backward()
    del loss


def test_disk_threshold_keeps_small_tensors_in_memory(tmp_path):
    x = torch.randn(10, requires_grad=True)
    with SaveOnDisk(min_bytes=1000, directory=tmp_path) as disk:
        small = x.exp()                         # 40 bytes, saved by exp
        big = x.repeat(100).exp()               # 4000 bytes
        y = (small.sum() + big.sum())
    assert disk.stats.kept == 1 and disk.stats.offloaded == 1
    assert disk.stats.offloaded_bytes == 4000 and disk.stats.kept_bytes == 40
    y.backward()
    assert os.listdir(tmp_path) == []


def test_disk_writes_only_the_view_not_its_whole_storage(tmp_path):
    x = torch.randn(10_000, requires_grad=True)
    with SaveOnDisk(directory=tmp_path) as disk:
        big = x * 2.0                           # saves nothing
        y = big[:10].sin().sum()                # sin saves a 10-element view of a 10k storage
    (name,) = [f for f in files_in(disk.directory)]
    assert os.path.getsize(os.path.join(disk.directory, name)) < 10_000  # not 40 kB
    y.backward()
    torch.testing.assert_close(x.grad[:10], (2 * (2 * x[:10]).cos()).detach())


def test_disk_loads_with_weights_only(tmp_path, monkeypatch):
    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    x = torch.randn(10, requires_grad=True)
    with SaveOnDisk(directory=tmp_path):
        y = x.exp().sum()
    y.backward()
    assert calls == [True]


def test_disk_bad_input_and_reentry(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SaveOnDisk(directory=tmp_path / "missing")
    disk = SaveOnDisk(directory=tmp_path)
    with pytest.raises(RuntimeError, match="before it is entered"):
        disk.directory
    with disk:
        with pytest.raises(RuntimeError, match="already active"):
            disk.__enter__()
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------- compression
def test_compress_default_threshold_skips_small_tensors():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.Tanh())
    x = torch.randn(32, 16)
    with CompressSaved("bf16", keep=[net, x]) as ctx:
        net(x)
    # linear output (8 kB, saved by batch norm) and tanh output (8 kB) are compressed;
    # batch norm's saved mean and inverse std (256 B each) are not; nor are x, the bn weight and
    # the running stats (parameters and `keep`)
    assert ctx.stats.offloaded == 2 and ctx.stats.offloaded_bytes == 2 * 32 * 64 * 4
    assert ctx.stats.kept == 6 and ctx.stats.kept_bytes == 32 * 16 * 4 + 5 * 64 * 4


def test_compress_bad_format():
    with pytest.raises(ValueError, match="bf16, int8"):
        CompressSaved("fp8")


@pytest.mark.parametrize("fmt,ratio", [("bf16", 2), ("int8", 4)])
def test_compress_sizes_and_small_gradient_error(fmt, ratio):
    net, _ = net_and_batch()
    x = torch.randn(256, 16)
    ctx = CompressSaved(fmt, min_bytes=0)
    ref = grads_of(net, x)
    got = grads_of(net, x, ctx)
    assert ctx.stats.offloaded > 0
    # int8 adds one float32 scale per channel (64 per 256 x 64 tensor)
    assert ctx.stats.offloaded_bytes / ctx.stats.stored_bytes == pytest.approx(ratio, rel=0.15)
    err = max(((a - b).norm() / a.norm()).item() for a, b in zip(ref, got))
    assert 0 < err < 5e-2


def test_int8_keeps_relu_mask_exactly():
    torch.manual_seed(0)
    h = torch.randn(1000, requires_grad=True)
    x = h * torch.logspace(-6, 0, 1000)  # many tiny values: plain rounding would zero them
    with CompressSaved("int8", min_bytes=0) as ctx:
        y = torch.relu(x)
    y.sum().backward()
    assert ctx.stats.offloaded == 1
    assert torch.equal(h.grad, (x > 0).float() * torch.logspace(-6, 0, 1000))


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
def test_integer_tensors_are_narrowed_losslessly(fmt):
    torch.manual_seed(0)
    x = torch.randn(1, 4, 16, 16, requires_grad=True)
    h = x.exp()
    ref = torch.autograd.grad(nn.functional.max_pool2d(h, 2).sum(), x, retain_graph=True)[0]
    with CompressSaved(fmt, min_bytes=0, keep=[h]) as ctx:  # keep the float input: only the indices are packed
        y = nn.functional.max_pool2d(h, 2)     # saves its input and the int64 indices of the maxima
    (got,) = torch.autograd.grad(y.sum(), x)
    assert ctx.stats.offloaded == 1 and ctx.stats.kept == 1
    assert ctx.stats.offloaded_bytes == 4 * 8 * 8 * 8  # 256 int64 indices
    assert ctx.stats.stored_bytes == 4 * 8 * 8 * 2     # indices into a 16x16 plane (< 256) fit in int16
    assert torch.equal(got, ref)


def test_integer_tensor_too_wide_is_kept_as_is():
    big = torch.tensor([0, 2**40])
    kept = CompressSaved("bf16")._encode(big)  # no type narrower than int64 holds 2**40
    assert kept.tensor.data_ptr() == big.data_ptr() and kept.version == big._version  # no copy; version checked
    small = CompressSaved("bf16")._encode(torch.tensor([-300, 300]))
    assert small.data.dtype == torch.int16 and small.dtype == torch.int64


# --------------------------------------------------------------- module helpers
@pytest.mark.usefixtures("only_new_objects_collected")  # its gc.collect() looks at what it made
def test_offload_module_uses_a_context_per_call_and_removes_hooks(tmp_path):
    net, x = net_and_batch()
    keys = list(net.state_dict())
    ref = grads_of(net, x)
    with hooklab.no_hooks_left_behind(net), offload_module(net[2], lambda: SaveOnDisk(directory=tmp_path)) as scope:
        assert net.state_dict().keys() == set(keys) or list(net.state_dict()) == keys
        net.zero_grad(set_to_none=True)
        loss = net(x).square().sum()
        first = scope.last
        net(x)  # a second call gets its own context
        assert scope.calls == 2 and scope.last is not first
        assert scope.stats.offloaded == first.stats.offloaded + scope.last.stats.offloaded >= 2
        assert first.files_alive >= 1
        loss.backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(ref, net.parameters()))
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_offload_module_state_stays_bounded_over_1000_steps():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    x = torch.randn(4, 8)
    with hooklab.no_hooks_left_behind(net), offload_module(net[0], lambda: CompressSaved("bf16", min_bytes=0)) as scope:
        for _ in range(100):
            net(x).sum().backward()
        with survivors() as kept:  # the Python objects created by the 900 steps still alive after them
            for _ in range(900):
                net(x).sum().backward()
        growth = len(kept)
        del kept
        assert scope.calls == 1000 and len(scope) == 2
        assert scope.stats.offloaded == 1000 * scope.last.stats.offloaded > 0
    assert growth < 50, f"{growth} more Python objects after 900 more steps"


def test_offload_module_hooks_removed_after_exception():
    net, _ = net_and_batch()
    with hooklab.no_hooks_left_behind(net), pytest.raises(RuntimeError):  # the saved-tensor context included
        with offload_module(net[2], lambda: CompressSaved("bf16")):
            net(torch.randn(2, 5))  # wrong width
    # and no saved-tensor hooks were left pushed: a new graph saves plain tensors
    y = torch.randn(3, requires_grad=True).exp()
    assert torch.equal(y.grad_fn._saved_result, y)


def test_offload_wrapper_and_dataparallel_on_cpu():
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(16, 64), nn.Tanh())
    x = torch.randn(8, 16)
    wrapped = OffloadWrapper(inner, lambda: CompressSaved("bf16", min_bytes=0, keep=[x]))
    out = nn.DataParallel(wrapped)(x)  # on CPU DataParallel just calls the module
    assert wrapped.last_hooks.stats.offloaded == 1  # tanh's output
    out.sum().backward()
    assert inner[0].weight.grad is not None


@pytest.mark.parametrize("factory", [SaveOnDisk(), "SaveOnDisk", None])
def test_module_helpers_reject_bad_factories(factory):
    with pytest.raises(TypeError, match="make_hooks|fresh context"):
        offload_module(nn.Linear(2, 2), factory)
    with pytest.raises(TypeError, match="make_hooks|fresh context"):
        OffloadWrapper(nn.Linear(2, 2), factory)


def test_module_helpers_reject_non_modules():
    with pytest.raises(TypeError, match="nn.Module"):
        offload_module(lambda x: x, SaveOnDisk)
    with pytest.raises(TypeError, match="nn.Module"):
        OffloadWrapper("layer1", SaveOnDisk)


# ---------------------------------------------------------------- gradient_error
def test_gradient_error_zero_for_lossless_and_positive_for_lossy():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 2))
    x = torch.randn(8, 16)
    step = lambda: net(x).square().mean()  # noqa: E731
    assert gradient_error(net, step, contextlib.nullcontext) == 0.0  # same seed: same dropout mask
    assert gradient_error(net, step, SaveOnDisk) == 0.0
    assert 0 < gradient_error(net, step, lambda: CompressSaved("bf16", min_bytes=0)) < 1e-2


def test_gradient_error_restores_grads_and_buffers():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    x = torch.randn(8, 4)
    net[0].weight.grad = torch.full_like(net[0].weight, 7.0)
    stats = net[1].running_mean.clone()
    gradient_error(net, lambda: net(x).sum(), lambda: CompressSaved("bf16"))
    assert torch.equal(net[0].weight.grad, torch.full_like(net[0].weight, 7.0))
    assert net[0].bias.grad is None
    assert torch.equal(net[1].running_mean, stats)


def test_gradient_error_bad_input():
    net = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match="scalar loss"):
        gradient_error(net, lambda: net(x), contextlib.nullcontext)
    with pytest.raises(ValueError, match="no parameters"):
        gradient_error(nn.ReLU(), lambda: x.sum(), contextlib.nullcontext)
    with pytest.raises(TypeError, match="nn.Module"):
        gradient_error("net", lambda: x.sum(), contextlib.nullcontext)
    assert net.weight.grad is None


# ------------------------------------------------------------ checkpoint_modules
def test_checkpoint_modules_same_gradients_less_memory_and_restored():
    from hooklab import MemoryMeter, checkpoint_modules

    torch.manual_seed(0)
    net = nn.Sequential(nn.Sequential(nn.Linear(16, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                                      nn.Linear(256, 256), nn.Tanh()),
                        nn.Linear(256, 4))
    x = torch.randn(32, 16)
    ref = grads_of(net, x)

    def held(context):
        net.zero_grad(set_to_none=True)
        with MemoryMeter(ignore=[*net.parameters(), x]) as meter:
            with context:
                loss = net(x).square().sum()
            alive = meter.mark()
            loss.backward()
        return alive

    plain = held(contextlib.nullcontext())
    ckpt = held(checkpoint_modules(net, ["0"]))
    # plain keeps three tanh outputs; checkpointed, only the block's output (saved by the head)
    assert ckpt < plain / 2
    assert all(torch.equal(a, p.grad) for a, p in zip(ref, net.parameters()))
    assert "forward" not in net[0].__dict__  # the patch is gone


def test_checkpoint_modules_restores_after_exception_and_checks_names():
    from hooklab import UnknownModuleError, checkpoint_modules

    net, _ = net_and_batch()
    with pytest.raises(RuntimeError):
        with checkpoint_modules(net, ["0", "2"]):
            net(torch.randn(2, 5))  # wrong width
    assert all("forward" not in m.__dict__ for m in net)
    with pytest.raises(UnknownModuleError, match="Names that exist: 0, 1, 2"):
        with checkpoint_modules(net, ["0", "layer9"]):
            pass
    with checkpoint_modules(net, ["0", "0"]) as modules:  # a name given twice is checkpointed once
        assert modules == [net[0]]
    with pytest.raises(RuntimeError, match="already has a patched forward"):
        with checkpoint_modules(net, ["0"]), checkpoint_modules(net, "0"):
            pass
    assert all("forward" not in m.__dict__ for m in net)
    with checkpoint_modules(net, "2") as modules:  # one name, as every tool's names= takes it
        assert modules == [net[2]] and "forward" in net[2].__dict__
    with pytest.raises(TypeError, match="module names are strings"):
        with checkpoint_modules(net, [0]):
            pass
    with pytest.raises(TypeError, match="nn.Module"):
        with checkpoint_modules("net", ["0"]):
            pass


def test_checkpoint_modules_refuses_a_module_with_one_of_its_descendants():
    from hooklab import checkpoint_modules

    torch.manual_seed(0)
    net = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4)), nn.Tanh())
    x = torch.randn(3, 4)
    for names in (["0", "0.0"], ["0.2", "0"]):
        with pytest.raises(ValueError, match=r"is inside '0', which is checkpointed too.*Name one of them"):
            with checkpoint_modules(net, names):
                pass
        assert all("forward" not in m.__dict__ for m in net.modules())
    # each one alone works, also when backward runs after the block (the usage the docstring shows)
    for names in (["0"], ["0.0", "0.2"]):
        with checkpoint_modules(net, names):
            loss = net(x).sum()
        loss.backward()


def test_offload_module_warns_when_the_module_never_ran():
    import warnings as _warnings

    import hooklab
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    with pytest.warns(RuntimeWarning, match="never ran inside the block"):
        with hooklab.offload_module(model[0], lambda: hooklab.CompressSaved("bf16")):
            pass
    with _warnings.catch_warnings():
        _warnings.simplefilter("error")
        with hooklab.offload_module(model[0], lambda: hooklab.CompressSaved("bf16")):
            model(torch.randn(2, 4, requires_grad=True)).sum().backward()


def test_disk_messages_name_what_is_wrong(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        SaveOnDisk(directory=afile)
    net, x = net_and_batch()
    with SaveOnDisk(directory=tmp_path, keep=[net, x]) as disk:
        loss = net(x).sum()
    import shutil
    shutil.rmtree(disk.directory)  # someone cleans the temp dir between forward and backward
    with pytest.raises(FileNotFoundError, match=r"is gone: its folder .* was removed \(or emptied\) before backward"):
        loss.backward()
    del loss


def _plain_inplace_error() -> str:
    x = torch.ones(3, requires_grad=True)
    y = x.exp()
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as plain:
        y.sum().backward()
    return str(plain.value)


@contextlib.contextmanager
def _tracer_saved():
    with hooklab.Tracer() as tr, tr.saved_tensors():
        yield tr


KEEPERS = {  # every way a saved-tensor tool keeps a tensor as it is instead of copying it
    "ledger": hooklab.SavedTensorLedger,
    "tracer": _tracer_saved,
    "SaveOnCpu on a CPU": SaveOnCpu,
    "SaveOnDisk under min_bytes": lambda: SaveOnDisk(min_bytes=1 << 20),
    "CompressSaved under min_bytes": lambda: CompressSaved("int8"),
    "SaveOnDisk keep=": None,  # built in the test: keep= names the tensor
}


@pytest.mark.parametrize("how", list(KEEPERS))
def test_in_place_change_of_a_kept_saved_tensor_raises_as_in_plain_pytorch(how):
    """S7: under hooklab's saved-tensor tools PyTorch's in-place error used to vanish and the gradient was wrong."""
    plain = _plain_inplace_error()
    x = torch.ones(3, requires_grad=True)
    if how == "SaveOnDisk keep=":
        h = x * 1
        with SaveOnDisk(keep=[h]):
            y = h.exp()  # exp saves its output y: keep it too by going through a kept input
        context = SaveOnDisk(keep=[y])
        with context:
            z = y.sin()  # saves y, kept as it is
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation.*expected version 0"):
            z.sum().backward()
        return
    with KEEPERS[how]():
        y = x.exp()
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as ours:
        y.sum().backward()
    # the same first sentence as PyTorch's own error, plus where the check was made
    assert str(ours.value).split(":")[0] == plain.split(":")[0]
    assert "is at version 1; expected version 0 instead" in plain and "is at version 1; expected version 0" in str(ours.value)
    assert x.grad is None


@pytest.mark.parametrize("make", [lambda: SaveOnDisk(), lambda: CompressSaved("bf16", min_bytes=0)],
                         ids=["SaveOnDisk", "CompressSaved"])
def test_a_copied_saved_tensor_gives_the_gradient_of_the_values_it_had(make):
    x = torch.ones(3, requires_grad=True)
    with make():
        y = x.exp()
    y.add_(1)
    y.sum().backward()  # the copy holds exp(x) as it was saved: the right gradient, d/dx (exp(x) + 1)
    assert torch.allclose(x.grad, torch.ones(3).exp(), rtol=1e-2)


def test_int8_keeps_a_causal_minus_inf_mask_exact_under_sdpa():
    """S1: an infinite amax made every other entry 0 * inf = nan: NaN gradients everywhere."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, 64, 8, requires_grad=True)
    mask = nn.Transformer.generate_square_subsequent_mask(64)  # -inf above the diagonal, 16 KiB > min_bytes
    plain = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask).sum(), q)[0]
    with CompressSaved("int8") as ctx:
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask).sum()
    assert ctx.stats.offloaded >= 1  # the mask itself was compressed, not skipped
    got = torch.autograd.grad(out, q)[0]
    assert got.isfinite().all()
    assert ((got - plain).norm() / plain.norm()).item() < 0.05


def test_int8_on_a_transformer_encoder_with_a_key_padding_mask_gives_finite_gradients():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x = torch.randn(2, 64, 32)
    pad = torch.zeros(2, 64, dtype=torch.bool)
    pad[1, 40:] = True  # MHA merges it into a float -inf mask that SDPA saves
    error = gradient_error(encoder, lambda: encoder(x, src_key_padding_mask=pad).square().mean(),
                           lambda: CompressSaved("int8"))
    assert error == error and error < 0.05  # not nan; plain PyTorch is the reference inside gradient_error


def test_int8_round_trips_inf_and_nan_exactly_and_scales_the_rest_by_the_finite_max():
    t = torch.tensor([[1.0, float("inf"), -float("inf"), float("nan"), -2.0, 0.5]] * 4).T.contiguous()
    packed = CompressSaved("int8", min_bytes=0)._encode(t)
    back = CompressSaved("int8")._decode(packed)
    assert torch.equal(back.isposinf(), t.isposinf()) and torch.equal(back.isneginf(), t.isneginf())
    assert torch.equal(back.isnan(), t.isnan())
    finite = t.isfinite()
    assert torch.allclose(back[finite], t[finite], atol=2.0 / 127)  # per-channel scale from |-2| at most
    x = torch.randn(2048)
    x[5] = float("inf")  # row 95 of the review: one inf in a 1-D activation
    back = CompressSaved("int8")._decode(CompressSaved("int8")._encode(x))
    assert back.isfinite().sum().item() == 2047 and back[5].item() == float("inf")


_HOLDER = r"""
import fcntl, os, sys, time
folder = sys.argv[1]
os.mkdir(folder)
fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
open(os.path.join(folder, "000001.pt"), "wb").close()
print("ready", flush=True)
sys.stdin.read()                    # holds the lock until the parent closes stdin (or kills it)
"""


@pytest.mark.timeout(120)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="flock: POSIX only")
def test_the_stale_folder_sweep_spares_a_live_folder_of_another_pid_namespace(tmp_path):
    """D1: the sweep deleted folders whose process id it could not see (another PID namespace, another host).
    Another process holds a folder whose name carries a pid that does not exist here; only its lock says it is
    live. The sweep must leave it while the lock is held, and remove it once its holder is gone."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True, timeout=hang_guard(60))
    folder = tmp_path / f"hooklab-saved-{int(dead.stdout)}-elsewhere"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(folder)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        net, x = net_and_batch()
        with SaveOnDisk(directory=tmp_path, keep=[x]) as disk:  # its sweep runs when it is entered
            loss = net(x).sum()
        assert disk.files_alive > 0
        assert folder.exists() and (folder / "000001.pt").exists()
        loss.backward()
    finally:
        holder.kill()
        holder.wait(timeout=hang_guard(30))
    with SaveOnDisk(directory=tmp_path):  # the holder was killed: its lock went with it, so the folder is stale
        pass
    assert not folder.exists() and os.listdir(tmp_path) == []


# --------------------------------------------------------------- messages for wrong uses (review D7)
def test_a_factory_that_returns_no_context_is_named():
    net, x = net_and_batch()
    with hooklab.no_hooks_left_behind(net):
        with offload_module(net[0], lambda: 42):
            with pytest.raises(TypeError, match=r"offload_module: make_hooks\(\) returned int .*not a context manager"):
                net(x)
        wrapped = OffloadWrapper(nn.Linear(16, 4), lambda: None)
        with pytest.raises(TypeError, match=r"OffloadWrapper: make_hooks\(\) returned NoneType"):
            wrapped(x)
        with pytest.raises(TypeError, match=r"gradient_error: make_hooks\(\) returned int"):
            gradient_error(net, lambda: net(x).sum(), lambda: 42)


def test_directory_must_be_a_path(tmp_path):
    with pytest.raises(TypeError, match="directory must be a folder path .* got int 1"):
        SaveOnDisk(directory=1)  # os.path.exists(1) is True: file descriptor 1 (stdout)


def test_a_damaged_file_is_named(tmp_path):
    net, x = net_and_batch()
    with SaveOnDisk(directory=tmp_path, keep=[x]) as disk:
        loss = net(x).square().sum()
    victim = sorted(files_in(disk.directory))[0]
    with open(os.path.join(disk.directory, victim), "r+b") as f:
        f.truncate(20)
    with pytest.raises(RuntimeError, match=rf"could not read back the saved tensor in .*{victim}: the file is damaged"):
        loss.backward()
    del loss


def test_gradient_error_says_when_step_runs_backward_itself():
    net, x = net_and_batch()

    def step_twice():
        loss = net(x).sum()
        loss.backward()
        loss.backward()
        return loss

    def step_once():
        loss = net(x).sum()
        loss.backward()
        return loss

    for step in (step_twice, step_once):
        with pytest.raises(ValueError, match=r"step\(\) ran backward itself"):
            gradient_error(net, step, lambda: CompressSaved("bf16"))
        assert all(p.grad is None for p in net.parameters())  # gradients put back as they were


# the Ctrl-C / SIGTERM tests of the finalizers (hooklab._saved) are in test_signals.py


def test_the_folder_finalizer_can_be_redone_after_an_interrupt(tmp_path):
    """Found by a full run: a Ctrl-C that lands after the lock's descriptor was closed but before the finalizer
    counts as done makes it run again (hooklab._saved.Finalizer redoes interrupted work); the second run closed
    the descriptor again (EBADF, or worse another file opened since under that number). It is closed once."""
    from hooklab.offload._store import _remove_folder

    folder = tmp_path / "hooklab-saved-x"
    folder.mkdir()
    fd = os.open(tmp_path / "lock", os.O_CREAT | os.O_RDWR)
    lock = [fd]
    _remove_folder(str(folder), lock)
    assert lock == [] and not folder.exists()
    reused = os.open(tmp_path / "other", os.O_CREAT | os.O_RDWR)  # may get the same number as the closed fd
    try:
        _remove_folder(str(folder), lock)  # the redo: nothing left to close
        os.fstat(reused)  # still open
    finally:
        os.close(reused)
