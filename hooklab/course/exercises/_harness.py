"""The harness every check runs the learner's answer under: it refuses leaks, whatever the exercise.

One mechanism for every checker (:func:`hooklab.course.exercises.verdict` enters it around the check); it refuses

* **host reads** (exercises registered with ``host_reads=False``): a tensor's value read by the learner's code by any
  route: ``.item()``, ``.tolist()``, ``.numpy()``, ``float(t)`` / ``int(t)`` / ``bool(t)`` (``if t:``), ``print(t)``,
  ``numpy.asarray(t)``, ``torch.equal``, ``numpy.from_dlpack(t)``, ``ctypes`` at ``t.data_ptr()`` ... On a CPU
  ``.tolist()`` and ``.numpy()`` go through no ATen op, so the Tensor methods themselves are intercepted for the
  check's duration (which names the route), a profile function (``sys.setprofile``) sees every call of a tensor's or
  a storage's functions written in C however it was reached (a method bound before the check,
  ``torch._C.TensorBase.tolist(t)``, torch's ``__dlpack__``), and a dispatch mode sees the reads that torch makes for
  the learner (``_local_scalar_dense``);
* **references kept**: a module or tensor made during the check that the answer (its closure, its defaults, the
  globals its code names) still reaches once the check is over, or that an attribute of a module or a class holds
  (``builtins``, ``torch``, ``__main__``, ``torch.optim.SGD._kept``: :func:`._namespaces.holders`);
* **unbounded growth**: an answer that retains more after each check, in what it reaches or in a module's or class's
  attribute (measured after one check and, only when the first check left more than before, after a second: a cache
  filled once is not growth);
* **calls into the course's answer machinery** from the learner's code during the check: the probes of the hook
  matrix (``hook_matrix.observe``), the reference solutions (``exercises.solutions``: read during the check, or a
  function of theirs that the answer is or holds), the checkers themselves (``verdict``), the matrix's record
  (``docs/hook_matrix.json``, opened by the answer during the check; 17.3 also refuses a prediction read from it by
  the code that asks for the check: :func:`record_read_by_the_caller`), and any function or class of a loaded module
  the answer replaced (patching a checker's ``_silent`` or ``RemovableHandle.remove`` makes answers right or wrong:
  :class:`._namespaces.Namespaces`): the original is put back, and the verdict names the patch.

Learner's code is code outside the course's package, torch and the Python installation: a notebook cell, a test
module, ``exec``-ed text. A call counts when such a frame lies between the check and the call (a hook the answer
registered and the checker ran counts too; one that autograd runs in a thread of its own, as on a GPU, does not).
The objects the check made are told apart by freezing the collector's objects for the check (``gc.freeze``): when
the learner's process froze objects itself, kept references and growth are not looked for.
"""
from __future__ import annotations

import builtins
import collections
import functools
import gc
import os
import sys
import sysconfig
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ._namespaces import Namespaces, holders
from ._support import Wrong

__all__ = ["Harness", "Leak", "consulted", "forget_consulted", "from_learner", "note_machinery", "threads_left", "threads_started"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # hooklab/


def _trusted_roots() -> tuple[str, ...]:
    roots = {_PACKAGE, os.path.dirname(os.path.abspath(torch.__file__))}
    paths = sysconfig.get_paths()
    roots |= {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))}
    return tuple(sorted({os.path.join(r, "") for r in roots} | {os.path.join(os.path.realpath(r), "") for r in roots}))


_TRUSTED = _trusted_roots()


@functools.lru_cache(maxsize=4096)
def _is_learner_file(filename: str) -> bool:
    """Code the learner wrote: not the course's package, not torch, not the Python installation."""
    if filename.startswith("<frozen") or filename.startswith(_TRUSTED):
        return False
    return not os.path.realpath(filename).startswith(_TRUSTED) if filename.startswith("/") else True


# the code object of the frame that runs a check (Harness.run): the boundary of a walk up the stack
_BOUNDARY: list[types.CodeType] = []
_ACTIVE: list[Harness] = []


def from_learner(depth: int = 1) -> tuple[bool, bool, str]:
    """``(inside a check, the learner's code is on the way, where)``: walk up from the caller's caller to the frame
    that runs the check; ``where`` is the learner's innermost frame as ``file:line``."""
    return _from_learner_frame(sys._getframe(depth + 1))


def _from_learner_frame(frame: types.FrameType | None) -> tuple[bool, bool, str]:
    """:func:`from_learner`, from ``frame`` up."""
    learner, where = False, ""
    while frame is not None:
        if _BOUNDARY and frame.f_code is _BOUNDARY[0]:
            return True, learner, where
        if not learner and _is_learner_file(frame.f_code.co_filename):
            learner, where = True, f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return False, learner, where


# ---- calls into the answer machinery -------------------------------------------------------------------------

# what the learner's code consulted outside any check: {(what, detail)}, in order (17.3's prediction is refused when
# its cells were observed); a dict, so that it holds each call once however often it was made
_CONSULTED: dict[tuple[str, str], None] = {}


def consulted(what: str) -> list[str]:
    """The details of the calls of machinery ``what`` that the learner's code made outside a check."""
    return [detail for w, detail in _CONSULTED if w == what]


def forget_consulted() -> None:
    """Forget what :func:`consulted` says (a fresh kernel has consulted nothing)."""
    _CONSULTED.clear()


def note_machinery(what: str, detail: str = "") -> None:
    """Called by the course's answer machinery (the hook matrix's probes, the reference solutions, the checkers):
    a call from the learner's code inside a check is a leak the running check refuses; outside a check it is noted
    (:func:`consulted`)."""
    inside, learner, where = from_learner(2)
    if not learner:
        return
    if inside and _ACTIVE:
        _ACTIVE[-1].machinery.append((what, detail, where))
    elif not inside:
        _CONSULTED[(what, detail)] = None


# ---- reads of the matrix's record (17.3 is a prediction: the record holds its answer) ----------------------------

RECORD_NAME = "hook_matrix.json"  # docs/hook_matrix.json: the hook matrix's record, every cell's observation
# {the learner's file that read the record: [where]}, since that file's last check of an exercise that asks for it
_RECORD_READS: dict[str, list[str]] = {}


def _learner_frame(frame: types.FrameType | None) -> types.FrameType | None:
    while frame is not None and not _is_learner_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _audit(event: str, args: tuple) -> None:
    """An audit hook (``sys.addaudithook``): note each opening of the matrix's record by the learner's code (its
    innermost frame's file, where). Never raises: an audit hook's error would stop the operation it audits."""
    if event != "open":
        return
    try:
        path = args[0] if args else None
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str) or not path.endswith(RECORD_NAME):
            return
        inside, learner, where = from_learner(1)
        if inside and learner and _ACTIVE:
            _ACTIVE[-1].machinery.append(("hook_matrix.record", path, where))
            return
        frame = _learner_frame(sys._getframe(1))
        if frame is not None:
            _RECORD_READS.setdefault(frame.f_code.co_filename, []).append(
                f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}")
    except Exception:  # noqa: BLE001, S110  see the docstring
        pass


sys.addaudithook(_audit)


def record_read_by_the_caller() -> str | None:
    """Inside a check: where the code that asked for the check (the learner's file or notebook cell that called
    ``course.check``) read the matrix's record since its last such question, if it did (forgotten once asked)."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and not (_BOUNDARY and frame.f_code is _BOUNDARY[0]):
        frame = frame.f_back
    caller = _learner_frame(frame)
    if caller is None:
        return None
    reads = _RECORD_READS.pop(caller.f_code.co_filename, [])
    return reads[0] if reads else None


class _GuardedModule(types.ModuleType):
    """The class of the reference-solution modules: reading one of their names from the learner's code inside a
    check is a call into the answer machinery."""

    def __getattribute__(self, name: str) -> Any:
        if _ACTIVE and not name.startswith("__"):
            inside, learner, where = from_learner(1)
            if inside and learner:
                _ACTIVE[-1].machinery.append(("solutions", f"{object.__getattribute__(self, '__name__')}.{name}",
                                              where))
        return object.__getattribute__(self, name)


def guard_solutions_module(module: types.ModuleType) -> None:
    if type(module) is types.ModuleType:
        module.__class__ = _GuardedModule


# ---- host reads -------------------------------------------------------------------------------------------------

# the routes by which a tensor's value reaches the host, with how the verdict names them
_TENSOR_ROUTES = {"item": "`.item()`", "tolist": "`.tolist()`", "numpy": "`.numpy()`", "__float__": "`float(t)`",
                  "__int__": "`int(t)`", "__index__": "`int(t)` / an index", "__bool__": "`if t:` / `bool(t)`",
                  "__complex__": "`complex(t)`", "__array__": "`numpy.asarray(t)`", "__repr__": "`print(t)` / `repr(t)`",
                  "__str__": "`print(t)` / `str(t)`", "__format__": "an f-string of a tensor"}
_TORCH_ROUTES = {"equal": "`torch.equal`", "allclose": "`torch.allclose`", "is_nonzero": "`torch.is_nonzero`"}
_STORAGE_ROUTES = {"tolist": "`storage.tolist()`", "__getitem__": "`storage[i]`"}
# the functions written in C through which a tensor's or a storage's data reaches the host, however they are reached
# (seen by the harness's profile function)
_C_ROUTES = {"tolist": "`.tolist()`", "item": "`.item()`", "numpy": "`.numpy()`", "data_ptr": "`t.data_ptr()`",
             "_data_ptr": "`t.data_ptr()`", "_to_dlpack": "`numpy.from_dlpack(t)` / `t.__dlpack__()`",
             "_to_dlpack_versioned": "`numpy.from_dlpack(t)` / `t.__dlpack__()`"}
_READ_OPS = {"_local_scalar_dense": "a value read on the host (`.item()`, `if t:` ...)", "equal": "`torch.equal`",
             "is_nonzero": "`torch.is_nonzero`"}


class _ReadOps(TorchDispatchMode):
    """Sees the reads torch makes through the dispatcher for the learner's code (``item()`` inside a library)."""

    def __init__(self, harness: Harness) -> None:
        super().__init__()
        self.harness = harness

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func.overloadpacket.__name__
        if name in _READ_OPS and not self.harness._reading[0]:
            inside, learner, where = from_learner(1)
            if inside and learner:
                self.harness.reads.append((_READ_OPS[name], where))
        return func(*args, **(kwargs or {}))


# ---- what the answer reaches ------------------------------------------------------------------------------------

_LIMIT = 200_000  # objects visited at most by one walk


def _names_in(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_in(const)
    return names


def _learner_type(obj: type) -> bool:
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    filename = getattr(module, "__file__", None)
    return module is not None and (filename is None or _is_learner_file(filename)) and module.__name__ != "builtins"


def _function_children(fn: types.FunctionType, *, names: bool) -> list[tuple[tuple[str, str], Any]]:
    """Where a function keeps things: its closure, its defaults and attributes, and (``names``: a function of the
    learner's) the globals its code names, each with how the verdict names it (en, zh)."""
    name = fn.__name__
    children: list[tuple[tuple[str, str], Any]] = []
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            children.append(((f"the closure variable `{var}`", f"闭包变量 `{var}`"), cell.cell_contents))
        except ValueError:  # an empty cell
            pass
    children += [((f"a default argument of `{name}`", f"`{name}` 的默认参数"), d) for d in (fn.__defaults__ or ())]
    children += [((f"the default of `{k}`", f"`{k}` 的默认值"), d) for k, d in (fn.__kwdefaults__ or {}).items()]
    children += [((f"`{name}.{k}`", f"`{name}.{k}`"), v) for k, v in vars(fn).items()]
    if names and fn.__globals__ is not builtins.__dict__:
        children += [((f"the global `{g}`", f"全局变量 `{g}`"), fn.__globals__[g])
                     for g in sorted(_names_in(fn.__code__)) if g in fn.__globals__]
    return children


def _is_learner_function(obj: Any) -> bool:
    return isinstance(obj, types.FunctionType) and _is_learner_file(obj.__code__.co_filename)


def _skip(obj: Any) -> bool:
    """Not walked into: modules, frames, the course's and the libraries' classes, functions written in C (a
    function in Python is walked into through its closure and defaults; the globals it names only when it is the
    learner's)."""
    if isinstance(obj, (types.ModuleType, types.FrameType, types.CodeType)):
        return True
    if isinstance(obj, type):
        return not _learner_type(obj)
    return isinstance(obj, types.BuiltinFunctionType)


_ANSWER = ("your answer", "你的答案")


_SOLUTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "solutions", "")


def _is_solution(obj: Any) -> bool:
    """A function of the reference solutions (``exercises/solutions/nbNN.py``)."""
    return isinstance(obj, types.FunctionType) and obj.__code__.co_filename.startswith(_SOLUTIONS)


def _reach(answer: Any, watch: set[int]) -> tuple[int, int, list[tuple[tuple[str, str], Any]]]:
    """Walk from the answer (for a function of the learner's: from what it keeps, see :func:`_function_children`):
    ``(objects and references reached, tensor bytes reached, [(how, object)] for each object in ``watch`` and each
    reference solution's function reached)``. Module dicts, frames and functions written in C are not walked into.
    A bounded buffer (a ``deque`` with a ``maxlen``) counts as full: what it holds is walked for ``watch`` only, so
    a buffer that fills up over the checks is not taken for a history that grows."""
    module_dicts = {id(vars(m)) for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)}
    visited: set[int] = set()
    found: list[tuple[tuple[str, str], Any]] = []
    count = nbytes = 0
    stack: list[tuple[tuple[str, str], Any, bool]] = [(_ANSWER, answer, True)]  # (how, object, counted)
    while stack and count < _LIMIT:
        how, obj, counted = stack.pop()
        if id(obj) in visited or id(obj) in module_dicts or _skip(obj):
            continue
        visited.add(id(obj))
        count += counted
        if id(obj) in watch or _is_solution(obj):
            found.append((how, obj))
            continue
        children: list[Any]
        if isinstance(obj, types.FunctionType):
            held = _function_children(obj, names=_is_learner_function(obj))
            count += len(held) * counted
            stack.extend((h, child, counted) for h, child in held)
            continue
        if isinstance(obj, collections.deque) and obj.maxlen is not None:
            count += obj.maxlen * counted
            stack.extend((how, child, False) for child in list(obj))
            continue
        if isinstance(obj, torch.Tensor):
            if obj.device.type != "meta" and counted:
                nbytes += obj.nelement() * obj.element_size()
            children = list(vars(obj).values()) + ([obj.grad] if obj.grad is not None else [])
        elif isinstance(obj, types.MethodType):
            children = [obj.__func__, obj.__self__]
        elif isinstance(obj, types.BuiltinMethodType):
            owner = getattr(obj, "__self__", None)
            children = [] if owner is None or isinstance(owner, types.ModuleType) else [owner]
        else:
            children = gc.get_referents(obj)
        count += len(children) * counted  # the references it holds: a list of the same small ints still grows
        stack.extend((how, child, counted) for child in children)
    return count, nbytes, found


def _describe(obj: Any) -> str:
    if isinstance(obj, nn.Parameter):
        return f"a parameter of shape {tuple(obj.shape)}"
    if isinstance(obj, torch.Tensor):
        return f"a tensor of shape {tuple(obj.shape)}"
    return f"a `{type(obj).__name__}` module"


# ---- the harness ------------------------------------------------------------------------------------------------

def _snapshot() -> Namespaces:
    """Every function and container of every loaded module and class, before the answer runs
    (:class:`._namespaces.Namespaces`)."""
    return Namespaces(_is_learner_file)


_TORCH = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "")


def _torch_did_it(new: Any) -> bool:
    """``new`` is Python code of torch's own: torch replaces some of its functions when a part of it is first imported
    (``torch._dynamo`` wraps ``torch.manual_seed`` and ``Module.__init__``). A function of the learner's or of the
    course's, a value that is not Python code and a deleted name are not."""
    new = getattr(new, "__func__", new)
    code = getattr(new, "__code__", None)
    return code is not None and os.path.realpath(code.co_filename).startswith(
        (_TORCH, os.path.join(os.path.realpath(_TORCH), "")))


class Leak(Wrong):
    """A verdict of the harness (a :class:`Wrong` with the leak's reason id)."""


class Harness:
    """Around one check (:func:`hooklab.course.exercises.verdict`): see :mod:`module docstring <._harness>`.

    ``host_reads``: whether the exercise allows reading tensor values on the host. After the check,
    :meth:`judge_during` and :meth:`judge_after` raise :class:`Leak` for what the answer did; the latter's ``rerun``
    runs the checker once more to tell a bounded cache from unbounded growth."""

    def __init__(self, answer: Any, *, host_reads: bool = True, data: bool = False) -> None:
        self.answer, self.host_reads, self.data = answer, host_reads, data
        self.reads: list[tuple[str, str]] = []
        self.machinery: list[tuple[str, str, str]] = []
        self._reading = [False]
        self._undo: list[Callable[[], None]] = []
        self.patched: list[str] = []
        self.solutions_used: list[tuple[tuple[str, str], Any]] = []

    # -- the check runs inside run(): the boundary of the walk up the stack
    def run(self, checker: Callable[[Any], None]) -> None:
        checker(self.answer)

    @contextmanager
    def watching(self, *, track: bool = True) -> Iterator[Harness]:
        """Around the check: with ``track``, note what the answer reaches and which objects the check makes (the
        collector is frozen meanwhile: it sees only those; left as it is when something else froze objects)."""
        self._frozen = track and gc.get_freeze_count() == 0
        if self._frozen:
            gc.freeze()
        if track:
            count, nbytes, solutions = _reach(self.answer, set())
            self.size_before, self.solutions_used = (count, nbytes), solutions
        snapshot = _snapshot()
        if track:
            self.namespaces_before = snapshot
        _ACTIVE.append(self)
        try:
            with self._host_reads_refused():
                yield self
        finally:
            _ACTIVE.remove(self)
            self.patched += [name for name in snapshot.put_back() if name not in self.patched]
            self._new_objects: list[Any] = []
            if self._frozen:
                gc.collect()
                self._new_objects = [o for o in gc.get_objects() if isinstance(o, (torch.Tensor, nn.Module))]
                gc.unfreeze()

    @contextmanager
    def _host_reads_refused(self) -> Iterator[None]:
        if self.host_reads:
            yield
            return
        for owner, routes in ((torch.Tensor, _TENSOR_ROUTES), (torch, _TORCH_ROUTES),
                              (torch.UntypedStorage, _STORAGE_ROUTES), (torch.TypedStorage, _STORAGE_ROUTES)):
            for name, label in routes.items():
                self._intercept(owner, name, label)
        profile, previous = self._profile(), sys.getprofile()
        sys.setprofile(profile)
        try:
            with _ReadOps(self):
                yield
        finally:
            if sys.getprofile() is not profile:  # the answer turned the watch off (sys.setprofile(None))
                self.patched.append("sys.setprofile")
            sys.setprofile(previous)
            for undo in reversed(self._undo):
                undo()
            self._undo.clear()

    def _profile(self) -> Callable[[types.FrameType, str, Any], None]:
        """A profile function (``sys.setprofile``) that sees every call of a tensor's functions written in C from
        Python code, however the function was reached: ``Tensor.tolist`` bound before the check,
        ``torch._C.TensorBase.tolist(t)``, ``t.data_ptr()`` (then ``ctypes``), ``numpy.from_dlpack(t)`` (torch's
        ``__dlpack__`` calls ``torch._C._to_dlpack``) ... (taking a tensor's storage reads nothing: reading the storage
        is seen where it reads) The routes intercepted by name above are seen there first
        (while one of them reads, this one looks away: one read, named by its route)."""
        reading, reads = self._reading, self.reads
        tensor_types = (torch._C.TensorBase, torch._C.StorageBase)
        storage_types = (torch.UntypedStorage, torch.TypedStorage)

        def profile(frame: types.FrameType, event: str, arg: Any) -> None:
            if event != "c_call" or reading[0]:
                return
            label = _C_ROUTES.get(getattr(arg, "__name__", ""))
            if label is None:
                return
            owner = getattr(arg, "__self__", None)
            if not (isinstance(owner, (torch.Tensor, *storage_types)) or owner is torch._C
                    or getattr(arg, "__objclass__", None) in tensor_types):
                return
            inside, learner, where = _from_learner_frame(frame)
            if inside and learner:
                reads.append((label, where))

        return profile

    def _intercept(self, owner: Any, name: str, label: str) -> None:
        had = name in vars(owner)
        original = getattr(owner, name)
        reading, reads = self._reading, self.reads

        def read(*args: Any, **kwargs: Any) -> Any:
            if reading[0]:
                return original(*args, **kwargs)
            inside, learner, where = from_learner(1)
            if inside and learner:
                reads.append((label, where))
            reading[0] = True
            try:
                return original(*args, **kwargs)
            finally:
                reading[0] = False

        read.__name__ = name
        setattr(owner, name, read)

        def undo() -> None:
            if vars(owner).get(name) is not read and not _torch_did_it(vars(owner).get(name)):
                self.patched.append(f"{getattr(owner, '__name__', owner)}.{name}")  # the answer replaced it
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)

        self._undo.append(undo)

    # -- after the check
    def judge_during(self) -> None:
        """What the answer did while it ran (refused whatever the checker found)."""
        if self.patched:
            others = f"（还有 {len(self.patched) - 1} 处）" if len(self.patched) > 1 else ""
            others_en = f" ({len(self.patched) - 1} more)" if len(self.patched) > 1 else ""
            raise Leak(f"你的代码替换了课程、torch 或 Python 的 {self.patched[0]}{others}（检查已把原来的放回）：检查要用它来判断"
                       "答案，替换它就等于自己给自己判分，而且它会一直改变这个内核里之后的一切。只修改练习给你的对象。",
                       f"your code replaced {self.patched[0]}{others_en}, of the course, of torch or of Python (the "
                       "check has put the original back): the check judges your answer with it, so replacing it "
                       "grades your own answer, and it would change everything this kernel runs afterwards. Change "
                       "only the objects the exercise gives you.", reason="patched-checker")
        if self.solutions_used:
            (how, zh_how), function = self.solutions_used[0]
            raise Leak(f"你的答案通过{zh_how} 用到了参考答案里的函数 `{function.__name__}`（来自 "
                       "`hooklab.course.exercises.solutions`）：答案要由你自己的代码算出来。",
                       f"your answer uses the reference solution's function `{function.__name__}` (from "
                       f"`hooklab.course.exercises.solutions`), through {how}: your answer must compute it with code "
                       "of its own.", reason="answer-machinery")
        if self.machinery:
            what, detail, where = self.machinery[0]
            zh, en = {"hook_matrix.observe": ("运行了行为矩阵的探针 `hook_matrix.observe`", "ran the matrix's probe "
                                              "`hook_matrix.observe`"),
                      "solutions": ("读了参考答案模块", "read the reference solutions module"),
                      "verdict": ("调用了检查本身（`course.check` / `verdict`）", "called the checker itself "
                                  "(`course.check` / `verdict`)"),
                      "solution": ("读了参考答案（`course.solution`）", "read the reference solution (`course.solution`)"),
                      "hook_matrix.record": ("读了行为矩阵的记录", "read the hook matrix's record")
                      }.get(what, (what, what))
            raise Leak(f"你的代码（{where}）在检查中{zh}（{detail}）：那是检查用来得出正确答案的工具，答案要由你自己的代码算出来。",
                       f"your code ({where}) {en} ({detail}) during the check: that is what the check computes the "
                       "right answer with; your answer must compute it with code of its own.", reason="answer-machinery")
        if self.reads:
            label, where = self.reads[0]
            routes = sorted({r for r, _ in self.reads})
            raise Leak(f"这道练习不许在主机上读取张量的值，你的代码却在主机上读了 {len(self.reads)} 次张量的值，第一次是 {label}（{where}）"
                       f"；用到的方式：{'、'.join(routes)}。在 GPU 上每一次都要等设备跑完。把值留在张量里，用张量运算"
                       "（比较的结果 `norm > limit` 本身就是张量）。",
                       f"this exercise reads no tensor value on the host, and your code read a tensor's value on the "
                       f"host {len(self.reads)} times, first by {label} ({where}); the routes used: {', '.join(routes)}. On a GPU each one "
                       "waits for the device. Keep the value in a tensor and compute with tensor ops (the comparison "
                       "`norm > limit` is itself a tensor).", reason="host-read")

    def judge_kept(self) -> tuple[int, int]:
        """Nothing the check made may still be reachable from the answer (also when the checker found it wrong: a
        model kept alive looks like a reference cycle or like saved memory to a checker); what the answer reaches,
        as :func:`_reach` counts it."""
        if not self._frozen:
            return (0, 0)
        survivors, self._new_objects = self._new_objects, []
        watch = {id(o) for o in survivors}
        count, nbytes, kept = _reach(self.answer, watch)
        kept = [(how, obj) for how, obj in kept if id(obj) in watch]
        if not kept and survivors:  # held by no path from the answer: by a module's or a class's attribute?
            kept = [((f"`{where}`", f"`{where}`"), obj)
                    for where, obj in holders(survivors, self.namespaces_before.modules, _is_learner_file)]
        del survivors
        if kept:
            (how, zh_how), obj = kept[0]
            raise Leak(f"检查结束后，你的代码仍通过{zh_how} 拿着检查创建的{_zh_describe(obj)}（一共 {len(kept)} 个）："
                       "它和它连着的一切都释放不了。不要把模型、张量或钩子收到的值存进全局变量、闭包或默认参数；"
                       "要留的只留数值，并且在函数结束前交出去。",
                       f"after the check your code still holds {_describe(obj)} the check made, through {how} ({len(kept)} "
                       "in all): it cannot be freed, nor anything it holds. Do not store models, tensors or what your "
                       "hooks receive in a global, a closure or a default argument; keep only what you must and hand it "
                       "back before your function returns.", reason="kept-reference")
        return count, nbytes

    def judge_after(self, rerun: Callable[[], None]) -> None:
        """After a check that found the answer right: nothing the check made is kept (:meth:`judge_kept`), and what
        the answer reaches does not grow from one check to the next."""
        if not self._frozen:
            return
        count, nbytes = self.judge_kept()
        if self.data:
            return
        if (count, nbytes) <= self.size_before and not self.namespaces_before.any_grown():
            return  # the usual case, told without a second note of every module and class
        namespaces = Namespaces(_is_learner_file)
        grown = namespaces.grown(self.namespaces_before)
        if (count, nbytes) <= self.size_before and not grown:
            return
        rerun()
        count_2, nbytes_2, _ = _reach(self.answer, set())
        grown_again = Namespaces(_is_learner_file).grown(namespaces, self.namespaces_before)
        if grown_again and not (count_2 > count or nbytes_2 > nbytes):
            where, first, second = grown_again[0]
            raise Leak(f"你的代码留下的东西每检查一次都在增加：`{where}` 在第一次检查后有 {first} 项，第二次后 {second} 项"
                       "（一个模块或类的属性，检查结束后仍然活着）：历史不断增长，长时间训练会耗尽内存。用固定大小的缓冲区"
                       "（按 `step % n` 写入，或用 `collections.deque(maxlen=n)`），或只保留汇总值；不要把东西存进模块、"
                       "类或 `builtins` 里。",
                       f"what your code keeps grows with every check: `{where}` held {first} items after one check and "
                       f"{second} after two (an attribute of a module or a class, alive after the check): an unbounded "
                       "history runs out of memory in a long run. Use a fixed-size buffer (written at `step % n`, or a "
                       "`collections.deque(maxlen=n)`) or keep only a summary; do not store things in a module, a class "
                       "or `builtins`.", reason="growth")
        if count_2 > count or nbytes_2 > nbytes:
            raise Leak(f"你的代码留下的东西每检查一次都在增加（检查前 {self.size_before[0]} 个对象和引用，一次后 {count}，"
                       f"两次后 {count_2}）：历史不断增长，长时间训练会耗尽内存。用固定大小的缓冲区（按 `step % n` 写入，"
                       "或用 `collections.deque(maxlen=n)`），或只保留汇总值。",
                       f"what your code keeps grows with every check ({self.size_before[0]} objects and references "
                       f"before the check, {count} after one, {count_2} after two): an unbounded history runs out of memory in a long "
                       "run. Use a fixed-size buffer (written at `step % n`, or a `collections.deque(maxlen=n)`) or keep "
                       "only a summary.", reason="growth")


_BOUNDARY.append(Harness.run.__code__)


def _zh_describe(obj: Any) -> str:
    if isinstance(obj, nn.Parameter):
        return f"形状为 {tuple(obj.shape)} 的参数"
    if isinstance(obj, torch.Tensor):
        return f"形状为 {tuple(obj.shape)} 的张量"
    return f" `{type(obj).__name__}` 模块"


_LIBRARY_CODE = (os.path.join(_PACKAGE, ""), os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), ""))


@contextmanager
def threads_started(started: list[threading.Thread]) -> Iterator[None]:
    """Inside the block, note in ``started`` each thread the learner's code starts inside a check (a thread that
    runs torch's or the course's own code, such as a compiler's worker pool, is theirs, not the learner's)."""
    start = threading.Thread.start

    def noting(thread: threading.Thread) -> None:
        inside, learner, _ = from_learner(1)
        target = getattr(thread, "_target", None)
        if type(thread).run is not threading.Thread.run:
            target = type(thread).run
        code = getattr(getattr(target, "__func__", target), "__code__", None)
        if inside and learner and not (code is not None and code.co_filename.startswith(_LIBRARY_CODE)):
            started.append(thread)
        start(thread)

    threading.Thread.start = noting  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        threading.Thread.start = start  # type: ignore[method-assign]


def threads_left(started: list[threading.Thread]) -> list[str]:
    """The names of the threads in ``started`` still running."""
    return [thread.name for thread in started if thread.is_alive()]
