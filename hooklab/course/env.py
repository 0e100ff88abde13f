"""One call at the top of every notebook: reproducible, readable, PNG-only output."""
from __future__ import annotations

import random
import warnings

import torch

__all__ = ["setup"]

# Noise from tools around the course, never from what a notebook teaches.
_QUIET = [
    (DeprecationWarning, r"(jupyter_client|ipykernel|zmq|traitlets|matplotlib_inline|IPython|graphviz)"),
]


def setup(seed: int = 0, threads: int = 1, precision: int = 4, verbose: bool = True) -> None:
    """Seed every generator, fix the thread count and print options, and make figures PNG.

    Also picks a CJK font for matplotlib when one is installed, so Chinese labels render.

    >>> setup(seed=0)
    course.setup: seed=0, threads=1, precision=4
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
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
    try:
        import matplotlib
        from matplotlib import font_manager
    except ImportError:
        return
    matplotlib.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "figure.figsize": (7, 3.5)})
    cjk = sorted({f.name for f in font_manager.fontManager.ttflist if "CJK" in f.name})
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
