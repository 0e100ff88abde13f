"""Memory and time of keeping activations for backward: ledger, disk, bf16, int8, checkpointing,
overlapped offloading, and the memory planner at budgets of 1/2, 1/4 and 1/10 of the baseline.

Trains a few SGD steps of a torchvision ResNet (random init, synthetic data) under each variant
and prints one table, every number relative to the baseline measured in the same run:

    .venv/bin/python benchmarks/bench_memory.py                 # CPU: ResNet-18 (a few minutes on 1 thread)
    .venv/bin/python benchmarks/bench_memory.py --quick         # smoke run: a cut ResNet-18, 32x32 (seconds)
    .venv/bin/python benchmarks/bench_memory.py --device cuda   # the tutorial's case: ResNet-152, batch 256, 224x224
    .venv/bin/python benchmarks/bench_memory.py --compile       # also torch.compile's activation_memory_budget

The planner rows (``plan 1/2`` ...) use hooklab.MemoryPlanner with the times measured on this
machine; each is followed by a line comparing it with the single strategies (one variant on every
block) whose measured bytes meet the same budget. On a CPU, "offload" in a plan is SaveOnDisk
(there is no slower memory to copy to), and the ``overlap`` row (OverlappedOffload) moves
nothing: it does what SaveOnCpu does there, so it is the baseline again.

Columns
  saved MiB   bytes of tensors created by forward and still alive when it ends (what the
              graph keeps for backward), measured op by op by hooklab.MemoryMeter
  x less      baseline saved / variant saved
  peak MiB    peak of live tensor bytes during forward + backward (same meter; parameters,
              buffers, the batch and the preallocated gradients excluded), not process RSS
  time x      median step time / median baseline step time (forward, backward, SGD step)
  grad err    relative L2 error of all parameter gradients vs the baseline (same seed)

Memory is measured in a separate, untimed pass (the meter slows every op down); time is the
median of interleaved repeats after a warm-up. With --device cpu and a GPU visible it also
measures torch.autograd.graph.save_on_cpu on GPU memory; without one that part says so
and is skipped.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager

import torch
import torchvision
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import hooklab  # noqa: E402

MiB = 1024 * 1024
Factory = Callable[[], ContextManager[Any]]

TARGETS = {  # variant: (min x less, max time x, max grad err)
    "checkpoint": (2.0, 1.5, None),
    "bf16": (2.0, 1.3, 1e-2),
}
GPU_TARGETS = {"overlap": (10.0, 1.5, None)}  # the target for overlapped offloading on a GPU
BUDGETS = (2, 4, 10)  # planner rows: budgets of 1/2, 1/4, 1/10 of the baseline's saved bytes
SINGLE = ("disk", "bf16", "int8", "checkpoint", "overlap", "cpu")  # single strategies a plan is compared with
MAX_ERROR = 1e-2  # the gradient error the planner may spend on compression


def sequential_resnet(seed: int, depth: int = 18) -> nn.Sequential:
    """torchvision's ResNet-18 (or -152) as a flat Sequential: stem, the residual blocks, head (same forward)."""
    torch.manual_seed(seed)
    r = getattr(torchvision.models, f"resnet{depth}")(weights=None)
    return nn.Sequential(
        nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool),
        *r.layer1, *r.layer2, *r.layer3, *r.layer4,
        nn.Sequential(r.avgpool, nn.Flatten(), r.fc),
    )


def quick_resnet(seed: int) -> nn.Sequential:
    """The smoke run's model (--quick): ResNet-18's stem, its first block (identity shortcut), its first downsampling
    block (1x1 conv shortcut) and a head on their 128 channels, as a flat Sequential. Every kind of block and every
    code path of the full run with a third of ResNet-18's layers: --compile traces it 4 times in seconds."""
    torch.manual_seed(seed)
    r = torchvision.models.resnet18(weights=None)
    return nn.Sequential(
        nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool),
        r.layer1[0], r.layer2[0],
        nn.Sequential(r.avgpool, nn.Flatten(), nn.Linear(r.layer2[0].conv2.out_channels, r.fc.out_features)),
    )


def variants(model: nn.Sequential, x: torch.Tensor, disk_min_bytes: int) -> dict[str, Factory]:
    blocks = [str(i) for i in range(len(model) - 1)]  # stem + every residual block, not the head
    keep = [model, x]  # buffers and the batch are alive anyway: copying them would only add memory
    found: dict[str, Factory] = {
        "baseline": contextlib.nullcontext,
        "ledger": lambda: hooklab.SavedTensorLedger(model),
        "disk": lambda: hooklab.SaveOnDisk(min_bytes=disk_min_bytes, keep=keep),
        "bf16": lambda: hooklab.CompressSaved("bf16", keep=keep),
        "int8": lambda: hooklab.CompressSaved("int8", keep=keep),
        "checkpoint": lambda: hooklab.checkpoint_modules(model, blocks),
        "overlap": lambda: hooklab.OverlappedOffload(min_bytes=disk_min_bytes, keep=keep, keep_last=2),
    }
    if x.is_cuda:  # tens of GB to disk is not a variant anyone would run; the plain copy to the CPU is
        del found["disk"]
        found["cpu"] = lambda: hooklab.SaveOnCpu(min_bytes=disk_min_bytes, pin_memory=True, keep=keep)
    return found


@dataclass
class PlanRow:
    """A planner row: its budget (bytes the meter may see after forward), the plan or why there is none."""

    name: str
    budget: int
    make: Factory | None
    choices: str = ""
    why: str = ""


CODES = {"keep": "k", "checkpoint": "C", "offload": "o", "bf16": "b", "int8": "i"}


def planner_rows(model: nn.Sequential, x: torch.Tensor, target: torch.Tensor, base_saved: int,
                 repeats: int) -> tuple[list[PlanRow], hooklab.MemoryPlanner]:
    """One plan per budget (a fraction of the baseline's measured saved bytes), or why there is none."""
    loss_fn = nn.CrossEntropyLoss()
    blocks = [str(i) for i in range(len(model) - 1)]
    planner = hooklab.MemoryPlanner(model, lambda: loss_fn(model(x), target), blocks,
                                    choices=("keep", "checkpoint", "offload", "bf16", "int8"), max_error=MAX_ERROR,
                                    min_bytes=16 * 1024, repeats=repeats, keep=[x, target])
    # the meter also counts what the planner's model leaves out (the logits, the loss): the same for every plan
    overhead = max(base_saved - planner.baseline_bytes, 0)
    rows = []
    for n in BUDGETS:
        budget = base_saved // n
        try:
            plan = planner.plan(max(budget - overhead, 0))
        except hooklab.BudgetError as error:
            rows.append(PlanRow(f"plan 1/{n}", budget, None, why=str(error).split(". ")[0]))
            continue
        rows.append(PlanRow(f"plan 1/{n}", budget, plan.apply, "".join(CODES[c] for c in plan.choices.values())))
    return rows, planner


def measure_memory(model: nn.Module, x: torch.Tensor, target: torch.Tensor, make: Factory) -> tuple[int, int]:
    """(bytes alive after forward, peak bytes during forward + backward) of one step."""
    loss_fn = nn.CrossEntropyLoss()
    model.zero_grad(set_to_none=False)  # gradients already allocated: not counted
    ignore = [*model.parameters(), *model.buffers(), x, target,
              *(p.grad for p in model.parameters() if p.grad is not None)]
    with hooklab.MemoryMeter(ignore=ignore) as meter:
        with make():
            loss = loss_fn(model(x), target)
        saved = meter.mark()
        loss.backward()
        del loss
    return saved, meter.peak_bytes


def time_steps(model: nn.Module, x: torch.Tensor, target: torch.Tensor, factories: dict[str, Factory],
               repeats: int, cuda: bool = False) -> dict[str, float]:
    """Median seconds of one training step per variant, variants interleaved."""
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times: dict[str, list[float]] = {name: [] for name in factories}

    def step(make: Factory) -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with make():
            loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    for make in factories.values():  # warm-up
        step(make)
    for _ in range(repeats):
        for name, make in factories.items():
            times[name].append(step(make))
    return {name: statistics.median(ts) for name, ts in times.items()}


def gpu_save_on_cpu(batch: int, size: int, repeats: int) -> list[str]:
    """GPU memory and time with torch.autograd.graph.save_on_cpu(pin_memory=True), or why skipped."""
    if not torch.cuda.is_available():
        return ["GPU save_on_cpu: skipped: no GPU (torch.cuda.is_available() is False)"]
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).to(device)
    x = torch.randn(batch, 3, size, size, device=device)
    target = torch.randint(0, 1000, (batch,), device=device)
    loss_fn = nn.CrossEntropyLoss()
    rows = {}
    for name, make in [("baseline", contextlib.nullcontext),
                       ("save_on_cpu", lambda: torch.autograd.graph.save_on_cpu(pin_memory=True))]:
        ts, peaks = [], []
        for i in range(repeats + 1):
            model.zero_grad(set_to_none=False)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            start = time.perf_counter()
            with make():
                loss = loss_fn(model(x), target)
            loss.backward()
            torch.cuda.synchronize()
            if i:  # first one is the warm-up
                ts.append(time.perf_counter() - start)
                peaks.append(torch.cuda.max_memory_allocated() - base)
            del loss
        rows[name] = (max(peaks), statistics.median(ts))
    (base_peak, base_t), (cpu_peak, cpu_t) = rows["baseline"], rows["save_on_cpu"]
    return [
        f"GPU save_on_cpu ({torch.cuda.get_device_name()}, resnet18, batch {batch}, {size}x{size}):",
        f"  peak GPU memory above the model {base_peak / MiB:.0f} MiB -> {cpu_peak / MiB:.0f} MiB "
        f"({base_peak / max(cpu_peak, 1):.1f}x less) at {cpu_t / base_t:.1f}x the step time",
        "  (tutorial: ResNet-152, batch 256, A100: 48 GB -> 5 GB at 6x slower)",
    ]


def compile_rows(model: nn.Sequential, x: torch.Tensor, target: torch.Tensor, repeats: int,
                 print_fn: Callable[[str], Any]) -> dict[float, dict[str, float]]:
    """torch.compile (backend aot_eager: AOTAutograd's partitioner, no code generation) at activation_memory_budget
    1, 1/2, 1/4, 1/10: bytes the compiled graph saves for backward (its CompiledFunctionBackward node's saved
    tensors, parameters, buffers and the batch left out), step time against the eager step, gradient error."""
    from torch._functorch import config as functorch_config

    loss_fn = nn.CrossEntropyLoss()
    alive = {t.untyped_storage().data_ptr() for t in [x, target, *model.parameters(), *model.buffers()]}

    def eager_grads() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        loss_fn(model(x), target).backward()
        return torch.cat([p.grad.flatten().double() for p in model.parameters()])

    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    reference = eager_grads()
    results: dict[float, dict[str, float]] = {}
    for budget in (1.0, *(1 / n for n in BUDGETS)):
        torch._dynamo.reset()
        with functorch_config.patch(activation_memory_budget=budget):
            compiled = torch.compile(model, backend="aot_eager")
            model.zero_grad(set_to_none=True)
            torch.manual_seed(0)
            out = compiled(x)  # compiles here
            saved = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                     for t in out.grad_fn.saved_tensors if t.untyped_storage().data_ptr() not in alive}
            loss_fn(out, target).backward()
            grads = torch.cat([p.grad.flatten().double() for p in model.parameters()])
            del out
            times = {"eager": [], "compiled": []}
            for _ in range(repeats):
                for name, fn in (("eager", model), ("compiled", compiled)):
                    start = time.perf_counter()
                    loss_fn(fn(x), target).backward()
                    times[name].append(time.perf_counter() - start)
        results[budget] = {"saved": sum(saved.values()),
                           "time": statistics.median(a / b for a, b in zip(times["compiled"], times["eager"])),
                           "grad_err": ((grads - reference).norm() / reference.norm()).item()}
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
    torch._dynamo.reset()
    model.zero_grad(set_to_none=False)
    base = results[1.0]["saved"]
    print_fn("")
    print_fn("torch.compile(backend='aot_eager') with activation_memory_budget (the partitioner's min-cut recompute); "
             "bytes the compiled graph saves, relative to budget 1; time relative to the eager step in the same round")
    header = f"{'budget':<11} {'saved MiB':>9} {'x less':>7} {'time x':>7} {'grad err':>9}"
    print_fn(header)
    print_fn("-" * len(header))
    for budget, r in results.items():
        print_fn(f"{budget:<11.2f} {r['saved'] / MiB:>9.2f} {base / max(r['saved'], 1):>7.2f} {r['time']:>7.2f} "
                 f"{r['grad_err']:>9.1e}")
    return results


def run(quick: bool = False, batch: int | None = None, size: int | None = None, repeats: int | None = None,
        threads: int = 1, device: str = "cpu", planner: bool = True, compile: bool = False,
        print_fn: Callable[[str], Any] = print) -> dict[str, dict[str, float]]:
    cuda = device.startswith("cuda")
    depth = 152 if cuda else 18
    model_name = "resnet18 stem + layer1.0 + layer2.0 (--quick)" if quick else f"resnet{depth}"
    batch = batch or (2 if quick else 256 if cuda else 8)
    size = size or (32 if quick else 224 if cuda else 128)
    repeats = repeats or (1 if quick else 5)
    torch.set_num_threads(threads)
    model = (quick_resnet(seed=0) if quick else sequential_resnet(seed=0, depth=depth)).to(device)
    torch.manual_seed(1)
    x = torch.randn(batch, 3, size, size, device=device)
    target = torch.randint(0, 1000, (batch,), device=device)
    factories = variants(model, x, disk_min_bytes=16 * 1024)
    loss_fn = nn.CrossEntropyLoss()

    # a first step allocates the gradients (kept allocated from then on)
    loss_fn(model(x), target).backward()

    results: dict[str, dict[str, float]] = {}
    for name, make in factories.items():
        saved, peak = measure_memory(model, x, target, make)
        results[name] = {"saved": saved, "peak": peak}
    plans: list[PlanRow] = []
    if planner:
        plans, _ = planner_rows(model, x, target, int(results["baseline"]["saved"]), 1 if quick else 3)
        for row in plans:
            if row.make is not None:
                factories[row.name] = row.make
                saved, peak = measure_memory(model, x, target, row.make)
                results[row.name] = {"saved": saved, "peak": peak}
    for name, make in factories.items():
        err = 0.0 if name == "baseline" else hooklab.gradient_error(model, lambda: loss_fn(model(x), target), make)
        results[name]["grad_err"] = err
    for name, seconds in time_steps(model, x, target, factories, repeats, cuda).items():
        results[name]["time"] = seconds

    base = results["baseline"]
    where = torch.cuda.get_device_name() if cuda else "CPU"
    print_fn(f"{model_name} on {where}, batch {batch}, {size}x{size}, {threads} thread(s), "
             f"median of {repeats} step(s) after warm-up, torch {torch.__version__.split('+')[0]}")
    header = f"{'variant':<11} {'saved MiB':>9} {'x less':>7} {'peak MiB':>9} {'time x':>7} {'grad err':>9}"
    print_fn(header)
    print_fn("-" * len(header))
    for name, r in results.items():
        less = base["saved"] / max(r["saved"], 1)
        print_fn(f"{name.replace(' ', '_'):<11} {r['saved'] / MiB:>9.2f} {less:>7.{2 if less < 100 else 0}f} "
                 f"{r['peak'] / MiB:>9.2f} {r['time'] / base['time']:>7.2f} {r['grad_err']:>9.1e}")
    print_fn("")
    for name, (min_less, max_time, max_err) in {**TARGETS, **(GPU_TARGETS if cuda else {})}.items():
        r = results[name]
        less, slow = base["saved"] / max(r["saved"], 1), r["time"] / base["time"]
        ok = less >= min_less and slow <= max_time and (max_err is None or r["grad_err"] < max_err)
        err_part = f", grad err < {max_err:g}" if max_err is not None else ""
        print_fn(f"target {name}: >= {min_less:g}x less at <= {max_time:g}x time{err_part}: "
                 f"{'met' if ok else 'NOT met'} ({less:.2f}x less, {slow:.2f}x time)")
    if not cuda:
        print_fn("target overlap: >= 10x less at <= 1.5x time: not measured (no GPU: run --device cuda where one is)")
    for row in plans:
        singles = {name: results[name] for name in SINGLE
                   if name in results and results[name]["saved"] <= row.budget and results[name]["grad_err"] < MAX_ERROR}
        others = ", ".join(f"{n} {r['time'] / base['time']:.2f}x" for n, r in singles.items()) or "none"
        prefix = f"{row.name} (budget {row.budget / MiB:.2f} MiB):"
        if row.make is None:
            print_fn(f"{prefix} cannot be met: {row.why}; single strategies that meet it: {others}")
            continue
        r = results[row.name]
        met = "met" if r["saved"] <= row.budget else "NOT met"
        fastest = min([r["time"], *(s["time"] for s in singles.values())])
        verdict = ("fastest" if r["time"] <= fastest else
                   f"slower than the best single strategy by {r['time'] / fastest:.2f}x")
        print_fn(f"{prefix} {met}, plan {row.choices}; {r['time'] / base['time']:.2f}x time, {verdict}; "
                 f"single strategies that meet it: {others}")
    if plans:
        print_fn("plan codes per block: k keep, C checkpoint, o offload (disk on a CPU, overlapped to CPU memory on "
                 f"a GPU), b bf16, i int8 (compression only where the gradient error < {MAX_ERROR:g})")
    if compile:
        compile_rows(model, x, target, repeats, print_fn)
    if not cuda:
        for line in gpu_save_on_cpu(batch=32 if quick else 128, size=size if quick else 224, repeats=repeats):
            print_fn(line)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a cut ResNet-18 (stem + 2 blocks), tiny inputs, one repeat (smoke test)")
    parser.add_argument("--batch", type=int, help="batch size (default 8; quick: 2)")
    parser.add_argument("--size", type=int, help="image side in pixels (default 128; quick: 32)")
    parser.add_argument("--repeats", type=int, help="timed steps per variant (default 5; quick: 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu (ResNet-18) or cuda (ResNet-152, batch 256, 224x224)")
    parser.add_argument("--no-planner", action="store_true", help="skip the planner rows")
    parser.add_argument("--compile", action="store_true",
                        help="also torch.compile (aot_eager) at activation_memory_budget 1, 1/2, 1/4, 1/10 (minutes)")
    args = parser.parse_args(argv)
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        parser.error(f"--device must be cpu or cuda, got {args.device!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU is visible here (torch.cuda.is_available() is False)")
    for name in ("batch", "size", "repeats", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be a positive integer, got {value}")
    run(quick=args.quick, batch=args.batch, size=args.size, repeats=args.repeats, threads=args.threads,
        device=args.device, planner=not args.no_planner, compile=args.compile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
