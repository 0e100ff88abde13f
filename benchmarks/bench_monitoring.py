"""How much do hooklab's capture / monitoring / clipping hooks slow down a training step?

    .venv/bin/python -m benchmarks.bench_monitoring           # ResNet-18, 8x3x128x128, 15 rounds
    .venv/bin/python -m benchmarks.bench_monitoring --quick   # 2x3x32x32, 2 rounds, 1 warm-up step (smoke test)
    .venv/bin/python -m benchmarks.bench_monitoring --device cuda   # where a GPU is visible

Every row runs the same forward + backward (cross-entropy on random labels) of a torchvision
ResNet-18 (``weights=None``) on the same input, measured in interleaved rounds (``ratios.py``). A
hooked row includes registering and removing its hooks each step, as a learner's ``with`` block does.
On the CPU the clock is this process's CPU time (one torch thread by default), which other jobs on the
same cores disturb far less than elapsed time; ``--clock wall`` measures elapsed time instead (the
default on a GPU, where the step ends with a synchronisation).

Each observer has a "floor:" row: the same hooks with empty bodies. "x floor" is the observer's time
over its floor's in the same round, the cost of what the tool does beyond having hooks at all; the
target (from the course's issue) is that every observer stays within 1.10x of its floor. Small inputs
make every fixed cost look bigger, so judge the targets on the full run, not on --quick.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

if __package__ in (None, ""):  # run as a file (python benchmarks/x.py); python -m benchmarks.x needs no help
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.ratios import BASELINE, Case, Row, load, measure, table  # noqa: E402
from hooklab.activations import ActivationStats  # noqa: E402
from hooklab.capturing import capture  # noqa: E402
from hooklab.clip import clip_grad_value_hooks  # noqa: E402
from hooklab.ledger import SavedTensorLedger  # noqa: E402
from hooklab.monitor import GradientMonitor  # noqa: E402
from hooklab.nonfinite import find_nonfinite, new_nodes  # noqa: E402
from hooklab.scope import HookScope  # noqa: E402

STAGES = ["layer1", "layer2", "layer3", "layer4"]
TOP = ["conv1", "bn1", "relu", "maxpool", *STAGES, "avgpool", "fc"]
TARGET = 1.10  # every observer within 1.10x of the same hooks doing nothing


def make(batch: int, size: int, device: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    from torchvision.models import resnet18

    torch.manual_seed(0)
    model = resnet18(weights=None).to(device)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    return model, x, y


def cases(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[Case]:
    """The rows, baseline first; each observer names its floor."""

    def step() -> None:
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    def inside(make: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            with make():
                step()
        return run

    def noop_forward_hooks(names: list[str], output_grads: bool = False) -> Callable[[], None]:
        def run() -> None:
            with HookScope() as scope:
                handles: list = []

                def hook(m, a, out):
                    if output_grads:
                        handles.append(out.register_hook(lambda g: None))
                for n in names:
                    scope.add(model.get_submodule(n).register_forward_hook(hook))
                step()
                for h in handles:
                    h.remove()
        return run

    def noop_post_accumulate_hooks() -> None:
        with HookScope() as scope:
            for p in model.parameters():
                scope.add(p.register_post_accumulate_grad_hook(lambda p: None))
            step()

    def noop_ledger_hooks() -> None:
        # what the ledger registers: a pre- and a post-hook on every module, a model pre-hook, saved-tensor hooks
        with HookScope() as scope:
            scope.add(model.register_forward_pre_hook(lambda m, a, k: None, with_kwargs=True))
            for m in model.modules():
                scope.add(m.register_forward_pre_hook(lambda m, a: None))
                scope.add(m.register_forward_hook(lambda m, a, o: None, always_call=True))
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                step()

    def noop_nonfinite_hooks() -> None:
        # what find_nonfinite registers: 3 hooks on every module, one on the model, and a post-hook on each
        # autograd Node that a module's output adds (found by the same graph walk), all doing nothing
        with HookScope() as scope:
            nodes: dict = {}

            def post(m, args, kwargs, out):
                for node in new_nodes([out] if isinstance(out, torch.Tensor) else [], nodes, {}):
                    nodes[id(node)] = node.register_hook(lambda gi, go: None)
            for m in model.modules():
                scope.add(m.register_forward_pre_hook(lambda m, a: None))
                scope.add(m.register_forward_hook(post, with_kwargs=True))
                scope.add(m.register_forward_hook(lambda m, a, o: None, always_call=True))
            scope.add(model.register_forward_pre_hook(lambda m, a, k: None, with_kwargs=True))
            step()
            for h in nodes.values():
                h.remove()

    def with_clip_after() -> None:
        step()
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)

    floor_stages, floor_top = "floor: no-op forward hooks layer1-4", "floor: no-op forward hooks 10 top-level"
    floor_grads = "floor: no-op forward + output-grad hooks layer1-4"
    floor_params = "floor: no-op post-accumulate hooks"
    floor_ledger = "floor: no-op module + saved-tensor hooks"
    floor_nonfinite = "floor: no-op module + Node hooks"
    return [
        Case(BASELINE, step),
        Case(floor_stages, noop_forward_hooks(STAGES)),
        Case("capture layer1-4", inside(lambda: capture(model, STAGES)), floor_stages, TARGET),
        Case(floor_top, noop_forward_hooks(TOP)),
        Case("capture 10 top-level", inside(lambda: capture(model, TOP)), floor_top, TARGET),
        Case(floor_grads, noop_forward_hooks(STAGES, output_grads=True)),
        Case("capture layer1-4 + grads", inside(lambda: capture(model, STAGES, grads=True)), floor_grads, TARGET),
        Case("activation stats layer1-4", inside(lambda: ActivationStats(model, STAGES)), floor_stages, TARGET),
        Case(floor_params, noop_post_accumulate_hooks),
        Case("gradient monitor, 62 params", inside(lambda: GradientMonitor(model)), floor_params, TARGET),
        Case(floor_ledger, noop_ledger_hooks),
        Case("saved-tensor ledger", inside(lambda: SavedTensorLedger(model)), floor_ledger, TARGET),
        Case(floor_nonfinite, noop_nonfinite_hooks),
        Case("find_nonfinite (finite run)", inside(lambda: find_nonfinite(model)), floor_nonfinite, TARGET),
        Case("clip value hooks", inside(lambda: clip_grad_value_hooks(model, 0.01))),
        Case("clip_grad_value_ after (ref)", with_clip_after),
    ]


def run(*, quick: bool = False, rounds: int | None = None, repeats: int | None = None, batch: int | None = None,
        size: int | None = None, threads: int = 1, device: str = "cpu", clock: str | None = None) -> list[Row]:
    """Measure every row; the defaults are the full run (``quick``: a small input, 2 rounds, 1 warm-up step)."""
    rounds = rounds or (2 if quick else 15)
    repeats = repeats or (1 if quick else 2)
    batch = batch or (2 if quick else 8)
    size = size or (32 if quick else 128)
    torch.set_num_threads(threads)
    cuda = device.startswith("cuda")
    clock = clock or ("wall" if cuda else "cpu")
    model, x, y = make(batch, size, device)
    rows = measure(cases(model, x, y), rounds=rounds, repeats=repeats,
                   clock=clock,
                   sync=torch.cuda.synchronize if cuda else (lambda: None), warmup=1 if quick else 2)
    print(f"ResNet-18 forward+backward, input {batch}x3x{size}x{size}, {device}, threads={threads}, "
          f"{clock} clock, {rounds} rounds x {repeats} steps, median [min-max] of the rounds; {load()}")
    print(table(rows, clock))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small input, few rounds (smoke test)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 15, quick 2)")
    parser.add_argument("--repeats", type=int, help="steps per row per round (default 2, quick 1)")
    parser.add_argument("--batch", type=int, help="batch size (default 8, quick 2)")
    parser.add_argument("--size", type=int, help="image side (default 128, quick 32)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--clock", choices=("cpu", "wall"),
                        help="cpu: this process's CPU time (default on cpu; steadier when other jobs share "
                             "the cores), wall: elapsed time (default on cuda)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU is visible here")
    run(quick=args.quick, rounds=args.rounds, repeats=args.repeats, batch=args.batch, size=args.size,
        threads=args.threads, device=args.device, clock=args.clock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
