"""In which order the repository's history shows each later round's draw, its grades and its recipes.

    python -m tools.recipes.held_out_order        # the table recipes/METHOD.md states, read from git

recipes/METHOD.md narrates each round from three on as: the held-out part drawn, the course graded on it before any
answer of the round, the rest of the round answered and the part graded again, then the held-out questions answered.
This module reads that order from git instead of from the narration: the commit that first adds each record
(``recipes/held_out_N.json``, ``..._grade.json``, ``..._grade_rest.json``), the commit in which each recipe id first
appears in a ``recipes/*.ipynb`` (a header cell's ``metadata.hooklab.recipe.id``), and ``git merge-base
--is-ancestor`` between them. tests/tools/test_recipe_bank.py holds the records to what it finds; it needs the
repository's history and is skipped on a shallow or history-less copy.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = (3, 4, 5)


class NoHistory(Exception):
    """The checkout has no history to read the order from (not a git work tree, or a shallow one)."""


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise NoHistory(f"git {' '.join(args[:2])}: {done.stderr.strip()[:200]}")
    return done.stdout


def history_available() -> bool:
    """Whether the checkout holds the full history this module reads."""
    try:
        return _git("rev-parse", "--is-shallow-repository").strip() == "false"
    except (NoHistory, OSError, subprocess.TimeoutExpired):
        return False


def is_ancestor(first: str, then: str) -> bool:
    """Whether commit ``first`` is ``then`` or an ancestor of it (``git merge-base --is-ancestor``)."""
    return subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", first, then],
                          capture_output=True, timeout=120).returncode == 0


def strictly_before(first: str, then: str) -> bool:
    """Whether ``first`` is an ancestor of ``then`` and not the same commit."""
    return is_ancestor(first, then) and not is_ancestor(then, first)


def added_in(path: str) -> str:
    """The commit that first added ``path`` (the oldest ``--diff-filter=A`` commit touching it)."""
    added = _git("log", "--diff-filter=A", "--format=%H", "--", path).split()
    if not added:
        raise NoHistory(f"no commit adds {path}")
    return added[-1]


@cache
def first_appearance() -> dict[str, str]:
    """Each recipe id -> the first commit (in topological order) whose ``recipes/*.ipynb`` hold it."""
    commits = _git("rev-list", "--reverse", "--topo-order", "HEAD", "--", "recipes").split()
    ids_of_blob: dict[str, list[str]] = {}
    first: dict[str, str] = {}
    for commit in commits:
        for line in _git("ls-tree", commit, "recipes/").splitlines():
            meta, path = line.split("\t")
            _, kind, sha = meta.split()
            if kind != "blob" or not path.endswith(".ipynb"):
                continue
            if sha not in ids_of_blob:
                try:
                    cells = json.loads(_git("cat-file", "-p", sha)).get("cells", [])
                except json.JSONDecodeError:
                    cells = []
                ids_of_blob[sha] = [rid for cell in cells
                                    if (rid := cell.get("metadata", {}).get("hooklab", {}).get("recipe", {}).get("id"))]
            for rid in ids_of_blob[sha]:
                first.setdefault(rid, commit)
    return first


@dataclass(frozen=True)
class RoundOrder:
    """What git shows for one round's held-out part."""

    number: int
    draw: str  # the commit adding recipes/held_out_N.json
    grade: str  # ... adding recipes/held_out_N_grade.json (before any answer of the round)
    grade_rest: str  # ... adding recipes/held_out_N_grade_rest.json (once the rest of the round was answered)
    pool_recipes_not_after_draw: tuple[str, ...]  # recipes of the round already there when it was drawn
    held_out_recipes_not_after_grade: tuple[str, ...]  # held-out recipes already there at the first grade
    held_out_recipes_before_grade_rest: tuple[str, ...]  # held-out recipes already committed at the second grade
    held_out_with_recipe: int

    def as_row(self) -> str:
        return (f"| {self.number} | {self.draw[:7]} | {self.grade[:7]} | {self.grade_rest[:7]} | "
                f"{len(self.pool_recipes_not_after_draw)} | {len(self.held_out_recipes_not_after_grade)} | "
                f"{len(self.held_out_recipes_before_grade_rest)} of {self.held_out_with_recipe} |")


def round_order(number: int) -> RoundOrder:
    """The order git shows for round ``number`` (3, 4 or 5)."""
    record = json.loads((ROOT / "recipes" / f"held_out_{number}.json").read_text(encoding="utf-8"))
    draw = added_in(f"recipes/held_out_{number}.json")
    grade = added_in(f"recipes/held_out_{number}_grade.json")
    rest = added_in(f"recipes/held_out_{number}_grade_rest.json")
    first = first_appearance()
    pool = {rid: first[rid] for rid in record["pool"] if rid in first}
    held = {rid: first[rid] for rid in record["ids"] if rid in first}
    return RoundOrder(
        number, draw, grade, rest,
        pool_recipes_not_after_draw=tuple(sorted(r for r, c in pool.items() if not strictly_before(draw, c))),
        held_out_recipes_not_after_grade=tuple(sorted(r for r, c in held.items() if not strictly_before(grade, c))),
        held_out_recipes_before_grade_rest=tuple(sorted(r for r, c in held.items() if is_ancestor(c, rest))),
        held_out_with_recipe=len(held),
    )


def main(argv: list[str] | None = None) -> int:
    if not history_available():
        print("error: this checkout has no full git history (shallow or not a work tree): nothing to read the order "
              "from", file=sys.stderr)
        return 1
    print("| round | draw | first grade | grade once the rest was answered | round recipes not after the draw | "
          "held-out recipes not after the first grade | held-out recipes already committed at the second grade |")
    print("|---|---|---|---|---|---|---|")
    for number in ROUNDS:
        print(round_order(number).as_row())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
