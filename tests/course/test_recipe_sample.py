"""Which recipe notebooks a run validates (tests/recipe_sample.py): a sample of RECIPE_SAMPLE that rotates with the week
and reaches every recipe notebook, all of them with HOOKLAB_RECIPES=all, and one named on the command line."""
from __future__ import annotations

import math
from datetime import date, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

import recipe_sample as sample

ROOT = Path(__file__).resolve().parents[2]
NAMES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "recipes").glob(sample.RECIPE_GLOB))


def config(*args):
    return SimpleNamespace(args=list(args), rootpath=ROOT)


def test_a_run_validates_a_sample_and_the_weeks_reach_every_recipe_notebook(monkeypatch):
    monkeypatch.delenv("HOOKLAB_RECIPES", raising=False)
    weeks = math.ceil(len(NAMES) / sample.RECIPE_SAMPLE)
    monday = date(2026, 11, 23)
    samples = [sample.recipe_sample(config(), monday + timedelta(weeks=k)) for k in range(weeks)]
    assert all(len(s) == min(sample.RECIPE_SAMPLE, len(NAMES)) for s in samples)
    assert set().union(*samples) == set(NAMES), "some recipe notebook is never validated"
    # the same sample all week long: a red run does not depend on the day
    assert sample.recipe_sample(config(), monday) == sample.recipe_sample(config(), monday + timedelta(days=6))


def test_all_or_a_named_notebook_runs_every_recipe_asked_for(monkeypatch):
    monkeypatch.setenv("HOOKLAB_RECIPES", "all")
    assert sample.recipe_sample(config()) is None
    monkeypatch.delenv("HOOKLAB_RECIPES")
    assert sample.recipe_sample(config(str(ROOT / NAMES[0]))) is None
    assert sample.recipe_sample(config("tests")) is not None


@pytest.mark.parametrize("path", ["recipes/01_x.ipynb", "recipes/01_x.ipynb[scalar-cpu]"])
def test_a_notebooks_copy_counts_as_that_recipe(path):
    nodeid = f"{path}::Cell 0"
    assert sample.is_recipe(nodeid) and sample.notebook_path(nodeid) == "recipes/01_x.ipynb"
    assert not sample.is_recipe("notebooks/01_tensor_hooks.ipynb::Cell 0")


def test_the_recipes_run_alone_are_drawn_with_the_commit_and_all_of_them_with_the_env(monkeypatch):
    ids = [f"area-{k:02d}" for k in range(60)]
    monkeypatch.delenv("HOOKLAB_RECIPES", raising=False)
    drawn = sample.alone_sample(ids, "3f2a")
    assert len(drawn) == sample.ALONE_SAMPLE and drawn == sample.alone_sample(ids, "3f2a")  # the same commit, the same draw
    assert set().union(*(sample.alone_sample(ids, str(k)) for k in range(600))) == set(ids), "a recipe no commit draws"
    monkeypatch.setenv("GITHUB_SHA", "3f2a")
    assert sample.seed(ROOT) == "3f2a"
    monkeypatch.setenv("HOOKLAB_RECIPES", "all")
    assert sample.alone_sample(ids, "3f2a") == ids
