"""``python -m tools.classroom.panel.measure [--as NAME] [--only answers_03 ...] [--tuning]``: every answer of the panel
through its exercise's checker, as a learner's notebook calls it.

Each ``answers_NN`` module runs in a process of its own (a fresh interpreter, as a fresh kernel), its source compiled
under a kernel's cell file name (``/tmp/ipykernel_panel/answers_NN.py``), each answer checked with
``hooklab.course.exercises.verdict``. What each answer got (status, reason, the English verdict) is written to
``build/panel/NAME.json`` (not committed: the held-out part's verdicts are not kept where they could be tuned
against); the figures per part are printed and written to ``docs/maintainers/exercise_panel.json`` under NAME.
A wrong answer's diagnosis is judged apart (``build/panel/NAME_judged.json``: id -> true when the verdict names the
answer's actual mistake), and counted when that file is there.

``--tuning`` runs only the answers outside the held-out part, and its rows say nothing of that part: what a checker's
author works from between two measures of the held-out part.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import PANEL, held_out

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BUILD = ROOT / "build" / "panel"
FIGURES = ROOT / "docs" / "maintainers" / "exercise_panel.json"
HELD_OUT = HERE / "held_out.json"
CHILD_LIMIT_S = 900  # one notebook's answers (a checker that starts processes takes seconds each)


def modules() -> list[str]:
    return sorted(p.stem for p in HERE.glob("answers_*.py"))


def _check_module(module: str, skip: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """In this process: ``module``'s answers but those in ``skip``, each through its checker."""
    from hooklab.course import exercises

    source = (HERE / f"{module}.py").read_text(encoding="utf-8")
    namespace: dict[str, Any] = {"__name__": f"{__package__}.{module}"}
    exec(compile(source, f"/tmp/ipykernel_panel/{module}.py", "exec"), namespace)  # noqa: S102 - the panel's own code
    rows = []
    for entry in [a for a in PANEL.values() if a.id.startswith(module + ":") and a.id not in skip]:
        start = time.process_time()
        try:
            v = exercises.verdict(entry.key, entry.answer())
            got = {"status": v.status, "reason": v.reason, "en": v.en[:800]}
        except Exception as exc:  # noqa: BLE001 - the checker itself failed: recorded as such
            got = {"status": "checker raised", "reason": type(exc).__name__, "en": str(exc)[:800]}
        rows.append({"id": entry.id, "key": entry.key, "right": entry.right, "mistake": entry.mistake,
                     "says": entry.says, **got, "cpu_s": round(time.process_time() - start, 2)})
    return rows


def run(only: list[str] | None = None, *, tuning: bool = False) -> list[dict[str, Any]]:
    """Every module's answers (``tuning``: those outside the held-out part), each module in a fresh interpreter,
    bounded by :data:`CHILD_LIMIT_S`."""
    rows: list[dict[str, Any]] = []
    for module in only or modules():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "rows.json"
            try:
                done = subprocess.run([sys.executable, "-m", "tools.classroom.panel.measure", "--child", module, "--out", str(out),
                                       *(["--tuning"] if tuning else [])],
                                      cwd=ROOT, capture_output=True, text=True, timeout=CHILD_LIMIT_S,
                                      env={**os.environ, "HOOKLAB_LANG": "en"})
            except subprocess.TimeoutExpired:
                raise SystemExit(f"{module}: its answers took more than {CHILD_LIMIT_S} s (waited for the checkers)") from None
            if done.returncode != 0 or not out.exists():
                raise SystemExit(f"{module}: the process ended with {done.returncode}:\n{done.stderr[-3000:]}")
            rows += json.loads(out.read_text(encoding="utf-8"))
        print(f"{module}: {sum(1 for r in rows if r['id'].startswith(module))} answers", flush=True)
    return rows


def figures(rows: list[dict[str, Any]], judged: dict[str, bool] | None) -> dict[str, Any]:
    """Per part (``held_out``, ``tuning``): right answers accepted, wrong answers rejected, and (when judged) wrong
    answers whose verdict names their actual mistake."""
    held = set(json.loads(HELD_OUT.read_text(encoding="utf-8"))["ids"])
    out: dict[str, Any] = {}
    for part, members in (("held_out", [r for r in rows if r["id"] in held]),
                          ("tuning", [r for r in rows if r["id"] not in held])):
        right = [r for r in members if r["right"]]
        wrong = [r for r in members if not r["right"]]
        fig = {"right": len(right), "right_accepted": sum(r["status"] == "correct" for r in right),
               "wrong": len(wrong), "wrong_rejected": sum(r["status"] == "wrong" for r in wrong),
               "checker_raised": sum(r["status"] == "checker raised" for r in members)}
        if judged is not None:
            fig["wrong_diagnosed"] = sum(bool(judged.get(r["id"])) for r in wrong)
        out[part] = fig
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.classroom.panel.measure", description=__doc__.split("\n")[0])
    parser.add_argument("--as", dest="phase", default="now")
    parser.add_argument("--only", nargs="+")
    parser.add_argument("--child")
    parser.add_argument("--out")
    parser.add_argument("--draw", action="store_true", help="draw the held-out part (once; before any measure)")
    parser.add_argument("--tuning", action="store_true", help="only the answers outside the held-out part")
    args = parser.parse_args(argv)
    if args.child:
        skip = frozenset(json.loads(HELD_OUT.read_text(encoding="utf-8"))["ids"]) if args.tuning else frozenset()
        Path(args.out).write_text(json.dumps(_check_module(args.child, skip)), encoding="utf-8")
        return 0
    from . import load

    panel = load()
    if args.draw:
        if HELD_OUT.exists():
            raise SystemExit(f"{HELD_OUT.relative_to(ROOT)} exists: the held-out part is drawn once")
        from . import HELD_OUT_SEED
        ids = sorted(held_out([(a.id, a.right) for a in panel.values()]))
        HELD_OUT.write_text(json.dumps({"seed": HELD_OUT_SEED, "of": len(panel), "ids": ids}, indent=1) + "\n",
                            encoding="utf-8")
        print(f"held out {len(ids)} of {len(panel)} answers (seed {HELD_OUT_SEED})")
        return 0
    rows = run(args.only, tuning=args.tuning)
    BUILD.mkdir(parents=True, exist_ok=True)
    (BUILD / f"{args.phase}.json").write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n",
                                              encoding="utf-8")
    judged_path = BUILD / f"{args.phase}_judged.json"
    judged = json.loads(judged_path.read_text(encoding="utf-8")) if judged_path.exists() else None
    result = figures(rows, judged)
    if args.tuning:  # a tuning run's figures are not a measure of the panel: printed, not kept
        result.pop("held_out")
    else:
        kept = json.loads(FIGURES.read_text(encoding="utf-8")) if FIGURES.exists() else {}
        kept[args.phase] = result
        FIGURES.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
    for part, fig in result.items():
        print(f"{args.phase} / {part}: " + ", ".join(f"{k} {v}" for k, v in fig.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
