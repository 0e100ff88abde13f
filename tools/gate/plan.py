"""Which checks a run of ``./course test`` runs, in which tier, and the text that says so.

The rules (the numbers are the constants below):

- ``fast``: a test file that costs at most ``FAST_S`` worker-seconds, and every module's docstring examples;
- ``notebooks``: every course notebook under the machine's CPU kernels;
- ``touched``: any other check whose inputs' hash is not the one it last passed at (``tests/gate/passed.json``);
- ``rotation``: the other checks in ``PARTS`` parts (:func:`rotation_parts`: the measured ones balanced by cost, a
  check not measured yet by its id's hash); a commit runs part ``n % PARTS``, ``n`` the number of commits in its
  first-parent history, so any ``PARTS`` consecutive commits run every part;
- ``sample``: ``SAMPLE`` members of each population drawn with the commit; touched members run too.

A push stays within ``BUDGET_S`` worker-seconds: touched checks beyond what is left once the other tiers are planned
are split, by cost, into as many slices as they need, and a commit runs slice ``n % slices`` of them (so all of them
within that many consecutive commits, or now with ``./course test --touched``), and the plan says so.

>>> balanced({"a": 5.0, "b": 4.0, "c": 3.0, "d": 2.0}, 2)
{'a': 0, 'b': 1, 'c': 1, 'd': 0}
"""
from __future__ import annotations

import datetime
import math
import os
import random
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.gate import record
from tools.gate.checks import ROOT, Check, checks

PARTS = 4
FAST_S = 20.0  # a test file that costs at most this (idle, worker-seconds) runs on every push
UNKNOWN_S = 30.0  # the cost assumed for a check not measured yet
SAMPLE = 2  # members of a population run on a push besides the touched ones
BUDGET_S = 2300.0  # worker-seconds of a push: about 20 minutes on 2 idle workers
TOUCHED_FLOOR_S = 600.0  # what touched checks get at least, even when the other tiers fill the budget
ALWAYS = ("fast", "notebooks")
# the sweeps that --all runs whole and splits test by test across shards (each a few hours at most in one shard)
SPLIT_BY_TEST = ("tests/library/test_atlas.py", "tests/tools/test_hook_matrix.py", "tests/library/test_explain_matrix.py",
                 "tests/tools/test_programs.py", "tests/tools/test_doctor_population.py",
                 "tests/tools/test_library_profiles.py")
TIERS = ("fast", "notebooks", "touched", "rotation", "sample")


def balanced(costs: dict[str, float], parts: int) -> dict[str, int]:
    """Each key to one of ``parts`` bins, the costliest first into the lightest bin (ties: the lower bin)."""
    load = [0.0] * parts
    out = {}
    for key in sorted(costs, key=lambda k: (-costs[k], k)):
        b = min(range(parts), key=lambda i: (load[i], i))
        out[key] = b
        load[b] += costs[key]
    return out


def rotation_parts(rotating: dict[str, float], measured: set[str] | dict[str, Any]) -> dict[str, int]:
    """The rotation's part of each check: those of ``measured`` (tests/gate/costs.json) balanced by cost, a check not
    measured yet by its id's hash. A new test file therefore moves no other check between parts (balancing it with
    the others would, and a check moved back by a part could wait up to 7 commits); parts change only when the costs
    are measured again.

    >>> measured = {"a": 5.0, "b": 4.0, "c": 3.0}
    >>> with_new = rotation_parts({**measured, "new": 30.0}, measured)
    >>> with_new == {**rotation_parts(measured, measured), "new": zlib.crc32(b"new") % PARTS}
    True
    """
    out = balanced({c: cost for c, cost in rotating.items() if c in measured}, PARTS)
    out.update({c: zlib.crc32(c.encode()) % PARTS for c in rotating if c not in measured})
    return out


def history(root: Path = ROOT) -> tuple[int | None, str]:
    """(the number of commits in HEAD's first-parent history, HEAD's id); (None, "") without git history."""
    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "HEAD")
    if not head or git("rev-parse", "--is-shallow-repository") == "true":
        return None, head
    count = git("rev-list", "--count", "--first-parent", "HEAD")
    return (int(count) if count.isdigit() else None), head


def seed_of(commit: str) -> str:
    """What a population's sample is drawn with: the commit (CI's ``GITHUB_SHA`` first), else the day."""
    return os.environ.get("GITHUB_SHA") or commit or datetime.date.today().isoformat()


@dataclass
class Plan:
    mode: str  # "push", "touched", "all", "named", "every"
    root: Path = ROOT
    part: int | None = None
    count: int | None = None
    commit: str = ""
    tiers: dict[str, str] = field(default_factory=dict)  # check -> tier, or "skip"
    hashes: dict[str, str] = field(default_factory=dict)  # check -> the hash it passes at now
    costs: dict[str, float] = field(default_factory=dict)
    slices: int = 1  # touched checks over the budget: in how many slices they run
    deferred: list[str] = field(default_factory=list)  # touched checks left to another commit's slice
    shard: tuple[int, int] | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "part": self.part, "count": self.count, "commit": self.commit, "root": str(self.root),
                "tiers": self.tiers, "hashes": self.hashes, "shard": list(self.shard) if self.shard else None}

    def cost(self, tier: str) -> float:
        return sum(self.costs.get(c, UNKNOWN_S) for c, t in self.tiers.items() if t == tier)

    def count_of(self, tier: str) -> int:
        return sum(1 for t in self.tiers.values() if t == tier)

    def header(self) -> str:
        """What the run will do, printed before it starts."""
        if self.mode == "all":
            shard = f", shard {self.shard[0]} of {self.shard[1]}" if self.shard else ""
            return f"./course test --all{shard}: every check, every population whole, every sweep"
        if self.mode == "named":
            return "./course test PATH ...: what is named, whole (a population: its sample and its touched members)"
        if self.mode == "every":
            return ("./course test --every: every check once in its push form (a population: its sample and its "
                    "touched members), to measure what each costs")
        lines = []
        if self.mode == "push":
            where = (f"commit {self.count} of this history" if self.count is not None
                     else "no git history here (a shallow clone?): the part is drawn from the commit's id")
            lines.append(f"this push runs part {self.part + 1} of {PARTS} of the rotation ({where}); "
                         f"HOOKLAB_GATE_PART={self.part} runs the same part again")
        else:
            lines.append("./course test --touched: every touched check now, no rotation")
        for tier in TIERS:
            n = self.count_of(tier)
            if n:
                lines.append(f"  {tier:<9} {n:5d} checks, about {self.cost(tier):6.0f} worker-seconds")
        if self.deferred:
            lines.append(f"  the touched checks are more than a push's budget: they run in {self.slices} slices, "
                         f"one a commit; {len(self.deferred)} wait for the next commits "
                         "(./course test --touched runs them all now)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _member_inputs_hash(hasher: record.Hasher, member: str, content: bytes, notebook: str,
                        cache: dict[str, list[str]]) -> str:
    """A member's hash: its own content, its test file's inputs and its notebook's reads (not the notebook file)."""
    test_file = member.split("::")[0]
    if notebook not in cache:
        reads = set(record.inputs(test_file, hasher.reads, hasher.root))
        reads |= {p for p in record.inputs(notebook, hasher.reads, hasher.root) if p != notebook}
        cache[notebook] = sorted(reads)
    return hasher.check(member, extra=content, paths=cache[notebook])


def make(mode: str, *, root: Path = ROOT, part: int | None = None, shard: tuple[int, int] | None = None,
         found: list[Check] | None = None, members: dict[str, dict[str, tuple[bytes, str]]] | None = None,
         passed: dict[str, str] | None = None, costs: dict[str, float] | None = None,
         reads: dict[str, list[str]] | None = None, count: int | None = None, commit: str | None = None) -> Plan:
    """The plan of a run in ``mode`` on the tree at ``root`` (the keyword arguments stand in for what is read from
    it, for tests)."""
    from tools.gate import populations

    found = checks(root) if found is None else found
    members = populations.members(root) if members is None else members
    passed = record.passed(root) if passed is None else passed
    costs = record.costs(root) if costs is None else costs
    hasher = record.Hasher(root, reads)
    if commit is None:
        count, commit = history(root)
    plan = Plan(mode=mode, root=root, count=count, commit=commit or "", shard=shard)
    plan.costs = {c.id: costs.get(c.id, UNKNOWN_S) for c in found}
    for c in found:
        plan.hashes[c.id] = hasher.check(c.id)
    member_check: dict[str, str] = {}
    shared: dict[str, list[str]] = {}
    for population, found_members in members.items():
        for mid, (content, notebook) in found_members.items():
            key = f"{population}::{mid}"
            member_check[key] = population
            plan.hashes[key] = _member_inputs_hash(hasher, key, content, notebook, shared)
            notebook_cost = costs.get(notebook, UNKNOWN_S)
            per_recipe = notebook_cost / max(1, sum(1 for _m, (_c, n) in found_members.items() if n == notebook))
            plan.costs[key] = costs.get(key, per_recipe + 8.0)  # a fresh kernel and the setup cell: about 8 s

    if mode == "all":
        for key in plan.hashes:
            plan.tiers[key] = "all"
        if shard:
            _shard(plan, shard, set(member_check))
        return plan

    seed = seed_of(commit or "")
    if mode in ("named", "every"):
        for key in plan.hashes:
            plan.tiers[key] = mode
        _members(plan, members, passed, seed)
        return plan

    if part is None:
        if count is not None:
            part = count % PARTS
        else:
            part = zlib.crc32(seed.encode()) % PARTS
            plan.notes.append("no git history: the rotation's part comes from the commit's id, not its number")
    plan.part = part
    rotating: dict[str, float] = {}
    touched: dict[str, float] = {}
    for c in found:
        if c.kind == "doctest" or (c.kind == "test" and plan.costs[c.id] <= FAST_S and c.id in costs):
            plan.tiers[c.id] = "fast"
        elif c.kind == "notebook" and not c.scalar:
            plan.tiers[c.id] = "notebooks"
        else:
            rotating[c.id] = plan.costs[c.id]
    # every check of the rotation has its part whether or not it is touched now, so that what a change touches does
    # not move the others between parts
    for c, b in rotation_parts(rotating, costs).items():
        if passed.get(c) != plan.hashes[c]:
            touched[c] = plan.costs[c]
        else:
            plan.tiers[c] = "rotation" if b == part else "skip"
    touched.update(_members(plan, members, passed, seed))
    if mode == "touched":
        for c in touched:
            plan.tiers[c] = "touched"
        return plan
    room = max(BUDGET_S - sum(plan.cost(t) for t in ("fast", "notebooks", "rotation", "sample")), TOUCHED_FLOOR_S)
    total = sum(touched.values())
    plan.slices = max(1, math.ceil(total / room)) if total > room else 1
    chosen = count if count is not None else zlib.crc32(seed.encode())
    for c, b in balanced(touched, plan.slices).items():
        here = b == chosen % plan.slices
        plan.tiers[c] = "touched" if here else "skip"
        if not here:
            plan.deferred.append(c)
    return plan


def _members(plan: Plan, members: dict[str, dict[str, tuple[bytes, str]]], passed: dict[str, str],
             seed: str) -> dict[str, float]:
    """Mark each population's drawn sample; return its touched members (whose tier the caller decides)."""
    touched = {}
    for population, found in members.items():
        keys = sorted(f"{population}::{m}" for m in found)
        drawn = set(random.Random(seed).sample(keys, min(SAMPLE, len(keys))))
        for key in keys:
            if passed.get(key) != plan.hashes[key]:
                touched[key] = plan.costs[key]
                plan.tiers[key] = "touched"
            else:
                plan.tiers[key] = "sample" if key in drawn else "skip"
    return touched


def _shard(plan: Plan, shard: tuple[int, int], members: set[str]) -> None:
    """--all in N shards: file-level checks balanced by cost, members by their id's hash; the tests of a sweep
    (which only --all parametrizes whole) are split by the plugin, test by test."""
    index, total = shard
    files = {c: plan.costs[c] for c in plan.tiers if c not in members and c not in SPLIT_BY_TEST}
    for c, b in balanced(files, total).items():
        plan.tiers[c] = "all" if b == index else "skip"
    for c in members:
        plan.tiers[c] = "all" if zlib.crc32(c.encode()) % total == index else "skip"


def sample_without_plan(config: Any, items: list) -> None:
    """A pytest run without the gate's plan (a plain ``pytest``, ``./course rerun``'s unit tests): of each
    population, the members drawn with the commit (``HOOKLAB_RECIPES=all``: every one)."""
    from tools.gate.checks import check_of

    if os.environ.get("HOOKLAB_RECIPES") == "all":
        return
    ours = {}
    for item in items:
        check = check_of(item.nodeid)
        if "::" in check:
            ours[check] = item
    if not ours:
        return
    drawn = set(random.Random(seed_of(history(ROOT)[1])).sample(sorted(ours), min(SAMPLE, len(ours))))
    drop = [item for check, item in ours.items() if check not in drawn]
    config.hook.pytest_deselected(items=drop)
    dropped = set(map(id, drop))
    items[:] = [i for i in items if id(i) not in dropped]
