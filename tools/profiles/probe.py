"""Measure what a library does to a model's hooks, by running it: the probe every measured profile goes through.

:func:`measure` takes a library's setup (``build``, ``inputs``, ``apply``, ``TARGET``, see :mod:`tools.profiles.spec`)
and reports, in words that do not depend on the machine:

- ``installs`` / ``during``: what :func:`hooklab.all_hooks` and the global hook dicts gain when ``apply`` returns, and
  what is there while the library runs (seen from a user's forward pre-hook, for libraries that hook only during a
  call); ``forward_replaced``: the modules whose ``forward`` the library set on the instance;
- ``order``: every hook that fired on the target module (and every global hook) in one forward and backward, the
  user's hooks registered before and after the entry point among them, each hook wrapped by a logger for the run;
- ``survives``: which of the library's hooks a ``copy.deepcopy`` keeps, whether the model's ``state_dict`` keys
  changed and a state dict of a fresh model still loads, whether the library's hooks run under ``torch.compile``
  (eager backend) and under non-reentrant checkpointing (and how often), and whether two backward passes accumulate
  gradients as two separate ones would;
- ``modules_replaced``: the submodules whose class changed or that are gone (a module swapped for the library's
  own: the hooks on the old object no longer run); ``your_hooks``: where each of your hooks registered before the
  entry point is after it (kept on the target, moved to another module, or taken off);
- ``removed``: whether the library's own way to take its hooks off (``remove``) leaves the model as it found it
  (no hook of its left, every module of the same class as before);
- ``inherits``: the behaviour-matrix cells whose hook families the library's hooks belong to.

>>> import torch
>>> from torch import nn
>>> from torch.nn.utils import prune
>>> class Setup:
...     TARGET = "0"
...     build = staticmethod(lambda: nn.Sequential(nn.Linear(3, 2)))
...     inputs = staticmethod(lambda: (torch.ones(1, 3),))
...     apply = staticmethod(lambda m: (prune.l1_unstructured(m[0], "weight", amount=0.5), m)[1])
>>> result = measure(Setup, probes={"compile"})
>>> [(r["where"], r["kind"], r["owner"]) for r in result["installs"]]
[('0', 'forward_pre', 'torch.nn.utils.prune')]
>>> result["order"]["forward"]
['yours, before: forward_pre', 'torch.nn.utils.prune: forward_pre L1Unstructured', 'yours, after: forward_pre', \
'yours, before: forward', 'yours, after: forward']
"""
from __future__ import annotations

import contextlib
import copy
import functools
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

import hooklab
from hooklab import _torch_internals as internals
from hooklab.inventory import hook_name
from hooklab.systems import hook_owner

__all__ = ["measure", "records", "PROBES"]

PROBES = frozenset({"deepcopy", "state_dict", "compile", "checkpoint", "accumulate", "remove"})
USER = ("yours, before", "yours, after")
# a hook kind of all_hooks (or of the global dicts) -> the behaviour-matrix family it belongs to
FAMILY = {"forward_pre": "forward-pre-hook", "forward": "forward-hook", "backward_pre": "backward-pre-hook",
          "backward": "full-backward-hook", "tensor": "param-hook",
          "post_accumulate_grad": "post-accumulate-grad-hook", "saved_tensors": "saved-tensors-pack",
          "global forward": "global-forward-hook", "global forward_pre": "global-forward-hook",
          "global backward": "global-full-backward-hook", "parametrization": "parametrization",
          "state_dict": "state-dict-post-hook", "state_dict_pre": "state-dict-pre-hook",
          "load_state_dict_pre": "load-state-dict-pre-hook", "load_state_dict_post": "load-state-dict-post-hook"}
CONTEXTS = ("eager", "deepcopy", "compile", "checkpoint")


def records(model: nn.Module) -> list[dict[str, str]]:
    """Every hook on ``model`` as :func:`hooklab.all_hooks` lists it, then the global module hooks and the active
    saved-tensor hooks, as plain dicts (``where``, ``kind``, ``what``, ``owner``)."""
    found = [{"where": r.where, "kind": r.kind, "what": r.what, "owner": r.owner} for r in hooklab.all_hooks(model)]
    for entry in hooklab.hook_inventory(None):
        found.append({"where": entry.where, "kind": f"global {entry.kind}" if entry.where == "(global)" else
                      entry.kind, "what": entry.hook, "owner": "(global)"})
    return found


def _place(record: dict[str, str]) -> tuple[str, ...]:
    return record["where"], record["kind"], record["owner"]


def _key(record: dict[str, str]) -> tuple[str, ...]:
    return record["where"], record["kind"], record["what"], record["owner"]


def _difference(after: list[dict[str, str]], before: list[dict[str, str]]) -> list[dict[str, str]]:
    """The records of ``after`` that ``before`` lacks, counted as a multiset, in ``after``'s order."""
    left = Counter(_key(r) for r in before)
    out = []
    for record in after:
        if left[_key(record)]:
            left[_key(record)] -= 1
        else:
            out.append(record)
    return out


def _not_yours(found: list[dict[str, str]]) -> list[dict[str, str]]:
    return [r for r in found if not r["what"].startswith("_user_")]


def find(model: nn.Module, path: str) -> nn.Module:
    """The submodule at ``path``, or the one whose path ends with ``.path`` (a wrapper adds a prefix such as
    ``_orig_mod.`` or ``module.``); ``""`` is the model itself."""
    if not path:
        return model
    with contextlib.suppress(AttributeError):
        return model.get_submodule(path)
    for name, module in model.named_modules():
        if name.endswith("." + path):
            return module
    raise LookupError(f"no submodule {path!r} in {type(model).__name__} (the TARGET of the profile)")


# ---------------------------------------------------------------------------------------------- the user's hooks
def _user_hooks(module: nn.Module, label: str, log: list[str], seen: dict[str, list]) -> list[Any]:
    """A user's four module hooks on ``module``, each writing ``label: kind`` to ``log``; the forward pre-hook also
    keeps what is on the model the first time it runs (``seen["during"]``)."""

    def _user_forward_pre(mod, args):
        log.append(f"{label}: forward_pre")
        if label == USER[0] and "during" not in seen:
            seen["during"] = records(seen["root"][0])

    def _user_forward(mod, args, output):
        log.append(f"{label}: forward")

    def _user_backward_pre(mod, grad_output):
        log.append(f"{label}: backward_pre")

    def _user_backward(mod, grad_input, grad_output):
        log.append(f"{label}: backward")

    return [module.register_forward_pre_hook(_user_forward_pre), module.register_forward_hook(_user_forward),
            module.register_full_backward_pre_hook(_user_backward_pre),
            module.register_full_backward_hook(_user_backward)]


# ---------------------------------------------------------------------------------------------- logging every hook
def _logged(fn: Callable, label: str, log: list[str]) -> Callable:
    @functools.wraps(fn)
    def _logging_hook(*args, **kwargs):
        log.append(label)
        return fn(*args, **kwargs)
    _logging_hook.__wrapped_for_log__ = fn
    return _logging_hook


@contextlib.contextmanager
def logging_hooks(model: nn.Module, log: list[str], *, where: str = "") -> Iterator[None]:
    """For the ``with`` block, every hook in PyTorch's hook dicts of the module at ``where`` and of the model itself
    (labelled ``(model)``), of that module's parameters and in the global dicts, and a ``forward`` set on those
    modules' instances, writes its label to ``log`` when it runs; the
    original callables are put back on exit, also when the block raises. A user's own hooks (which log themselves)
    are left alone."""
    swapped: list[tuple[dict, Any, Any]] = []
    target = find(model, where)
    modules = [(where, target)] + ([("(model)", model)] if target is not model else [])
    dicts = [(name, kind, d) for name, module in modules for _attr, kind, d in internals.module_hook_dicts(module)]
    dicts += [("(global)", f"global {kind}", d) for _attr, kind, d in internals.global_hook_dicts()]
    for name, module in modules:
        for pname, tensor in module.named_parameters(recurse=False):
            for kind, d in internals.tensor_hook_dicts(tensor):
                dicts.append((f"{name}.{pname}", kind, d))
    for name, module in modules:
        forward = module.__dict__.get("forward")
        if forward is not None:
            dicts.append((name, "forward replaced", module.__dict__))
    try:
        for place, kind, d in dicts:
            on = "(model) " if place == "(model)" else ""  # the model's own hooks, when the target is a submodule
            if kind == "forward replaced":
                fn = d["forward"]
                d["forward"] = _logged(fn, f"{on}{hook_owner(fn)}: forward replaced", log)
                swapped.append((d, "forward", fn))
                continue
            for key, fn in list(d.items()):
                if hook_name(fn).startswith("_user_"):
                    continue
                d[key] = _logged(fn, f"{on}{hook_owner(fn)}: {kind} {_short(fn)}", log)
                swapped.append((d, key, fn))
        yield
    finally:
        for d, key, fn in swapped:
            if key in d:
                d[key] = fn


def _short(fn: Any) -> str:
    name = hook_name(fn)
    if name.startswith("partial("):
        name = name[len("partial("):-1]
    return name.rsplit(".", 1)[-1] if "." in name and not name.startswith("_") else name


# ---------------------------------------------------------------------------------------------- one step
def _loss(setup: Any, output: Any) -> torch.Tensor:
    if hasattr(setup, "loss"):
        return setup.loss(output)
    while not isinstance(output, torch.Tensor):
        if isinstance(output, dict) or hasattr(output, "values"):
            output = next(v for v in output.values() if isinstance(v, torch.Tensor))
        elif isinstance(output, (tuple, list)):
            output = output[0]
        else:
            raise TypeError(f"cannot make a loss of {type(output).__name__}: give the profile a loss(output)")
    return output.float().pow(2).mean()


def _step(setup: Any, model: nn.Module, log: list[str], *, wrap: Callable | None = None) -> None:
    """One forward and backward of ``model``, ``log`` marking where the backward starts."""
    inputs = setup.inputs()
    output = wrap(model, *inputs) if wrap is not None else model(*inputs)
    loss = _loss(setup, output)
    log.append("-- backward --")
    if loss.requires_grad:
        loss.backward()


def _split(log: list[str]) -> dict[str, list[str]]:
    cut = log.index("-- backward --") if "-- backward --" in log else len(log)
    return {"forward": log[:cut], "backward": log[cut + 1:]}


def _library_labels(log: list[str]) -> list[str]:
    return [x for x in log if not x.startswith("yours") and x != "-- backward --"]


def _grads(model: nn.Module) -> list[torch.Tensor | None]:
    """Each parameter's gradient, a DTensor's as the full tensor (allclose has no rule for sharded ones)."""
    def plain(grad: torch.Tensor) -> torch.Tensor:
        full = getattr(grad, "full_tensor", None)
        return (full() if callable(full) else grad).detach().clone()
    return [None if p.grad is None else plain(p.grad) for p in model.parameters()]


# ---------------------------------------------------------------------------------------------- the probe
def measure(setup: Any, *, probes: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Run the standard probe on ``setup`` (a library's profile module); ``probes`` are the parts to leave out
    (see :data:`PROBES`), with ``setup.PROBES`` added. See the module's docstring for what is measured."""
    skip = set(probes) | set(getattr(setup, "PROBES", ()))
    unknown = skip - PROBES
    if unknown:
        raise ValueError(f"unknown probe parts {sorted(unknown)}; the parts are {sorted(PROBES)}")
    torch.manual_seed(0)
    model = setup.build()
    fresh_keys = sorted(model.state_dict())
    before = records(model)
    log: list[str] = []
    seen: dict[str, Any] = {"root": [model]}
    handles = _user_hooks(find(model, setup.TARGET), USER[0], log, seen)
    classes = _classes(model)
    try:
        with logging_hooks(model, log, where=setup.TARGET):
            ran = setup.apply(model)
        ran = model if ran is None else ran
        seen["root"][0] = ran
        during = seen.get("during")
        installed = _difference(_not_yours(records(ran)), _not_yours(before))
        entry_log = list(log)
        log.clear()
        target = find(ran, setup.TARGET)
        handles += _user_hooks(target, USER[1], log, seen)
        with logging_hooks(ran, log, where=setup.TARGET):
            _step(setup, ran, log)
        order = {"entry": entry_log, **_split(log)}
        result: dict[str, Any] = {
            "installs": installed,
            "during": None if during is None else _difference(_not_yours(during), _not_yours(before)),
            "forward_replaced": sorted({r["where"] for r in installed if r["kind"] == "forward replaced"}),
            "modules_replaced": _swapped(classes, _classes(ran), _prefix(ran, setup.TARGET)),
            "your_hooks": _where_yours_are(ran, handles, setup.TARGET),
            "order": order,
            "library_fires": sorted(set(_library_labels(order["forward"] + order["backward"]))),
        }
        result["survives"] = _survival(setup, ran, installed, fresh_keys, skip)
    finally:
        for handle in handles:
            handle.remove()
    if "remove" not in skip and hasattr(setup, "remove"):
        result["removed"] = _removal(setup, ran, before, classes)
    result["inherits"] = inherited(result["installs"] + (result["during"] or []))
    result["skipped"] = sorted(skip)
    return result


def _survival(setup: Any, ran: nn.Module, installed: list[dict[str, str]], fresh_keys: list[str],
              skip: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "deepcopy" not in skip:
        try:
            twin = copy.deepcopy(ran)
        except Exception as exc:  # noqa: BLE001 - a library's model that cannot be copied is a finding
            out["deepcopy"] = f"raises {type(exc).__name__}"
        else:
            # compared without ``what``: it may carry state that a step changes (an observer that "saw data")
            # and the model itself by "" (all_hooks names it by its class, which a copy may not keep: torchvision's)
            def place(record: dict[str, str], root: nn.Module) -> tuple[str, ...]:
                return ("" if record["where"] == type(root).__name__ else record["where"]), *_place(record)[1:]
            left = Counter(place(r, twin) for r in _not_yours(records(twin)))
            kept = 0
            for record in installed:
                if left[place(record, ran)]:
                    left[place(record, ran)] -= 1
                    kept += 1
            out["deepcopy"] = f"{kept} of {len(installed)} kept"
    if "state_dict" not in skip:
        keys = sorted(ran.state_dict())
        out["state_dict_keys"] = "same" if keys == fresh_keys else \
            f"{len(set(keys) - set(fresh_keys))} added, {len(set(fresh_keys) - set(keys))} gone"
        torch.manual_seed(1)
        clean = setup.build().state_dict()
        try:
            problems = ran.load_state_dict(clean, strict=False)
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            out["loads_fresh_state_dict"] = f"raises {type(exc).__name__}"
        else:
            out["loads_fresh_state_dict"] = "clean" if not (problems.missing_keys or problems.unexpected_keys) \
                else f"{len(problems.missing_keys)} missing, {len(problems.unexpected_keys)} unexpected"
    eager: list[str] = []
    with logging_hooks(ran, eager, where=setup.TARGET):
        _step(setup, ran, eager)
    plain = Counter(_library_labels(eager))
    if "compile" not in skip:
        out["compile"] = _under(setup, ran, plain, "compile")
    if "checkpoint" not in skip:
        out["checkpoint"] = _under(setup, ran, plain, "checkpoint")
    if "accumulate" not in skip:
        out["accumulate"] = _accumulation(setup, ran)
    return out


def _under(setup: Any, ran: nn.Module, plain: Counter, how: str) -> str:
    """How the library's hooks on the target ran under ``how`` against plain eager: "same", "raises X" or the
    labels whose count changed."""
    log: list[str] = []
    try:
        with logging_hooks(ran, log, where=setup.TARGET):
            if how == "compile":
                import torch._dynamo
                torch._dynamo.reset()
                compiled = torch.compile(ran, backend="eager")
                _step(setup, compiled, log)
            else:
                from torch.utils.checkpoint import checkpoint
                _step(setup, ran, log, wrap=lambda m, *a: checkpoint(m, *a, use_reentrant=False))
    except Exception as exc:  # noqa: BLE001 - a library that does not run this way is a finding
        return f"raises {type(exc).__name__}"
    finally:
        if how == "compile":
            import torch._dynamo
            torch._dynamo.reset()
    got = Counter(_library_labels(log))
    if got == plain:
        return "same"
    changed = sorted(set(got) | set(plain))
    return "; ".join(f"{label} {plain[label]}x -> {got[label]}x" for label in changed if got[label] != plain[label])


def _accumulation(setup: Any, ran: nn.Module) -> str:
    """Whether two backward passes leave twice the gradients of one (as PyTorch's accumulation does)."""
    sink: list[str] = []
    nn.Module.zero_grad(ran, set_to_none=True)  # a wrapper's own zero_grad may take other arguments (DeepSpeed's)
    torch.manual_seed(2)
    _step(setup, ran, sink)
    once = _grads(ran)
    torch.manual_seed(2)
    _step(setup, ran, sink)
    twice = _grads(ran)
    nn.Module.zero_grad(ran, set_to_none=True)
    pairs = [(a, b) for a, b in zip(once, twice, strict=True) if a is not None or b is not None]
    if not pairs:
        return "no gradients"
    same = all(a is not None and b is not None and torch.allclose(2 * a, b, rtol=1e-4, atol=1e-6) for a, b in pairs)
    return "accumulates" if same else "does not accumulate as two backward passes do"


def _removal(setup: Any, ran: nn.Module, before: list[dict[str, str]], classes: dict[str, str]) -> str:
    try:
        back = setup.remove(ran)
    except Exception as exc:  # noqa: BLE001 - reported
        return f"raises {type(exc).__name__}"
    back = ran if back is None else back
    left = [f"{r['where']} {r['kind']}" for r in _difference(_not_yours(records(back)), _not_yours(before))]
    left += [f"{change} (module not put back)" for change in _swapped(classes, _classes(back),
                                                                          _prefix(back, setup.TARGET))]
    return "nothing left" if not left else f"{len(left)} left: " + ", ".join(left)


def _classes(model: nn.Module) -> dict[str, str]:
    """Each module path's class, as its top-level package and name (``torch Linear``, ``peft Linear``)."""
    return {name: f"{type(m).__module__.split('.')[0]} {type(m).__qualname__}" for name, m in model.named_modules()}


def _prefix(model: nn.Module, target: str) -> str:
    """What a wrapper put before the paths (``module.``, ``base_model.model.``), read from where the target is."""
    if not target:
        return ""
    names = [name for name, _ in model.named_modules()]
    if target in names:
        return ""
    ends = [name for name in names if name.endswith("." + target)]
    return ends[0][: -len(target)] if ends else ""


def _swapped(before: dict[str, str], after: dict[str, str], prefix: str = "") -> list[str]:
    """``path: Old -> New`` for each module path whose class changed (a module replaced, or its class swapped), and
    ``path: Old -> gone`` for one that is no longer there; a wrapper's ``prefix`` is put before the old paths."""
    changes = []
    for path, cls in before.items():
        if not path:
            continue
        now = after.get(prefix + path, after.get(path))
        if now != cls:
            changes.append(f"{path}: {cls} -> {now or 'gone'}")
    return changes


def _where_yours_are(model: nn.Module, handles: list[Any], target: str) -> dict[str, str]:
    """For each of the user's four hooks registered before the entry point: still on the target (``kept``), on
    another module now (``moved to <path>``: the library put a new module in its place and kept the old one inside
    it), or on no module of the model any more (``taken off``)."""
    kinds = ("forward_pre", "forward", "backward_pre", "backward")
    where = {}
    home = _prefix(model, target) + target
    for kind, handle in zip(kinds, handles[:4], strict=True):
        found = next((name for name, module in model.named_modules()
                      for _attr, _kind, hooks in internals.module_hook_dicts(module) if handle.id in hooks), None)
        where[kind] = "taken off" if found is None else "kept" if found == home else f"moved to {found or '(model)'}"
    return where


def inherited(found: list[dict[str, str]]) -> list[str]:
    """The behaviour-matrix cells (``family@context``) that the hooks in ``found`` inherit, for the contexts the
    probe also runs (:data:`CONTEXTS`)."""
    families = sorted({FAMILY[r["kind"]] for r in found if r["kind"] in FAMILY})
    return [f"{family}@{context}" for family in families for context in CONTEXTS]
