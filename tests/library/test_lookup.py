"""hooklab.get_module: names, suggestions and bad input."""
import pytest
from torch import nn

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
