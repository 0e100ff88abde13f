"""Plots of what hooklab's recorders recorded: functions of plain data (dicts, lists, records), one module.

Each recorder keeps a one-line ``plot()`` that hands its results to the function here, so a figure can also be
drawn from results saved earlier, without a model or a recorder::

    plot.norms(gm.norms())                      # GradientMonitor: gradient norm per layer over steps
    plot.activation_stats(st.stats, eps=st.eps) # ActivationStats: mean, std, near-zero fraction over calls
    plot.saved_bytes({r.module: r.activation_bytes for r in ledger.by_module()})
    plot.timeline(tr.events)                    # Tracer: one lane per kind of hook, in firing order

matplotlib is imported when a function draws (``pip install "hooklab[plot]"``); ``import hooklab`` never needs it.
Every function returns what it drew on (the axes), and draws on the ``ax`` / ``axes`` it is given.

>>> from hooklab import plot
>>> ax = plot.norms({"fc1": [1.0, 0.5, float("nan")], "fc2": [2.0, 1.0, 0.5]})
>>> [line.get_label() for line in ax.get_lines()], ax.get_yscale()
(['fc1', 'fc2'], 'log')
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = ["activation_stats", "norms", "saved_bytes", "timeline"]


class _Event(Protocol):  # what timeline() reads of a Tracer Event
    @property
    def step(self) -> int: ...
    @property
    def phase(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...


def _pyplot() -> Any:
    """``matplotlib.pyplot``, or an ImportError that says how to install it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as missing:
        raise ImportError(f'hooklab\'s plots need matplotlib ({missing}): pip install "hooklab[plot]" '
                          "(or pip install matplotlib)", name=missing.name) from None
    return plt


def norms(data: Mapping[str, Sequence[float]], *, steps: Sequence[int] | None = None, ax: Any = None,
          logy: bool = True, title: str | None = None, per: str = "layer", norm_type: float = 2.0,
          xlabel: str = "step (backward pass)") -> Any:
    """One line per layer (or parameter) over steps, a gap where a step got no gradient (``nan``); return the axes.

    ``data`` is what :meth:`GradientMonitor.norms` returns; ``steps`` the x value of each entry (default
    ``1, 2, ...``: a monitor that records one step in ``every`` passes the steps it recorded); ``per``,
    ``norm_type`` and ``xlabel`` only label the figure.
    """
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots()
    for name, values in data.items():
        ax.plot(list(steps) if steps is not None else range(1, len(values) + 1), list(values), label=name)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"gradient {norm_type:g}-norm")
    ax.set_title(title or f"gradient norm per {per}")
    if len(data) <= 12:
        ax.legend(fontsize="small")
    return ax


_STATS = ("mean", "std", "near_zero")


def activation_stats(data: Mapping[str, Mapping[str, Sequence[float]]], *, eps: float, axes: Any = None,
                     title: str | None = None) -> Any:
    """Three panels (mean, std, fraction with ``|x| <= eps``) over calls, one line per layer; return the axes.

    ``data`` is what :attr:`ActivationStats.stats` holds: ``{layer: {"mean": [...], "std": [...], "near_zero": [...]}}``.
    """
    plt = _pyplot()
    if axes is None:
        fig, axes = plt.subplots(1, 3, figsize=(10, 3))
        if title:
            fig.suptitle(title)
    labels = {"mean": "mean", "std": "std", "near_zero": f"fraction |x| <= {eps:g}"}
    for ax, stat in zip(axes, _STATS):
        for name, values in data.items():
            ax.plot(range(1, len(values[stat]) + 1), list(values[stat]), label=name)
        ax.set_title(labels[stat])
        ax.set_xlabel("step (forward call)")
    axes[0].legend(fontsize="small")
    return axes


def saved_bytes(data: Mapping[str, int], *, ax: Any = None, top: int = 15) -> Any:
    """A horizontal bar per module: the activation bytes it saved for backward (the ``top`` largest); return the axes.

    ``data`` is ``{module: bytes}``, e.g. from :meth:`SavedTensorLedger.by_module`.
    """
    plt = _pyplot()
    rows = sorted(((name, n) for name, n in data.items() if n > 0), key=lambda row: row[1], reverse=True)[:top]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.3 * len(rows) + 1.2))
    ax.barh([name for name, _ in rows][::-1], [n / 1024 for _, n in rows][::-1], color="tab:orange")
    ax.set_xlabel("activation bytes saved for backward (KiB)")
    ax.set_title("Saved activations per module")
    return ax


def timeline(events: Sequence[_Event], *, kinds: Sequence[str] = (), ax: Any = None,
             title: str = "hook firing order", annotate: bool = True) -> Any:
    """The events as a timeline (x: step, one lane per kind, the backward pass shaded); return the axes.

    ``events`` are :class:`~hooklab.Event` records (anything with ``step``, ``phase``, ``kind``, ``name``);
    ``kinds`` orders the lanes from top to bottom (default: the order the kinds first appear).
    """
    if not events:
        raise ValueError("nothing to plot: no events were recorded")
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    order = list(dict.fromkeys([*kinds, *(e.kind for e in events)]))
    lanes = [k for k in order if any(e.kind == k for e in events)]
    if ax is None:
        height = 1.0 + 0.45 * len(lanes)
        _, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(events) + 2.5), height))
    cmap = plt.get_cmap("tab20")
    colour = {k: cmap(i % 20) for i, k in enumerate(order)}
    back = [e.step for e in events if e.phase == "backward"]
    if back:
        ax.axvspan(min(back) - 0.5, max(back) + 0.5, color="0.93", zorder=0)
        ax.text(min(back) - 0.4, len(lanes) - 0.45, "backward", fontsize=8, color="0.4", va="top")
    for e in events:
        y = len(lanes) - 1 - lanes.index(e.kind)
        ax.scatter([e.step], [y], color=colour[e.kind], s=60, zorder=3, edgecolors="black", linewidths=0.5)
        if annotate:
            ax.annotate(e.name, (e.step, y), textcoords="offset points", xytext=(0, 7),
                        ha="center", fontsize=8, rotation=30)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(list(reversed(lanes)), fontsize=8)
    ax.set_ylim(-0.6, len(lanes) - 0.1)
    ax.set_xlim(0.3, len(events) + 1.2)  # room for the last, rotated label
    if len(events) <= 30:
        ax.set_xticks(range(1, len(events) + 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step (order of firing)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.figure.tight_layout()
    return ax
