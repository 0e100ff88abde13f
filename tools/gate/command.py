"""``./course test``: plan the run, say what it runs, then run pytest with the plan.

    ./course test                  the push gate: fast tests, every notebook, what the change touched, a rotation part
    ./course test --touched        every touched check now (no rotation, no budget)
    ./course test --every          every check once in its push form: what python -m tools.gate measure times
    ./course test --all [--shard i/N]   everything: every check, population and sweep (the weekly run, in shards)
    ./course test PATH ...         what is named, whole
    --order SEED                   run in another order: the files, and the tests inside each Python file, shuffled
                                   with SEED (a notebook's cells keep theirs), so the workers get other groupings too
    --trace                        also record what each check runs and reads (tests/gate/reads.json; slower)

Other arguments go to pytest (``-x``, ``-k``, ``--durations=0``, ``-n 1``). The environment's variables
``COURSE_WORKERS`` (2) and ``HOOKLAB_GATE_PART`` (the rotation's part, 0-3) are read too.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tools.gate import plan as planning
from tools.gate.checks import ROOT

PLAN_FILE = ROOT / "build" / "gate" / "plan.json"
# what --all turns on: every test file's sweep ("all" instead of its sample)
SWEEPS = {
    "HOOKLAB_RECIPES": "all",  # every recipe notebook's recipes run alone, and the site finds each recipe
    "HOOKLAB_SEARCH": "all",  # the lookup's and the site search's full measures
    "HOOKLAB_PROGRAMS": "all",  # every program of docs/programs/ and the profiles' programs
    "HOOKLAB_PROFILES": "all",  # every library profile measured again, the other frameworks' examples
    "HOOKLAB_DOCTOR": "all",  # every setup of the doctor's population, every held-out part
    "HOOKLAB_HOOK_MATRIX": "all",  # every cell of the hook behaviour matrix
    "HOOKLAB_ATLAS_ALL": "1",  # the doctor on every model of the atlas
    "HOOKLAB_ZOO_HEAVY": "1",  # the zoo's full-size models
}


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="./course test", add_help=False)
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--touched", action="store_true")
    parser.add_argument("--every", action="store_true")
    parser.add_argument("--shard", default=None)
    parser.add_argument("--order", default=None)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    ours, rest = parser.parse_known_args(argv)
    if ours.shard is not None:
        if not ours.all:
            parser.error("--shard goes with --all (the weekly run's parts)")
        try:
            index, total = (int(x) for x in ours.shard.split("/"))
        except ValueError:
            parser.error(f"--shard takes i/N (e.g. 0/6), not {ours.shard!r}")
        if not 0 <= index < total:
            parser.error(f"--shard {ours.shard}: i counts from 0 to N-1")
        ours.shard = (index, total)
    if sum((ours.all, ours.touched, ours.every)) > 1:
        parser.error("one of --all, --touched, --every at a time")
    if ours.order is not None and not ours.order.isdigit():
        parser.error(f"--order takes a whole number (a seed), not {ours.order!r}")
    return ours, rest


def named_paths(rest: list[str]) -> list[str]:
    """The paths among pytest's arguments (what is named), without its options and their values."""
    takes_value = {"-n", "-k", "-m", "-p", "-c", "-o", "--dist", "--deselect", "--junitxml", "--rootdir",
                   "--maxfail", "--durations", "--cpu-kernels", "--basetemp", "--timeout", "-W", "--tb"}
    found, skip = [], False
    for arg in rest:
        if skip:
            skip = False
            continue
        if arg.startswith("-"):
            skip = arg in takes_value
            continue
        if Path(arg.split("::")[0]).exists():
            found.append(arg)
    return found


def pytest_argv(ours: argparse.Namespace, rest: list[str], plan_file: Path) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "-n", os.environ.get("COURSE_WORKERS", "2"), "--dist", "loadfile",
            "--no-loadscope-reorder", "--cpu-kernels=both", "-p", "tools.gate.plugin", f"--gate-plan={plan_file}",
            "-p", "tools.gate.fresh"]
    if ours.order is not None:
        argv.append(f"--gate-order={ours.order}")
    if ours.trace:
        argv += ["-p", "tools.gate.trace"]
    return argv + rest


def main(argv: list[str] | None = None) -> int:
    ours, rest = parse(sys.argv[1:] if argv is None else argv)
    if ours.help:
        print(__doc__)
        return 0
    named = named_paths(rest)
    mode = ("all" if ours.all else "touched" if ours.touched else "every" if ours.every else "named" if named
            else "push")
    part = os.environ.get("HOOKLAB_GATE_PART")
    if part is not None and not (part.isdigit() and int(part) < planning.PARTS):
        print(f"HOOKLAB_GATE_PART={part!r}: the rotation's part is a whole number from 0 to {planning.PARTS - 1}",
              file=sys.stderr)
        return 2
    if ours.all:
        os.environ.update(SWEEPS)
    plan = planning.make(mode, part=int(part) if part is not None else None, shard=ours.shard)
    PLAN_FILE.parent.mkdir(parents=True, exist_ok=True)
    PLAN_FILE.write_text(json.dumps(plan.to_json()), encoding="utf-8")
    print(f"[course] {plan.header()}", file=sys.stderr, flush=True)
    argv = pytest_argv(ours, rest, PLAN_FILE)
    os.execv(argv[0], argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
