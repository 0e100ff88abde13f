"""Every public hooklab tool on a zoo of real models (tests/library/zoo.py holds the models and the expectations).

Each cell either works (its runner checks what the tool recorded against plain PyTorch) or
refuses with the message the table expects. ``zoo_table.py`` makes the same table for the maintainers' manual
(docs/maintainers/package.md), and the last test checks that the manual holds it. The full-size ConvNeXt-T, ViT-B/16, Swin-T and DenseNet-121 (about 10 minutes on 2
busy cores) are marked ``zoo_heavy`` and run only with ``HOOKLAB_ZOO_HEAVY=1``; by default their
small variants (the same torchvision classes, narrower) stand in for them.
"""
from __future__ import annotations

import contextlib
import os
import re

import pytest
import torch

import hooklab

pytest.importorskip("torchvision")

from zoo import SPECS, TOOLS, Case, expected  # noqa: E402
from zoo_distributed import DIST_SPECS, DIST_TOOLS, DistSpec, run_rows  # noqa: E402

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


_HEAVY = [pytest.mark.zoo_heavy,
          pytest.mark.skipif(os.environ.get("HOOKLAB_ZOO_HEAVY") != "1",
                             reason="full-size model: set HOOKLAB_ZOO_HEAVY=1 to run it")]
# torch.compile's treatment of hooks added after compiling changes between releases: the compiled rows check the pin's
_PIN = [pytest.mark.pin]
PARAMS = [pytest.param(spec, tool, id=f"{spec.name.split(' (')[0]}-{tool}",
                       marks=(_HEAVY if spec.heavy else []) + (_PIN if spec.compiled else []))
          for spec in SPECS for tool in TOOLS]
# DDP / FSDP2 rows (tests/library/zoo_distributed.py): one launch of 2 gloo workers runs every tool of every such row
PARAMS += [pytest.param(spec, tool, id=f"{spec.name.split(' (')[0]}-{tool}") for spec in DIST_SPECS
           for tool in DIST_TOOLS]
_ranks: list = []  # what each worker found, once per test session


def replayed(spec, tool):
    """A runner that gives back what ``tool`` did in both workers of ``spec``'s row."""
    if not _ranks:
        _ranks.extend(run_rows())

    def run(case) -> str:
        for rank, rows in enumerate(_ranks):
            status, text = rows[spec.name][tool]
            if status != "works":
                raise RuntimeError(f"rank {rank}: {text}")
        return _ranks[0][spec.name][tool][1]
    return run


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.filterwarnings("ignore:Tracer.modules. this model modifies")
@pytest.mark.filterwarnings("ignore:offload_module. the module never ran")  # the known defect its cells exercise
@pytest.mark.parametrize("spec, tool", PARAMS)
@pytest.mark.timeout(300)
def test_zoo(spec, tool):
    distributed = isinstance(spec, DistSpec)
    case = None if distributed else case_for(spec)
    want = expected(spec, tool)
    run = replayed(spec, tool) if distributed else TOOLS[tool]
    if want.startswith("n/a"):
        pytest.skip(want)
    if want.startswith("xfail"):  # a known defect, listed in the README table: it must still fail
        try:
            run(case)
        except Exception as exc:
            pytest.xfail(f"{want} ({type(exc).__name__})")
        pytest.fail(f"expected to fail ({want}) but it worked: the defect is gone; update tests/library/zoo.py and the "
                    "manual's table (docs/maintainers/package.md, tests/library/zoo_table.py)")
    # whatever happens, no hook is left on the model (the workers check their own)
    with contextlib.nullcontext() if distributed else hooklab.no_hooks_left_behind(case.eager):
        if want.startswith("refuses: "):
            with pytest.raises(Exception) as info:
                run(case)
            assert re.search(want.removeprefix("refuses: "), str(info.value)), str(info.value)
        else:
            note = run(case)
            assert isinstance(note, str) and note


def test_readme_table_is_the_one_this_data_prints():
    """A golden text: the maintainers' manual (docs/maintainers/package.md) holds exactly the table that tests/library/zoo_table.py makes from this data."""
    import difflib
    from pathlib import Path

    from zoo_table import table
    readme = (Path(__file__).resolve().parents[2] / "docs" / "maintainers" / "package.md").read_text(encoding="utf-8")
    expected = table()
    if expected not in readme:
        start = readme.find("| model | ")
        shown = readme[start:start + len(expected)] if start >= 0 else ""
        diff = "\n".join(difflib.unified_diff(shown.splitlines(), expected.splitlines(), "docs/maintainers/package.md", "zoo_table.py",
                                               lineterm="", n=1))
        pytest.fail("the manual's 'what works where' table (docs/maintainers/package.md) is out of date: paste the output of "
                    f".venv/bin/python tests/library/zoo_table.py\n{diff}")
