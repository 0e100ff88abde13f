"""Every public hooklab tool on a zoo of real models (tests/zoo.py holds the models and the expectations).

Each cell either works (its runner checks what the tool recorded against plain PyTorch) or
refuses with the message the table expects. ``tools/zoo_table.py`` prints the same table for
the README. Heavy models are marked ``zoo_heavy`` (``-m "not zoo_heavy"`` skips them).
"""
from __future__ import annotations

import re

import pytest
import torch

import hooklab

pytest.importorskip("torchvision")

from zoo import SPECS, TOOLS, Case, expected  # noqa: E402

_cases: dict[str, Case] = {}


def case_for(spec) -> Case:
    if spec.name not in _cases:
        _cases.clear()  # one model alive at a time (tests run model by model)
        _cases[spec.name] = Case(spec)
    return _cases[spec.name]


@pytest.fixture(autouse=True, scope="module")
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    _cases.clear()
    torch._dynamo.reset()


PARAMS = [pytest.param(spec, tool, id=f"{spec.name}-{tool}",
                       marks=[pytest.mark.zoo_heavy] if spec.heavy else [])
          for spec in SPECS for tool in TOOLS]


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.filterwarnings("ignore:Tracer.modules. this model modifies")
@pytest.mark.parametrize("spec, tool", PARAMS)
def test_zoo(spec, tool):
    case = case_for(spec)
    want = expected(spec, tool)
    run = TOOLS[tool]
    if want.startswith("n/a"):
        pytest.skip(want)
    if want.startswith("xfail"):
        pytest.xfail(want)  # a known defect, listed in the README table
    if want.startswith("refuses: "):
        with pytest.raises(Exception) as info:
            run(case)
        assert re.search(want.removeprefix("refuses: "), str(info.value)), str(info.value)
    else:
        note = run(case)
        assert isinstance(note, str) and note
    # whatever happened, no hook is left on the model
    assert hooklab.hook_inventory(case.eager, include_global=False) == []
