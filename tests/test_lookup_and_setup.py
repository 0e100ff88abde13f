import random
import warnings

import pytest
import torch
from torch import nn

import hooklab
import hooklab.course
from hooklab import UnknownModuleError, get_module

from process_state import restored, snapshot


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


def test_setup_seeds_and_fixes_threads(capsys, setup_undone):
    hooklab.course.setup(seed=123)
    a, r = torch.rand(3), random.random()
    hooklab.course.setup(seed=123)
    assert torch.equal(a, torch.rand(3)) and r == random.random()
    assert torch.get_num_threads() == 1
    assert "seed=123" in capsys.readouterr().out


def test_setup_makes_figures_png(setup_undone):
    import graphviz
    import matplotlib
    hooklab.course.setup(verbose=False)
    assert set(graphviz.Digraph()._repr_mimebundle_()) == {"image/png"}
    assert matplotlib.rcParams["figure.dpi"] == 80


@pytest.mark.parametrize("kwargs, error, message", [
    ({"seed": "0"}, TypeError, "seed must be an int"),
    ({"seed": True}, TypeError, "seed must be an int"),
    ({"seed": -1}, ValueError, "seed must be between 0 and 4294967295"),
    ({"threads": 0}, ValueError, "threads must be >= 1"),
    ({"threads": True}, TypeError, "threads must be an int"),
    ({"threads": 2.0}, TypeError, "threads must be an int"),
    ({"precision": -3}, ValueError, "precision must be >= 0"),
    ({"precision": "x"}, TypeError, "precision must be an int"),
    ({"verbose": "no"}, TypeError, "verbose must be True or False"),
    ({"seed": 5, "threads": 2, "verbose": 1}, TypeError, "verbose"),   # the last argument is bad: nothing changes
])
def test_setup_checks_every_argument_before_changing_anything(kwargs, error, message, setup_undone):
    torch.manual_seed(7)
    before = snapshot()
    with pytest.raises(error, match=message):
        hooklab.course.setup(**kwargs)
    assert snapshot() == before


def test_process_state_restored_puts_back_everything_setup_changes():
    before = snapshot()
    with restored():
        hooklab.course.setup(seed=99, threads=torch.get_num_threads() + 1, precision=1, verbose=False)
        warnings.filterwarnings("ignore", message="only in this test")
        changed = snapshot()
    assert {k for k in before if changed[k] != before[k]} >= {"threads", "print options", "warning filters",
                                                             "initial seed", "torch rng", "random", "numpy"}
    assert snapshot() == before


def test_wrapper_prefixes_get_a_did_you_mean_both_ways():
    """D7 (review rows N35, N36): 'module.' names on an unwrapped model, and bare names on a DataParallel wrapper."""
    from torch import nn

    from hooklab import UnknownModuleError, capture

    model = nn.Sequential()
    model.fc = nn.Linear(2, 2)
    with pytest.raises(UnknownModuleError, match=r"Did you mean 'fc'\? This model is not wrapped"):
        capture(model, "module.fc")
    with pytest.raises(UnknownModuleError, match=r"Did you mean 'module.fc'\? DataParallel wraps the model"):
        capture(nn.DataParallel(model), "fc")
