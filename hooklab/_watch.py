"""What :func:`~hooklab.explain.explain_hook` watches while the step runs, without registering anything.

:class:`_Watch` is the profile function that :func:`~hooklab.explain.explain_hook` installs for the step (and its
fallback, a global module pre-hook's function): it sees each module call (``Module._call_impl``), which Python
functions and fast-path ops ran and which code read the hooked module's parameters, and counts each hook that fired
and with which module. :meth:`_Watch.relation` says how a module that ran relates to the hooked one (the relations
below: the module itself, a copy, a replica, a compiled, scripted or fused version, a graph module...).
:mod:`hooklab.explain` turns what it saw into a cause and reasons.
"""
from __future__ import annotations

import os
import sys
import threading
import types
from collections import Counter
from concurrent.futures import wait as futures_wait
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as module_globals

from . import _torch_internals as internals
from .inventory import hook_name
from .systems import _is_script_module, _unwrap, compiled

# relations of a module that ran to the hooked one
SELF = "the module"
REPLICA = "a replica (shares its hook dicts)"
COPY = "a copy (carries the same hooks)"
COPY_INSIDE = "a copy inside the model (carries the same hooks)"
LOOKALIKE = "a module like it, outside the model"
COMPILED = "a torch.compile wrapper around it"
SCRIPTED = "a TorchScript module (torch.jit.script / trace)"
FUSED = "a fused module made from it"
GRAPH = "an FX GraphModule that inlined it"
IN_MODEL = "another module of the model"
OTHER_GRAPH = "an FX GraphModule (torch.fx, torch.export)"
DYNAMO_GRAPH = "a graph module made by torch.compile (its backend returned it)"
UNFLATTENED = "a copy made by torch.export.unflatten"
_HOOK_KINDS = ("forward_pre", "forward", "backward_pre", "backward")
# modules that Conv+BN(+ReLU) fusion folds into the fused module (they have no copy inside it)
_FOLDED = (nn.modules.batchnorm._BatchNorm, nn.ReLU)
_FAST_PATH_OWNERS = (nn.TransformerEncoderLayer, nn.MultiheadAttention)
_GETATTR = nn.Module.__getattr__.__code__
# functions that read a module's attributes to describe it, not to compute: repr(model), print(model), a library's
# status report built on them (PEFT's get_model_status); a parameter read under them is not a computation
_DESCRIBING = frozenset({"__repr__", "extra_repr", "__str__", "_repr_html_", "__format__", "__dir__"})
_TENSOR_REGISTER = _REGISTER = getattr(torch.Tensor.register_hook, "__code__", None)
_GLOBAL_KINDS = (("forward_pre", "_global_forward_pre_hooks"), ("forward", "_global_forward_hooks"),
                 ("backward_pre", "_global_backward_pre_hooks"), ("backward", "_global_backward_hooks"))
_REGISTERS = ("register_hook", "register_prehook")  # what a forward hook calls to hook its output's backward
_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")
POOL_WAIT_S = 60.0  # how long a pool's threads are waited for to take the profile function: a guard against a thread
# kept busy by a task of its own (the step waits that long at most), never reached by a thread that is only slow to be
# scheduled on a loaded machine, so that load decides no count


def _fast_paths() -> dict[Any, str]:
    """Built-in ops that compute a whole module without calling its submodules (nor their hooks)."""
    paths = {}
    for op, what in (("_transformer_encoder_layer_fwd", "nn.TransformerEncoderLayer's fast path"),
                     ("_native_multi_head_attention", "nn.MultiheadAttention's fast path")):
        fn = getattr(torch, op, None)
        if fn is not None:
            paths[fn] = f"{what} (torch.{op})"
    return paths


class _Watch:
    """The probes of one explain_hook call: a profile function (or, when another profiler is active, a global module
    pre-hook)."""

    def __init__(self, model: nn.Module, name: str, target: nn.Module) -> None:
        self.model, self.name, self.target = model, name, target
        named = list(model.named_modules(remove_duplicate=False))
        self.tree = {id(m): n for n, m in named}
        self.modules_by_id = {id(m): m for _, m in named}
        parts = name.split(".") if name else []
        self.ancestors = [(".".join(parts[:i]), model.get_submodule(".".join(parts[:i])))
                          for i in range(len(parts) - 1, -1, -1)]  # parent first, the model last
        self.parent = self.ancestors[0][1] if self.ancestors else None
        self.subtree = {id(m) for m in target.modules()}
        self.calls: Counter = Counter()           # id(module) -> module(...) calls, for every module called
        self.compiled_calls: Counter = Counter()  # id(module) -> calls of a module compiled in place
        self.without_grad = self.forward_runs = self.in_eval = 0
        self.ran_instead: Counter = Counter()
        self.outside_convs: Counter = Counter()   # (type name, out_channels) of convolutions outside the model
        self.fast: Counter = Counter()
        self.fast_ops = _fast_paths()
        self.reads: Counter = Counter()           # who read the target's parameters (code outside it)
        self.described = 0                         # reads of them made by repr() / str() (describing, not computing)
        # a TorchScript module's class has no Python forward to watch (type(m).forward raises)
        self.forward_code: Any = None if _is_script_module(target) else _code(type(target).forward)
        self.checkpoint_first = self.checkpoint_recomputed = 0  # calls in checkpoint's first pass / its recompute
        self.checkpoint_inputs_need_grad = False  # whether an input of a reentrant checkpoint required grad
        self.call_code, self.wrapped_code = internals.module_call_codes()
        self.hook_objects: dict[int, str] = {}     # id(hook object) -> label (callable objects: exact match)
        self.hook_codes: dict[Any, list[str]] = {}  # code object -> labels (functions)
        self.hook_labels: dict[int, str] = {}      # id(module hook function) -> label
        self.fired: dict[str, Counter] = {}
        self.labels: list[str] = []
        self.fns: dict[str, Any] = {}              # label -> the hook function (to tell closures of one code apart)
        self.kinds: dict[str, str] = {}            # label -> its kind (forward, backward, tensor, global forward...)
        self.registered: dict[str, tuple[dict, Any]] = {}  # label -> (its hook dict, its key): removed later?
        self.removed_elsewhere: list[tuple[int, str]] = []  # (id of another hook dict, label) a handle removed it from
        self.global_labels: list[str] = []         # global module hooks (they fire on every module)
        self.removed_in_step: set[str] = set()     # labels of hooks whose handle's remove() ran in the step
        self.param_of: dict[str, Any] = {}         # label of a hook on its parameter -> that Parameter
        self.in_step: dict[str, str] = {}          # label -> what the step registered it on (an output, a Node)
        self.registrars: set[Any] = set()          # codes of its forward hooks that register hooks on outputs
        self.main_thread = threading.get_ident()
        # the profile function runs in every thread of the step at once: its counts are read and written under a
        # lock (a count's first ``+= 1`` calls Counter.__missing__, where another thread could take over and the
        # two increments become one)
        self._lock = threading.Lock()
        self.thread_calls = 0                      # calls of the target outside the step's thread
        self.model_calls_cached = 0                # calls of the model under torch.nn.utils.parametrize.cached()
        self.outputs: Counter = Counter()          # what its forward returned: tensor, tuple, dict, other
        self.pool_tasks = 0                        # tasks the step gave a thread pool whose threads existed
        self.pool_tasks_new = 0                    # tasks given to a pool that started its threads in the step
        self.profile_fn: Any = None                # the profile function to set in a pool's threads
        self.pools: list[Any] = []                 # pools whose threads got it
        self.pools_watched = True                  # whether every such thread got it before its tasks
        self.asked: list[tuple[str, set[int] | None]] = []  # the step's backward passes: kind, ids of its inputs=
        self.threads_before: set[int] = {t.ident for t in threading.enumerate() if t.ident is not None}
        self.fired_outside: Counter = Counter()    # label -> firings outside the step's thread
        self._target_hooks: set[int] = set()
        self._target_keys: set[tuple[int, int]] = set()  # (handle id, id(fn)): what a deepcopy keeps
        for _attr, kind, hooks in internals.module_hook_dicts(target):
            if kind not in _HOOK_KINDS:
                continue
            for key, fn in hooks.items():
                label = self._watch(fn, f"{hook_name(fn)} ({kind})", kind)
                self.hook_labels[id(fn)] = label
                self.registered[label] = (hooks, key)
                self._target_hooks.add(id(fn))
                self._target_keys.add((key, id(fn)))
                names = getattr(_code(fn), "co_names", ())
                if kind == "forward" and any(n in names for n in _REGISTERS):
                    self.registrars.add(_code(fn))
        # its parameters, and those of its submodules (an adapter's base_layer, a parametrization's original)
        for pname, p in target.named_parameters():
            for kind, hooks in internals.tensor_hook_dicts(p):
                for key, fn in hooks.items():
                    label = self._watch(fn, f"{hook_name(fn)} ({pname}: {kind} hook)", kind)
                    self.registered[label] = (hooks, key)
                    self.param_of[label] = p
        for kind, attr in _GLOBAL_KINDS:  # global module hooks fire on it too
            hooks = getattr(module_globals, attr, None) or {}
            for key, fn in hooks.items():
                label = self._watch(fn, f"{hook_name(fn)} (global {kind})", f"global {kind}")
                self.hook_labels.setdefault(id(fn), label)
                self.global_labels.append(label)
                self.registered[label] = (hooks, key)
        # copies inside the model: modules that carry the target's hooks under the same handle ids (a deepcopy keeps
        # them; registering one function on many modules gives each its own id)
        self.copies_inside = {id(m) for _, m in named if m is not target and self._target_keys and
                              self._target_keys & {(k, id(f)) for _a, kind, d in internals.module_hook_dicts(m)
                                                   if kind in _HOOK_KINDS for k, f in d.items()}}

    def _watch(self, fn: Any, label: str, kind: str) -> str:
        base, n = label, 1
        while label in self.fired:
            n += 1
            label = f"{base} #{n}"
        self.labels.append(label)
        self.fired[label] = Counter()
        self.kinds[label] = kind
        inner = _unwrap(fn)
        self.fns[label] = inner
        code = _code(inner)
        if code is not None:
            self.hook_codes.setdefault(code, []).append(label)
        else:
            call = _code(getattr(type(inner), "__call__", None))  # noqa: B004 (its code object, not a callable test)
            if call is not None:
                self.hook_objects[id(inner)] = label
                self.hook_codes.setdefault(call, [])
        return label

    # ---- what a module that ran is to the hooked one
    def relation(self, m: Any) -> str:
        target = self.target
        if m is target:
            return SELF
        if getattr(m, "_forward_hooks", None) is getattr(target, "_forward_hooks", False):
            return REPLICA
        if id(m) in self.tree:
            return COPY_INSIDE if id(m) in self.copies_inside else IN_MODEL
        if not isinstance(m, nn.Module):
            return IN_MODEL
        if compiled(m):
            inner = internals.unwrap_compiled(m)
            if inner is target or any(sub is target for sub in inner.modules()):
                return COMPILED
        if _is_script_module(m):
            return SCRIPTED
        if type(m).__module__ == "torch.export.unflatten":
            return UNFLATTENED
        if type(m).__module__.startswith("torch.ao.nn.intrinsic") and (
                any(self._carries_target_hooks(c) or self._looks_alike(c) for c in m.children())
                or isinstance(target, _FOLDED)):
            return FUSED
        if self._carries_target_hooks(m):
            return COPY
        if isinstance(m, torch.fx.GraphModule) and "dynamo_compile_id" in getattr(m, "meta", {}):
            return DYNAMO_GRAPH  # what a torch.compile backend returned (not torch.fx tracing of the model)
        if isinstance(m, torch.fx.GraphModule) and any(sub is child for sub in m.modules()
                                                        for child in target.children()):
            return GRAPH
        if self._looks_alike(m):
            return LOOKALIKE
        if isinstance(m, torch.fx.GraphModule):
            return OTHER_GRAPH
        return "other"

    def _carries_target_hooks(self, m: nn.Module) -> bool:
        if not self._target_hooks:
            return False
        for _attr, kind, hooks in internals.module_hook_dicts(m):
            if kind in _HOOK_KINDS and any(id(fn) in self._target_hooks for fn in hooks.values()):
                return True
        return False

    def _looks_alike(self, m: nn.Module) -> bool:
        if type(m) is not type(self.target):
            return False
        mine = [tuple(p.shape) for p in self.target.parameters()]
        return bool(mine) and mine == [tuple(p.shape) for p in m.parameters()]

    # ---- the probes
    def on_call(self, m: Any) -> None:
        self.calls[id(m)] += 1
        if m is self.model and internals.parametrize_cache_enabled():
            self.model_calls_cached += 1
        if m is self.target:
            if not torch.is_grad_enabled():
                self.without_grad += 1
            if isinstance(m, nn.Module) and not m.training:
                self.in_eval += 1
            if threading.get_ident() != self.main_thread:
                self.thread_calls += 1
            self._checkpoint(sys._getframe(1))
        elif id(m) not in self.tree or id(m) in self.copies_inside:
            relation = self.relation(m)
            if relation not in ("other", IN_MODEL):
                self.ran_instead[f"{relation}: {type(m).__name__}"] += 1
            elif isinstance(m, nn.modules.conv._ConvNd) and id(m) not in self.tree:
                self.outside_convs[(type(m).__name__, m.out_channels)] += 1

    def _checkpoint(self, frame: Any) -> None:
        """Whether this call of the target is torch.utils.checkpoint's first pass or its recomputation."""
        while frame is not None:
            code = frame.f_code
            if code.co_filename.endswith(_CHECKPOINT_FILE):
                if code.co_name == "forward" and "run_function" in frame.f_locals:  # reentrant, under no_grad
                    self.checkpoint_first += 1
                    self.checkpoint_inputs_need_grad |= any(
                        isinstance(a, torch.Tensor) and a.requires_grad for a in frame.f_locals.get("args", ()))
                elif code.co_name in ("backward", "recompute_fn", "unpack_hook"):
                    self.checkpoint_recomputed += 1
                else:
                    frame = frame.f_back
                    continue
                return
            frame = frame.f_back

    def pre_hook(self, m: nn.Module, args: Any) -> None:  # the fallback when another profiler is active
        with self._lock:
            self.on_call(m)

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        with self._lock:
            pool = self._profile(frame, event, arg)
        if pool is not None:  # outside the lock: the pool's threads, given the profile function, take it too
            self._pool(pool)

    def _profile(self, frame: Any, event: str, arg: Any) -> Any:
        """Note one profile event; return the thread pool a task is being given to (``submit``), if it is one."""
        if event == "return":
            if frame.f_code is self.forward_code and self.forward_code is not None and \
                    frame.f_locals.get(frame.f_code.co_varnames[0]) is self.target:
                self.outputs[_shape(arg)] += 1
            return None
        pool = None
        if event == "call":
            code = frame.f_code
            if code is _TENSOR_REGISTER:
                self._registered_in_step(frame.f_back, frame.f_locals.get("hook"), "a tensor hook on its output")
            elif code is _SUBMIT:
                pool = frame.f_locals.get("self")
            elif code is _REMOVE:
                self._removing(frame.f_locals.get("self"))
            if code is self.call_code:
                self.on_call(frame.f_locals.get("self"))
            elif code is self.wrapped_code:
                me = frame.f_locals.get("self")
                if getattr(me, "_compiled_call_impl", None) is not None:
                    self.compiled_calls[id(me)] += 1
            elif code is _GETATTR:
                self._read(frame)
            if code is self.forward_code:
                me = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
                if me is self.target:
                    self.forward_runs += 1
            if code in self.hook_codes:
                self._hook_fired(frame, code)
        elif event == "c_call":
            if arg in self.fast_ops:
                self.fast[self.fast_ops[arg]] += 1
            elif getattr(arg, "__name__", None) in _REGISTERS and isinstance(getattr(arg, "__self__", None),
                                                                             torch.autograd.graph.Node):
                for value in list(frame.f_locals.values()):  # the function it registers: a local of the caller
                    if _user_callable(value) and _code(value) not in self.registrars:
                        self._registered_in_step(frame, value, "a Node hook on its output's grad_fn")
        return pool

    def _registered_in_step(self, caller: Any, fn: Any, what: str) -> None:
        """A hook registered during the step by one of the target's forward hooks: watched from now on."""
        if fn is None or caller is None or caller.f_code not in self.registrars:
            return
        if any(self.fns.get(label) is _unwrap(fn) for label in self.in_step):
            return
        label = self._watch(fn, f"{hook_name(fn)} ({what}, registered by its forward hook)", "in step")
        self.in_step[label] = what

    def _pool(self, pool: Any) -> None:
        """A task given to a thread pool: a pool whose threads existed before the step gets the profile function
        set in each of its threads before the step's task (:meth:`_in_threads`); :meth:`release_pools` removes it.
        Called outside the lock: while the pool's threads take the function, their calls are noted already."""
        with self._lock:
            threads = [t for t in getattr(pool, "_threads", ()) if t.ident in self.threads_before]
            if not threads:
                self.pool_tasks_new += 1
                return
            self.pool_tasks += 1
            if self.profile_fn is None or any(p is pool for p in self.pools):
                return
            self.pools.append(pool)
        watched = self._in_threads(pool, self.profile_fn)
        with self._lock:
            self.pools_watched &= watched

    @staticmethod
    def _in_threads(pool: Any, fn: Any) -> bool:
        """Set ``fn`` as the profile function of every thread of ``pool``; whether every thread took it.

        One task per thread, each held until the pool's threads have all taken one: a held thread takes no other
        task, so each thread takes exactly one. Tasks are given until there are as many as threads (giving one can
        start a thread). Which thread takes which task is the pool's business, and how soon depends on the machine's
        load: the answer is read from the threads that took a task, never from a time (the wait is only a guard
        against a thread kept busy by a task of its own)."""
        taken: set[int] = set()
        cond, released = threading.Condition(), [False]

        def install() -> None:
            with cond:
                taken.add(threading.get_ident())
                cond.notify_all()
                cond.wait_for(lambda: released[0], timeout=POOL_WAIT_S)
            sys.setprofile(fn)  # last: the held thread runs none of the profile function while the step's waits

        futures: list[Any] = []
        try:
            while len(futures) < len(getattr(pool, "_threads", ())):
                futures.append(pool.submit(install))
        except RuntimeError:  # shut down
            pass
        with cond:
            cond.wait_for(lambda: len(taken) >= len(futures), timeout=POOL_WAIT_S)
            released[0] = True
            cond.notify_all()
            everyone = bool(futures) and {t.ident for t in getattr(pool, "_threads", ())} <= taken
        if fn is None:  # releasing: wait until every thread has dropped it
            done, _pending = futures_wait(futures, timeout=POOL_WAIT_S)
            everyone = everyone and len(done) == len(futures)
        return everyone

    def release_pools(self) -> None:
        """Remove the profile function from the threads of the pools it was set in."""
        for pool in self.pools:
            try:
                self._in_threads(pool, None)
            except Exception:  # noqa: BLE001 - a pool shut down or busy: its threads end with it
                pass
        self.pools.clear()

    def _removing(self, handle: Any) -> None:
        """A RemovableHandle's remove() in the step: which watched hook it removes."""
        ref = getattr(handle, "hooks_dict_ref", None)
        hooks = ref() if callable(ref) else None
        fn = hooks.get(getattr(handle, "id", None)) if isinstance(hooks, dict) else None
        if fn is None:
            return
        inner = _unwrap(fn)
        # the same function registered on another object (a copy prepare_qat registered again on the module that
        # replaced this one): removing that registration leaves the one watched here in place
        self.removed_in_step.update(label for label, f in self.fns.items() if f is inner and (
            label not in self.registered or self.registered[label][0] is hooks))
        self.removed_elsewhere.extend((id(hooks), label) for label, f in self.fns.items() if f is inner and
                                      label in self.registered and self.registered[label][0] is not hooks)

    def removed(self) -> list[str]:
        """The hooks it watched that were removed during the step (or are no longer registered after it)."""
        gone = [label for label, (hooks, key) in self.registered.items() if key not in hooks]
        return gone + [label for label in self.labels if label in self.removed_in_step and label not in gone]

    def _read(self, frame: Any) -> None:
        local = frame.f_locals
        owner, attr = local.get("self"), local.get("name")
        if id(owner) not in self.subtree or attr not in getattr(owner, "_parameters", {}):
            return
        up = frame.f_back
        for _depth in range(40):  # a read made while describing the module (repr) computes nothing
            if up is None:
                break
            if up.f_code.co_name in _DESCRIBING:
                self.described += 1
                return
            up = up.f_back
        caller = frame.f_back
        while caller is not None and caller.f_code is _GETATTR:
            caller = caller.f_back
        method = None
        while caller is not None and id(caller.f_locals.get("self")) in self.subtree:
            # its own code: a method of it (rel_pos.get_bias()) called from outside, or its forward
            method = f"{type(caller.f_locals['self']).__name__}.{caller.f_code.co_name}()"
            caller = caller.f_back
        if caller is None:
            return
        reader = caller.f_locals.get("self")
        where = self.tree.get(id(reader))
        who = f"{type(reader).__name__}.{caller.f_code.co_name}" if isinstance(reader, nn.Module) \
            else caller.f_code.co_name
        self.reads[who + (f" ({where!r})" if where else "") + (f" through {method}" if method else "")] += 1

    def _hook_fired(self, frame: Any, code: Any) -> None:
        local = frame.f_locals
        positional = [local.get(n) for n in code.co_varnames[:code.co_argcount]]
        if code.co_flags & 0x04:  # *args
            positional += list(local.get(code.co_varnames[code.co_argcount + code.co_kwonlyargcount], ()))
        labels = list(self.hook_codes[code])
        if positional and id(positional[0]) in self.hook_objects:  # a callable object: exactly this one
            labels = [self.hook_objects[id(positional[0])]]
        else:  # closures of one factory share the code: the one running has these free variables
            labels = [label for label in labels if _runs(self.fns.get(label), local)]
        if not any(isinstance(a, nn.Module) for a in positional):
            # PyTorch calls a module hook with the module first: a call without one is the same factory's hook on a
            # tensor (closures that hold the same objects cannot be told apart otherwise)
            labels = [label for label in labels if self.kinds.get(label) not in _HOOK_KINDS and
                      label not in self.global_labels]
            tensors = [a for a in positional if isinstance(a, torch.Tensor)]  # (past `self` of a hook object)
            # and a hook on its parameter gets that Parameter (post-accumulate-grad) or a gradient of its shape
            labels = [label for label in labels if label not in self.param_of or not tensors or (
                any(t is self.param_of[label] for t in tensors) if self.kinds.get(label) == "post_accumulate_grad"
                else any(t.shape == self.param_of[label].shape for t in tensors))]
        if not labels:
            return
        if threading.get_ident() != self.main_thread:
            for label in labels:
                self.fired_outside[label] += 1
        globals_ = [label for label in labels if label in self.global_labels]
        if globals_:  # a global hook: it fires on every module; counted when the module is the target or like it
            module = next((a for a in positional if isinstance(a, nn.Module)), None)
            if module is None:
                return
            relation = self.relation(module)
            if relation in (IN_MODEL, "other"):
                return
            for label in globals_:
                self.fired[label][relation] += 1
            return
        module = next((a for a in positional if isinstance(a, nn.Module)), None)
        relation = self.relation(module) if module is not None else SELF
        if relation in (IN_MODEL, "other"):
            return  # the same function registered on another module
        if module is not None and len(labels) > 0 and not (positional and id(positional[0]) in self.hook_objects):
            # functions that share this code (lambdas made in a loop): only those in the calling module's dicts
            present = {self.hook_labels[id(fn)] for _a, kind, hooks in internals.module_hook_dicts(module)
                       if kind in _HOOK_KINDS for fn in hooks.values()
                       if id(fn) in self.hook_labels and _code(fn) is code}
            labels = [label for label in labels if label in present]
        if len(labels) > 1:  # several functions share this code (one factory, two hooks): which one is running
            labels = self._which(frame, labels, relation)
        for label in labels:
            self.fired[label][relation] += 1

    def _which(self, frame: Any, labels: list[str], relation: str) -> list[str]:
        """Of hook functions that share one code object, the one this frame runs: its caller holds it (PyTorch
        calls ``hook(module, ...)`` from a loop variable); otherwise the one with the fewest firings so far, so that
        each firing is counted once."""
        wanted = set(labels)
        caller = frame.f_back
        for _depth in range(3):  # _call_impl, BackwardHook, or a functools.partial / wrapper in between
            if caller is None:
                break
            for value in list(caller.f_locals.values()):
                label = self.hook_labels.get(id(value)) or self.hook_labels.get(id(_unwrap(value)))
                if label in wanted:
                    return [label]
            caller = caller.f_back
        return [min(labels, key=lambda label: self.fired[label][relation])]


def _runs(fn: Any, local: dict) -> bool:
    """Whether a frame with these locals runs the closure ``fn`` (its free variables hold the same objects)."""
    cells = getattr(fn, "__closure__", None)
    if not cells:
        return True  # a plain function: one code, one function
    for name, cell in zip(fn.__code__.co_freevars, cells):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if name in local and local[name] is not value:
            return False
    return True


def _user_callable(value: Any) -> bool:
    """A function, or an object of a class of the user's with __call__ (not a module, tensor, class or builtin)."""
    if isinstance(value, types.FunctionType):
        return True
    kind = type(value)
    return not isinstance(value, (type, nn.Module, torch.Tensor, types.BuiltinFunctionType, types.MethodType)) and \
        "__call__" in kind.__dict__ and not kind.__module__.startswith(("torch", "builtins", "functools"))


def _shape(out: Any) -> str:
    """What a forward returned, as full backward hooks see it: a tensor, a tuple (of tensors), a dict, or other."""
    if isinstance(out, torch.Tensor):
        return "tensor"
    if isinstance(out, tuple) and not hasattr(out, "keys"):
        return "tuple"
    if isinstance(out, dict) or hasattr(out, "keys"):
        return "dict"
    return "other"


def _submit_code() -> Any:
    from concurrent.futures import ThreadPoolExecutor
    return getattr(ThreadPoolExecutor.submit, "__code__", None)


_SUBMIT = _submit_code()
_REMOVE = getattr(torch.utils.hooks.RemovableHandle.remove, "__code__", None)


def _code(fn: Any) -> Any:
    fn = _unwrap(fn) if fn is not None else None
    return getattr(fn, "__code__", None)
