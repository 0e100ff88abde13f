"""What does a hook cost? Each kind of hook as a ratio to the same model without hooks, measured in one run.

    .venv/bin/python -m benchmarks.bench_hook_cost            # MLP 8x(Linear 512 + ReLU), batch 64, 15 rounds
    .venv/bin/python -m benchmarks.bench_hook_cost --quick    # width 64, 2 rounds, aot_eager (smoke test)
    .venv/bin/python -m benchmarks.bench_hook_cost --device cuda   # where a GPU is visible (untested here)

Every row runs the same forward + backward (``out.square().mean()``) of one model on the same input,
in interleaved rounds (``ratios.py``): "x base" is the row's time over the model without hooks in the
same round. An eager row registers its hooks, runs the step and removes them, as a ``with`` block
does. "x floor" pairs a row with the row it should be compared to: ``.item()`` / ``.cpu()`` with the
same hook without them, the compiled model with hooks traced in with the compiled model without hooks.
"calls/step" is how many times the hooks ran in one step (counted in a separate pass, so the timed
hooks stay empty); it does not depend on the machine, the times do.

On the CPU the clock is this process's CPU time (one torch thread by default). ``.item()`` and
``.cpu()`` cost little here; on a GPU each is a device synchronisation (the host waits for every
queued kernel), which is what makes them expensive there. The compiled rows use ``torch.compile``
with hooks registered before compiling: dynamo traces them into the graph, so at run time their
Python does not run per call (``--backend``: inductor by default, aot_eager with ``--quick``).
"""
from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

if __package__ in (None, ""):  # run as a file (python benchmarks/x.py); python -m benchmarks.x needs no help
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.ratios import BASELINE, Case, Row, load, measure, table  # noqa: E402
from hooklab.scope import HookScope  # noqa: E402

COMPILED = "compiled (no hooks)"


def make(width: int, depth: int, batch: int, device: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(*[layer for _ in range(depth) for layer in (nn.Linear(width, width), nn.ReLU())]).to(device)
    # the input requires grad (in every row): full backward hooks then report an input gradient instead of
    # warning at every call that none is computed
    return model, torch.randn(batch, width, device=device, requires_grad=True)


def hook_rows(model: nn.Module) -> dict[str, Callable[[HookScope, Callable[[], None]], None]]:
    """Each row's hooks: a function that registers them into a scope (``count`` is called once per hook run)."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    params = list(model.parameters())
    log: list[str] = []

    def forward_each(body: Callable[[nn.Module, torch.Tensor], None]) -> Callable:
        def add(scope: HookScope, count: Callable[[], None]) -> None:
            def hook(m: nn.Module, args: tuple, out: torch.Tensor) -> None:
                count()
                body(m, out)
            for m in model.modules():
                scope.add(m.register_forward_hook(hook))
        return add

    def one_forward(scope: HookScope, count: Callable[[], None]) -> None:
        scope.add(linears[0].register_forward_hook(lambda m, a, o: count()))

    def global_forward(scope: HookScope, count: Callable[[], None]) -> None:
        from torch.nn.modules.module import register_module_forward_hook
        scope.add(register_module_forward_hook(lambda m, a, o: count()))

    def full_backward(scope: HookScope, count: Callable[[], None]) -> None:
        for m in model.modules():
            scope.add(m.register_full_backward_hook(lambda m, gi, go: count()))

    def tensor_hooks(scope: HookScope, count: Callable[[], None]) -> None:
        for p in params:
            scope.add(p.register_hook(lambda g: count()))

    def post_accumulate(scope: HookScope, count: Callable[[], None]) -> None:
        for p in params:
            scope.add(p.register_post_accumulate_grad_hook(lambda p: count()))

    def multi_grad(scope: HookScope, count: Callable[[], None]) -> None:
        scope.add(torch.autograd.graph.register_multi_grad_hook(params, lambda grads: count()))

    def python_work(m: nn.Module, out: torch.Tensor) -> None:
        log.append(f"{type(m).__name__} {tuple(out.shape)} {out.dtype}")
        del log[:-100]

    return {
        "no-op forward hook, 1 module": one_forward,
        "no-op forward hook, every module": forward_each(lambda m, out: None),
        "global forward hook (no-op)": global_forward,
        "full backward hooks, every module": full_backward,
        "tensor hooks, every parameter": tensor_hooks,
        "post-accumulate hooks, every parameter": post_accumulate,
        "one multi-grad hook, all parameters": multi_grad,
        "Python work in a forward hook": forward_each(python_work),
        "tensor stat in a forward hook": forward_each(lambda m, out: out.detach().abs().mean()),
        ".item() of that stat": forward_each(lambda m, out: out.detach().abs().mean().item()),
        ".cpu() of the output": forward_each(lambda m, out: out.detach().cpu()),
    }


FLOORS = {".item() of that stat": "tensor stat in a forward hook",
          ".cpu() of the output": "no-op forward hook, every module"}


class _Plain(nn.Module):
    """A wrapper with its own forward: dynamo does not guard on module hooks (``skip_nnmodule_hook_guards``),
    so two compiled copies of one class would share one compiled graph, with or without hooks."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


class _Hooked(_Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # a code object of its own: a cache entry of its own
        return self.inner(x)


class _Counted(_Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def cases(model: nn.Module, x: torch.Tensor, *, backend: str) -> tuple[list[Case], dict[str, int]]:
    """The rows, baseline first, and how many times each row's hooks run per step."""

    def step_of(m: nn.Module) -> Callable[[], None]:
        def step() -> None:
            m.zero_grad(set_to_none=True)
            m(x).square().mean().backward()
        return step

    step = step_of(model)
    rows, calls = [Case(BASELINE, step)], {}
    for name, add in hook_rows(model).items():
        counter = [0]
        with HookScope() as scope:  # the counting pass
            add(scope, lambda counter=counter: counter.__setitem__(0, counter[0] + 1))
            step()
        calls[name] = counter[0]

        def run(add: Callable = add) -> None:
            with HookScope() as scope:
                add(scope, lambda: None)
                step()
        rows.append(Case(name, run, FLOORS.get(name)))

    torch._dynamo.reset()
    plain = torch.compile(_Plain(copy.deepcopy(model)), backend=backend)
    hooked_eager, counted_eager = _Hooked(copy.deepcopy(model)), _Counted(copy.deepcopy(model))
    ran: list[int] = []
    for m in hooked_eager.inner.modules():  # registered before compiling: traced into the graph
        m.register_forward_hook(lambda m, a, o: None)
    for m in counted_eager.inner.modules():  # the counting copy (appending does not make dynamo guard on a value)
        m.register_forward_hook(lambda m, a, o: ran.append(1))
    hooked, counted = torch.compile(hooked_eager, backend=backend), torch.compile(counted_eager, backend=backend)
    for compiled in (plain, hooked, counted):
        step_of(compiled)()  # compile now, not in the first timed round
    ran.clear()
    step_of(counted)()
    counter = [len(ran)]
    name = "compiled, forward hooks traced in"
    calls[name] = counter[0]
    rows += [Case(COMPILED, step_of(plain)), Case(name, step_of(hooked), COMPILED)]
    return rows, calls


def report(rows: list[Row], calls: dict[str, int], clock: str = "cpu") -> str:
    """ratios.table() with a calls/step column."""
    lines = table(rows, clock).splitlines()
    width = max(len(line) for line in lines)
    out = [lines[0].ljust(width) + "  calls/step"]
    for row, line in zip(rows, lines[1:], strict=True):
        out.append(line.ljust(width) + f"  {calls[row.name]:>10}" if row.name in calls else line)
    return "\n".join(out)


def run(*, quick: bool = False, rounds: int | None = None, repeats: int | None = None, width: int | None = None,
        depth: int = 8, batch: int | None = None, threads: int = 1, device: str = "cpu", clock: str | None = None,
        backend: str | None = None) -> tuple[list[Row], dict[str, int]]:
    """Measure every row; the defaults are the full run (``quick``: a narrow model, 2 rounds, aot_eager)."""
    rounds = rounds or (2 if quick else 15)
    repeats = repeats or (1 if quick else 5)
    width = width or (64 if quick else 512)
    batch = batch or (8 if quick else 64)
    backend = backend or ("aot_eager" if quick else "inductor")
    torch.set_num_threads(threads)
    cuda = device.startswith("cuda")
    clock = clock or ("wall" if cuda else "cpu")
    model, x = make(width, depth, batch, device)
    rows_in, calls = cases(model, x, backend=backend)
    rows = measure(rows_in, rounds=rounds, repeats=repeats,
                   clock=clock,
                   sync=torch.cuda.synchronize if cuda else (lambda: None))
    print(f"MLP {depth}x(Linear {width} + ReLU) forward+backward, batch {batch}, {device}, threads={threads}, "
          f"{clock} clock, {rounds} rounds x {repeats} steps, median [min-max] of the rounds, torch.compile "
          f"backend={backend}; {load()}")
    print(report(rows, calls, clock))
    return rows, calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="narrow model, few rounds, aot_eager (smoke test)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 15, quick 2)")
    parser.add_argument("--repeats", type=int, help="steps per row per round (default 5, quick 1)")
    parser.add_argument("--width", type=int, help="layer width (default 512, quick 64)")
    parser.add_argument("--batch", type=int, help="batch size (default 64, quick 8)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--backend", help="torch.compile backend (default inductor, quick aot_eager)")
    parser.add_argument("--clock", choices=("cpu", "wall"),
                        help="cpu: this process's CPU time (default on cpu), wall: elapsed time (default on cuda)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU is visible here")
    run(quick=args.quick, rounds=args.rounds, repeats=args.repeats, width=args.width, batch=args.batch,
        threads=args.threads, device=args.device, clock=args.clock, backend=args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
