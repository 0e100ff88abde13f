"""What a new process pays to start with hooklab: ``import hooklab`` beside ``import torch``, and the first answer of
``course.ask``.

    .venv/bin/python -m benchmarks.bench_startup                        # this checkout, 10 rounds
    .venv/bin/python -m benchmarks.bench_startup --against ../before    # and another checkout, in the same rounds
    .venv/bin/python -m benchmarks.bench_startup --quick                # 2 rounds (the smoke test)

A first import and a first answer happen once per process, so each measurement is a new interpreter that times
itself on its own CPU clock, in order: ``import torch`` (the baseline), ``import hooklab``, the first use of the three
tools the README shows (``capture``, ``all_hooks``, ``explain_hook``: their modules are imported then), every other
public name (what a process that uses them all pays
in the end), ``from hooklab import course``, the first ``course.ask(QUERY)`` with its text as a notebook shows it
(reading the index happens here), and a second question. A row's ratio divides its time by ``import torch``'s in the same process, so a busy machine moves
both; each is shown as the median over the rounds with its [min-max] spread (benchmarks/ratios.py's rule: compare
ratios, and read a difference inside the spread as none). Each round runs every checkout once, starting with the
next one each round. The interpreters compile hooklab's bytecode into a private folder, warmed by one run of each
checkout first, as an installed package has it (the course's ``PYTHONDONTWRITEBYTECODE=1`` would compile hooklab
again at every import).

Targets: ``import hooklab`` within :data:`IMPORT_TARGET` of ``import torch``'s CPU time; the first answer within
:data:`FIRST_ANSWER_TARGET` s of CPU (an absolute time: judged on the seconds, with the ratio beside it).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python benchmarks/x.py); python -m benchmarks.x needs no help
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.ratios import load, verdict  # noqa: E402
from hooklab._text import format_table  # noqa: E402
from hooklab.planner.decide import Spread  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUERY = "hook not firing after torch.compile"  # the README's example
SECOND = "我的前向钩子没有被调用"
IMPORT_TARGET = 0.015  # x import torch: "near 1 %"
FIRST_ANSWER_TARGET = 1.0  # s of CPU
STEPS = ("import torch", "import hooklab", "the README's three tools", "every public name",
         "from hooklab import course", "first ask", "second ask")

# what each new interpreter runs: its own CPU clock around each step, printed as one JSON line
CHILD = """
import json, sys, time
clock, wall = time.process_time, time.perf_counter
times = {}
def step(name, run):
    c, w = clock(), wall()
    run()
    times[name] = (clock() - c, wall() - w)
step("import torch", lambda: __import__("torch"))
step("import hooklab", lambda: __import__("hooklab"))
import hooklab
step("the README's three tools", lambda: (hooklab.capture, hooklab.all_hooks, hooklab.explain_hook))
step("every public name", lambda: [getattr(hooklab, name) for name in hooklab.__all__])
step("from hooklab import course", lambda: __import__("hooklab.course"))
import hooklab.course as course
step("first ask", lambda: repr(course.ask(QUERY, lang="en")))
step("second ask", lambda: repr(course.ask(SECOND, lang="zh")))
print(json.dumps({"file": sys.modules["hooklab"].__file__, "times": times}))
"""


def child_env(root: Path, cache: Path) -> dict[str, str]:
    """The environment of a measured interpreter: ``root``'s hooklab first on the path, bytecode in ``cache``, one
    thread, no GPU."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env.update(PYTHONPATH=str(root), PYTHONPYCACHEPREFIX=str(cache), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="")
    return env


def run_once(root: Path, cache: Path) -> dict[str, tuple[float, float]]:
    """One new interpreter on ``root``'s hooklab: each step's (CPU s, wall s)."""
    code = CHILD.replace("QUERY", repr(QUERY)).replace("SECOND", repr(SECOND))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tempfile.gettempdir(),
                          env=child_env(root, cache), timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the measured interpreter failed on {root}:\n{done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(found["file"]).resolve().is_relative_to(root.resolve()):
        raise RuntimeError(f"{root}: the interpreter imported hooklab from {found['file']}, not from this checkout")
    return {name: tuple(value) for name, value in found["times"].items()}


def measure(roots: list[Path], rounds: int) -> dict[Path, list[dict[str, tuple[float, float]]]]:
    """Every checkout once per round, in turn (the first one later each round), after one warm-up run of each."""
    runs: dict[Path, list[dict[str, tuple[float, float]]]] = {root: [] for root in roots}
    with tempfile.TemporaryDirectory(prefix="hooklab-startup-") as folder:
        caches = {root: Path(folder) / str(i) for i, root in enumerate(roots)}  # one per checkout: same file names
        for root in roots:
            run_once(root, caches[root])  # compiles the bytecode, reads the files into the OS's cache
        for r in range(rounds):
            for root in roots[r % len(roots):] + roots[:r % len(roots)]:
                runs[root].append(run_once(root, caches[root]))
    return runs


def rows(runs: list[dict[str, tuple[float, float]]]) -> list[tuple[str, float, float, Spread, float | None, str]]:
    """(step, median CPU ms, median wall ms, CPU ratio to import torch, target, verdict) per step."""
    out = []
    for name in STEPS:
        cpu = [run[name][0] for run in runs]
        ratio = Spread.of(run[name][0] / run["import torch"][0] for run in runs)
        if name == "import hooklab":
            target, judged = IMPORT_TARGET, verdict(ratio, IMPORT_TARGET)
        elif name == "first ask":
            target, judged = FIRST_ANSWER_TARGET, verdict(Spread.of(cpu), FIRST_ANSWER_TARGET)
        else:
            target, judged = None, "-"
        out.append((name, statistics.median(cpu) * 1e3, statistics.median(run[name][1] for run in runs) * 1e3,
                    ratio, target, judged))
    return out


def table(measured: list[tuple[str, float, float, Spread, float | None, str]]) -> str:
    def shown(name: str, target: float | None) -> str:
        if target is None:
            return "-"
        return f"{target:.1%} of torch" if name == "import hooklab" else f"{target:g} s CPU"

    return format_table(("step", "cpu ms", "wall ms", "x import torch (cpu) [min-max]", "target", "verdict"),
                        [(name, f"{cpu:.4g}", f"{wall:.4g}", f"{ratio.median:.4f} [{ratio.low:.4f}-{ratio.high:.4f}]",
                          shown(name, target), judged) for name, cpu, wall, ratio, target, judged in measured],
                        right=range(1, 4))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_startup", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds (the smoke test)")
    parser.add_argument("--rounds", type=int, help="rounds (default 10, --quick 2)")
    parser.add_argument("--against", type=Path, action="append", default=[],
                        help="another checkout to measure in the same rounds (e.g. a git worktree of an older commit)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 10)
    roots = [ROOT, *(path.resolve() for path in args.against)]
    for root in roots[1:]:
        if not (root / "hooklab" / "__init__.py").is_file():
            parser.error(f"--against {root}: no hooklab/__init__.py there")
    runs = measure(roots, rounds)
    print(f"{rounds} rounds, a new interpreter per measurement, its own CPU clock, median [min-max] of the rounds, "
          f"1 thread; query {QUERY!r}; {load()}")
    for root in roots:
        print(f"\n{root}")
        print(table(rows(runs[root])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
