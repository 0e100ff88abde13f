"""What a test may leave in the process, read before and after it and put back (the root conftest.py's fixtures).

Every test, in every folder, is read around: the global module and optimizer hooks and the saved-tensor hook contexts
still entered; grad mode, inference mode, whether saved-tensor hooks are disabled, anomaly mode, the default dtype,
deterministic algorithms, the thread count and torch's print options; the loggers' levels; ``os.environ``; the
working directory. What a test changed is put back, so the next test starts from the same process whatever ran
before it. In tests/library/ a test that leaves a hook or an autograd setting fails (hooklab's tools must never leave
one); elsewhere what was put back is listed at the end of the run.

Every test file is read around too, for what outlives a test by design: modules that carry hooks (after a garbage
collection, which also frees what only a cycle held), threads that are not daemons, and child processes (but
multiprocessing's resource tracker, which lives as long as the interpreter by design: :func:`lifelong`). A file that
leaves one fails at its last test, naming what it left; the hooks are removed, the processes killed.
"""
from __future__ import annotations

import gc
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.modules.module as _module_globals

from hooklab import _torch_internals as internals

_kept_guards: list = []  # inference-mode guards entered to undo a leaked one (a guard is undone when it is freed)


def _set_inference_mode(mode: bool) -> None:
    # torch has no setter: a guard object sets the mode until it is freed, so the guard is kept
    guard = torch._C._InferenceMode(mode)
    guard.__enter__()
    _kept_guards.append(guard)


def _set_saved_tensors_hooks_enabled(enabled: bool) -> None:
    if enabled:
        torch._C._autograd._saved_tensors_hooks_enable()
    else:
        torch._C._autograd._saved_tensors_hooks_disable("disabled before this test (put back by tests/leftovers.py)")


def _print_options() -> dict[str, Any]:
    return {k: getattr(torch._tensor_str.PRINT_OPTS, k) for k in ("precision", "threshold", "edgeitems", "linewidth",
                                                                   "sci_mode")}


class LoggerLevels:
    """The level of every logger that exists, and ``logging.disable``'s. A level that differs from the one before is a
    change, except a library setting the level of a logger still at NOTSET to WARNING or below: that is the library
    configuring its loggers when it is first imported (transformers and diffusers set WARNING, Lightning INFO), which
    happens once per process whichever test imports it; set to ERROR or above, it is a test quieting them."""

    def __init__(self) -> None:
        loggers = [(name, lg) for name, lg in list(logging.root.manager.loggerDict.items())
                   if isinstance(lg, logging.Logger)]
        self.levels = {"": logging.root.level, **{name: lg.level for name, lg in loggers}}
        self.disabled = logging.root.manager.disable

    def differing(self, before: LoggerLevels) -> list[str]:
        """The loggers (``""``: the root) whose level changed since ``before``, and ``logging.disable`` if it did."""
        names = [n for n in self.levels.keys() & before.levels.keys() if self.levels[n] != before.levels[n]
                 and (before.levels[n] != logging.NOTSET or self.levels[n] > logging.WARNING)]
        return sorted(names) + (["logging.disable"] if self.disabled != before.disabled else [])

    def __eq__(self, before: object) -> bool:
        return isinstance(before, LoggerLevels) and not self.differing(before)

    def __repr__(self) -> str:
        return f"<levels of {len(self.levels)} loggers>"

    def put_back(self) -> None:
        """Each changed level as it was in this reading."""
        for name in LoggerLevels().differing(self):
            if name == "logging.disable":
                logging.disable(self.disabled)
            else:
                logging.getLogger(name or None).setLevel(self.levels[name])


# name: (read it, set it back); inference mode before grad mode, since leaving inference mode sets grad mode
AUTOGRAD = {
    "inference mode (torch.is_inference_mode_enabled())": (torch.is_inference_mode_enabled, _set_inference_mode),
    "grad mode (torch.is_grad_enabled())": (torch.is_grad_enabled, torch.set_grad_enabled),
    "saved-tensor hooks enabled (torch.autograd.graph.disable_saved_tensors_hooks)":
        (torch._C._autograd._saved_tensors_hooks_is_enabled, _set_saved_tensors_hooks_enabled),
    "anomaly mode, NaN check (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())":
        (lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
         lambda mode: torch.set_anomaly_enabled(*mode)),
    "default dtype (torch.get_default_dtype())": (torch.get_default_dtype, torch.set_default_dtype),
}
OTHER = {
    "deterministic algorithms (torch.are_deterministic_algorithms_enabled())":
        (lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
         lambda mode: torch.use_deterministic_algorithms(mode[0], warn_only=mode[1])),
    "threads (torch.get_num_threads())": (torch.get_num_threads, torch.set_num_threads),
    "print options (torch.set_printoptions)": (_print_options, lambda options: torch.set_printoptions(**options)),
    "working directory (os.getcwd())": (os.getcwd, os.chdir),
    # a level set to ERROR (transformers' or diffusers' set_verbosity_error, a Trainer quieted) and kept: a later
    # trigger of a message those loggers warn showed nothing in one order of the gate
    "logger levels (logging.getLogger(name).setLevel, logging.disable)": (LoggerLevels, LoggerLevels.put_back),
    # set by the first global backward hook and never reset when it is removed: a test that registered a full one and
    # removed it made a later test's old-style global backward hook raise "Cannot use both regular backward hooks and
    # full backward hooks as a global Module hook"
    "kind of the global backward hooks (torch.nn.modules.module._global_is_full_backward_hook)":
        (internals.global_full_backward, lambda flag: setattr(_module_globals, "_global_is_full_backward_hook", flag)),
}


def settings(table: dict = AUTOGRAD) -> dict[str, object]:
    return {name: read() for name, (read, _set) in table.items()}


def global_hook_keys() -> list[tuple[str, set]]:
    """Each global hook dict (module and optimizer hooks, and the flags kept beside them) with its keys now."""
    dicts = [(attr, d) for attr, _kind, d in internals.global_hook_dicts() + internals.global_optimizer_hook_dicts()]
    dicts += [(attr, getattr(_module_globals, attr)) for attr in internals.GLOBAL_HOOK_FLAGS
              if isinstance(getattr(_module_globals, attr, None), dict)]
    return [(attr, set(d)) for attr, d in dicts]


def _dict_named(attr: str) -> dict:
    import torch.optim.optimizer as optimizer_globals
    found = getattr(_module_globals, attr, None)
    return found if isinstance(found, dict) else getattr(optimizer_globals, attr)


@dataclass
class Snapshot:
    """The process-wide state around one test."""
    hooks: list[tuple[str, set]] = field(default_factory=global_hook_keys)
    full_backward: object = field(default_factory=internals.global_full_backward)
    saved_top: object = field(default_factory=internals.top_saved_tensors_hooks)
    autograd: dict[str, object] = field(default_factory=settings)
    other: dict[str, object] = field(default_factory=lambda: settings(OTHER))
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    def hooks_added(self) -> list[str]:
        lines = []
        for attr, keys in self.hooks:
            hooks = _dict_named(attr)
            lines += [f"a global hook in torch's {attr}: {hooks[k]!r:.120}" for k in set(hooks) - keys]
        if internals.top_saved_tensors_hooks() != self.saved_top:
            lines.append("a saved-tensor hooks context still entered (torch.autograd.graph.saved_tensors_hooks)")
        return lines

    def changed(self, table: str) -> list[str]:
        before = getattr(self, table)
        now = settings(AUTOGRAD if table == "autograd" else OTHER)
        return [f"{name}: {before[name]!r:.80} before the test, {now[name]!r:.80} after it"
                if not isinstance(now[name], LoggerLevels) else f"{name}: {', '.join(n or 'root' for n in now[name].differing(before[name]))}"
                for name in before if now[name] != before[name]]

    def environ_changed(self) -> list[str]:
        now = os.environ
        keys = sorted((set(now) ^ set(self.environ) | {k for k in now if k in self.environ and now[k] != self.environ[k]})
                      - {"PYTEST_CURRENT_TEST"})  # pytest's own
        return [f"os.environ[{k!r}]: {self.environ.get(k)!r:.60} before the test, {now.get(k)!r:.60} after it"
                for k in keys]

    def put_back(self) -> None:
        for attr, keys in self.hooks:
            hooks = _dict_named(attr)
            for key in set(hooks) - keys:
                del hooks[key]
        _module_globals._global_is_full_backward_hook = self.full_backward
        for _ in range(1000):  # a bound: a leak is a few contexts, never an endless stack
            if internals.top_saved_tensors_hooks() == self.saved_top or not internals.pop_saved_tensors_hooks():
                break
        for table, values in ((AUTOGRAD, self.autograd), (OTHER, self.other)):
            for name, (read, set_back) in table.items():
                if read() != values[name]:
                    set_back(values[name])
        if os.environ != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)


# ----------------------------------------------------------------------------------------- around a test file
def hooked_modules() -> list[torch.nn.Module]:
    """Every module alive that carries a hook of its own (after a collection)."""
    gc.collect()
    found = []
    for o in gc.get_objects():
        if issubclass(type(o), torch.nn.Module) and any(d for _a, _k, d in internals.module_hook_dicts(o)):
            found.append(o)
    return found


def children() -> set[int]:
    """The process ids of this process's children (Linux; elsewhere none are seen)."""
    found: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{os.getpid()}/task"):
            with open(f"/proc/{os.getpid()}/task/{task}/children", encoding="ascii") as f:
                found.update(int(p) for p in f.read().split())
    except OSError:
        pass
    return found


def lifelong() -> set[int]:
    """Children that live as long as the interpreter by design, whichever test started them: multiprocessing's resource
    tracker, which the first process started by 'spawn' or 'forkserver' starts (hooklab.run_workers spawns after a
    compiled backward). Killing it only makes multiprocessing warn and start another for the next such test."""
    from multiprocessing import resource_tracker

    pid = getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)
    return {pid} if pid else set()


def threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()}


@dataclass
class FileSnapshot:
    modules: set[int] = field(default_factory=lambda: {id(m) for m in hooked_modules()})
    processes: set[int] = field(default_factory=children)
    threads: set[threading.Thread] = field(default_factory=threads)

    def left(self) -> list[str]:
        """What the file left, each put back: hooks removed from the modules, processes killed, threads named."""
        lines = []
        for m in hooked_modules():
            if id(m) in self.modules:
                continue
            kinds = sorted({kind for _a, kind, d in internals.module_hook_dicts(m) if d})
            lines.append(f"a {type(m).__name__} still alive with {', '.join(kinds)} hooks (removed now); what "
                         f"holds it: {_holders(m)}")
            for _attr, _kind, d in internals.module_hook_dicts(m):
                d.clear()
        for pid in sorted(children() - self.processes - lifelong()):
            lines.append(f"child process {pid} ({_command(pid)}) still running (killed now)")
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except (OSError, ChildProcessError):
                pass
        for t in threads() - self.threads:
            t.join(timeout=2.0)
            if t.is_alive():
                lines.append(f"thread {t.name!r} (not a daemon) still running")
        return lines


def _holders(o: object) -> str:
    kinds = [type(r).__name__ for r in gc.get_referrers(o) if r is not globals()][:4]
    return ", ".join(kinds) or "nothing but a cycle"


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:100].strip()
    except OSError:
        return "?"
