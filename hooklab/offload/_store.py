"""The disk store of :class:`hooklab.SaveOnDisk`: a private, locked temp folder per context, removed when its last
file is gone, and a sweep of the folders that killed processes left behind. Operating-system work only: no hooks.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading

from .._saved import Finalizer

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
