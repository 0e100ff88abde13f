"""What every answer can reach without being handed it: the namespaces of the process.

An answer reaches every loaded module (``import torch``; ``sys.modules["__main__"]``; ``builtins``) and every class
those modules define (``torch.optim.SGD``; ``torch.utils.hooks.RemovableHandle``). The leak harness
(:mod:`._harness`) looks at them around each check, in one pass over their dicts (~1,300 modules and ~5,000 classes
once torch is imported: tens of milliseconds):

* :class:`Namespaces` notes, before the check, every function, class and descriptor they hold
  (:meth:`Namespaces.put_back` restores the ones the answer replaced and names them) and the size of every container
  they hold (:meth:`Namespaces.grown`: which grew, for the harness's growth check);
* :func:`holders` finds, for objects the check made that are still alive after it, the module or class attribute
  that holds them (a model kept in ``builtins.__dict__``, in ``torch.__dict__``, in ``torch.optim.SGD._kept``).

Modules of the learner's own (a notebook's ``__main__``, a test module) are the learner's: a function replaced there
is not a patch of the course's or of a library's, but a container there that grows or holds a check's model is
still a leak.
"""
from __future__ import annotations

import collections
import functools
import gc
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class whose attributes can be set (a class written in C cannot be patched)

# what an answer may put in the place of a function of the course or of a library
_REPLACEABLE = (types.FunctionType, types.BuiltinFunctionType, type, classmethod, staticmethod, property,
                types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodType, functools.partial,
                functools._lru_cache_wrapper)
# containers whose size the growth check follows
_CONTAINERS = (list, dict, set, collections.deque, bytearray)


# sets of the exact types, looked up first: every attribute of every loaded module and class passes through these two
# functions before and after each check (~130,000 functions and ~28,000 containers once transformers is imported)
_REPLACEABLE_TYPES = frozenset(_REPLACEABLE)
_CONTAINER_TYPES = frozenset(_CONTAINERS)  # unrelated to one another: a type that is one of them is no other's subclass


# the globals torch.compile (Dynamo) puts into the module of each frame it compiles, and removes again when that
# compiled code is freed (its cache entry's cleanup): a check during which an earlier test's or cell's compiled code is
# collected sees them go, which no answer did
DYNAMO_GLOBALS = ("__compiled_fn", "__resume_at_", "__import_")


def _is_replaceable(value: Any) -> bool:
    kind = type(value)  # not isinstance: it would read __class__, which some module attributes warn on
    return kind in _REPLACEABLE_TYPES or issubclass(kind, (type, types.FunctionType))


def _size(value: Any) -> int | None:
    """The number of items of a container (by its base class's ``__len__``: no code of a subclass runs), else None;
    a bounded buffer (a ``deque`` with a ``maxlen``) counts as full, so filling it up is not growth."""
    kind = type(value)
    if issubclass(kind, collections.deque) and (maxlen := collections.deque.maxlen.__get__(value)) is not None:
        return maxlen
    if kind in _CONTAINER_TYPES:
        return kind.__len__(value)
    if not issubclass(kind, _CONTAINERS):
        return None
    return next(base for base in _CONTAINERS if issubclass(kind, base)).__len__(value)


def _modules() -> list[tuple[str, types.ModuleType]]:
    return [(name, m) for name, m in list(sys.modules.items()) if type(m) is types.ModuleType
            or issubclass(type(m), types.ModuleType)]


def _owners(is_learner_file: Callable[[str], bool]) -> Iterator[tuple[str, Any, dict[str, Any], bool]]:
    """``(label, owner, its dict, the learner's)`` for every loaded module and every class a module defines."""
    seen: set[int] = set()
    for name, module in _modules():
        namespace = module.__dict__
        if id(namespace) in seen:
            continue
        seen.add(id(namespace))
        filename = namespace.get("__file__")
        learner = name == "__main__" or (isinstance(filename, str) and is_learner_file(filename))
        yield name, module, namespace, learner
        for key, value in list(namespace.items()):
            if issubclass(type(value), type) and value.__flags__ & _HEAPTYPE and id(value) not in seen:
                seen.add(id(value))
                home = sys.modules.get(vars(value).get("__module__") or "")
                home_file = getattr(home, "__file__", None)
                mine = home is not None and (home.__name__ == "__main__" or (
                    isinstance(home_file, str) and is_learner_file(home_file)))
                yield f"{name}.{key}", value, value.__dict__, mine


def _learners(value: Any, is_learner_file: Callable[[str], bool]) -> bool:
    """``value`` is code of the learner's: a function or method written in a learner's file (a lambda in a notebook
    cell), a ``functools.partial`` of one, or an object of a class of the learner's."""
    value = getattr(value, "func", value) if type(value) is functools.partial else value
    value = getattr(value, "__func__", value)
    code = getattr(value, "__code__", None)
    if code is not None:
        return is_learner_file(code.co_filename)
    module = sys.modules.get(getattr(type(value), "__module__", "") or "")
    filename = getattr(module, "__file__", None)
    return module is not None and (module.__name__ == "__main__" or (isinstance(filename, str)
                                                                      and is_learner_file(filename)))


def _replaced(owner_label: str, new: Any, is_learner_file: Callable[[str], bool]) -> bool:
    """Whether a changed attribute counts as the answer's patch. In the course's own package every change does (an
    answer that puts one course function in place of another patches the course); elsewhere only the learner's code
    put in place: libraries replace their own functions (``torch._dynamo`` wraps ``torch.manual_seed`` when first
    imported; ``sys.unraisablehook`` is set by a checker that watches for errors in ``__del__``; a class fills in a
    lazy property), and a deleted name breaks the check by itself."""
    if owner_label.split(".")[0] == "hooklab":
        return True
    return _learners(new, is_learner_file)


class Namespaces:
    """The functions and containers of every loaded module and class, noted before a check (see the module)."""

    def __init__(self, is_learner_file: Callable[[str], bool], *, sizes: bool = True) -> None:
        self._is_learner_file = is_learner_file
        self.functions: list[tuple[str, Any, dict[str, Any]]] = []
        self.sizes: dict[tuple[str, str], int] = {}
        self.modules = {id(m) for _, m in _modules()}
        self.learners: set[str] = set()
        self.owners: dict[str, Any] = {}  # label -> the module or class (with ``sizes``: for :meth:`any_grown`)
        for label, owner, namespace, learner in _owners(is_learner_file):
            if learner:
                self.learners.add(label)
            kept: dict[str, Any] = {}
            for key, value in list(namespace.items()):
                if not learner and _is_replaceable(value) and not key.startswith(DYNAMO_GLOBALS):
                    kept[key] = value
                elif sizes and (size := _size(value)) is not None:
                    self.sizes[label, key] = size
            if kept:
                self.functions.append((label, owner, kept))
            if sizes:
                self.sizes[label, ""] = len(namespace)
                self.owners[label] = owner

    def put_back(self) -> list[str]:
        """Restore every function, class and descriptor the answer replaced or deleted; their names."""
        changed = []
        for label, owner, before in self.functions:
            now = vars(owner)
            for name, value in before.items():
                current = now.get(name, None)
                if current is not value and _replaced(label, current, self._is_learner_file):
                    changed.append(f"{label}.{name}")
                    try:
                        setattr(owner, name, value)
                    except (AttributeError, TypeError):  # a read-only owner: nothing could have replaced it
                        changed.pop()
        return changed

    def any_grown(self) -> bool:
        """Whether something :meth:`grown` compares against this note (``Namespaces(...).grown(note)``) holds more
        now, read without a new note: the length of each attribute dict noted, and each container of the learner's
        modules noted (about 40,000 reads instead of 250,000 once transformers is imported). A first look: where it
        says yes, the harness takes a new note and asks :meth:`grown`."""
        for (label, key), before in self.sizes.items():
            if key and label not in self.learners:
                continue
            namespace = self.owners[label].__dict__
            now = len(namespace) if not key else _size(namespace.get(key))
            if now is not None and now > before:
                return True
        return False

    def grown(self, since: Namespaces, first: Namespaces | None = None) -> list[tuple[str, int, int]]:
        """``[(where, size before, size now)]`` for each container that ``since`` saw and that holds more now: an
        attribute dict, a container of the learner's modules, or (``first``: the namespaces before the first of the
        checks compared) a container under a name that was not there then (``torch._my_history``, added by the
        answer). A library's own containers are not looked at: they grow as the library works (``linecache.cache``
        gets the source of each function ``torch.compile`` makes); nor is a library module or class that was not
        there before the first check (its containers are its own, under names that were not there either: where
        the check first imports ``torch._dynamo``, ``torch._dynamo.utils._compilation_metrics`` grows from one check
        to the next)."""
        first = first or since
        return [(f"{label}.{key}" if key else f"{label}.__dict__", since.sizes[label, key], size)
                for (label, key), size in self.sizes.items()
                if (label, key) in since.sizes and size > since.sizes[label, key]
                and (label in self.learners or (
                    (label, "") in first.sizes and (not key or (label, key) not in first.sizes)))]


_PLAIN = (list, dict, set, frozenset, tuple, collections.deque, collections.OrderedDict, collections.defaultdict)


def _roots(modules_before: set[int], is_learner_file: Callable[[str], bool]) -> dict[int, tuple[str, dict]]:
    """``{id(dict): (label, dict)}``: the attribute dicts of the modules that existed before the check and of the
    classes they define (a class's ``__dict__`` is a read-only view of the dict it holds)."""
    roots: dict[int, tuple[str, dict]] = {}
    module: Any = None
    for label, owner, namespace, _ in _owners(is_learner_file):
        if issubclass(type(owner), types.ModuleType):  # a module comes before the classes found in it
            module = owner
        if id(module) not in modules_before:
            continue
        if type(namespace) is not dict:  # a class's mappingproxy: the dict behind it
            inner = [r for r in gc.get_referents(namespace) if type(r) is dict]
            if not inner:
                continue
            namespace = inner[0]
        roots[id(namespace)] = (label, namespace)
    return roots


def holders(objects: list[Any], modules_before: set[int], is_learner_file: Callable[[str], bool], *,
            depth: int = 6, limit: int = 2000) -> list[tuple[str, Any]]:
    """``[(where, object)]``: for each object of ``objects`` held, through at most ``depth`` containers, by an
    attribute of a module that existed before the check (``modules_before``: their ids) or of a class such a module
    defines, that attribute (``builtins._kept``, ``torch.optim.SGD._kept``, ``__main__.MODELS``).

    A walk up the references (``gc.get_referrers``, one scan of the collector's objects per level), from the objects
    together, at most ``limit`` objects per level."""
    roots = _roots(modules_before, is_learner_file)
    found: list[tuple[str, Any]] = []
    origin: dict[int, Any] = {id(o): o for o in objects}  # for each object on the way: the check's object it leads to
    frontier = list(objects)
    seen = set(origin)
    ignore = {id(frontier), id(objects), id(origin), id(seen), id(roots), id(found)}
    done: set[int] = set()
    for _ in range(depth):
        if not frontier:
            break
        referrers = gc.get_referrers(*frontier)
        ignore.add(id(referrers))
        nexts: list[Any] = []
        for ref in referrers:
            if id(ref) in ignore or type(ref) is types.FrameType:
                continue
            held = next((o for o in frontier if _holds(ref, o)), None)
            if held is None:
                continue
            target = origin[id(held)]
            if id(ref) in roots:
                label, namespace = roots[id(ref)]
                # the object itself or a plain container: a library's cache (an lru_cache'd function) is not
                if id(target) not in done and (held is target or type(held) in _PLAIN):
                    done.add(id(target))
                    key = next((k for k, v in namespace.items() if v is held), "?")
                    found.append((f"{label}.{key}", target))
                continue
            if id(ref) not in seen and len(nexts) < limit and not issubclass(type(ref), (type, types.ModuleType)):
                seen.add(id(ref))
                origin[id(ref)] = target
                nexts.append(ref)
        del referrers
        frontier = nexts
        ignore.add(id(frontier))
    return found


def _holds(container: Any, obj: Any) -> bool:
    try:
        return any(r is obj for r in gc.get_referents(container))
    except Exception:  # noqa: BLE001  an object whose references cannot be listed holds nothing we can name
        return False


__all__ = ["Namespaces", "holders"]
