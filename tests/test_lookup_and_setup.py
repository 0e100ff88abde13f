import random

import pytest
import torch
from torch import nn

import hooklab
import hooklab.course
from hooklab import UnknownModuleError, get_module


@pytest.fixture
def model():
    return nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), nn.Linear(2, 1))


def test_get_module_finds_nested_names(model):
    assert get_module(model, "0.1") is model[0][1]
    assert get_module(model, "") is model


def test_unknown_name_lists_names_and_suggests(model):
    with pytest.raises(UnknownModuleError) as info:
        get_module(model, "0.2")
    message = str(info.value)
    assert "no submodule '0.2'" in message
    assert "Did you mean" in message
    assert "Names that exist: 0, 0.0, 0.1, 1" in message
    assert isinstance(info.value, KeyError)


def test_get_module_bad_types(model):
    with pytest.raises(TypeError, match="nn.Module"):
        get_module("model", "0")
    with pytest.raises(TypeError, match="strings"):
        get_module(model, 0)


def test_setup_seeds_and_fixes_threads(capsys):
    previous = torch.get_num_threads()
    try:
        hooklab.course.setup(seed=123)
        a, r = torch.rand(3), random.random()
        hooklab.course.setup(seed=123)
        assert torch.equal(a, torch.rand(3)) and r == random.random()
        assert torch.get_num_threads() == 1
        assert "seed=123" in capsys.readouterr().out
    finally:
        torch.set_num_threads(previous)


def test_setup_makes_figures_png():
    import graphviz
    import matplotlib
    hooklab.course.setup(verbose=False)
    assert set(graphviz.Digraph()._repr_mimebundle_()) == {"image/png"}
    assert matplotlib.rcParams["figure.dpi"] == 80


def test_setup_rejects_bad_arguments():
    with pytest.raises(TypeError, match="seed"):
        hooklab.course.setup(seed="0")
    with pytest.raises(ValueError, match="threads"):
        hooklab.course.setup(threads=0)
