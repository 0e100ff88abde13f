"""Look inside a model without changing it: capture activations, list layer shapes, extract features.

    with capture(model, ["layer1", "layer4"], grads=True) as store:
        model(x).sum().backward()
    store["layer4"].shape          # the activation (detached)
    store.grads["layer4"].shape    # d(loss)/d(activation)
    # every hook is gone here, also if the body raised

All three tools register forward hooks only while they run and remove them in ``finally``,
so the model carries no hook before or after.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .lookup import get_module
from .scope import HookScope

__all__ = ["Capture", "FeatureExtractor", "ShapeRow", "ShapeTable", "capture", "layer_shapes"]


def _as_names(names: str | Iterable[str]) -> list[str]:
    """One name or several, as a list without duplicates (order kept)."""
    if isinstance(names, str):
        names = [names]
    try:
        out = list(dict.fromkeys(names))
    except TypeError:
        raise TypeError(f"names must be a module name or an iterable of names, got {type(names).__name__}") from None
    bad = [n for n in out if not isinstance(n, str)]
    if bad:
        raise TypeError(f"module names are strings like 'layer1.0.conv1', got {bad[0]!r}")
    if not out:
        raise ValueError("no module names given; pass at least one name from model.named_modules()")
    return out


def _store(t: Any, detach: bool, to_cpu: bool, clone: bool) -> Any:
    """Apply detach / to CPU / clone to every tensor in a (nested) output."""
    if isinstance(t, torch.Tensor):
        if detach:
            t = t.detach()
        if to_cpu:
            t = t.to("cpu")
        if clone:
            t = t.clone()
        return t
    if isinstance(t, (tuple, list)):
        items = [_store(v, detach, to_cpu, clone) for v in t]
        return type(t)(*items) if hasattr(t, "_fields") else type(t)(items)
    if isinstance(t, dict):
        return {k: _store(v, detach, to_cpu, clone) for k, v in t.items()}
    return t


def _version(t: Any) -> int | None:
    if not isinstance(t, torch.Tensor) or t.is_inference():
        return None  # inference tensors keep no version counter
    return t._version


class Capture(Mapping[str, Any]):
    """What :func:`capture` recorded; ``store[name]`` is that module's latest output.

    ``store.grads[name]`` is the gradient of the loss with respect to that same output (with
    ``grads=True``, after a backward inside the block); ``store.calls[name]`` counts the
    forward calls (a module used twice per forward, like ``relu`` in a torchvision
    ``BasicBlock``, counts 2 and keeps only its last output and that output's gradient).
    """

    def __init__(self, names: list[str]) -> None:
        self.names = list(names)
        self.outputs: dict[str, Any] = {}
        self.grads: dict[str, torch.Tensor] = {}
        self.calls: dict[str, int] = {n: 0 for n in names}
        self._versions: dict[str, int | None] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self.outputs:
            if name in self.calls:
                raise KeyError(f"{name!r} has not run yet: call the model inside the `with capture(...)` block")
            raise KeyError(f"{name!r} was not captured; captured names: {', '.join(self.names)}")
        out = self.outputs[name]
        before, now = self._versions.get(name), _version(out)
        if before is not None and now is not None and now != before:
            raise RuntimeError(
                f"the output of {name!r} was modified in place after it was captured "
                f"(e.g. by a following ReLU(inplace=True)), so the stored tensor no longer holds "
                f"that output; capture it with clone=True"
            )
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def clear(self) -> None:
        """Forget what was captured (calls are counted from zero again)."""
        self.outputs.clear()
        self.grads.clear()
        self._versions.clear()
        self.calls = {n: 0 for n in self.names}

    def __repr__(self) -> str:
        return f"Capture(names={self.names}, captured={sorted(self.outputs)}, grads={sorted(self.grads)})"


class capture:  # noqa: N801 - used like a function: ``with capture(model, names) as store``
    """Context manager recording the outputs (and optionally output gradients) of named submodules.

    Args:
        model: the model; it is not modified.
        names: one name or several, as in ``model.named_modules()`` (unknown names raise
            :class:`~hooklab.UnknownModuleError`, listing the names that exist, before any hook).
        grads: also record ``d(loss)/d(output)`` during backward (through a tensor hook on
            the output, which, unlike a full backward hook, works before in-place ops).
        detach: store detached tensors (default), so no autograd graph is kept alive.
        to_cpu: move what is stored to the CPU.
        clone: store copies; needed when a later in-place op overwrites the output
            (reading such an output without ``clone=True`` raises a ``RuntimeError``).

    >>> with capture(model, "fc") as store:
    ...     _ = model(x)
    >>> store["fc"].shape
    torch.Size([2, 10])
    """

    def __init__(self, model: nn.Module, names: str | Iterable[str], *, grads: bool = False,
                 detach: bool = True, to_cpu: bool = False, clone: bool = False) -> None:
        self.names = _as_names(names)
        self.modules = {n: get_module(model, n) for n in self.names}
        self.grads, self.detach, self.to_cpu, self.clone = grads, detach, to_cpu, clone
        self.store = Capture(self.names)
        self.scope = HookScope("capture")
        # one gradient hook per name, on the output held now: older outputs' hooks are removed,
        # so the number of live handles stays len(names) however many forward passes run
        self._grad_hooks: dict[str, Any] = {}

    def _hook(self, name: str):
        store, grad_hooks = self.store, self._grad_hooks
        grads, detach, to_cpu, clone = self.grads, self.detach, self.to_cpu, self.clone

        def capture_output(module: nn.Module, args: Any, output: Any) -> None:
            store.calls[name] += 1
            kept = store.outputs[name] = _store(output, detach, to_cpu, clone)
            shared = isinstance(output, torch.Tensor) and kept.data_ptr() == output.data_ptr()
            # a detached tensor shares the output's memory and version counter: remember the
            # version to tell later if an in-place op overwrote what we hold
            store._versions[name] = _version(kept) if shared else None
            previous = grad_hooks.pop(name, None)
            if previous is not None:  # only the gradient of the output held now is recorded
                previous.remove()
            if grads and torch.is_grad_enabled():
                if not isinstance(output, torch.Tensor):
                    raise TypeError(
                        f"capture(grads=True) needs a tensor output, but {name!r} returned "
                        f"{type(output).__name__}; capture a submodule that returns a tensor"
                    )
                if output.requires_grad:
                    def capture_grad(grad: torch.Tensor) -> None:
                        store.grads[name] = _store(grad, detach, to_cpu, clone)
                    grad_hooks[name] = output.register_hook(capture_grad)

        return capture_output

    def __enter__(self) -> Capture:
        try:
            for name, module in self.modules.items():
                self.scope.add(module.register_forward_hook(self._hook(name)))
        except BaseException:
            self.scope.remove()
            raise
        return self.store

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.scope.remove()
        finally:
            while self._grad_hooks:
                self._grad_hooks.popitem()[1].remove()


class FeatureExtractor(nn.Module):
    """Wrap ``model`` so that calling it returns a fresh dict ``{layer name: output}``.

    Hooks exist only while the wrapper runs, so ``model`` stays hook-free and can be used
    on its own; each call returns a new dict (earlier results are not overwritten).

    >>> features = FeatureExtractor(resnet, ["layer4", "avgpool"])(x)
    >>> {k: tuple(v.shape) for k, v in features.items()}
    {'layer4': (2, 512, 2, 2), 'avgpool': (2, 512, 1, 1)}
    """

    def __init__(self, model: nn.Module, layers: str | Iterable[str], *, detach: bool = True,
                 clone: bool = False) -> None:
        super().__init__()
        self.model = model
        self.layers = _as_names(layers)
        for name in self.layers:
            get_module(model, name)  # fail now, with the list of names, not at the first call
        self.detach, self.clone = detach, clone

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        with capture(self.model, self.layers, detach=self.detach, clone=self.clone) as store:
            self.model(*args, **kwargs)
        return {name: store[name] for name in self.layers}

    def extra_repr(self) -> str:
        return f"layers={self.layers}, detach={self.detach}"


@dataclass(frozen=True)
class ShapeRow:
    """One module call seen by :func:`layer_shapes`."""

    name: str
    kind: str
    shape: str
    params: int
    depth: int


def _shape(out: Any) -> str:
    if isinstance(out, torch.Tensor):
        return str(list(out.shape))
    if isinstance(out, (tuple, list)):
        return "(" + ", ".join(_shape(o) for o in out) + ")"
    if isinstance(out, dict):
        return "{" + ", ".join(f"{k}: {_shape(v)}" for k, v in out.items()) + "}"
    return type(out).__name__


class ShapeTable(list):
    """A list of :class:`ShapeRow` that prints as an aligned table."""

    def table(self) -> str:
        rows = [("layer", "type", "output shape", "params")]
        rows += [("  " * (r.depth - 1) + r.name, r.kind, r.shape, f"{r.params:,}") for r in self]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = []
        for row in rows:
            cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].ljust(widths[2]),
                     row[3].rjust(widths[3])]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def layer_shapes(model: nn.Module, *args: Any, depth: int = 1, **kwargs: Any) -> ShapeTable:
    """Run ``model(*args, **kwargs)`` once and return every submodule call's output shape.

    Rows come in the order the calls start (a parent before its children); ``depth`` is how
    many levels of ``named_modules()`` to show (1 = direct children, like ``conv1``,
    ``layer1``; 2 adds ``layer1.0`` ...). A module called twice gives two rows. The run is
    under ``torch.no_grad()`` in eval mode (so BatchNorm statistics are not updated); each
    module's train / eval flag is restored afterwards, and every hook is removed.

    >>> print(layer_shapes(resnet, torch.zeros(1, 3, 64, 64)))   # doctest: +SKIP
    layer    type         output shape      params
    conv1    Conv2d       [1, 64, 32, 32]    9,408
    ...
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"layer_shapes needs an nn.Module, got {type(model).__name__}")
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise ValueError(f"depth must be an int >= 1, got {depth!r}")
    rows: list[list[Any]] = []
    open_rows: dict[int, list[list[Any]]] = {}  # id(module) -> its rows still waiting for an output
    modes = {m: m.training for m in model.modules()}

    def row_start(name: str, level: int):
        def shape_pre_hook(module: nn.Module, inputs: Any) -> None:
            params = sum(p.numel() for p in module.parameters())
            row = [name, type(module).__name__, "?", params, level]
            rows.append(row)
            open_rows.setdefault(id(module), []).append(row)
        return shape_pre_hook

    def shape_hook(module: nn.Module, inputs: Any, output: Any) -> None:
        open_rows[id(module)].pop()[2] = _shape(output)

    with HookScope("layer_shapes") as scope:
        try:
            for name, module in model.named_modules():
                level = len(name.split(".")) if name else 0
                if 1 <= level <= depth:
                    scope.add(module.register_forward_pre_hook(row_start(name, level)))
                    scope.add(module.register_forward_hook(shape_hook))
            model.eval()
            with torch.no_grad():
                model(*args, **kwargs)
        finally:
            for module, training in modes.items():
                module.training = training
    return ShapeTable(ShapeRow(*row) for row in rows)
