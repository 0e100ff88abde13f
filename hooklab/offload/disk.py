"""Saved tensors written to files in a private temp folder, read back in backward (:class:`SaveOnDisk`)."""
from __future__ import annotations

import errno
import os
import shutil
from typing import TYPE_CHECKING

import torch

from .._saved import Finalizer
from ._base import Keep, _nbytes, _OffloadHooks
from ._store import _LOCK, _DiskStore

if TYPE_CHECKING:  # typing.Self is Python >= 3.11
    from typing_extensions import Self

__all__ = ["SaveOnDisk"]


class _OnDisk:
    """The packed form: a file name. Its file is deleted when this object dies (graph freed)."""

    __slots__ = ("path", "device", "store", "nbytes", "__weakref__")

    def __init__(self, store: _DiskStore, device: torch.device, nbytes: int) -> None:
        self.store, self.device, self.nbytes = store, device, nbytes
        self.path = store.new_path()
        Finalizer(self, store.file_gone, self.path)


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
            files_left = os.statvfs(store.path).f_favail if hasattr(os, "statvfs") else -1
            if files_left == 0:  # bytes to spare, but no inode for one more file
                why, code = "no file can be created there: the file system has no free inodes", errno.ENOSPC
            elif free < _nbytes(t) + (1 << 20):
                why, code = f"{free} bytes free: the disk is full", errno.ENOSPC
            else:
                why, code = f"{free} bytes free; the error above says why", errno.EIO
            raise OSError(code, f"SaveOnDisk could not write a {_nbytes(t)}-byte tensor to {store.path} ({why}); "
                                "pass directory= on a disk with room, or raise min_bytes") from exc
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
