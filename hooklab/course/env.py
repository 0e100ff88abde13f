"""One call at the top of every notebook: reproducible, readable, PNG-only output."""
from __future__ import annotations

import importlib.abc
import importlib.util
import random
import sys
import warnings
from typing import Any

import torch

__all__ = ["setup"]

# Noise from tools around the course, never from what a notebook teaches.
_QUIET = [
    (DeprecationWarning, r"(jupyter_client|ipykernel|zmq|traitlets|matplotlib_inline|IPython|graphviz)"),
]


def _int_at_least(name: str, value: object, low: int, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bounds}, got {value}")
    return value


def setup(seed: int = 0, threads: int = 1, precision: int = 4, verbose: bool = True) -> None:
    """Seed every generator, fix the thread count and print options, and make figures PNG.

    Also picks a CJK font for matplotlib when one is installed, so Chinese labels render.
    Every argument is checked before anything is changed: a bad one raises and leaves the process as it was.
    A notebook's first cell::

        course.setup()      # prints: course.setup: seed=0, threads=1, precision=4
    """
    _int_at_least("seed", seed, 0, 2**32 - 1)  # numpy's seeds are 32-bit
    _int_at_least("threads", threads, 1)
    _int_at_least("precision", precision, 0)
    if not isinstance(verbose, bool):
        raise TypeError(f"verbose must be True or False, got {verbose!r}")
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:
        pass
    torch.set_num_threads(threads)
    torch.set_printoptions(precision=precision, sci_mode=False)
    for category, module in _QUIET:
        warnings.filterwarnings("ignore", category=category, module=module)
    _configure_matplotlib()
    _configure_graphviz()
    if verbose:
        print(f"course.setup: seed={seed}, threads={threads}, precision={precision}")


def _configure_matplotlib() -> None:
    """The course's figure settings: now if matplotlib is imported, else right after its first import (importing
    it costs about 1 s of CPU, and most notebooks never plot)."""
    if "matplotlib" in sys.modules:
        _matplotlib_settings()
    elif not any(isinstance(finder, _SettingsOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SettingsOnImport())


class _SettingsOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``matplotlib`` is first imported, it lets the usual finders load it, applies the
    course's settings once its ``__init__`` has run, and leaves ``sys.meta_path``."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "matplotlib":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module: Any) -> None:
            run_module(module)
            _matplotlib_settings()
        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _matplotlib_settings() -> None:
    try:
        import matplotlib
        from matplotlib import font_manager
    except ImportError:
        return
    matplotlib.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "figure.figsize": (7, 3.5)})
    # simplified Chinese's glyph shapes first (Noto Sans CJK SC), then any CJK font
    cjk = sorted({f.name for f in font_manager.fontManager.ttflist if "CJK" in f.name}, key=lambda n: ("SC" not in n, n))
    if cjk:
        matplotlib.rcParams["font.sans-serif"] = [cjk[0], *matplotlib.rcParams["font.sans-serif"]]
        matplotlib.rcParams["axes.unicode_minus"] = False
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    if get_ipython() is not None:
        set_matplotlib_formats("png")  # nbval skips PNG bytes; SVG text would differ every run


def _configure_graphviz() -> None:
    try:
        import graphviz
    except ImportError:
        return
    graphviz.set_jupyter_format("png")
