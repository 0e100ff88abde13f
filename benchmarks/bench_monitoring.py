"""How much do hooklab's capture / monitoring / clipping hooks slow down a training step?

    .venv/bin/python benchmarks/bench_monitoring.py           # ResNet-18, 8x3x128x128, 15 rounds
    .venv/bin/python benchmarks/bench_monitoring.py --quick   # 2x3x64x64, 2 rounds (smoke test)

Every row runs the same forward + backward (cross-entropy on random labels) of a torchvision
ResNet-18 (``weights=None``) on the same input. The rows are measured in interleaved rounds
(each round runs every row ``--repeats`` times, starting one row later each round); a row's ratio is its time divided by the
baseline's time *in the same round*, and the table shows the median ratio over the rounds
(these machines are noisy: compare ratios, not ms). On the CPU the clock is this process's CPU
time (one torch thread by default), which other jobs on the same cores disturb far less than
elapsed time; ``--clock wall`` measures elapsed time instead. A hooked row includes registering and
removing its hooks each step, as a learner's ``with`` block does.

The "floor:" rows run the same hooks with empty bodies (registered and removed the same way): the
cost of hooks as such, beside which each tool's own cost shows. Targets (from the course's issue): capture <= 1.05x, gradient monitor <= 1.10x. Small inputs
make every fixed cost look bigger (the forward+backward is short but the gradient norms
still read every weight), so judge the targets on the full run, not on --quick.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hooklab.capture import capture  # noqa: E402
from hooklab.clip import clip_grad_value_hooks  # noqa: E402
from hooklab.monitor import ActivationStats, GradientMonitor  # noqa: E402
from hooklab.scope import HookScope  # noqa: E402

STAGES = ["layer1", "layer2", "layer3", "layer4"]
TOP = ["conv1", "bn1", "relu", "maxpool", *STAGES, "avgpool", "fc"]
TARGETS = {"capture": 1.05, "gradient monitor": 1.10}


def make(batch: int, size: int, device: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    from torchvision.models import resnet18

    torch.manual_seed(0)
    model = resnet18(weights=None).to(device)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    return model, x, y


def cases(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, tuple[str | None, Callable[[], None]]]:
    """name -> (target group or None, one step)."""

    def step() -> None:
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    def with_capture(names: list[str], **kw) -> Callable[[], None]:
        def run() -> None:
            with capture(model, names, **kw):
                step()
        return run

    def with_monitor() -> None:
        with GradientMonitor(model):
            step()

    def with_stats() -> None:
        with ActivationStats(model, STAGES):
            step()

    def with_clip_hooks() -> None:
        with clip_grad_value_hooks(model, 0.01):
            step()

    def with_clip_after() -> None:
        step()
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)

    # the floor: the same hooks with empty bodies, registered and removed the same way
    def noop_forward_hooks(names: list[str]) -> Callable[[], None]:
        def run() -> None:
            with HookScope() as scope:
                for n in names:
                    scope.add(model.get_submodule(n).register_forward_hook(lambda m, a, o: None))
                step()
        return run

    def noop_post_accumulate_hooks() -> None:
        with HookScope() as scope:
            for p in model.parameters():
                scope.add(p.register_post_accumulate_grad_hook(lambda p: None))
            step()

    return {
        "baseline (no hooks)": (None, step),
        "floor: no-op forward hooks layer1-4": (None, noop_forward_hooks(STAGES)),
        "capture layer1-4": ("capture", with_capture(STAGES)),
        "floor: no-op forward hooks 10 top-level": (None, noop_forward_hooks(TOP)),
        "capture 10 top-level": ("capture", with_capture(TOP)),
        "capture layer1-4 + grads": ("capture", with_capture(STAGES, grads=True)),
        "floor: no-op post-accumulate hooks": (None, noop_post_accumulate_hooks),
        "gradient monitor, 62 params": ("gradient monitor", with_monitor),
        "activation stats layer1-4": (None, with_stats),
        "clip value hooks": (None, with_clip_hooks),
        "clip_grad_value_ after (ref)": (None, with_clip_after),
    }


def measure(rows: dict[str, tuple[str | None, Callable[[], None]]], rounds: int, repeats: int,
            sync: Callable[[], None], clock: Callable[[], float]) -> dict[str, tuple[float, float]]:
    """name -> (median ms per step, median ratio to the baseline of the same round)."""
    for _, run in rows.values():  # warm up every path (allocator, first-call costs)
        run()
        run()
    sync()
    times: dict[str, list[float]] = {name: [] for name in rows}
    names = list(rows)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate: no row always first
            run = rows[name][1]
            start = clock()
            for _ in range(repeats):
                run()
            sync()
            times[name].append((clock() - start) / repeats)
    base = times["baseline (no hooks)"]
    return {name: (statistics.median(t) * 1e3, statistics.median(a / b for a, b in zip(t, base)))
            for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small input, few rounds (smoke test)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 7, quick 2)")
    parser.add_argument("--repeats", type=int, help="steps per row per round (default 3, quick 1)")
    parser.add_argument("--batch", type=int, help="batch size (default 8, quick 2)")
    parser.add_argument("--size", type=int, help="image side (default 128, quick 64)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--clock", choices=("cpu", "wall"),
                        help="cpu: this process's CPU time (default on cpu; steadier when other jobs share "
                             "the cores), wall: elapsed time (default on cuda)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 15)
    repeats = args.repeats or (1 if args.quick else 2)
    batch = args.batch or (2 if args.quick else 8)
    size = args.size or (64 if args.quick else 128)
    torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    clock_name = args.clock or ("wall" if cuda else "cpu")
    clock = time.perf_counter if clock_name == "wall" else time.process_time

    model, x, y = make(batch, size, args.device)
    result = measure(cases(model, x, y), rounds, repeats, sync, clock)
    groups = {name: group for name, (group, _) in cases(model, x, y).items()}

    print(f"ResNet-18 forward+backward, input {batch}x3x{size}x{size}, {args.device}, "
          f"threads={args.threads}, {clock_name} clock, {rounds} rounds x {repeats} steps")
    header = ("case", "ms", "ratio", "target", "verdict")
    width = max(len(n) for n in result) + 2
    print(f"{header[0]:<{width}}{header[1]:>9}{header[2]:>8}{header[3]:>8}  {header[4]}")
    for name, (ms, ratio) in result.items():
        group = groups[name]
        target = TARGETS.get(group) if group else None
        verdict = "-" if target is None else ("ok" if ratio <= target else "over")
        target_s = "-" if target is None else f"{target:.2f}"
        print(f"{name:<{width}}{ms:>9.1f}{ratio:>8.2f}{target_s:>8}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
