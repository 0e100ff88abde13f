"""Activation memory against step time on models the planner was not tuned on: ``MemoryPlanner.decide`` against
every alternative that meets the same budget, in the same run.

Models (random weights from configs, nothing downloaded), each as a flat ``nn.Sequential`` of its blocks where it is
a chain: timm's ViT-S/16 (``vit_small_patch16_224``, batch 4 x 3 x 224 x 224), GPT-2 small (12 layers, width 768,
12 heads, vocabulary 50257, batch 4 x 256 tokens, from ``GPT2Config``), torchvision's ResNet-50 (``weights=None``,
batch 4 x 3 x 224 x 224) and a diffusers ``UNet2DModel`` from a small config (batch 4 x 3 x 64 x 64; not a chain:
its up blocks take the down blocks' outputs, so ``checkpoint_sequential`` does not apply)::

    nice -n 10 timeout 24h .venv/bin/python -m benchmarks.bench_memory         # all four (hours on 2 busy cores)
    .venv/bin/python -m benchmarks.bench_memory --model vit,unet --rounds 3    # some of them
    .venv/bin/python -m benchmarks.bench_memory --quick                        # smoke run: tiny configs (a minute)
    .venv/bin/python -m benchmarks.bench_memory --device cuda                  # GPU rows: ResNet-152, batch 256

What it does, per model. (1) ``hooklab.MemoryPlanner`` measures the model (its own choice of plans: keep,
checkpoint, segment, offload, bf16, int8 with a gradient error < 1e-2). (2) At budgets of 1/2, 1/4 and 1/10 of the
bytes held after forward without a plan, ``planner.decide(budget)`` (defaults: its three best plans,
``checkpoint_sequential``, ``torch.compile`` with ``activation_memory_budget`` on ``--backends``, 5 rounds,
a bound of 100 steps' time) measures and chooses; its choice, reason and measuring cost are printed. (3) Then every
variant is measured again, independently, in fresh interleaved rounds: the model as it is, each single strategy
(disk or CPU offload, bf16, int8, every block checkpointed), plain ``checkpoint_sequential`` at every segment
count whose bytes meet 1/2 (the bytes of every count are printed: they are not monotonic), every plan and compiled
model the decisions measured. (4) Per budget, the decision's choice is compared round by round with the fastest
other variant that meets the budget (gradient error < 1e-2): "slower" only when it is slower in every round and by
more at the median than the run's own spread (the A/A ratio of the model as it is, timed twice in each round half a
round apart: ``baseline_again``), "faster" likewise, "tie (within the A/A spread)" when every round agrees but by
less, otherwise "tie (within the spread)"; and so is the plan the planner's time model alone would have picked. The
last lines are the README's table, as Markdown.

How it is measured. Bytes: held after forward (tensors made by the forward pass and alive when it ends, the loss
and the inputs left out): ``hooklab.MemoryMeter`` for eager variants, a walk of the autograd graph for compiled ones
(their ops run below the meter). Peak: the meter's peak during forward and backward (eager only). Time: the step
(forward, backward, SGD step) of every variant once per round, each round starting one variant later; a ratio is a
variant's time over the baseline's in the same round, on the process's CPU clock (on a GPU the wall clock after a
synchronisation), shown as median [min-max] over the rounds. Gradient error: relative L2 error of all parameter
gradients against the baseline's, same seed. The script's own wall and CPU time are printed at the end.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

if __package__ in (None, ""):  # run as a file (python benchmarks/x.py); python -m benchmarks.x needs no help
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import hooklab  # noqa: E402
from benchmarks.memory_models import SETUPS, Setup, resnet_setup  # noqa: E402
from benchmarks.ratios import Spread, load  # noqa: E402
from hooklab.planner.alternatives import graph_saved_bytes  # noqa: E402

MiB = 1024 * 1024
BUDGETS = (2, 4, 10)  # budgets of 1/2, 1/4, 1/10 of the bytes held after forward without a plan
MAX_ERROR = 1e-2  # the gradient error the planner may spend on compression, and that an alternative may have
PLAN_CHOICES = ("keep", "checkpoint", "segment", "offload", "bf16", "int8")
MODELS = ("vit", "resnet50", "unet", "gpt2")  # the heaviest last
GPU_TARGET = (10.0, 1.5)  # OverlappedOffload on a GPU: at least 10x less held, at most 1.5x the step
AGAIN = "baseline_again"  # the model as it is once more, half a round later: the run's own spread (an A/A ratio)


# ----------------------------------------------------------------------------------------- variants
@dataclass
class Variant:
    """One way to run the forward: ``run()`` returns the loss (backward is run outside)."""

    name: str
    run: Callable[[], torch.Tensor]
    kind: str = "eager"           # "eager", "compiled" (bytes by the graph walk) or "reference" (not compared)
    held: int = 0
    peak: int | None = None
    grad_err: float = 0.0
    times: list[float] = field(default_factory=list)        # primary clock, per round
    wall: list[float] = field(default_factory=list)


@contextlib.contextmanager
def sequential_checkpoints(model: nn.Sequential, segments: int) -> Iterator[None]:
    """Inside, ``model(x)`` is ``torch.utils.checkpoint.checkpoint_sequential(model, segments, x)`` (the last
    segment runs without a checkpoint, as checkpoint_sequential does)."""
    model.forward = lambda x: torch.utils.checkpoint.checkpoint_sequential(  # type: ignore[method-assign]
        model, segments, x, use_reentrant=False)
    try:
        yield
    finally:
        del model.forward


def under(s: Setup, make: Callable[[], Any]) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        with make():
            return s.forward()
    return run


MIN_BYTES = 16 * 1024  # the smallest saved tensor an offloading variant moves, the planner's too


def single_variants(s: Setup, cuda: bool) -> list[Variant]:
    """The model as it is, and each strategy applied to the whole model."""
    keep = [s.model, *s.keep]
    out = [Variant("baseline", under(s, contextlib.nullcontext))]
    if cuda:  # tens of GB to disk is not a variant anyone would run; the plain copy to the CPU is
        out.append(Variant("cpu", under(s, lambda: hooklab.SaveOnCpu(min_bytes=MIN_BYTES, pin_memory=True,
                                                                       keep=keep))))
    else:
        out.append(Variant("disk", under(s, lambda: hooklab.SaveOnDisk(min_bytes=MIN_BYTES, keep=keep))))
    out += [Variant("bf16", under(s, lambda: hooklab.CompressSaved("bf16", keep=keep))),
            Variant("int8", under(s, lambda: hooklab.CompressSaved("int8", keep=keep))),
            Variant("checkpoint", under(s, lambda: hooklab.checkpoint_modules(s.model, s.blocks)))]
    if cuda:  # on a CPU it is SaveOnCpu, which moves nothing
        out.append(Variant("overlap", under(s, lambda: hooklab.OverlappedOffload(min_bytes=MIN_BYTES, keep=keep,
                                                                                  keep_last=2))))
    return out


def sequential_variants(s: Setup) -> list[Variant]:
    assert isinstance(s.model, nn.Sequential)
    model = s.model
    return [Variant(f"seq_{n}", under(s, lambda n=n: sequential_checkpoints(model, n)))
            for n in range(2, len(model) + 1)]


def variant_name(candidate: Any) -> str:
    """The benchmark's name for a decision's candidate."""
    option = candidate.option
    if candidate.kind == "checkpoint_sequential":
        return f"seq_{option.segments}"
    if candidate.kind == "checkpoint":  # torch.utils.checkpoint around each block: the single variant "checkpoint"
        return "checkpoint"
    if candidate.kind == "torch.compile":
        return f"{option.backend}@{option.fraction:.3g}"
    if candidate.kind == "as is":
        return "baseline"
    if isinstance(option, hooklab.OffloadStep):  # on a CPU the variant "disk": the same SaveOnDisk, keep and size
        same = option.device.type == "cpu" and option.min_bytes == MIN_BYTES
        return "disk" if same else "offload_step"
    return f"plan_{option.codes}"


def candidate_variants(s: Setup, decisions: dict[int, Any], have: set[str]) -> list[Variant]:
    """Every plan and compiled model the decisions measured, once each (their own ``apply()``)."""
    out = []
    for decision in decisions.values():
        for c in decision.candidates:
            name = variant_name(c)
            if name in have or c.kind == "checkpoint_sequential" or c.held_bytes is None:
                continue
            have.add(name)
            out.append(Variant(name, under(s, c.apply), kind="compiled" if c.kind == "torch.compile" else "eager"))
    return out


# --------------------------------------------------------------------------------------- measuring
def measure_memory(s: Setup, v: Variant, reference: list[torch.Tensor] | None) -> list[torch.Tensor]:
    """Bytes held after forward (and the peak, eager) and the gradients of one step, same seed; returns them."""
    model = s.model
    model.zero_grad(set_to_none=False)  # gradients already allocated: not counted
    params = [p for p in model.parameters() if p.requires_grad]
    ignore = [*model.parameters(), *model.buffers(), *s.keep, *(p.grad for p in params if p.grad is not None)]
    torch.manual_seed(0)
    if v.kind == "compiled":
        loss = v.run()
        v.held = graph_saved_bytes(loss, {t.untyped_storage().data_ptr() for t in ignore})
        loss.backward()
    else:
        with hooklab.MemoryMeter(ignore=ignore) as meter:
            loss = v.run()
            v.held = meter.mark() - loss.untyped_storage().nbytes()
            loss.backward()
        v.peak = meter.peak_bytes
    del loss
    grads = [p.grad.detach().clone() for p in params]
    if reference is not None:
        diff = torch.cat([(g - r).flatten().double() for g, r in zip(grads, reference, strict=True)])
        norm = torch.cat([r.flatten().double() for r in reference]).norm()
        v.grad_err = (diff.norm() / norm).item()
    model.zero_grad(set_to_none=False)
    return grads


def time_rounds(s: Setup, variants: list[Variant], rounds: int, repeats: int, cuda: bool) -> None:
    """Steps of every variant in interleaved rounds (each round starts one variant later), both clocks."""
    opt = torch.optim.SGD(s.model.parameters(), lr=1e-4)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step(v: Variant) -> None:
        loss = v.run()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    gc.collect()
    for v in variants:  # warm-up
        step(v)
    for r in range(rounds):
        k = r % len(variants)
        for v in variants[k:] + variants[:k]:
            sync()
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(repeats):
                step(v)
            sync()
            cpu, wall = (time.process_time() - cpu) / repeats, (time.perf_counter() - wall) / repeats
            v.times.append(wall if cuda else cpu)
            v.wall.append(wall)


def ratio(v: Variant, base: Variant) -> Spread:
    return Spread.of([a / b for a, b in zip(v.times, base.times, strict=True)])


def noise(variants: list[Variant]) -> float:
    """The run's own spread: the largest distance from 1 of the per-round ratio of the model as it is timed twice
    in each round, half a round apart: two runs of the same steps that differ by nothing but the moment they ran."""
    again = next(v for v in variants if v.name == AGAIN)
    return max(abs(r - 1) for r in (a / b for a, b in zip(again.times, variants[0].times, strict=True)))


def compare(a: Variant, b: Variant, spread: float) -> tuple[Spread, str]:
    """``a`` over ``b`` per round, and the verdict only where the rounds and the run's own spread decide: "slower"
    when ``a`` was slower in every round and by more than ``spread`` at the median ("faster" likewise); slower or
    faster in every round by less is "tie (within the A/A spread)"; otherwise "tie (within the spread)"."""
    per_round = Spread.of([x / y for x, y in zip(a.times, b.times, strict=True)])
    if per_round.low > 1 or per_round.high < 1:
        beyond = abs(per_round.median - 1) > spread
        return per_round, (("slower" if per_round.low > 1 else "faster") if beyond
                           else "tie (within the A/A spread)")
    return per_round, "tie (within the spread)"


# ---------------------------------------------------------------------------------------- one model
@dataclass
class Row:
    """One line of the README's table."""

    model: str
    budget: str
    cells: list[str]


def run_model(s: Setup, *, backends: tuple[str, ...], rounds: int, repeats: int, decide_rounds: int,
              decide_seconds: float | None, cuda: bool, print_fn: Callable[[str], Any]) -> list[Row]:
    print_fn(f"== {s.description}")
    model = s.model
    s.forward().backward()  # a first step allocates the gradients (kept allocated from then on)
    start = time.process_time()
    planner = hooklab.MemoryPlanner(model, s.forward, s.blocks, choices=PLAN_CHOICES, max_error=MAX_ERROR,
                                    min_bytes=MIN_BYTES, keep=s.keep)
    print_fn(f"planner: {len(s.blocks)} blocks measured in {time.process_time() - start:.1f} s of CPU; "
             f"{planner.baseline_bytes / MiB:.2f} MiB held after forward without a plan")
    decisions: dict[int, Any] = {}
    picks: dict[int, str] = {}
    for n in BUDGETS:
        budget = planner.baseline_bytes // n
        try:
            picks[n] = "plan_" + planner.plan(budget).codes
        except hooklab.BudgetError:
            picks[n] = "none"
        try:
            d = planner.decide(budget, backends=backends, rounds=decide_rounds, max_seconds=decide_seconds)
        except hooklab.BudgetError as error:
            print_fn(f"decide 1/{n} ({budget / MiB:.2f} MiB): nothing meets it: {str(error).split('. ')[0]}")
            continue
        decisions[n] = d
        print_fn(f"decide 1/{n} ({budget / MiB:.2f} MiB): {variant_name(d.chosen)} = {d.chosen.name}: {d.reason}; "
                 f"measuring {d.seconds:.1f} s CPU ({d.wall_seconds:.1f} s wall, bound {d.max_seconds:.0f} s), "
                 f"{d.rounds} rounds, {sum(1 for c in d.candidates if c.times)} candidates timed")
        for note in d.notes:
            print_fn(f"  {note}")
    variants = single_variants(s, cuda)
    if isinstance(model, nn.Sequential):
        variants += sequential_variants(s)
    variants += candidate_variants(s, decisions, {v.name for v in variants})
    # the model as it is, timed a second time half a round away from the first (rounds rotate the order)
    variants.insert(len(variants) // 2 + 1, Variant(AGAIN, variants[0].run, kind="reference"))
    reference = measure_memory(s, variants[0], None)
    for v in variants[1:]:
        measure_memory(s, v, reference)
    seq = [v for v in variants if v.name.startswith("seq_")]
    if seq:
        print_fn("checkpoint_sequential, MiB held after forward by segment count: "
                 + ", ".join(f"{v.name[4:]}: {v.held / MiB:.2f}" for v in seq))
    # a checkpoint_sequential count, plan or compiled model that does not meet the loosest budget is nobody's
    # alternative: not timed
    late = [v for v in variants if v.name.startswith(("seq_", "plan_")) or v.kind == "compiled"]
    late = [v for v in late if v.held > planner.baseline_bytes // BUDGETS[0]]
    variants = [v for v in variants if v not in late]
    if late:
        print_fn(f"not timed (they hold more than 1/{BUDGETS[0]}): {', '.join(v.name for v in late)}")
    time_rounds(s, variants, rounds, repeats, cuda)
    clock = "wall" if cuda else "cpu"
    print_fn(f"{rounds} interleaved rounds x {repeats} step(s), median [min-max] of the per-round ratios, {clock} "
             f"clock; {load()}")
    rows = report(s, variants, decisions, picks, planner.baseline_bytes, clock, cuda, print_fn)
    torch._dynamo.reset()
    return rows


def report(s: Setup, variants: list[Variant], decisions: dict[int, Any], picks: dict[int, str], baseline: int,
           clock: str, cuda: bool, print_fn: Callable[[str], Any]) -> list[Row]:
    base = variants[0]
    header = (f"{'variant':<18} {'held MiB':>9} {'x less':>7} {'peak MiB':>9} {'time x (' + clock + ')':>19} "
              f"{'wall x':>6} {'grad err':>9}")
    print_fn(header)
    print_fn("-" * len(header))
    for v in variants:
        less = base.held / max(v.held, 1)
        peak = "-" if v.peak is None else f"{v.peak / MiB:.2f}"
        wall = statistics.median(a / b for a, b in zip(v.wall, base.wall, strict=True))
        print_fn(f"{v.name:<18} {v.held / MiB:>9.2f} {less:>7.{2 if less < 100 else 0}f} {peak:>9} "
                 f"{str(ratio(v, base)):>19} {wall:>6.2f} {v.grad_err:>9.1e}")
    print_fn("")
    spread = noise(variants)
    print_fn(f"the run's own spread (A/A: the model as it is twice in each round, half a round apart): {spread:.1%}; a "
             "verdict of slower or faster needs every round and more than it at the median")
    if base.held != baseline:
        print_fn(f"note: the planner's baseline ({baseline} bytes) and the meter's ({base.held}) differ")
    by_name = {v.name: v for v in variants}
    if cuda:
        v = by_name["overlap"]
        less, slow = base.held / max(v.held, 1), ratio(v, base)
        judged = ("met" if less >= GPU_TARGET[0] and slow.high <= GPU_TARGET[1] else
                  "NOT met" if less < GPU_TARGET[0] or slow.low > GPU_TARGET[1] else "within noise")
        print_fn(f"target overlap: >= {GPU_TARGET[0]:g}x less at <= {GPU_TARGET[1]:g}x time: {judged} "
                 f"({less:.2f}x less, {slow}x time)")
    else:
        print_fn("target overlap: >= 10x less at <= 1.5x time: not measured (no GPU: run --device cuda where one is)")
    rows = []
    for n in BUDGETS:
        budget = baseline // n
        prefix = f"budget 1/{n} ({budget / MiB:.2f} MiB):"
        meeting = [v for v in variants[1:] if v.kind != "reference" and v.held <= budget and v.grad_err < MAX_ERROR]
        meeting.sort(key=lambda v: ratio(v, base).median)
        listed = ", ".join(f"{v.name} {ratio(v, base)}" for v in meeting) or "none"
        d = decisions.get(n)
        if d is None:
            print_fn(f"{prefix} no decision (nothing the planner measured meets it); variants that meet it: {listed}")
            rows.append(Row(s.name, f"1/{n}", ["nothing meets it", "-", "-", listed, "-", "-", "-", "-"]))
            continue
        chosen = by_name[variant_name(d.chosen)]
        met = "met" if chosen.held <= budget else "NOT met"
        others = [v for v in meeting if v is not chosen]
        if others:
            per_round, verdict = compare(chosen, others[0], spread)
            versus = f"x {others[0].name}, per round: {per_round}: {verdict}"
        else:
            per_round, verdict, versus = None, "the only variant that meets it", "no other variant meets it"
        pick = by_name.get(picks[n])
        own = "-"
        if pick is not None and others:
            fastest_other = [v for v in meeting if v is not pick][:1]
            if fastest_other:
                p_round, p_verdict = compare(pick, fastest_other[0], spread)
                own = f"{pick.name}: {p_round} ({p_verdict})"
        print_fn(f"{prefix} decided {chosen.name} {met} ({chosen.held / MiB:.2f} MiB), {ratio(chosen, base)}x time; "
                 f"{versus}; the time model's own pick {own}; measuring {d.seconds:.0f} s; variants that meet it, "
                 f"fastest first: {listed}")
        rows.append(Row(s.name, f"1/{n}", [
            f"`{chosen.name}`", f"{chosen.held / MiB:.2f} ({budget / MiB:.2f})", str(ratio(chosen, base)),
            f"`{others[0].name}` {ratio(others[0], base)}" if others else "-",
            str(per_round) if per_round else "-", verdict, own.replace(pick.name, f"`{pick.name}`") if pick else "-",
            f"{d.seconds:.0f}"]))
    print_fn("variant names: seq_n checkpoint_sequential with n segments; plan_<codes> a MemoryPlan, one letter per "
             "block: k keep, C checkpoint, s segment (with the block before), o offload (disk on a CPU, CPU memory "
             f"on a GPU), b bf16, i int8 (compression only where the block's gradient error < {MAX_ERROR:g}); "
             "backend@f torch.compile with activation_memory_budget f")
    return rows


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


def markdown(rows: list[Row]) -> list[str]:
    """The README's table: one row per model and budget."""
    out = ["| model | budget | decided | MiB held (budget) | step x | fastest other that meets it | decided / it, "
           "per round | verdict | the time model's own pick / fastest other | measuring s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {r.model} | {r.budget} | " + " | ".join(r.cells) + " |" for r in rows]
    return out


def run(models: tuple[str, ...] = MODELS, *, quick: bool = False, rounds: int | None = None,
        repeats: int | None = None, threads: int = 1, device: str = "cpu", backends: tuple[str, ...] | None = None,
        decide_rounds: int = 5, decide_seconds: float | None = None,
        print_fn: Callable[[str], Any] = print) -> list[Row]:
    cuda = device.startswith("cuda")
    rounds = rounds or (2 if quick else 5)
    repeats = repeats or 1
    backends = backends if backends is not None else (("aot_eager",) if quick else ("inductor",))
    torch.set_num_threads(threads)
    wall, cpu = time.perf_counter(), time.process_time()
    print_fn(f"torch {torch.__version__.split('+')[0]}, {threads} thread(s), {'GPU' if cuda else 'CPU'}; "
             f"{load()} at the start; compile backends: {', '.join(backends) or 'none'}")
    rows: list[Row] = []
    for name in models:
        setup = resnet_setup(quick, device, 152) if name == "resnet152" else SETUPS[name](quick, device)
        done = run_model(setup, backends=backends, rounds=rounds, repeats=repeats,
                         decide_rounds=2 if quick else decide_rounds, decide_seconds=decide_seconds, cuda=cuda,
                         print_fn=print_fn)
        rows += done
        print_fn(f"{name}'s rows of the table: {time.perf_counter() - wall:.0f} s wall so far")
        for line in markdown(done)[2:]:
            print_fn(line)
        print_fn("")
    for line in markdown(rows):
        print_fn(line)
    if not cuda:
        for line in gpu_save_on_cpu(batch=32 if quick else 128, size=32 if quick else 224, repeats=repeats):
            print_fn(line)
    print_fn(f"benchmark: {time.perf_counter() - wall:.0f} s wall, {time.process_time() - cpu:.0f} s CPU; "
             f"{load()} at the end")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="all",
                        help="vit, resnet50, unet, gpt2, resnet152 (the tutorial's GPU case), several separated by "
                             "commas, or all (default: the four; on a GPU also resnet152)")
    parser.add_argument("--quick", action="store_true", help="tiny configs, two rounds (smoke test)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds of the final timing (default 5; quick: 2)")
    parser.add_argument("--repeats", type=int, help="steps per variant per round (default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--backends", help="comma-separated torch.compile backends the decisions try, or 'none' "
                                           "(default: inductor; quick: aot_eager)")
    parser.add_argument("--decide-rounds", type=int, default=5, help="MemoryPlanner.decide's rounds (default 5)")
    parser.add_argument("--decide-seconds", type=float,
                        help="MemoryPlanner.decide's measuring bound (default: its own, 100 steps' time)")
    args = parser.parse_args(argv)
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        parser.error(f"--device must be cpu or cuda, got {args.device!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU is visible here (torch.cuda.is_available() is False); the GPU rows "
                     "run only where one is (./course test hides it unless HOOKLAB_TEST_GPU=1)")
    for name in ("rounds", "repeats", "threads", "decide_rounds"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    if args.decide_rounds < 2:
        parser.error("--decide-rounds must be at least 2 (a spread needs two rounds)")
    backends = None if args.backends is None else tuple(b for b in args.backends.split(",") if b and b != "none")
    cuda = args.device.startswith("cuda")
    models = (*MODELS, *(("resnet152",) if cuda else ())) if args.model == "all" else tuple(args.model.split(","))
    unknown = [m for m in models if m not in (*MODELS, "resnet152")]
    if unknown:
        parser.error(f"--model: unknown {', '.join(unknown)}; choose among {', '.join(MODELS)}, resnet152 or all")
    run(models, quick=args.quick, rounds=args.rounds, repeats=args.repeats, threads=args.threads,
        device=args.device, backends=backends, decide_rounds=args.decide_rounds, decide_seconds=args.decide_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
