"""Every notebook ends with 2-4 checked exercises whose committed outputs are the blank starting point; every
reference solution passes; every reason a checker can give has a literal id, and a test that asserts it."""
import ast
import json
import re
from pathlib import Path

import pytest

from exercise_support import reference_answer, verdict
from hooklab.course import exercises

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
    assert verdict(key, reference_answer(key)) == "correct"


EXERCISES = Path(exercises.__file__).parent
CHECKERS = sorted(EXERCISES.glob("nb[0-9][0-9].py"))
TESTS = Path(__file__).parent
# the rules, with the position of their reason id; the verdicts take it as `reason=`
RULES, VERDICTS = {"fail": 0, "expect": 1, "guarded": 0}, {"Wrong", "NotSolved", "Leak"}


def reason_ids(path):
    """Every reason id a checker module can give, and the calls that give one that is not a literal string."""
    ids, unnamed = set(), []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", None))
        if name in RULES:
            reason = node.args[RULES[name]] if len(node.args) > RULES[name] else None
        elif name in VERDICTS:
            reason = next((k.value for k in node.keywords if k.arg == "reason"), None)
            if reason is None and name == "NotSolved":
                ids.add("blank")
                continue
        else:
            continue
        if isinstance(reason, ast.Name) and reason.id == "reason":  # a rule passing its own argument on
            continue
        if isinstance(reason, ast.Constant) and isinstance(reason.value, str) and reason.value:
            ids.add(reason.value)
        else:
            unnamed.append(f"{path.name}:{node.lineno} {name}(...)")
    return ids, unnamed


def asserting_tests(path):
    """The tests of a checker module: tests/course/test_exercises_nbNN*.py; notebook 00's and the shared rules'
    are in test_exercises.py; _comm.py's (DDP communication hooks) in those of notebooks 10 and 14; the leak
    harness's in test_exercises_harness.py."""
    if path.stem == "_harness":  # the leak harness, tested on every exercise at once
        return (TESTS / "test_exercises_harness.py").read_text(encoding="utf-8")
    numbers = {"_comm": ["10", "14"], "_support": ["00"]}.get(path.stem, [path.stem[2:]])
    files = [f for n in numbers for f in (sorted(TESTS.glob(f"test_exercises_nb{n}*.py")) if n != "00"
                                          else [TESTS / "test_exercises.py"])]
    return "\n".join(f.read_text(encoding="utf-8") for f in files)


@pytest.mark.parametrize("path", [*CHECKERS, EXERCISES / "_support.py", EXERCISES / "_comm.py",
                                  EXERCISES / "_harness.py"], ids=lambda p: p.stem)
def test_every_reason_has_an_id_that_a_test_asserts(path):
    ids, unnamed = reason_ids(path)
    assert unnamed == [], f"verdicts without a literal reason id: {unnamed}"
    tests = asserting_tests(path)
    untested = sorted(i for i in ids if f'"{i}"' not in tests)
    assert untested == [], f"{path.name}: no test asserts the reason ids {untested}"
