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

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ._checks import copy_output, flag, needs_tensor, no_call_causes, refuse_compiled, select_output
from ._torch_internals import version as _version, was_compiled
from .errors import NotRecorded
from .lookup import as_names, get_modules
from .scope import Recorder

__all__ = ["Capture", "FeatureExtractor", "capture"]


class _Grads(dict):
    """``store.grads``: a dict whose missing keys say why no gradient arrived."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self._names = names

    def __missing__(self, name: str) -> Any:
        if name not in self._names:
            raise NotRecorded(f"{name!r} was not captured; captured names: {', '.join(self._names)}")
        raise NotRecorded(
            f"no gradient reached {name!r}: capture it with grads=True and run backward inside the block; "
            "its output must require grad (not a frozen layer, not under torch.no_grad() / inference_mode())")


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
        self.grads: dict[str, torch.Tensor] = _Grads(self.names)
        self.calls: dict[str, int] = {n: 0 for n in names}
        self._versions: dict[str, int | None] = {}
        self.compiled = False  # the model has a torch.compile wrapper (set by capture)

    def __getitem__(self, name: str) -> Any:
        if name not in self.outputs:
            if name in self.calls:
                raise NotRecorded(f"{name!r} has not run yet. {no_call_causes('this model' if self.compiled else None)}")
            raise NotRecorded(f"{name!r} was not captured; captured names: {', '.join(self.names)}")
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


class capture(Recorder):  # noqa: N801 - used like a function: ``with capture(model, names) as store``
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
        output: for modules that return a tuple or dict (``nn.LSTM``, ``nn.MultiheadAttention``),
            which part to keep: an index, a key, or a function of the output (needed with ``grads=True``).

    >>> model, x = nn.Sequential(nn.Linear(4, 3), nn.ReLU()), torch.ones(2, 4)
    >>> with capture(model, ["0", "1"], grads=True) as store:
    ...     model(x).sum().backward()
    >>> store["0"].shape, store.grads["1"].tolist(), store.calls
    (torch.Size([2, 3]), [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], {'0': 1, '1': 1})

    A torch.compile'd model is refused (hooks added after compiling never fire); capture on
    ``model._orig_mod`` and call that one. Module hooks are not per thread: forward calls made in
    other threads during the block are recorded too. An output may be a nested tensor
    (``nn.TransformerEncoder`` with a padding mask under ``no_grad``), which has no single
    ``.shape``: use ``.unbind()``. Beyond the course, torchvision's
    ``models.feature_extraction.create_feature_extractor`` gives features through FX instead of
    hooks (no in-place or called-twice caveats, but the model must be traceable). Like every recorder (:class:`~hooklab.scope.Recorder`)
    it registers when the block is entered and records that one block.
    """

    _model_refs = ("modules",)

    def __init__(self, model: nn.Module, names: str | Iterable[str], *, grads: bool = False,
                 detach: bool = True, to_cpu: bool = False, clone: bool = False, output: Any = None) -> None:
        super().__init__()
        refuse_compiled(model, "capture")
        self.names = as_names(names)
        self.modules = get_modules(model, self.names)  # let go of when the block ends
        for value, what in ((grads, "grads"), (detach, "detach"), (to_cpu, "to_cpu"), (clone, "clone")):
            flag(value, what)
        self.grads, self.detach, self.to_cpu, self.clone = grads, detach, to_cpu, clone
        self.output = output
        self.store = Capture(self.names)
        self.store.compiled = was_compiled(model)
        self._awaited_grads = False  # a gradient hook was registered (so a backward was expected)
        self._grads_seen = False  # ... and one of them fired

    def _hook(self, name: str) -> Callable[[nn.Module, Any, Any], None]:
        store, scope = self.store, self.scope
        grads, detach, to_cpu, clone, selector = self.grads, self.detach, self.to_cpu, self.clone, self.output

        def capture_output(module: nn.Module, args: Any, output: Any) -> None:
            output = select_output(output, selector, name)
            store.calls[name] += 1
            kept = store.outputs[name] = copy_output(output, detach, to_cpu, clone)
            shared = isinstance(output, torch.Tensor) and kept.data_ptr() == output.data_ptr()
            # a detached tensor shares the output's memory and version counter: remember the
            # version to tell later if an in-place op overwrote what we hold
            store._versions[name] = _version(kept) if shared else None
            # one gradient hook per name, on the output held now: the hook on an older output is removed
            # (only the gradient of the output held now is recorded), so the handles stay len(names)
            old = scope.get(("grad", name))
            if old is not None:
                old.remove()
            if grads and torch.is_grad_enabled():
                needs_tensor(output, name, "capture(grads=True)")
                if output.requires_grad:
                    def capture_grad(grad: torch.Tensor) -> None:
                        store.grads[name] = copy_output(grad, detach, to_cpu, clone)
                        self._grads_seen = True
                    scope.add(output.register_hook(capture_grad), key=("grad", name))
                    self._awaited_grads = True

        return capture_output

    def _register(self) -> None:
        for name, module in self.modules.items():
            self._on(module, self._hook(name))

    def _unregister(self) -> None:
        self.scope.remove()
        if self._awaited_grads and not self._grads_seen and not self._block_raised:
            warnings.warn("capture(grads=True) recorded no gradient: run backward inside the `with` block (its "
                          "gradient hooks are removed when the block ends)", RuntimeWarning, stacklevel=4)

    # the block gives the store, not the recorder (as `with open(...) as f` gives the file)
    def __enter__(self) -> Capture:  # type: ignore[override]
        super().__enter__()
        return self.store


class FeatureExtractor(nn.Module):
    """Wrap ``model`` so that calling it returns a fresh dict ``{layer name: output}``.

    Hooks exist only while the wrapper runs, so ``model`` stays hook-free and can be used
    on its own; each call returns a new dict (earlier results are not overwritten).

    A module called more than once per forward gives its last call's output (with a warning).

    >>> model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
    >>> features = FeatureExtractor(model, ["0", "2"])(torch.zeros(2, 3, 8, 8))
    >>> {k: tuple(v.shape) for k, v in features.items()}
    {'0': (2, 4, 6, 6), '2': (2, 4, 1, 1)}
    """

    def __init__(self, model: nn.Module, names: str | Iterable[str], *, detach: bool = True,
                 clone: bool = False, output: Any = None) -> None:
        super().__init__()
        refuse_compiled(model, "FeatureExtractor")
        self.model = model
        self.names = as_names(names)
        get_modules(model, self.names)  # fail now, with the list of names, not at the first call
        self.detach, self.clone, self.output = detach, clone, output

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Run the model on the arguments and return ``{name: output}`` of the named modules (a module that ran
        twice gives its last output, with a warning); the hooks are gone when this returns."""
        with capture(self.model, self.names, detach=self.detach, clone=self.clone, output=self.output) as store:
            self.model(*args, **kwargs)
        twice = [n for n in self.names if store.calls[n] > 1]
        if twice:
            warnings.warn(f"FeatureExtractor: {', '.join(map(repr, twice))} ran more than once in one forward "
                          "(e.g. a ReLU reused in a ResNet block); the result is its last call. Use capture() "
                          "to see the call count, or name a module that runs once.", stacklevel=2)
        return {name: store[name] for name in self.names}

    def extra_repr(self) -> str:
        """What ``print(extractor)`` shows besides the wrapped model: the names and ``detach``."""
        return f"names={self.names}, detach={self.detach}"
