"""What ``course.setup()`` changes process-wide, read and put back (for the tests that call it)."""
import random
import warnings
from contextlib import contextmanager

import graphviz
import matplotlib
import numpy
import torch
from torch._tensor_str import get_printoptions


def graphviz_format() -> str:
    previous = graphviz.set_jupyter_format("svg")  # graphviz has no getter: set returns the format it replaced
    graphviz.set_jupyter_format(previous)
    return previous


def snapshot() -> dict:
    """Everything ``course.setup()`` may change, comparable with ``==`` (the RNG state as bytes)."""
    return {"initial seed": torch.initial_seed(), "torch rng": torch.random.get_rng_state().tolist(),
            "random": random.getstate(), "numpy": str(numpy.random.get_state()), "threads": torch.get_num_threads(),
            "print options": get_printoptions(), "warning filters": list(warnings.filters),
            "rcParams": dict(matplotlib.rcParams), "graphviz": graphviz_format()}


@contextmanager
def restored():
    """Put back, after the block, what ``course.setup()`` changes: the RNGs (torch, random, numpy), the thread count,
    torch's print options, the warning filters, matplotlib's rcParams and graphviz's Jupyter format."""
    threads, options = torch.get_num_threads(), get_printoptions()
    python_rng, numpy_rng, jupyter_format = random.getstate(), numpy.random.get_state(), graphviz_format()
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings(), matplotlib.rc_context():
            yield
    finally:
        torch.set_num_threads(threads)
        torch.set_printoptions(**options)
        random.setstate(python_rng)
        numpy.random.set_state(numpy_rng)
        graphviz.set_jupyter_format(jupyter_format)
