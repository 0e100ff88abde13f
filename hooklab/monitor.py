"""Watch training through hooks: gradient norms per parameter / layer, activation statistics per layer.

    with GradientMonitor(model) as gm:
        for x, y in batches:
            opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    gm.plot()                       # one line per layer: gradient norm over steps

    with ActivationStats(model, ["act1", "act2"]) as st:
        ...                         # train
    st.plot()                       # mean, std and fraction near zero per layer over steps

Both record 0-d tensors inside the hooks (no ``.item()``, so no device sync per step) and
convert them only when asked. Both are recorders (:class:`~hooklab.scope.Recorder`): they
register when the ``with`` block is entered and remove their hooks when it ends.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any, Literal, get_args

import torch
from torch import nn

from .clip import loss_scale_reader
from ._torch_internals import was_compiled
from ._text import format_table
from .capture import NO_CALL_CAUSES, needs_tensor, refuse_compiled, select_output
from .lookup import as_names, get_modules
from .scope import Recorder

__all__ = ["ActivationStats", "GradientMonitor"]


Per = Literal["layer", "parameter"]


def _owner(param_name: str) -> str:
    """'layer1.0.conv1.weight' -> 'layer1.0.conv1' (the module that owns the parameter)."""
    return param_name.rpartition(".")[0] or "(model)"


class GradientMonitor(Recorder):
    """Record the norm of every parameter's gradient at each backward, through hooks.

    It uses ``Tensor.register_post_accumulate_grad_hook``: the hook fires once per backward,
    after the gradient is accumulated into ``.grad``, so it sees what the optimizer will see
    (with gradient accumulation over several backwards, the running sum).

    Args:
        model: the model to watch.
        names: the modules whose parameters to watch, one name or several (default: every
            parameter that requires a gradient). Unknown names raise, listing the names that exist.
        norm_type: the vector norm (2 = Euclidean).
        scaler: under mixed precision, the ``torch.amp.GradScaler`` the loss is scaled with: the
            hooks run on scaled gradients, and the recorded norms are divided by its scale (the
            norms of the true gradients). In a step whose gradients overflowed (the scaler skips
            that step) the recorded norm is inf or nan.

    Sparse gradients (``nn.Embedding(sparse=True)``) are measured on their stored values.

    >>> model, x = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1)), torch.ones(8, 4)
    >>> _ = nn.init.constant_(model[0].weight, 0.5), nn.init.zeros_(model[0].bias)
    >>> _ = nn.init.constant_(model[2].weight, 1.0), nn.init.zeros_(model[2].bias)
    >>> with GradientMonitor(model) as gm:
    ...     model(x).sum().backward()
    >>> {k: [round(v, 2) for v in vals] for k, vals in gm.norms().items()}   # per layer
    {'0': [30.98], '2': [28.84]}
    >>> gm.steps, sorted(gm.norms(per="parameter"))
    (1, ['0.bias', '0.weight', '2.bias', '2.weight'])
    """

    def __init__(self, model: nn.Module, names: str | Iterable[str] | None = None, *,
                 norm_type: float = 2.0, scaler: object | None = None) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"GradientMonitor needs an nn.Module, got {type(model).__name__}")
        self._loss_scale = loss_scale_reader(scaler)
        if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)):
            raise TypeError(f"norm_type must be a number such as 2.0 or float('inf'), got {norm_type!r}")
        if not norm_type > 0:
            raise ValueError(f"norm_type must be > 0 (2 = Euclidean, float('inf') = largest entry), "
                             f"got {norm_type!r}")
        if names is None:
            params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        else:
            params = []
            for layer, module in get_modules(model, as_names(names)).items():
                prefix = f"{layer}." if layer else ""
                params += [(prefix + n, p) for n, p in module.named_parameters() if p.requires_grad]
            params = list(dict((n, p) for n, p in params).items())
        if not params:
            raise ValueError("no parameter that requires a gradient to watch; "
                             "check `names` and `requires_grad`")
        self.norm_type = float(norm_type)
        self._params = params
        self.history: dict[str, list[torch.Tensor]] = {n: [] for n, _ in params}

    def _register(self) -> None:
        for name, param in self._params:
            self.scope.add(param.register_post_accumulate_grad_hook(self._hook(name)))

    def _hook(self, name: str):
        record, norm_type = self.history[name], self.norm_type

        def record_grad_norm(param: torch.Tensor) -> None:
            grad = param.grad.detach()
            if grad.is_sparse:  # the norm of a sparse gradient is that of its (summed) stored values
                grad = grad.coalesce().values()
            record.append(torch.linalg.vector_norm(grad, norm_type) / self._loss_scale())

        return record_grad_norm

    @property
    def steps(self) -> int:
        """How many backward passes were recorded (for the parameter seen most often)."""
        self._check_used()
        return max(len(v) for v in self.history.values())

    def norms(self, per: Per = "layer") -> dict[str, list[float]]:
        """Norms per step, as floats: ``per="parameter"`` (one per tensor) or ``"layer"``.

        A layer's norm combines its parameters' norms (for the 2-norm:
        ``sqrt(|dW|^2 + |db|^2)``), step by step, over the steps all of them were seen.
        """
        self._check_used()
        if per not in get_args(Per):
            raise ValueError(f"per must be {' or '.join(map(repr, get_args(Per)))}, got {per!r}")
        as_float = {n: torch.stack(v).tolist() if v else [] for n, v in self.history.items()}
        if per == "parameter":
            return as_float
        layers: dict[str, list[list[float]]] = {}
        for name, values in as_float.items():
            layers.setdefault(_owner(name), []).append(values)
        p = self.norm_type
        out = {}
        for layer, series in layers.items():
            steps = min(len(s) for s in series)
            if p == float("inf"):
                out[layer] = [max(s[i] for s in series) for i in range(steps)]
            else:
                out[layer] = [sum(s[i] ** p for s in series) ** (1 / p) for i in range(steps)]
        return out

    def table(self, per: Per = "layer") -> str:
        """The latest norm and the range over steps, one row per layer (or parameter), as text.

        >>> layer = nn.Linear(2, 1)
        >>> with GradientMonitor(layer) as gm:
        ...     layer(torch.ones(3, 2)).sum().backward()
        >>> print(gm)
        layer    steps   last    min    max
        (model)      1  5.196  5.196  5.196
        """
        rows = [(name, str(len(v)), f"{v[-1]:.4g}", f"{min(v):.4g}", f"{max(v):.4g}")
                for name, v in self.norms(per).items() if v]
        return format_table(("layer" if per == "layer" else "parameter", "steps", "last", "min", "max"), rows,
                            right=range(1, 5))

    def __str__(self) -> str:
        return self.table()

    def plot(self, per: Per = "layer", *, ax: Any = None, logy: bool = True, title: str | None = None) -> Any:
        """Plot the norms over steps (one line per layer or parameter); return the axes."""
        import matplotlib.pyplot as plt

        data = self.norms(per)
        if ax is None:
            _, ax = plt.subplots()
        for name, values in data.items():
            ax.plot(range(1, len(values) + 1), values, label=name)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("step (backward pass)")
        ax.set_ylabel(f"gradient {self.norm_type:g}-norm")
        ax.set_title(title or f"gradient norm per {per}")
        if len(data) <= 12:
            ax.legend(fontsize="small")
        return ax

    def __repr__(self) -> str:
        steps = max(len(v) for v in self.history.values())
        return f"GradientMonitor({len(self.history)} parameters, {steps} steps, hooks={len(self.scope)})"


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
    >>> st.stats()["1"]
    {'mean': [1.0], 'std': [1.0690449476242065], 'near_zero': [0.5]}
    >>> print(st)
    layer  calls  mean    std  near_zero
    1          1     1  1.069      0.500
    """

    STATS = ("mean", "std", "near_zero")

    def __init__(self, model: nn.Module, names: str | Iterable[str], *, eps: float = 1e-3,
                 output: Any = None) -> None:
        super().__init__()
        refuse_compiled(model, "ActivationStats")
        names = as_names(names)
        self._modules = get_modules(model, names)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0 or math.isinf(eps):
            raise ValueError(f"eps must be a finite number >= 0 (|x| <= eps counts as near zero), got {eps!r}")
        self.eps = float(eps)
        self.output = output
        self._compiled = was_compiled(model)
        self.history: dict[str, list[torch.Tensor]] = {n: [] for n in names}

    def _register(self) -> None:
        for name, module in self._modules.items():
            self.scope.add(module.register_forward_hook(self._hook(name)))

    def _hook(self, name: str):
        record, eps, selector = self.history[name], self.eps, self.output

        def record_activation_stats(module: nn.Module, args: Any, output: Any) -> None:
            output = needs_tensor(select_output(output, selector, name), name, "ActivationStats")
            with torch.no_grad():
                x = output.detach()
                if x.is_nested:  # e.g. TransformerEncoder with a padding mask under no_grad
                    x = torch.cat([c.flatten() for c in x.unbind()])
                x = x.float()
                # the sample standard deviation; of one value it is undefined (nan), without torch's warning
                std = x.std() if x.numel() > 1 else x.new_full((), float("nan"))
                record.append(torch.stack([x.mean(), std, (x.abs() <= eps).float().mean()]))

        return record_activation_stats

    def stats(self) -> dict[str, dict[str, list[float]]]:
        """``{layer: {"mean": [...], "std": [...], "near_zero": [...]}}``, one value per call."""
        self._check_used()
        out = {}
        for name, rec in self.history.items():
            cols = torch.stack(rec).T.tolist() if rec else [[], [], []]
            out[name] = dict(zip(self.STATS, cols))
        return out

    def table(self) -> str:
        """The latest call's statistics per layer, as text (``print(stats)`` prints it too)."""
        rows = [(name, str(len(v["mean"])), f"{v['mean'][-1]:.4g}", f"{v['std'][-1]:.4g}", f"{v['near_zero'][-1]:.3f}")
                for name, v in self.stats().items() if v["mean"]]
        return format_table(("layer", "calls", "mean", "std", "near_zero"), rows, right=range(1, 5))

    def __str__(self) -> str:
        return self.table()

    def plot(self, *, axes: Any = None, title: str | None = None) -> Any:
        """Three panels (mean, std, near-zero fraction) over calls, one line per layer."""
        import matplotlib.pyplot as plt

        data = self.stats()
        if axes is None:
            fig, axes = plt.subplots(1, 3, figsize=(10, 3))
            if title:
                fig.suptitle(title)
        labels = {"mean": "mean", "std": "std", "near_zero": f"fraction |x| <= {self.eps:g}"}
        for ax, stat in zip(axes, self.STATS):
            for name, values in data.items():
                ax.plot(range(1, len(values[stat]) + 1), values[stat], label=name)
            ax.set_title(labels[stat])
            ax.set_xlabel("step (forward call)")
        axes[0].legend(fontsize="small")
        return axes

    def _unregister(self) -> None:
        self.scope.remove()
        silent = [name for name, record in self.history.items() if not record]
        if silent and not self._block_raised:
            first = ("the model has been torch.compile'd, and hooks added after compiling do not run in the compiled "
                     "code: call the eager model inside the block. Other possible causes: "
                     if self._compiled else "Possible causes: ")
            warnings.warn(f"ActivationStats recorded no call of {', '.join(map(repr, silent))}. {first}{NO_CALL_CAUSES}",
                          RuntimeWarning, stacklevel=4)

    def __repr__(self) -> str:
        return f"ActivationStats({list(self.history)}, hooks={len(self.scope)})"
