"""Every notebook ends with 2-4 checked exercises whose committed outputs are the blank starting point."""
import json
import re
from pathlib import Path

import pytest

from hooklab.course import exercises

from exercise_support import run_solution, verdict

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHECK_CALL = re.compile(r'\bcourse\.check\("(\d\d\.\d+)"')


def code_cells(path):
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def registered_keys():
    exercises._load_all()
    return sorted(exercises._REGISTRY)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_notebook_checks_its_own_exercises_from_a_blank_start(path):
    number = path.name[:2]
    checked = []
    for cell in code_cells(path):
        source = "".join(cell["source"])
        assert "course.solution(" not in source, "a committed notebook must not print solutions"
        keys = CHECK_CALL.findall(source)
        if keys:
            out = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
            for key in keys:
                assert f"[{key}] not solved yet:" in out and f"[{key}] 尚未完成：" in out, \
                    f"{path.name}: the committed output of exercise {key} is not the blank start"
            checked += keys
    own = [k for k in registered_keys() if k.startswith(number + ".")]
    assert 2 <= len(own) <= 4, f"notebook {number} should have 2-4 exercises, has {own}"
    assert sorted(checked) == own, f"{path.name} checks {checked}, registry has {own}"


@pytest.mark.parametrize("key", registered_keys())
def test_every_reference_solution_passes_its_checker(key):
    if "torchvision" in exercises._get(key).solution:
        pytest.importorskip("torchvision", reason=f"exercise {key} uses torchvision, which is not installed")
    namespace = run_solution(key)
    answers = [v for name, v in namespace.items() if not name.startswith("__") and name not in ("hooklab", "course", "torch", "nn")]
    assert answers, f"the solution of {key} defines nothing"
    assert verdict(key, answers[-1]) == "correct"
