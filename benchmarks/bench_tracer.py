"""How much does hooklab.Tracer slow down one forward + backward pass?

    .venv/bin/python -m benchmarks.bench_tracer           # small CNN, 30 rounds x 10 steps
    .venv/bin/python -m benchmarks.bench_tracer --quick   # tiny MLP, a few rounds (smoke test)

Every row runs the same forward + backward on the same model and input, measured in interleaved
rounds (``ratios.py``); the input requires grad (so that full module backward hooks see a gradient
for it). A traced row includes creating the Tracer, registering its hooks and removing them, as a
learner's cell does. Each traced row has a "floor:" row that registers the same hooks with plain
PyTorch and empty bodies: "x floor" is the cost of the tracer's bookkeeping beyond the hooks
themselves, and the target (from the course's issue) is that it stays within 1.10x.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

if __package__ in (None, ""):  # run as a file (python benchmarks/x.py); python -m benchmarks.x needs no help
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.ratios import BASELINE, Case, Row, load, measure, table  # noqa: E402
from hooklab import HookScope  # noqa: E402
from hooklab.tracer import Tracer  # noqa: E402

TARGET = 1.10  # the tracer within 1.10x of the same hooks doing nothing
WHAT = ("modules", "parameters", "saved", "everything")


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


def traced(model: nn.Module, x: torch.Tensor, what: str, events: list[int]) -> Callable[[], None]:
    def run() -> None:
        with Tracer() as tr:
            if what in ("modules", "everything"):
                tr.modules(model)
            if what in ("parameters", "everything"):
                for name, p in model.named_parameters():
                    tr.tensor(p, name)
                    tr.post_accumulate_grad(p, name)
            if what in ("saved", "everything"):
                with tr.saved_tensors():
                    model.zero_grad(set_to_none=True)
                    out = model(x)
                out.square().mean().backward()
            else:
                step(model, x)
        events[0] = len(tr.events)
    return run


def noop_hooks(model: nn.Module, x: torch.Tensor, what: str) -> Callable[[], None]:
    """The hooks ``traced(what)`` registers, with empty bodies."""
    def run() -> None:
        with HookScope() as scope:
            if what in ("modules", "everything"):
                for _, m in model.named_modules():
                    if m is model or any(True for _ in m.children()):
                        continue
                    scope.add(m.register_forward_pre_hook(lambda *a, **k: None, with_kwargs=True))
                    scope.add(m.register_forward_hook(lambda *a: None))
                    scope.add(m.register_full_backward_pre_hook(lambda *a: None))
                    scope.add(m.register_full_backward_hook(lambda *a: None))
            if what in ("parameters", "everything"):
                for p in model.parameters():
                    scope.add(p.register_hook(lambda g: None))
                    scope.add(p.register_post_accumulate_grad_hook(lambda p: None))
            if what in ("saved", "everything"):
                with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    model.zero_grad(set_to_none=True)
                    out = model(x)
                out.square().mean().backward()
            else:
                step(model, x)
    return run


def run(*, quick: bool = False, rounds: int | None = None,
        repeats: int | None = None) -> tuple[list[Row], dict[str, int]]:
    """Measure every row; return the rows and the number of events each traced row recorded."""
    torch.set_num_threads(1)
    rounds = rounds or (5 if quick else 30)
    repeats = repeats or (1 if quick else 10)  # a step is a few ms: ten per round keep the clock's noise small
    model, x = make_model(quick)
    cases, events = [Case(BASELINE, lambda: step(model, x))], {}
    for what in WHAT:
        label = "modules fwd+bwd" if what == "modules" else what
        floor = f"floor: no-op hooks, {label}"
        events[f"tracer: {label}"] = counter = [0]
        cases += [Case(floor, noop_hooks(model, x, what)),
                  Case(f"tracer: {label}", traced(model, x, what, counter), floor, TARGET)]
    rows = measure(cases, rounds=rounds, repeats=repeats, clock="cpu", warmup=1 if quick else 3)
    print(f"model: {'tiny MLP' if quick else 'small CNN'}, input {tuple(x.shape)}, {rounds} rounds x {repeats} steps, "
          f"median [min-max] of the rounds, 1 thread, cpu clock; {load()}")
    print(table(rows))
    return rows, {name: n[0] for name, n in events.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, few rounds (for the smoke test)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 30, quick 5)")
    parser.add_argument("--repeats", type=int, default=None, help="steps per row per round (default 10, quick 1)")
    args = parser.parse_args(argv)
    run(quick=args.quick, rounds=args.rounds, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
