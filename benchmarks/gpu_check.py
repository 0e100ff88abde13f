"""The one GPU check: the GPU tests and the GPU benchmarks in one command, within 8 minutes, one table at the end.

    ./course gpu-check              # on a machine with a CUDA GPU, with whatever torch it has
    ./course gpu-check --dry-run    # anywhere: what it would run, each step's time budget and the total

It installs nothing and needs no lock: the pinned torch may not be installable where the GPU is, so it runs with the
Python it is started with (``.venv/bin/python`` where there is one, else ``python3``; ``HOOKLAB_PYTHON`` names
another), which needs torch with CUDA, torchvision for the ResNet rows, and pytest for the tests (a step whose
package is missing is reported as not run, with what to install). Steps, each in its own process with its own limit:

1. ``tests``: ``tests/library/test_gpu*.py`` with ``-m gpu`` (observers never make the host wait, SaveOnCpu and
   OverlappedOffload move tensors and give the plain gradients, the planner starts and decides on a GPU);
2. ``resnet152``: the source's case, ResNet-152 at batch 256, 224 x 224, fp32, one training step: the model as it is,
   ``OverlappedOffload``, ``SaveOnCpu`` (pinned), every block checkpointed, every block checkpointed with its inputs
   offloaded (``CheckpointAndOffload``, the last two kept) and what ``MemoryPlanner.decide`` chooses at a tenth of the
   activations, side by side in one process: step time (median of 3 after a warm-up) and peak activation memory
   (the most allocated during forward and backward, less what was allocated before), each over the model as it is;
3. ``observers``: ``benchmarks.bench_monitoring --device cuda`` (each observer over its own no-op floor);
4. ``hook-cost``: ``benchmarks.bench_hook_cost --device cuda``.

The table at the end has one row per step (passed / failed / not run, and its time) and the ResNet-152 rows.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOTAL_S = 480  # the whole check: 8 minutes
GIB = 1 << 30


@dataclass(frozen=True)
class Step:
    name: str
    seconds: int          # its limit
    needs: tuple[str, ...]  # importable packages it needs besides torch
    what: str


STEPS = (
    Step("tests", 60, ("pytest",), "pytest -m gpu tests/library/test_gpu.py test_gpu_overlap.py test_gpu_planner.py"),
    Step("resnet152", 300, ("torchvision",), "ResNet-152, batch 256, fp32: plain and every variant in one process"),
    Step("observers", 60, ("torchvision",), "python -m benchmarks.bench_monitoring --device cuda --rounds 5"),
    Step("hook-cost", 45, (), "python -m benchmarks.bench_hook_cost --device cuda --rounds 5 --backend aot_eager"),
)
VARIANTS = ("plain", "OverlappedOffload", "SaveOnCpu pinned", "checkpoint each block",
            "checkpoint each block + offload inputs", "MemoryPlanner.decide (1/10)")


def _missing(step: Step) -> list[str]:
    return [name for name in step.needs if importlib.util.find_spec(name) is None]


def _command(step: Step) -> list[str]:
    py = sys.executable
    if step.name == "tests":
        return [py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                "tests/library/test_gpu.py", "tests/library/test_gpu_overlap.py", "tests/library/test_gpu_planner.py"]
    if step.name == "resnet152":
        return [py, "-m", "benchmarks.gpu_check", "--resnet152-only"]
    if step.name == "observers":
        return [py, "-m", "benchmarks.bench_monitoring", "--device", "cuda", "--rounds", "5"]
    return [py, "-m", "benchmarks.bench_hook_cost", "--device", "cuda", "--rounds", "5", "--backend", "aot_eager"]


def dry_run(print_fn: Callable[[str], Any] = print) -> int:
    """What the check would run, with each step's limit and the total (runs anywhere; no GPU needed)."""
    total = sum(s.seconds for s in STEPS)
    print_fn(f"gpu-check would run {len(STEPS)} steps, {total} s at most in all (limit {TOTAL_S} s):")
    for s in STEPS:
        print_fn(f"  {s.name:<10} {s.seconds:>4} s  {s.what}")
        print_fn(f"             {' '.join(_command(s)[1:])}")
    print_fn("  resnet152 rows: " + "; ".join(VARIANTS))
    if total > TOTAL_S:
        print_fn(f"the steps' limits add up to {total} s, over {TOTAL_S} s")
        return 1
    return 0


def run(print_fn: Callable[[str], Any] = print) -> int:
    """Run every step (each under its limit) and print one table; 0 when every step that ran passed."""
    import torch

    if not torch.cuda.is_available():
        print_fn("gpu-check: no CUDA device is visible (torch.cuda.is_available() is False): run it on a machine "
                 "with a GPU, or see what it would run with --dry-run")
        return 2
    env = {**os.environ, "HOOKLAB_TEST_GPU": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"
           f"{os.pathsep}{ROOT / 'tests' / 'library'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if env.get("CUDA_VISIBLE_DEVICES") == "":  # ./course test hides the GPU this way; this check needs it
        del env["CUDA_VISIBLE_DEVICES"]
    rows, resnet = [], None
    for s in STEPS:
        missing = _missing(s)
        if missing:
            rows.append((s.name, "not run", 0.0, f"needs {', '.join(missing)} (pip install {' '.join(missing)})"))
            continue
        start = time.perf_counter()
        try:
            done = subprocess.run(_command(s), cwd=ROOT, env=env, capture_output=True, text=True, timeout=s.seconds)
            status = "passed" if done.returncode == 0 else f"failed (exit {done.returncode})"
            out = done.stdout + done.stderr
        except subprocess.TimeoutExpired as error:
            status, out = f"over its {s.seconds} s", (error.stdout or b"").decode(errors="replace") \
                if isinstance(error.stdout, bytes) else (error.stdout or "")
        seconds = time.perf_counter() - start
        print_fn(f"== {s.name}: {status} in {seconds:.0f} s\n{out.rstrip()}")
        if s.name == "resnet152":
            resnet = rows_from(out) or None
        last = (out.strip().splitlines() or [""])[-1][:90]
        rows.append((s.name, status, seconds, last))
    print_fn(f"\ngpu-check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print_fn("| step | result | seconds | last line |\n|---|---|---:|---|")
    for name, status, seconds, last in rows:
        print_fn(f"| {name} | {status} | {seconds:.0f} | {last} |")
    if resnet:
        print_fn(resnet_table(resnet))
    return 0 if all(r[1] in ("passed", "not run") for r in rows) else 1


ROW = "RESNET152_ROW "  # the resnet152 step prints each row as it is measured, so a step stopped at its limit keeps them


def rows_from(out: str) -> list[dict[str, Any]]:
    """The ResNet-152 rows the step printed before it ended or was stopped.

    >>> rows_from('loading\\nRESNET152_ROW {"variant": "plain", "ms": 250.0, "peak": 1, "s": 9.0}\\ncut off here')
    [{'variant': 'plain', 'ms': 250.0, 'peak': 1, 's': 9.0}]
    """
    return [json.loads(line[len(ROW):]) for line in out.splitlines() if line.startswith(ROW)]


def resnet_table(rows: list[dict[str, Any]]) -> str:
    """The ResNet-152 rows as a table, each over the model as it is (and how long its measure took)."""
    plain = next((r for r in rows if r["variant"] == "plain" and "error" not in r), None)
    if plain is None:
        return "| ResNet-152, batch 256 | plain was not measured |\n|---|---|"
    out = ["| ResNet-152, batch 256 | step ms | x plain | peak activations GiB | less than plain | measured in s |",
           "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        took = f"{r['s']:.0f}" if "s" in r else ""
        if "error" in r:
            out.append(f"| {r['variant']} | {r['error']} | | | | {took} |")
            continue
        out.append(f"| {r['variant']} | {r['ms']:.0f} | {r['ms'] / plain['ms']:.2f} | {r['peak'] / GIB:.2f} | "
                   f"{plain['peak'] / max(r['peak'], 1):.1f}x | {took} |")
    return "\n".join(out)


def resnet152_rows(batch: int = 256, size: int = 224, steps: int = 3,
                   report: Callable[[dict[str, Any]], Any] = lambda row: None) -> list[dict[str, Any]]:
    """Each variant's step time and peak activation memory on ResNet-152, in one process (see the module's text);
    ``report`` gets each row as soon as it is measured."""
    import torch
    import torchvision

    sys.path.insert(0, str(ROOT))
    import hooklab
    from hooklab.planner import CheckpointAndOffload

    device = torch.device("cuda")
    torch.manual_seed(0)
    model = torchvision.models.resnet152(weights=None).to(device)
    x = torch.randn(batch, 3, size, size, device=device)
    blocks = [f"layer{i}.{j}" for i, n in zip(range(1, 5), (3, 8, 36, 3), strict=True) for j in range(n)]
    step = lambda: model(x).logsumexp(1).mean()  # noqa: E731

    def measure(make: Callable[[], Any]) -> dict[str, float]:
        def one() -> tuple[float, int]:
            model.zero_grad(set_to_none=False)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            with make():
                loss = step()
            loss.backward()
            torch.cuda.synchronize()
            return time.perf_counter() - start, torch.cuda.max_memory_allocated() - base
        one()
        runs = [one() for _ in range(steps)]
        return {"ms": 1000 * statistics.median(t for t, _ in runs), "peak": max(m for _, m in runs)}

    variants: dict[str, Callable[[], Any]] = {
        "plain": contextlib.nullcontext,
        "OverlappedOffload": lambda: hooklab.OverlappedOffload(min_bytes=1 << 20, keep=[model, x], keep_last=2),
        "SaveOnCpu pinned": lambda: hooklab.SaveOnCpu(min_bytes=1 << 20, pin_memory=True, keep=[model, x]),
        "checkpoint each block": lambda: hooklab.checkpoint_modules(model, blocks),
        "checkpoint each block + offload inputs":
            CheckpointAndOffload(model, blocks, [x], device, 1 << 20, keep_last=2).apply,
    }
    rows: list[dict[str, Any]] = []

    def add(row: dict[str, Any], start: float) -> None:
        row["s"] = time.perf_counter() - start
        rows.append(row)
        report(row)

    for name, make in variants.items():
        start = time.perf_counter()
        try:
            add({"variant": name, **measure(make)}, start)
        except Exception as error:  # reported in the table, the other rows still run
            add({"variant": name, "error": f"{type(error).__name__}: {str(error)[:120]}"}, start)
        torch.cuda.empty_cache()
    start = time.perf_counter()
    try:
        planner = hooklab.MemoryPlanner(model, step, blocks, keep=[x], min_bytes=1 << 20,
                                        choices=("keep", "checkpoint", "segment", "offload"))
        decision = planner.decide(planner.baseline_bytes // 10, backends=(), rounds=2, sequential=False,
                                  max_seconds=60)
        add({"variant": f"MemoryPlanner.decide (1/10): {decision.chosen.name}"[:80], **measure(decision.apply)},
            start)
    except Exception as error:
        add({"variant": VARIANTS[-1], "error": f"{type(error).__name__}: {str(error)[:120]}"}, start)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="list the steps and their limits; run nothing")
    parser.add_argument("--resnet152-only", action="store_true", help=argparse.SUPPRESS)  # the resnet152 step
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run()
    if args.resnet152_only:
        rows = resnet152_rows(report=lambda row: print(ROW + json.dumps(row), flush=True))
        print(resnet_table(rows))
        return 0 if all("error" not in r for r in rows) else 1
    return run()


if __name__ == "__main__":
    sys.exit(main())
