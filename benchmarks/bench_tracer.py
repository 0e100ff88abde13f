"""How much does hooklab.Tracer slow down one forward + backward pass?

    .venv/bin/python benchmarks/bench_tracer.py           # small CNN, 30 repeats
    .venv/bin/python benchmarks/bench_tracer.py --quick   # tiny MLP, a few repeats (smoke test)

Every row runs the same forward + backward on the same model and input; the time of each
row is the median over the repeats (after a warm-up), and "ratio" divides it by the
baseline row measured in the same run (these machines are noisy: compare ratios, not ms).
The input requires grad (so that full module backward hooks see a gradient for it).
A traced row includes creating the Tracer, registering its hooks and removing them, as a
learner's cell does. The "no-op hooks" row registers the same hooks as "everything" with
plain PyTorch and empty bodies, separating the cost of hooks themselves from the tracer's
bookkeeping.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hooklab import HookScope  # noqa: E402
from hooklab.tracer import Tracer  # noqa: E402


def make_model(quick: bool) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if quick:
        model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
        return model, torch.randn(4, 16, requires_grad=True)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )
    return model, torch.randn(8, 3, 32, 32, requires_grad=True)


def step(model: nn.Module, x: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    model(x).square().mean().backward()


def traced(model: nn.Module, x: torch.Tensor, what: str) -> Callable[[], int]:
    def run() -> int:
        with Tracer() as tr:
            if what in ("modules", "everything"):
                tr.modules(model)
            if what in ("parameters", "everything"):
                for name, p in model.named_parameters():
                    tr.tensor(p, name)
                    tr.post_accumulate(p, name)
            if what in ("saved", "everything"):
                with tr.saved_tensors():
                    model.zero_grad(set_to_none=True)
                    out = model(x)
                out.square().mean().backward()
            else:
                step(model, x)
        return len(tr.events)
    return run


def noop_hooks(model: nn.Module, x: torch.Tensor) -> Callable[[], int]:
    def run() -> int:
        with HookScope() as scope:
            for _, m in model.named_modules():
                if m is model or any(True for _ in m.children()):
                    continue
                scope.add(m.register_forward_pre_hook(lambda *a: None))
                scope.add(m.register_forward_hook(lambda *a: None))
                scope.add(m.register_full_backward_pre_hook(lambda *a: None))
                scope.add(m.register_full_backward_hook(lambda *a: None))
            for p in model.parameters():
                scope.add(p.register_hook(lambda g: None))
                scope.add(p.register_post_accumulate_grad_hook(lambda p: None))
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                model.zero_grad(set_to_none=True)
                out = model(x)
            out.square().mean().backward()
        return 0
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, few repeats (for the smoke test)")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    repeats = args.repeats or (5 if args.quick else 30)
    warmup = 1 if args.quick else 3
    model, x = make_model(args.quick)

    def baseline() -> int:
        step(model, x)
        return 0

    cases: list[tuple[str, Callable[[], int]]] = [
        ("baseline (no hooks)", baseline),
        ("no-op hooks, everything", noop_hooks(model, x)),
        ("tracer: modules fwd+bwd", traced(model, x, "modules")),
        ("tracer: parameters", traced(model, x, "parameters")),
        ("tracer: saved tensors", traced(model, x, "saved")),
        ("tracer: everything", traced(model, x, "everything")),
    ]
    # Interleave the rows round by round so slow drifts of the machine hit every row alike.
    times: dict[str, list[float]] = {name: [] for name, _ in cases}
    events: dict[str, int] = {}
    for name, fn in cases:
        for _ in range(warmup):
            events[name] = fn()
    for _ in range(repeats):
        for name, fn in cases:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    base = medians["baseline (no hooks)"]
    print(f"model: {'tiny MLP' if args.quick else 'small CNN'}, input {tuple(x.shape)}, "
          f"{repeats} repeats, median, 1 thread")
    width = max(len(name) for name, _ in cases)
    print(f"{'case':<{width}}  {'ms':>8}  {'ratio':>6}  {'events':>6}")
    for name, _ in cases:
        print(f"{name:<{width}}  {medians[name] * 1e3:8.3f}  {medians[name] / base:6.2f}  {events[name]:6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
