"""Each course section that recipes rely on names their libraries and links them (tools/recipes/used_by.py): the
notes in notebooks/ are what the recipes say today, and the note is built as documented."""
from __future__ import annotations

import pytest

from tools.recipes import used_by

pytestmark = pytest.mark.timeout(120)


def test_every_section_that_recipes_rely_on_says_so_and_no_other():
    assert used_by.out_of_date() == [], "run: python -m tools.recipes.used_by --write"


def test_a_note_names_each_library_once_pytorch_last_and_counts_what_it_leaves_out():
    uses = [{"id": f"x-0{k}", "path": "07_hf.ipynb", "libraries": libs}
            for k, libs in enumerate([["peft", "torch"], ["torch"], ["peft"], ["peft"], ["peft"], ["accelerate"]])]
    en = used_by.note(uses, "en")
    assert en.startswith(used_by.BEGIN) and en.endswith(used_by.END)
    body = en.split("\n")[1]
    assert body.index("accelerate") < body.index("peft") < body.index("PyTorch itself")
    assert body.count("](../recipes/07_hf.ipynb#recipe-x-0") == 1 + used_by.PER_LIBRARY + 1
    assert "1 more" in body
    assert "PyTorch 本身" in used_by.note(uses, "zh")


def test_writing_twice_changes_nothing_and_a_removed_recipe_removes_its_note(tmp_path):
    import json
    import shutil

    from hooklab.course.notebook import read_notebook

    root = tmp_path
    (root / "notebooks").mkdir()
    (root / "recipes").mkdir()
    course = used_by.ROOT / "notebooks" / "03_module_forward_hooks.ipynb"
    shutil.copy(course, root / "notebooks" / course.name)
    cells = read_notebook(course)["cells"]
    target = next(c["id"] for k, c in enumerate(cells)
                  if c["cell_type"] == "code" and used_by.section_heading(cells, k) is not None)
    recipe = {"cell_type": "markdown", "id": "r1", "source": "## Rx-01 · t",
              "metadata": {"tags": ["lang-zh"], "hooklab": {"recipe": {"id": "x-01", "libraries": ["timm"],
                                                                       "course": [f"{course.name}#{target}"]}}}}
    (root / "recipes" / "01_x.ipynb").write_text(json.dumps({"cells": [recipe], "metadata": {}, "nbformat": 4,
                                                             "nbformat_minor": 5}), encoding="utf-8")
    used_by.out_of_date(root, write=True)
    assert used_by.out_of_date(root) == []
    text = (root / "notebooks" / course.name).read_text(encoding="utf-8")
    assert "recipe-x-01" in text
    (root / "recipes" / "01_x.ipynb").unlink()
    assert used_by.out_of_date(root, write=True) == [course.name]
    assert "recipe-x-01" not in (root / "notebooks" / course.name).read_text(encoding="utf-8")
