"""Which recipe notebooks a run of the tests validates (the root conftest.py deselects the others).

Every push validates ``RECIPE_SAMPLE`` recipe notebooks that rotate with the week (counted from a Monday, so the turn runs on across a year's end): the same sample all week, so a
red run does not depend on the day, and every notebook within a few weeks. ``HOOKLAB_RECIPES=all`` validates every
one (the weekly CI does; ``./course rerun`` re-runs them all), and so does naming a recipe notebook on the command line.

Each recipe also runs alone (tests/course/test_recipes_alone.py: the notebook's setup cell and that recipe's cells, in a
fresh kernel): every push runs ``ALONE_SAMPLE`` recipes drawn with the commit as the seed (the day's date where there
is no commit), ``HOOKLAB_RECIPES=all`` runs every one.
"""
from __future__ import annotations

import os
import random
import subprocess
from datetime import date
from pathlib import Path

RECIPE_GLOB = "[0-9][0-9]_*.ipynb"
RECIPE_SAMPLE = 1  # recipe notebooks validated per run: under a minute in both CPU-kernel configurations (2 workers)
ALONE_SAMPLE = 2  # recipes run alone per push: a fresh kernel each, its setup's imports included, within a minute
SUFFIXES = ("[scalar-cpu]", "[shifted-memory]")  # the other configurations' copies of a notebook (conftest.py)


def recipe_sample(config, today: date | None = None) -> set[str] | None:
    """The recipe notebooks (``recipes/NN_area.ipynb``) this run validates, or None for all of them:
    ``HOOKLAB_RECIPES=all`` validates them all, and so does naming recipe notebooks on the command line (then only
    those are collected)."""
    if os.environ.get("HOOKLAB_RECIPES") == "all":
        return None
    named = {Path(os.path.relpath(Path(a.split("::")[0]).resolve(), config.rootpath)).as_posix() for a in config.args}
    if any(n.startswith("recipes/") and n.endswith(".ipynb") for n in named):
        return None
    names = sorted(p.relative_to(config.rootpath).as_posix() for p in (config.rootpath / "recipes").glob(RECIPE_GLOB))
    if not names:
        return set()
    week = ((today or date.today()).toordinal() - 1) // 7  # weeks counted from a Monday: consecutive across years
    start = week * RECIPE_SAMPLE % len(names)
    return {names[(start + k) % len(names)] for k in range(min(RECIPE_SAMPLE, len(names)))}


def notebook_path(nodeid: str) -> str:
    """The notebook a test id belongs to, without the suffix of another configuration's copy."""
    path = nodeid.split("::")[0]
    for suffix in SUFFIXES:
        path = path.removesuffix(suffix)
    return path


def is_recipe(nodeid: str) -> bool:
    path = notebook_path(nodeid)
    return path.startswith("recipes/") and path.endswith(".ipynb")




def seed(root: Path, today: date | None = None) -> str:
    """The commit checked out (CI's ``GITHUB_SHA`` or ``git rev-parse HEAD``), else the day: the same seed draws the
    same recipes, so a red run can be repeated."""
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        head = None
    if head is not None and head.returncode == 0 and head.stdout.strip():
        return head.stdout.strip()
    return (today or date.today()).isoformat()


def alone_sample(ids: list[str], seed_text: str) -> list[str]:
    """The recipe ids run alone in this run: every one with ``HOOKLAB_RECIPES=all``, else ``ALONE_SAMPLE`` of them
    drawn with ``seed_text`` (in the order given).

    >>> alone_sample(["a-01", "b-01", "c-01", "d-01"], "abc") == alone_sample(["a-01", "b-01", "c-01", "d-01"], "abc")
    True
    """
    if os.environ.get("HOOKLAB_RECIPES") == "all":
        return list(ids)
    drawn = set(random.Random(seed_text).sample(sorted(ids), min(ALONE_SAMPLE, len(ids))))
    return [i for i in ids if i in drawn]
