"""More columns of the matrix: the ways of running code that training and deployment code meets beyond the
compilers and transforms of :mod:`.contexts` (which lists every column in ``CONTEXTS``), one small function each,
written as the functions there are: forward-mode AD, loading a state dict by assignment or from a memory-mapped file,
a model built on the meta device, ``functional_call``, a step on another thread and what a hook sees of the caller's
``ContextVar`` and thread-locals, gradient accumulation, ``GradScaler``, ``DataParallel``, ``torch.jit.freeze`` and
eager-mode quantization.
"""
from __future__ import annotations

import contextlib
import contextvars
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import record
from .families import Rig
from .steps import forward_backward as _forward_backward, scripted_install

THREAD_SECONDS = 120  # a step on another thread that has not finished by then is reported, not waited for




# ---- forward-mode AD --------------------------------------------------------------------------------------------

def _decompositions_loaded() -> None:
    """Load forward-mode AD's decompositions, which PyTorch scripts once per process at the first dual tensor (with
    a deprecation warning for each): here, quietly, so that no cell records what only a process's first one does."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.autograd.forward_ad._maybe_load_decompositions()


def forward_ad(h: Any) -> None:
    """``torch.func.jvp`` of the model at ``x`` along a tangent of ones: forward-mode AD, no backward."""
    _decompositions_loaded()
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out, tangent = torch.func.jvp(rig.net, (rig.x,), (torch.ones_like(rig.x),))[:2]
    h.fact(out, tangent)


def forward_ad_dual(h: Any) -> None:
    """The same with ``torch.autograd.forward_ad``'s dual numbers: ``make_dual``, the forward, ``unpack_dual``."""
    import torch.autograd.forward_ad as fwad

    _decompositions_loaded()
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    with fwad.dual_level():
        out = rig.net(fwad.make_dual(rig.x, torch.ones_like(rig.x)))
        primal, tangent = fwad.unpack_dual(out)
        h.fact(primal, tangent)


# ---- loading state dicts ------------------------------------------------------------------------------------------

def _state(rig: Rig) -> dict[str, torch.Tensor]:
    """A copy of the model's parameters by state-dict key, read without ``state_dict()`` (whose hooks would run)."""
    return {name: p.detach().clone() for name, p in rig.net.named_parameters()}


def _load(h: Any, rig: Rig, state: dict[str, torch.Tensor], *, assign: bool) -> None:
    """``load_state_dict(state, assign=...)``, then the eager run; notes whether the parameter objects were
    replaced and whether the optimizer (built before loading, as usual) still holds the model's parameters."""
    before = dict(rig.net.named_parameters())
    h.phase("load")
    rig.net.load_state_dict(state, assign=assign)
    after = dict(rig.net.named_parameters())
    replaced = [name for name in after if after[name] is not before.get(name)]
    held = {id(p) for group in rig.opt.param_groups for p in group["params"]}
    h.note(f"parameter objects replaced by the load: {len(replaced)} of {len(after)}")
    if any(id(p) not in held for p in after.values()):
        h.note("the optimizer built before the load holds the old parameters: opt.step() does not update the model")
    _forward_backward(h, rig.net, rig)
    h.exercise(rig, rig.net)


def load_assign(h: Any) -> None:
    """``load_state_dict(state, assign=True)`` of a state dict in memory, then forward, backward and a step."""
    rig = h.rig()
    h.install(rig)
    _load(h, rig, _state(rig), assign=True)


def _load_mmap(h: Any, *, assign: bool) -> None:
    rig = h.rig()
    h.install(rig)
    with tempfile.TemporaryDirectory(prefix="hooklab-mmap-") as folder:
        path = Path(folder) / "state.pt"
        torch.save(_state(rig), path)
        state = torch.load(path, mmap=True, weights_only=True)
        _load(h, rig, state, assign=assign)


def load_mmap(h: Any) -> None:
    """``torch.load(file, mmap=True)`` of a saved state dict, then ``load_state_dict`` (copying into the
    parameters), forward, backward and a step."""
    _load_mmap(h, assign=False)


def load_mmap_assign(h: Any) -> None:
    _load_mmap(h, assign=True)


def meta_to_empty(h: Any) -> None:
    """The model built on the meta device, the hooks registered, ``to_empty(device="cpu")``, every parameter
    drawn again (the init), an optimizer built then (as one must: the meta one holds meta tensors), its hooks
    registered on it, then the eager run."""
    with torch.device("meta"):
        rig = h.rig()
    on_optimizer = h.family.where == "optimizer"
    if not on_optimizer:
        h.install(rig)
    before = dict(rig.net.named_parameters())
    h.phase("to_empty")
    rig.net.to_empty(device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in rig.net.parameters():
            nn.init.uniform_(p, -0.5, 0.5)
    after = dict(rig.net.named_parameters())
    h.note(f"parameter objects replaced by to_empty: {sum(after[n] is not before.get(n) for n in after)} of "
           f"{len(after)}")
    rig.x = torch.randn(2, 3).requires_grad_()
    rig.opt = torch.optim.SGD(rig.net.parameters(), lr=0.1)
    if on_optimizer:
        h.install(rig)
    _forward_backward(h, rig.net, rig)
    h.exercise(rig, rig.net)


def functional_call(h: Any) -> None:
    """``torch.func.functional_call(net, params, (x,))`` with copies of the parameters, then a plain backward (the
    same function as the deprecated ``torch.nn.utils.stateless.functional_call``)."""
    rig = h.rig()
    h.install(rig)
    params = {name: p.detach().clone().requires_grad_() for name, p in rig.net.named_parameters()}
    h.phase("forward")
    out = torch.func.functional_call(rig.net, params, (rig.x,))
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *[params[name].grad for name in sorted(params)], *h.grads(rig))


# ---- threads ------------------------------------------------------------------------------------------------------

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("hooklab_probe", default="unset")
LOCAL = threading.local()
_LABELS: dict[int, str] = {}  # thread ident -> how the notes name it


def _seen() -> str:
    where = _LABELS.get(threading.get_ident(), "another thread")
    return f"on {where}, ContextVar {VAR.get()!r}, thread-local {getattr(LOCAL, 'value', 'unset')!r}"


@contextlib.contextmanager
def _watching(h: Any, caller: str) -> Iterator[None]:
    """Ask every call of the family's hook what it sees (:data:`.record.WATCH`), naming this thread ``caller``;
    afterwards note each phase's answers (each once)."""
    _LABELS.clear()
    _LABELS[threading.get_ident()] = caller
    record.SEEN.clear()
    record.WATCH[0] = _seen
    try:
        yield
    finally:
        record.WATCH[0] = None
        seen = [f"hook in {phase} {text}" for key, phase, text in record.SEEN if key == h.family.id]
        record.SEEN.clear()
        _LABELS.clear()
        for text in dict.fromkeys(seen):
            h.note(text)


@contextlib.contextmanager
def _set(value: str) -> Iterator[None]:
    """The ContextVar and the thread-local both set to ``value`` on this thread, for the block."""
    token = VAR.set(value)
    LOCAL.value = value
    try:
        yield
    finally:
        VAR.reset(token)
        del LOCAL.value


def thread(h: Any) -> None:
    """The hooks registered on the caller's thread; the whole step (forward, backward, ``opt.step()``, the state
    dicts) run in a ``threading.Thread``, started with the ContextVar and a thread-local set on the caller's thread."""
    rig = h.rig()
    h.install(rig)
    errors: list[BaseException] = []

    def step() -> None:
        _LABELS[threading.get_ident()] = "the step's thread"
        try:
            _forward_backward(h, rig.net, rig)
            h.exercise(rig, rig.net)
        except BaseException as error:  # noqa: BLE001 - raised again on the caller's thread
            errors.append(error)

    with _watching(h, "the registering thread"), _set("set by the registering thread"):
        worker = threading.Thread(target=step, name="hooklab-step", daemon=True)
        worker.start()
        worker.join(THREAD_SECONDS)
        if worker.is_alive():
            raise TimeoutError(f"the step on another thread did not finish in {THREAD_SECONDS} s")
    if errors:
        raise errors[0]


def contextvar(h: Any, *, pool: bool = False) -> None:
    """The forward on the caller's thread, then ``backward()`` with a ContextVar and a thread-local set around it;
    the notes say where each hook call ran and what it saw of both. ``pool``: the backward submitted to a
    ``ThreadPoolExecutor`` from there instead."""
    rig = h.rig()
    h.install(rig)
    with _watching(h, "the thread that called backward()" if not pool else "the submitting thread"):
        h.phase("forward")
        out = rig.net(rig.x)
        with _set("set around backward()"):
            h.phase("backward")
            loss = out.sum()
            if pool:
                with ThreadPoolExecutor(1, thread_name_prefix="hooklab-pool") as executor:
                    executor.submit(loss.backward).result(timeout=THREAD_SECONDS)
            else:
                loss.backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


def contextvar_pool(h: Any) -> None:
    contextvar(h, pool=True)


# ---- accumulation, loss scaling, DataParallel ---------------------------------------------------------------------

def _no_sync(net: Any) -> Any:
    """What stops a wrapper reducing gradients for one micro-batch: DDP's ``no_sync()``, FSDP2's
    ``set_requires_gradient_sync(False)``; a plain model's nothing."""
    if hasattr(net, "no_sync"):
        return net.no_sync()
    if hasattr(net, "set_requires_gradient_sync"):
        @contextlib.contextmanager
        def fsdp_no_sync() -> Iterator[None]:
            net.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                net.set_requires_gradient_sync(True)
        return fsdp_no_sync()
    return contextlib.nullcontext()


def grad_accumulation(h: Any, *, sync_every: bool = False) -> None:
    """Two micro-batches (each a forward and a backward), then one step; under DDP / FSDP2 the first micro-batch
    in ``no_sync()`` / ``set_requires_gradient_sync(False)`` (``sync_every``: reduced too)."""
    rig = h.rig()
    h.install(rig)
    for first, micro_batch in ((True, rig.x[:1]), (False, rig.x[1:])):
        with _no_sync(rig.net) if first and not sync_every else contextlib.nullcontext():
            h.phase("forward")
            out = rig.net(micro_batch)
            h.phase("backward")
            out.sum().backward()
    h.fact(rig.x.grad, *h.grads(rig))
    h.exercise(rig, rig.net)


def grad_accumulation_sync_every(h: Any) -> None:
    grad_accumulation(h, sync_every=True)


def _received(family: str, start: int) -> list[torch.Tensor]:
    """The floating-point tensors (parameters aside) that the family's hook received in backward since ``start``
    in the log, copied; a bucket's buffer for DDP's communication hook."""
    out = []
    for key, phase, args in record.LOG[start:]:
        if key != family or phase != "backward":
            continue
        stack = list(args)
        while stack:
            value = stack.pop(0)
            if isinstance(value, (tuple, list)):
                stack[:0] = list(value)
            elif isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                if value.is_floating_point():
                    out.append(value.detach().clone())
            elif callable(getattr(value, "buffer", None)):
                with contextlib.suppress(RuntimeError):
                    out.append(value.buffer().detach().clone())
    return out


def grad_scaler(h: Any) -> None:
    """``torch.amp.GradScaler("cpu")``: ``scaler.scale(loss).backward()``, ``scaler.step(opt)``,
    ``scaler.update()``. A note says how the gradients the hook received compare with those of an unscaled
    backward, run first on a twin of the model (same seed, the hook installed the same way), whose calls are then
    taken off the record and whose hooks are removed."""
    start = len(record.LOG)
    twin = h.rig()
    h.install(twin)
    h.phase("forward")
    out = twin.net(twin.x)
    h.phase("backward")
    out.sum().backward()
    plain = _received(h.family.id, start)
    del record.LOG[start:]
    twin.close()
    record.set_phase("run")
    rig = h.rig()
    h.install(rig)
    scaler = torch.amp.GradScaler("cpu")
    h.phase("forward")
    out = rig.net(rig.x)
    loss = scaler.scale(out.sum())
    h.phase("backward")
    start = len(record.LOG)
    loss.backward()
    scaled = _received(h.family.id, start)
    h.fact(out, rig.x.grad, *h.grads(rig))
    ratios = sorted({round(float(s.norm() / p.norm()), 1) for p, s in zip(plain, scaled)
                     if p.shape == s.shape and float(p.norm()) > 0})
    if ratios:
        what = " or ".join(f"{r:g}" for r in ratios)
        h.note(f"the gradients it received in backward: {what} x those of an unscaled backward "
               f"(the loss scale: {scaler.get_scale():g})")
    h.phase("step")
    scaler.step(rig.opt)
    scaler.update()
    h.fact(*[p for group in rig.opt.param_groups for p in group["params"]])


def data_parallel(h: Any) -> None:
    """``torch.nn.DataParallel(net)`` on a machine without a GPU (it then calls the module itself), the eager run."""
    rig = h.rig()
    h.install(rig)
    model = nn.DataParallel(rig.net)
    h.note(f"DataParallel device_ids: {model.device_ids}")
    _forward_backward(h, model, rig)
    h.exercise(rig, model)


# ---- TorchScript freezing, quantization -----------------------------------------------------------------------------

def jit_freeze(h: Any) -> None:
    """``torch.jit.freeze(torch.jit.script(net.eval()))``, then forward and, where the output requires grad,
    backward."""
    rig = h.rig()
    scripted_install(h, rig)
    h.phase("script")
    scripted = torch.jit.script(rig.net.eval())
    h.phase("freeze")
    model = torch.jit.freeze(scripted)
    h.phase("forward")
    out = model(rig.x)
    h.fact(out)
    if out.requires_grad:
        h.phase("backward")
        out.sum().backward()
        h.fact(rig.x.grad, *h.grads(rig))
    h.exercise(rig, model)


def quantization(h: Any) -> None:
    """Eager-mode post-training quantization: ``QuantStub() -> net -> DeQuantStub()`` in eval mode with the default
    ``x86`` qconfig; ``prepare`` (observers), a calibration forward, ``convert`` (the ``Linear`` layers swapped for
    quantized ones), a forward, then ``state_dict()`` / ``load_state_dict()``."""
    import warnings

    from torch.ao import quantization as tq

    with warnings.catch_warnings():  # PyTorch warns once per process at the first quantized tensor: not the cell's
        warnings.simplefilter("ignore")
        torch.quantize_per_tensor(torch.zeros(1), 1.0, 0, torch.quint8)
    rig = h.rig()
    h.install(rig)
    model = nn.Sequential(tq.QuantStub(), rig.net, tq.DeQuantStub()).eval()
    model.qconfig = tq.get_default_qconfig("x86")
    h.phase("prepare")
    tq.prepare(model, inplace=True)
    h.phase("calibrate")
    model(rig.x)
    h.phase("convert")
    tq.convert(model, inplace=True)
    converted: Any = model[1]
    swapped = type(converted.subject.lin)
    h.note(f"after convert the subject's Linear is a {swapped.__module__}.{swapped.__name__}")
    h.phase("forward")
    h.fact(model(rig.x))
    h.exercise(rig, model)
