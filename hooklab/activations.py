"""Activation statistics per layer through forward hooks: :class:`ActivationStats`.

    with ActivationStats(model, ["act1", "act2"]) as st:
        ...                         # train
    st.plot()                       # mean, std and fraction near zero per layer over steps

It records small tensors inside the hooks (no ``.item()``, so no device sync per step), stacks them into one tensor
every 64 records and converts them only when asked; it is a recorder (:class:`~hooklab.scope.Recorder`): it registers
when the ``with`` block is entered and removes its hooks when it ends. Gradient norms: :mod:`hooklab.monitor`.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from . import plot
from ._checks import (
    needs_tensor,
    no_call_causes,
    number,
    refuse_compiled,
    select_output,
)
from ._series import _Series
from ._text import format_table
from ._torch_internals import was_compiled
from .lookup import as_names, get_modules
from .scope import Recorder

__all__ = ["ActivationStats"]


class ActivationStats(Recorder):
    """Record mean, standard deviation and fraction of near-zero values of layer outputs.

    One record per forward call of each named module (a module used twice per forward
    records twice). ``eps`` sets "near zero": ``|x| <= eps``. For modules that return a tuple
    or dict (``nn.LSTM``), ``output=`` picks the tensor: an index, a key or a function.
    A nested tensor's statistics are those of all its components' values together. ``std`` is
    the sample standard deviation (``nan`` for an output of a single value). A name that never
    ran inside the block gets a warning at the end of it, saying what may have caused it.

    >>> model = nn.Sequential(nn.Linear(2, 4), nn.ReLU())
    >>> _ = nn.init.constant_(model[0].weight, 1.0), nn.init.constant_(model[0].bias, -1.0)
    >>> with ActivationStats(model, ["1"]) as st:
    ...     _ = model(torch.tensor([[0.0, 0.0], [1.0, 2.0]]))
    >>> st.stats["1"]
    {'mean': [1.0], 'std': [1.0690449476242065], 'near_zero': [0.5]}
    >>> print(st)
    layer  calls  mean    std  near_zero
    1          1     1  1.069      0.500
    """

    STATS = ("mean", "std", "near_zero")
    _model_refs = ("_modules",)

    def __init__(self, model: nn.Module, names: str | Iterable[str], *, eps: float = 1e-3,
                 output: Any = None) -> None:
        super().__init__()
        refuse_compiled(model, "ActivationStats")
        names = as_names(names)
        self._modules = get_modules(model, names)
        self.eps = number(eps, "eps", nonnegative=True, finite=True, note="|x| <= eps counts as near zero")
        self.output = output
        self._compiled = was_compiled(model)
        self._series = {n: _Series() for n in names}  # per name: one [mean, std, near_zero] row per call

    def _register(self) -> None:
        for name, module in self._modules.items():
            self._on(module, self._hook(name))

    def _hook(self, name: str) -> Any:
        record, eps, selector = self._series[name].append, self.eps, self.output

        def record_activation_stats(module: nn.Module, args: Any, output: Any) -> None:
            output = needs_tensor(select_output(output, selector, name), name, "ActivationStats")
            with torch.no_grad():
                x = output.detach()
                if x.is_nested:  # e.g. TransformerEncoder with a padding mask under no_grad
                    x = torch.cat([c.flatten() for c in x.unbind()])
                x = x.float()
                # the sample standard deviation; of one value it is undefined (nan), without torch's warning
                std = x.std() if x.numel() > 1 else x.new_full((), float("nan"))
                record(torch.stack([x.mean(), std, (x.abs() <= eps).float().mean()]))

        return record_activation_stats

    @property
    def stats(self) -> dict[str, dict[str, list[float]]]:
        """``{layer: {"mean": [...], "std": [...], "near_zero": [...]}}``, one value per call."""
        self._check_used()
        out: dict[str, dict[str, list[float]]] = {}
        for name, series in self._series.items():
            rec = series.stacked()
            cols = rec.T.tolist() if rec is not None else [[], [], []]
            out[name] = dict(zip(self.STATS, cols))
        return out

    def table(self) -> str:
        """The latest call's statistics per layer, as text (``print(stats)`` prints it too)."""
        rows = [(name, str(len(v["mean"])), f"{v['mean'][-1]:.4g}", f"{v['std'][-1]:.4g}", f"{v['near_zero'][-1]:.3f}")
                for name, v in self.stats.items() if v["mean"]]
        return format_table(("layer", "calls", "mean", "std", "near_zero"), rows, right=range(1, 5))

    def __str__(self) -> str:
        return self.table()

    def plot(self, *, axes: Any = None, title: str | None = None) -> Any:
        """Three panels (mean, std, near-zero fraction) over calls (:func:`hooklab.plot.activation_stats`)."""
        return plot.activation_stats(self.stats, eps=self.eps, axes=axes, title=title)

    def _unregister(self) -> None:
        self.scope.remove()
        silent = [name for name, series in self._series.items() if not len(series)]
        if silent and not self._block_raised:
            warnings.warn(f"ActivationStats recorded no call of {', '.join(map(repr, silent))}. "
                          f"{no_call_causes('the model' if self._compiled else None)}", RuntimeWarning, stacklevel=4)

    def __repr__(self) -> str:
        return f"ActivationStats({list(self._series)}, hooks={len(self.scope)})"
