"""Every exact comparison of floats in the notebooks and the exercise checkers says why it is exact.

``tests/course/bitwise_claims.py`` parses the code and finds them (``torch.equal``, ``a.equal(b)``, an element-wise
``==`` reduced with ``.all()``, zero tolerances, a float ``.item() ==``); each needs a ``# bitwise: <kind>, <reason>``
marker, or becomes ``allclose`` with a tolerance. The finder's own tests below use made-up sources: each form is found,
comments and strings are not, integer sides are told apart, markers are read and checked, and a real notebook cell
with one unmarked ``torch.equal`` added fails.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bitwise_claims import KINDS, code_cells, find_comparisons, problems_of, sources

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
NOTEBOOKS += sorted((ROOT / "recipes").glob("[0-9][0-9]_*.ipynb"))  # the recipes hold to the same rule
CHECKERS = sorted((ROOT / "hooklab" / "course" / "exercises").rglob("*.py"))


@pytest.mark.parametrize("path", NOTEBOOKS + CHECKERS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_exact_comparison_says_why(path):
    problems = [f"{where} {problem}" for where, source in sources(path) for problem in problems_of(source)]
    assert not problems, ("exact comparisons of floats that do not say why they are exact (add '# bitwise: <kind>, "
                          f"<reason>', kinds: {', '.join(KINDS)}; or compare with allclose at a stated "
                          "tolerance):\n" + "\n".join(problems))


def forms(source: str) -> list[str]:
    return [c.form for c in find_comparisons(source)[0]]


def unmarked(source: str) -> list[str]:
    return [c.form for c in find_comparisons(source)[0] if c.kind is None]


# ------------------------------------------------------------------------------------------- what counts
@pytest.mark.parametrize("source,form", [
    ("print(torch.equal(a, b))", "torch.equal"),
    ("same = a.grad.equal(b.grad)", "Tensor.equal"),
    ("ok = (a == b).all()", "elementwise =="),
    ("ok = bool((a != b).any())", "elementwise =="),
    ("n = int((out == 0).sum())", "elementwise =="),
    ("share = (a == b).float().mean()", "elementwise =="),
    ("ok = torch.all(a == b)", "elementwise =="),
    ("ok = torch.eq(a, b).all()", "elementwise eq"),
    ("ok = a.eq(b).all()", "elementwise eq"),
    ("torch.testing.assert_close(a, b, rtol=0, atol=0)", "assert_close(rtol=0, atol=0)"),
    ("ok = torch.allclose(a, b, rtol=0.0, atol=0)", "allclose(rtol=0, atol=0)"),
    ("np.testing.assert_array_equal(a, b)", "numpy assert_array_equal"),
    ("print(out.item() == 55.0)", "scalar float =="),
    ("assert g.tolist() == [1.0, 2.0]", "scalar float =="),
    ("assert float(loss) != -0.5", "scalar float =="),
    ("print(not torch.equal(*draws))", "torch.equal"),
])
def test_each_form_is_found(source, form):
    assert forms(source) == [form]


@pytest.mark.parametrize("source", [
    "# print(torch.equal(a, b))",                       # a comment
    "text = 'torch.equal(a, b)'",                        # a string
    'print("a.equal(b) and (a == b).all()")',            # the name printed, not called
    "ok = torch.allclose(a, b)",                         # a tolerance
    "ok = torch.allclose(a, b, atol=0)",                 # rtol is still 1e-5
    "torch.testing.assert_close(a, b)",
    "assert name == 'fc1' and n == 3",                   # no float in sight
    "same = a == b",                                     # two names: out of a parser's reach
    "ok = (logits.argmax(-1) == labels).float().mean()", # an integer side
    "ok = torch.equal(scores.argsort()[:3], top)",
    "ok = (mask.bool() == other).all()",
    "ok = len(a) == 3.0",
])
def test_comments_strings_tolerances_and_integers_are_not(source):
    assert forms(source) == []


# ------------------------------------------------------------------------------------------- markers
def test_a_marker_on_the_line_or_above_the_statement_covers_it():
    source = ("# bitwise: same computation, the hook returned None: the same kernels ran\n"
              "print('unchanged:',\n"
              "      torch.equal(out, plain))\n"
              "ok = (ids == expected).all()  # bitwise: integer\n")
    comparisons, problems = find_comparisons(source)
    assert [(c.form, c.kind) for c in comparisons] == [("torch.equal", "same computation"),
                                                       ("elementwise ==", "integer")]
    assert comparisons[0].reason == "the hook returned None: the same kernels ran" and not problems


def test_a_marker_covers_only_the_statement_below_it():
    source = ("# bitwise: copy, the saved tensor is x itself\n"
              "a = torch.equal(saved, x)\n"
              "b = torch.equal(recomputed, x)\n")
    assert unmarked(source) == ["torch.equal"]


@pytest.mark.parametrize("marker,message", [
    ("# bitwise: because", "names no kind"),
    ("# bitwise: same computation", "needs its reason"),
    ("# bitwise: copy, same", "needs its reason"),
])
def test_a_marker_must_name_its_kind_and_reason(marker, message):
    problems = problems_of(f"print(torch.equal(a, b))  {marker}")
    assert any(message in p for p in problems), problems


def test_integer_and_bool_need_no_reason():
    assert problems_of("ok = (ids == expected).all()  # bitwise: integer") == []
    assert problems_of("ok = (mask == other).all()  # bitwise: bool") == []


def test_a_marker_beside_no_equality_is_reported():
    problems = problems_of("# bitwise: copy, a tensor that is no longer compared\nprint(a.shape)\n")
    assert len(problems) == 1 and "beside no equality" in problems[0]


def test_a_marker_may_stand_beside_an_equality_the_finder_cannot_type():
    assert problems_of("same = a == b  # bitwise: exact arithmetic, whole numbers in floats") == []


# ------------------------------------------------------------------------------------------- mutations
def notebook_with(tmp_path: Path, cell_source: str, based_on: Path) -> Path:
    nb = json.loads(based_on.read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "added", "metadata": {}, "outputs": [],
                        "source": cell_source})
    path = tmp_path / based_on.name
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


@pytest.mark.parametrize("added", [
    "print(torch.equal(a, b))",
    "print(a.equal(b))",
    "assert (a == b).all()",
    "torch.testing.assert_close(a, b, rtol=0, atol=0)",
    "print(a.item() == 0.5)",
])
def test_a_new_unmarked_comparison_in_a_real_notebook_fails(tmp_path, added):
    original = ROOT / "notebooks" / "06_saved_tensor_hooks.ipynb"
    assert all(not problems_of(s) for _, s in code_cells(original))
    mutated = notebook_with(tmp_path, added, original)
    problems = [p for _, s in sources(mutated) for p in problems_of(s)]
    assert len(problems) == 1 and problems[0].startswith("line 1: ") and "without a '# bitwise" in problems[0]
    marked = notebook_with(tmp_path, added + "  # bitwise: same computation, a reason that says why", original)
    assert not [p for _, s in sources(marked) for p in problems_of(s)]


def test_removing_a_marker_from_a_real_cell_fails():
    cell = dict(code_cells(ROOT / "notebooks" / "04_module_backward_hooks.ipynb"))[30]
    assert problems_of(cell) == []
    stripped = "\n".join(line.split("  # bitwise:")[0] for line in cell.splitlines())
    assert len(problems_of(stripped)) == 3  # entry 0, 1 and 2 each compare with torch.equal


def test_a_cell_with_magics_is_parsed_as_the_calls_they_stand_for(tmp_path):
    path = tmp_path / "magics.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "%time same = torch.equal(a, b)\n!ls\n"
                                                                           "print((a == b).all())"}]}), encoding="utf-8")
    (_, source), = code_cells(path)
    assert "get_ipython()" in source and forms(source) == ["elementwise =="]  # %time's argument is a string
