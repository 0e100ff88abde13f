"""Keep the tensors saved for backward somewhere cheaper: on the CPU, on disk, or compressed.

Each helper is a ``saved_tensors_hooks`` context manager with a size threshold and counters::

    with SaveOnDisk(min_bytes=64 * 1024) as disk:   # tensors >= 64 KiB go to a private temp dir
        loss = model(x).sum()
    loss.backward()                                   # each file is deleted when the graph frees it
    print(disk.stats)

Use them around part of a network with :func:`offload_module` (hooks on the module, the
state_dict is unchanged) or :class:`OffloadWrapper` (an ``nn.Module`` wrapper, as in the
tutorial). :func:`hooklab.checkpoint_modules` makes the opposite trade (keep nothing, recompute
in backward). :func:`gradient_error` says how far a lossy helper moves the gradients.

Saved-tensor hooks are thread-local: a forward run in another thread inside the block is not
offloaded (its ``stats`` stay at zero); enter the context in that thread (:class:`OffloadWrapper`
does, inside ``forward``).

Common rules: parameters (leaf tensors that require grad, and views of them such as the
``weight.t()`` that ``nn.Linear`` saves) stay where they are, and so do the tensors and modules
listed in ``keep`` (pass the model and the batch: buffers and inputs are alive anyway, and a
copy of them would only add memory); a storage saved by several ops (ReLU's
output is also the next conv's input) is packed once; nothing keeps a reference to the
original tensor, so memory really is released. A tensor kept where it is (not copied) has its
version checked in backward: an in-place change after the save raises PyTorch's "modified by an
inplace operation" error, as without saved-tensor hooks; a copied tensor gives backward the values
as they were saved, which is the right gradient.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Literal, get_args

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from ._saved import Finalizer, Kept
from ._torch_internals import StorageWeakRef, is_parameter_like, storage_key, version
from .scope import HookScope, LocalHook, same_module

if TYPE_CHECKING:  # typing.Self is Python >= 3.11
    from typing_extensions import Self

__all__ = [
    "CompressSaved",
    "OffloadScope",
    "OffloadStats",
    "OffloadWrapper",
    "SaveOnCpu",
    "SaveOnDisk",
    "gradient_error",
    "offload_module",
]


@dataclass
class OffloadStats:
    """Counters of one offloading context.

    ``packed``: pack-hook calls; ``offloaded``: tensors moved/encoded (``offloaded_bytes``
    before, ``stored_bytes`` after encoding); ``reused``: pack calls answered with an earlier
    packed copy of the same storage; ``kept``: tensors left in memory as they were
    (``kept_bytes``): too small, a parameter, in ``keep``, or not applicable (already on CPU).
    """

    packed: int = 0
    offloaded: int = 0
    reused: int = 0
    kept: int = 0
    offloaded_bytes: int = 0
    stored_bytes: int = 0
    kept_bytes: int = 0

    def __iadd__(self, other: OffloadStats) -> OffloadStats:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


Keep = Iterable["torch.Tensor | nn.Module"]


def _keep_keys(keep: Keep) -> set[int]:
    if isinstance(keep, (torch.Tensor, nn.Module)):
        keep = [keep]
    keys: set[int] = set()
    for item in keep:
        if isinstance(item, nn.Module):
            keys.update(storage_key(t) for t in (*item.parameters(), *item.buffers()))
        elif isinstance(item, torch.Tensor):
            keys.add(storage_key(item))
        else:
            raise TypeError(f"keep takes tensors and modules, got {type(item).__name__}")
    return keys


class _OffloadHooks(saved_tensors_hooks):
    """Shared machinery: threshold, parameters and ``keep`` skipped, one packed copy per storage, counters."""

    def __init__(self, *, min_bytes: int = 0, keep: Keep = (), include_parameters: bool = False) -> None:
        if not isinstance(min_bytes, int) or isinstance(min_bytes, bool) or min_bytes < 0:
            raise ValueError(f"min_bytes must be an int >= 0 (a size in bytes), got {min_bytes!r}")
        super().__init__(self._pack, self._unpack)
        self.min_bytes = min_bytes
        self.include_parameters = include_parameters
        self._keep = _keep_keys(keep)
        self.stats = OffloadStats()
        # storage -> its packed copy; pruned of dead entries as it grows (a weakref callback would be Python code
        # run as a finalizer, where a Ctrl-C is swallowed)
        self._cache: dict[tuple, tuple[StorageWeakRef, weakref.ref]] = {}
        self._prune_at = 64
        self._lock = threading.Lock()

    # subclasses decide what applies and how to encode / decode
    def _applies(self, t: torch.Tensor) -> bool:
        return True

    def _encode(self, t: torch.Tensor) -> Any:
        raise NotImplementedError

    def _decode(self, packed: Any) -> torch.Tensor:
        raise NotImplementedError

    def _stored_nbytes(self, packed: Any) -> int:
        raise NotImplementedError

    # torch's saved_tensors_hooks.__enter__ returns None; this one returns the context, so that
    # `with SaveOnCpu() as ctx:` gives it (its stats stay readable after the block)
    def __enter__(self) -> Self:  # type: ignore[override]
        super().__enter__()
        return self

    def _pack(self, t: torch.Tensor) -> Any:
        nbytes = _nbytes(t)
        with self._lock:
            self.stats.packed += 1
        if (nbytes < self.min_bytes or (not self.include_parameters and is_parameter_like(t))
                or storage_key(t) in self._keep or not self._applies(t)):
            with self._lock:
                self.stats.kept += 1
                self.stats.kept_bytes += nbytes
            return Kept(t)  # detached, with its version: backward raises if an in-place op changes it
        key = (storage_key(t), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, version(t))
        with self._lock:
            hit = self._cache.get(key)
            packed = hit[1]() if hit is not None and not hit[0].expired() else None
            if packed is not None:
                self.stats.reused += 1
                return packed
        packed = self._encode(t.detach())
        with self._lock:
            if len(self._cache) >= self._prune_at:
                for old in [k for k, (_, ref) in self._cache.items() if ref() is None]:
                    del self._cache[old]
                self._prune_at = max(64, 2 * len(self._cache))
            self._cache[key] = (StorageWeakRef(t.untyped_storage()), weakref.ref(packed))
            self.stats.offloaded += 1
            self.stats.offloaded_bytes += nbytes
            self.stats.stored_bytes += self._stored_nbytes(packed)
        return packed

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, Kept):
            return packed.get(type(self).__name__)
        return self._decode(packed)


class _OnCpu:
    __slots__ = ("device", "tensor", "__weakref__")

    def __init__(self, device: torch.device, tensor: torch.Tensor) -> None:
        self.device, self.tensor = device, tensor


class SaveOnCpu(_OffloadHooks):
    """Save tensors that live on an accelerator to CPU memory; bring them back for backward.

    Like ``torch.autograd.graph.save_on_cpu`` plus a size threshold, counters, parameters left
    in place, and no copy at all for tensors already on the CPU (``save_on_cpu(pin_memory=True)``
    copies those too). ``pin_memory=True`` uses page-locked memory when CUDA is available
    (faster, asynchronous copies) and is skipped otherwise.

    >>> import torch
    >>> x = torch.randn(100, requires_grad=True)
    >>> with SaveOnCpu() as cpu:
    ...     y = (x * x).sum()          # on a CPU-only machine nothing moves
    >>> cpu.stats.offloaded
    0
    """

    def __init__(self, *, min_bytes: int = 0, pin_memory: bool = False, keep: Keep = (),
                 include_parameters: bool = False) -> None:
        super().__init__(min_bytes=min_bytes, keep=keep, include_parameters=include_parameters)
        self.pin_memory = pin_memory

    def _applies(self, t: torch.Tensor) -> bool:
        return t.device.type != "cpu"

    def _encode(self, t: torch.Tensor) -> _OnCpu:
        pin = self.pin_memory and torch.cuda.is_available() and not t.is_sparse
        copy = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=pin)
        copy.copy_(t, non_blocking=pin)
        return _OnCpu(t.device, copy)

    def _decode(self, packed: _OnCpu) -> torch.Tensor:
        return packed.tensor.to(packed.device, non_blocking=self.pin_memory)

    def _stored_nbytes(self, packed: _OnCpu) -> int:
        return _nbytes(packed.tensor)


# ---------------------------------------------------------------------------------- disk
try:
    import fcntl
except ImportError:  # not on Windows: folders then carry only the process id
    fcntl = None  # type: ignore[assignment]

_LOCK = ".lock"  # in each private folder; held (flock) by the process that uses the folder


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's) or unknown: leave it alone
    return True


def _lock_folder(path: str) -> int | None:
    """Take the folder's lock without waiting; return its open descriptor, or None if another process holds it."""
    if fcntl is None:
        return None
    fd = os.open(os.path.join(path, _LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _stale(entry: os.DirEntry) -> bool:
    """Whether a ``hooklab-saved-*`` folder was left by a process that is gone."""
    if os.path.exists(os.path.join(entry.path, _LOCK)):
        # a live user holds the lock, from whatever PID namespace or host shares the folder; a process
        # that was killed released it with its last descriptor
        fd = _lock_folder(entry.path) if fcntl is not None else None
        if fd is None:
            return False
        os.close(fd)  # rmtree follows; a folder that someone locks meanwhile was already given up
        return True
    parts = entry.name.split("-")  # a folder of an older hooklab, without a lock: its process id decides
    return (len(parts) >= 4 and parts[2].isdigit() and int(parts[2]) != os.getpid()
            and not _pid_alive(int(parts[2])))


def _sweep_stale(directory: str | os.PathLike | None) -> None:
    """Remove the ``hooklab-saved-*`` folders of processes that were killed before they could clean up."""
    base = os.fspath(directory) if directory is not None else tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            if entry.name.startswith("hooklab-saved-") and entry.is_dir(follow_symlinks=False) and _stale(entry):
                shutil.rmtree(entry.path, ignore_errors=True)


def _remove_folder(path: str, lock: list[int]) -> None:
    """The finalizer's work; run again when a Ctrl-C interrupted it, so it must be safe to redo: the lock's file
    descriptor is taken out of ``lock`` before it is closed, never closed twice (a second close could close
    a descriptor the process has opened since under the same number)."""
    shutil.rmtree(path, ignore_errors=True)
    if lock:
        os.close(lock.pop())  # released only once the folder is gone


class _DiskStore:
    """A private temp directory; removed when the context has exited and no file is left.

    The process that uses it holds an ``flock`` on the ``.lock`` file inside, so the next SaveOnDisk of any
    process (also in another PID namespace or container, or on another host sharing the folder) removes
    only the folders whose lock nobody holds: those of processes that were killed.
    """

    def __init__(self, directory: str | os.PathLike | None) -> None:
        _sweep_stale(directory)
        base = directory if directory is not None else tempfile.gettempdir()
        # made under another name and locked before it gets the name the sweep looks for
        made = tempfile.mkdtemp(prefix=f"hooklab-new-{os.getpid()}-", dir=directory)
        lock_fd = _lock_folder(made)
        self.path = os.path.join(base, "hooklab-saved-" + os.path.basename(made)[len("hooklab-new-"):])
        os.rename(made, self.path)
        self.pending: set[str] = set()  # files written and not yet deleted
        self.count = 0
        self.exited = False
        self.broken = False
        self.lock = threading.Lock()
        # last resort (interpreter exit, store dropped): remove whatever is left
        self._finalizer = Finalizer(self, _remove_folder, self.path, [] if lock_fd is None else [lock_fd])

    @property
    def live(self) -> int:
        return len(self.pending)

    def new_path(self) -> str:
        with self.lock:
            self.count += 1
            path = os.path.join(self.path, f"{self.count:06d}.pt")
            self.pending.add(path)
            return path

    def file_gone(self, path: str) -> None:
        """Delete one file; safe to run again after an interrupt (a second run does nothing)."""
        if path not in self.pending:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        finally:  # an interrupt inside os.remove must not leave the count (and the folder) behind
            with self.lock:
                self.pending.discard(path)
                done = self.exited and not self.pending
            if done:
                self.cleanup()

    def cleanup(self) -> None:
        self._finalizer()  # runs rmtree once


def _remove_file(store: _DiskStore, path: str) -> None:
    store.file_gone(path)


class _OnDisk:
    """The packed form: a file name. Its file is deleted when this object dies (graph freed)."""

    __slots__ = ("path", "device", "store", "nbytes", "__weakref__")

    def __init__(self, store: _DiskStore, device: torch.device, nbytes: int) -> None:
        self.store, self.device, self.nbytes = store, device, nbytes
        self.path = store.new_path()
        Finalizer(self, _remove_file, store, self.path)


class SaveOnDisk(_OffloadHooks):
    """Save tensors to files in a private temp directory; read them back (maybe several times) in backward.

    Pass ``keep=[model, x]`` so that buffers and the input batch (alive anyway) are not copied to
    disk. Each file is deleted when autograd frees the saved tensor (after backward, or when the graph
    is dropped without backward); the directory goes when the context has exited and its last
    file is gone. If the ``with`` body raises, every file is deleted at once (a traceback can
    keep the half-built graph alive for a long time) and unpacking then raises. Files are read
    with ``torch.load(..., weights_only=True)``: only tensors, no pickled code.

    The process using a folder holds an ``flock`` on its ``.lock`` file; entering a SaveOnDisk
    removes the ``hooklab-saved-*`` folders whose lock nobody holds (left by a killed process), and
    never a live one of another process, PID namespace or host sharing the directory. A Ctrl-C that
    lands while a file is being deleted (a finalizer, where Python cannot raise) is delivered again
    right after it: the first entry installs an unraisable hook for that, which passes everything
    else to the hook that was there.

    >>> import torch
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
    >>> x = torch.randn(32, 64)
    >>> with SaveOnDisk(min_bytes=1024, keep=[model, x]) as disk:
    ...     loss = model(x).sum()
    >>> disk.files_alive > 0
    True
    >>> loss.backward(); disk.files_alive
    0
    """

    def __init__(self, *, min_bytes: int = 0, directory: str | os.PathLike | None = None,
                 keep: Keep = (), include_parameters: bool = False) -> None:
        super().__init__(min_bytes=min_bytes, keep=keep, include_parameters=include_parameters)
        if directory is not None and not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"directory must be a folder path (str or os.PathLike) or None for the system temp dir, "
                            f"got {type(directory).__name__} {directory!r}")
        if directory is not None and os.path.exists(directory) and not os.path.isdir(directory):
            raise NotADirectoryError(f"directory {str(directory)!r} is a file, not a folder; pass a folder (its "
                                     "private subfolder is made there) or None for the system temp dir")
        if directory is not None and not os.path.isdir(directory):
            raise FileNotFoundError(f"directory {str(directory)!r} does not exist; create it or pass None "
                                    "for the system temp dir")
        self._directory = directory
        self._store: _DiskStore | None = None

    @property
    def directory(self) -> str:
        """The private directory of the current (or last) use of this context."""
        if self._store is None:
            raise RuntimeError("SaveOnDisk has no directory before it is entered")
        return self._store.path

    @property
    def files_alive(self) -> int:
        """Files of this context still on disk."""
        if self._store is None or not os.path.isdir(self._store.path):
            return 0
        return sum(name != _LOCK for name in os.listdir(self._store.path))

    def __enter__(self) -> Self:  # type: ignore[override]  # see _OffloadHooks.__enter__
        if self._store is not None and not self._store.exited:
            raise RuntimeError("this SaveOnDisk context is already active; create a new one per region")
        self._store = _DiskStore(self._directory)
        self._cache.clear()
        return super().__enter__()

    def __exit__(self, *exc_info: object) -> None:
        super().__exit__(*exc_info)
        raised = exc_info[0] is not None
        store = self._store
        assert store is not None
        with store.lock:
            store.exited = True
            if raised:
                store.broken = True
            done = not store.pending
        if raised or done:
            store.cleanup()

    def _encode(self, t: torch.Tensor) -> _OnDisk:
        store = self._store
        assert store is not None
        if t.untyped_storage().nbytes() > _nbytes(t):
            t = t.clone()  # torch.save writes a view's whole storage: copy just the view
        packed = _OnDisk(store, t.device, _nbytes(t))
        try:
            torch.save(t.cpu(), packed.path)
        except (RuntimeError, OSError) as exc:
            free = shutil.disk_usage(store.path).free
            raise OSError(errno.ENOSPC if free < _nbytes(t) + (1 << 20) else errno.EIO,
                          f"SaveOnDisk could not write a {_nbytes(t)}-byte tensor to {store.path} "
                          f"({free} bytes free: disk full?); pass directory= on a disk with room, or raise "
                          f"min_bytes") from exc
        return packed

    def _decode(self, packed: _OnDisk) -> torch.Tensor:
        if packed.store.broken:
            raise RuntimeError("this saved tensor's file was deleted because an exception left the "
                               "SaveOnDisk context; run the forward pass again")
        try:
            return torch.load(packed.path, weights_only=True, map_location="cpu").to(packed.device)
        except FileNotFoundError:
            raise FileNotFoundError(f"the file SaveOnDisk wrote for a saved tensor, {packed.path}, is gone: its "
                                    f"folder {os.path.dirname(packed.path)} was removed (or emptied) before backward "
                                    "read it back. Leave the folder alone until backward has run.") from None
        except Exception as exc:  # torch.load's own message names no file ("corrupted checkpoint", EOF, unpickling)
            raise RuntimeError(f"SaveOnDisk could not read back the saved tensor in {packed.path}: the file is damaged "
                               f"(truncated or overwritten after it was written: {type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''}). Leave the folder alone until "
                               "backward has run, and run the forward pass again.") from exc

    def _stored_nbytes(self, packed: _OnDisk) -> int:
        return packed.nbytes


# ---------------------------------------------------------------------------- compression
class _Compressed:
    __slots__ = ("data", "scale", "dtype", "special", "__weakref__")

    def __init__(self, data: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype,
                 special: torch.Tensor | None = None) -> None:
        self.data, self.scale, self.dtype = data, scale, dtype
        self.special = special  # int8: the non-finite entries (where data == -128): +1 inf, -1 -inf, 0 nan


Format = Literal["bf16", "int8"]


class CompressSaved(_OffloadHooks):
    """Keep floating-point saved tensors in a smaller, lossy form: ``"bf16"`` or ``"int8"``.

    ``bf16`` halves float32 (8 bits of mantissa, about 3 significant digits); ``int8`` quarters it
    with one scale per channel (dim 1; ``x ~ q * max|x| / 127``) and sign-preserving rounding
    (a nonzero value never rounds to 0: ReLU's backward reads ``out > 0`` from its saved output,
    and plain rounding flips that mask for small values, which multiplies the gradient error
    by about 20 on a ResNet). ``int8`` keeps +-inf and nan exactly (one extra byte per such
    entry; the scale comes from the finite values), so a ``-inf`` attention mask saved for
    backward stays a mask. Backward uses the decoded values, so gradients change: measure how
    much with :func:`gradient_error`. Integer tensors (e.g. max-pool indices, int64) are stored
    losslessly in the smallest integer type that holds their values.

    ``min_bytes`` defaults to 4 KiB: small tensors (batch norm's saved mean and inverse std, one
    number per channel) would save next to nothing, and they are where precision matters most
    (on a ResNet-18, compressing them too doubles the gradient error).

    >>> import torch
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
    >>> x = torch.randn(32, 64)
    >>> with CompressSaved("bf16", keep=[model, x]) as comp:
    ...     loss = model(x).sum()
    >>> comp.stats.stored_bytes * 2 == comp.stats.offloaded_bytes     # float32 -> bf16 (no ints saved)
    True
    """

    FORMATS: tuple[Format, ...] = get_args(Format)

    def __init__(self, fmt: Format = "bf16", *, min_bytes: int = 4096, keep: Keep = (),
                 include_parameters: bool = False) -> None:
        if fmt not in self.FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(self.FORMATS)}")
        super().__init__(min_bytes=min_bytes, keep=keep, include_parameters=include_parameters)
        self.fmt = fmt

    _INTS = (torch.int8, torch.int16, torch.int32)
    _SIGNED = (torch.int16, torch.int32, torch.int64)

    def _applies(self, t: torch.Tensor) -> bool:
        if t.is_floating_point():
            return t.element_size() > (1 if self.fmt == "int8" else 2)
        return t.dtype in self._SIGNED and t.numel() > 0

    def _encode(self, t: torch.Tensor) -> _Compressed | Kept:
        if not t.is_floating_point():
            # integer tensors (max-pool indices are int64) go, losslessly, into the smallest
            # integer type that holds their range
            lo, hi = t.min().item(), t.max().item()
            for dtype in self._INTS:
                info = torch.iinfo(dtype)
                if info.min <= lo and hi <= info.max and torch.iinfo(t.dtype).bits > info.bits:
                    return _Compressed(t.to(dtype), None, t.dtype)
            return Kept(t)  # no smaller type holds it: keep the tensor itself, no copy
        if self.fmt == "bf16":
            return _Compressed(t.to(torch.bfloat16), None, t.dtype)
        x = t.float()
        # +-inf and nan (a -inf attention mask) are kept exactly, one byte each, and left out of
        # the scale: an infinite max would turn every other value into 0 or nan
        finite = torch.isfinite(x)
        special = None
        if not bool(finite.all()):
            odd = x[~finite]
            special = torch.where(odd.isnan(), 0, torch.sign(odd)).to(torch.int8)
            x = x.masked_fill(~finite, 0)
        # one scale per channel (dim 1) when there is one, else per tensor
        dims = [d for d in range(x.dim()) if d != 1] if x.dim() > 1 else list(range(x.dim()))
        amax = x.abs().amax(dim=dims, keepdim=True) if dims else x.abs()
        scale = amax.clamp_min(torch.finfo(torch.float32).tiny) / 127
        # sign-preserving rounding: a small nonzero value becomes +-1, never 0, so masks that
        # backward reads from a saved tensor (ReLU: grad * (out > 0)) survive exactly
        q = torch.round(x.abs() / scale).clamp_(1, 127) * torch.sign(x)
        if special is not None:
            q.masked_fill_(~finite, -128)  # -128 is never a rounded value: it marks a non-finite entry
        return _Compressed(q.to(torch.int8), scale, t.dtype, special)

    def _decode(self, packed: _Compressed) -> torch.Tensor:
        if packed.scale is None:  # bf16, or an integer tensor
            return packed.data.to(packed.dtype)
        out = packed.data.float() * packed.scale
        if packed.special is not None:
            out[packed.data == -128] = packed.special.float() * float("inf")  # 0 * inf is nan
        return out.to(packed.dtype)

    def _stored_nbytes(self, packed: _Compressed | Kept) -> int:
        if isinstance(packed, Kept):
            return _nbytes(packed.tensor)
        extra = [t for t in (packed.scale, packed.special) if t is not None]
        return _nbytes(packed.data) + sum(_nbytes(t) for t in extra)


# ------------------------------------------------------------------------- on modules
HooksFactory = Callable[[], ContextManager[Any]]


def _make_context(make_hooks: HooksFactory, tool: str) -> Any:
    """Call ``make_hooks()`` and check that it gave a context manager (a clear error instead of a raw one)."""
    hooks = make_hooks()
    if not (hasattr(hooks, "__enter__") and hasattr(hooks, "__exit__")):
        raise TypeError(f"{tool}: make_hooks() returned {type(hooks).__name__} ({hooks!r}), not a context manager; "
                        "pass a function that returns a fresh one for each forward call, e.g. "
                        "lambda: SaveOnDisk(min_bytes=4096)")
    return hooks


def _check_factory(make_hooks: Any) -> None:
    if isinstance(make_hooks, contextlib.AbstractContextManager) or isinstance(make_hooks, saved_tensors_hooks):
        raise TypeError("pass a function that makes a fresh context for each forward call, e.g. "
                        "lambda: SaveOnDisk(min_bytes=4096), not a context object")
    if not callable(make_hooks):
        raise TypeError(f"make_hooks must be callable (returning a context manager), got {type(make_hooks).__name__}")


class OffloadWrapper(nn.Module):
    """Run ``module`` under a fresh ``make_hooks()`` context on every forward call.

    The context is entered inside ``forward``, in the thread that runs it, so it also works
    under ``nn.DataParallel`` (saved-tensor hooks are thread-local). The wrapped module's
    state_dict keys gain a ``module.`` prefix; :func:`offload_module` avoids that.

    >>> net = nn.Sequential(nn.Linear(10, 100), OffloadWrapper(nn.Linear(100, 100), SaveOnDisk))
    """

    def __init__(self, module: nn.Module, make_hooks: HooksFactory) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"OffloadWrapper wraps an nn.Module, got {type(module).__name__}")
        _check_factory(make_hooks)
        self.module = module
        self.make_hooks = make_hooks
        self.last_hooks: Any = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped module inside a fresh ``make_hooks()`` context (kept as :attr:`last_hooks`)."""
        hooks = _make_context(self.make_hooks, "OffloadWrapper")
        self.last_hooks = hooks
        with hooks:
            return self.module(*args, **kwargs)


class OffloadScope(HookScope):
    """What :func:`offload_module` returns: its two hooks, and a bounded summary of the calls.

    ``calls``: forward calls so far; ``stats``: the :class:`OffloadStats` of every call's context
    added up (contexts without ``stats``, e.g. torch's ``save_on_cpu``, are not counted);
    ``last``: the context of the latest call. Nothing here grows with the number of calls.
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.calls = 0
        self.stats = OffloadStats()
        self.last: ContextManager | None = None

    def __exit__(self, *exc_info: object) -> None:
        super().__exit__(*exc_info)
        if exc_info[0] is None and self.calls == 0:
            warnings.warn(
                "offload_module: the module never ran inside the block, so nothing was offloaded. If the model "
                "is torch.compile'd, hooks added after compiling do not run in the compiled code: call the "
                "eager model (model._orig_mod) inside the block.", RuntimeWarning, stacklevel=2)


def offload_module(module: nn.Module, make_hooks: HooksFactory) -> OffloadScope:
    """Make every forward call of ``module`` run under a fresh ``make_hooks()`` context.

    Uses a forward pre-hook to enter and an always-called forward hook to leave, so the
    model and its state_dict are unchanged. Returns an :class:`OffloadScope`; ``.remove()`` it
    (or use it in ``with``) to stop. ``scope.stats`` sums the counters of every call and
    ``scope.last`` is the latest call's context.
    If the module's forward raises, its context is left as after a normal exit (a hook cannot
    tell the exception apart from one already being handled around the call); a
    :class:`SaveOnDisk` context then deletes its files when the partial graph is freed.

    >>> import torch
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
    >>> x = torch.randn(32, 64)
    >>> with offload_module(model[0], lambda: CompressSaved("bf16")) as scope:
    ...     loss = model(x).sum()
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"offload_module takes an nn.Module, got {type(module).__name__}")
    _check_factory(make_hooks)
    scope = OffloadScope("offload_module")
    local = threading.local()
    registered = same_module(module)  # a copy.deepcopy made while the scope is active carries these hooks

    def enter(mod: nn.Module, args: Any) -> None:
        if not registered(mod):
            return
        scope.calls += 1  # counted also when making the context fails (the module did run)
        hooks = _make_context(make_hooks, "offload_module")
        hooks.__enter__()
        stack = getattr(local, "stack", None) or []
        stack.append(hooks)
        local.stack = stack
        scope.last = hooks

    def leave(mod: nn.Module, args: Any, output: Any) -> None:
        if not registered(mod):
            return
        stack = getattr(local, "stack", None)
        if stack:
            hooks = stack.pop()
            hooks.__exit__(None, None, None)
            if isinstance(getattr(hooks, "stats", None), OffloadStats):
                scope.stats += hooks.stats  # packing is over once the call has returned

    scope.add(module.register_forward_pre_hook(LocalHook(enter, "offload_module")))
    scope.add(module.register_forward_hook(LocalHook(leave, "offload_module"), always_call=True))
    return scope


# ---------------------------------------------------------------------------- accuracy
_STEP_RAN_BACKWARD = ("gradient_error: step() ran backward itself; step() must only run the forward pass and return "
                      "the loss: gradient_error calls loss.backward() once per run (without and with the hooks)")


def gradient_error(model: nn.Module, step: Callable[[], torch.Tensor], make_hooks: HooksFactory,
                   seed: int = 0) -> float:
    """Relative L2 error of all parameter gradients when ``step()`` runs under ``make_hooks()``.

    ``step`` runs the forward pass and returns a scalar loss. Both runs use the same RNG seed;
    the model's gradients and buffers (e.g. batch-norm statistics) are restored afterwards.

    >>> import torch
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
    >>> x = torch.randn(32, 64)
    >>> gradient_error(model, lambda: model(x).sum(), lambda: CompressSaved("bf16")) < 1e-2
    True
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"gradient_error takes an nn.Module, got {type(model).__name__}")
    _check_factory(make_hooks)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no parameters that require grad")
    old_grads = [p.grad for p in params]
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}

    def grads(context: ContextManager[Any]) -> torch.Tensor:
        for p in params:
            p.grad = None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                with context:
                    loss = step()
            except RuntimeError as exc:
                if "backward through the graph a second time" not in str(exc):
                    raise
                raise ValueError(_STEP_RAN_BACKWARD) from exc
            if any(p.grad is not None for p in params):
                raise ValueError(_STEP_RAN_BACKWARD)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise ValueError("step() must return a scalar loss tensor, got "
                                 f"{type(loss).__name__}{'' if not isinstance(loss, torch.Tensor) else ' of shape ' + str(tuple(loss.shape))}")
            loss.backward()
        out = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten().double()
                         for p in params])
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
        return out

    try:
        reference = grads(contextlib.nullcontext())
        approx = grads(_make_context(make_hooks, "gradient_error"))
    finally:
        for p, g in zip(params, old_grads):
            p.grad = g
        with torch.no_grad():  # also when step() raised (the docstring promises the buffers back)
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
    norm = reference.norm().item()
    diff = (approx - reference).norm().item()
    return diff / norm if norm > 0 else diff
