"""Activation memory against step time: the memory planner, plain PyTorch and torch.compile, in the same run.

For each model (the benchmark's ResNet-18 and a GPT-2 built from a config, each as a flat ``nn.Sequential``
of its blocks) it trains SGD steps under every variant and prints, relative to the baseline measured in the
same rounds: the activation bytes held after forward, the peak, the step time and the gradient error. Then,
at budgets of 1/2, 1/4 and 1/10 of the baseline's bytes, it compares the plan of ``hooklab.MemoryPlanner``
with every alternative that meets the same budget: each single strategy, plain
``torch.utils.checkpoint.checkpoint_sequential`` at every segment count, and (``--compile``)
``torch.compile`` with ``activation_memory_budget`` on the ``aot_eager`` and ``inductor`` backends::

    .venv/bin/python -m benchmarks.bench_memory                  # both models, eager variants and the planner
    .venv/bin/python -m benchmarks.bench_memory --compile        # ... and torch.compile (aot_eager, inductor)
    .venv/bin/python -m benchmarks.bench_memory --model gpt2     # one model
    .venv/bin/python -m benchmarks.bench_memory --quick          # smoke run: cut models, tiny inputs (seconds)
    .venv/bin/python -m benchmarks.bench_memory --device cuda    # the tutorial's case: ResNet-152, batch 256

How it is measured. Bytes: tensors created by forward and alive when it ends (what the graph keeps for
backward), by ``hooklab.MemoryMeter`` op by op for the eager variants, and for the compiled ones by walking
the autograd graph from the loss and counting every saved tensor's storage once (a compiled graph runs its
ops below the meter); parameters, buffers, the batch and the labels are left out, copies of them are not
(inductor on a CPU keeps layout-converted copies of the conv weights). Peak: the meter's peak during forward
and backward (eager only). Time: the step (forward, backward, SGD step) of every variant in interleaved
rounds, each round starting one variant later; a variant's ratio is its time over the baseline's in the same
round, on the process's CPU clock (on a GPU: the wall clock after a synchronisation), shown as the median
[min-max] over the rounds. A planner row's verdict compares it round by round with the fastest alternative
that meets its budget (gradient error < 1e-2), and with the fastest that runs the eager kernels (all but
inductor, which generates its own): "slower" only when it is slower in every round, "faster" when it is
faster in every round, otherwise "tie (within the spread)". Gradient error: relative L2 error of
all parameter gradients against the baseline's, with the same seed.
"""
from __future__ import annotations

import argparse
import contextlib
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
from benchmarks.ratios import Spread, load  # noqa: E402

MiB = 1024 * 1024
BUDGETS = (2, 4, 10)  # budgets of 1/2, 1/4, 1/10 of the baseline's saved bytes
MAX_ERROR = 1e-2  # the gradient error the planner may spend on compression, and that an alternative may have
PLAN_CHOICES = ("keep", "checkpoint", "segment", "offload", "bf16", "int8")
CODES = {"keep": "k", "checkpoint": "C", "segment": "s", "offload": "o", "bf16": "b", "int8": "i"}
TARGETS = {"checkpoint": (2.0, 1.5, None), "bf16": (2.0, 1.3, 1e-2)}  # variant: (min x less, max time x, max error)
GPU_TARGETS = {"overlap": (10.0, 1.5, None)}  # the target for overlapped offloading on a GPU


# ------------------------------------------------------------------------------------------- models
@dataclass
class Setup:
    """A model as a flat Sequential (its blocks, then a head), a batch, labels and the loss."""

    name: str
    model: nn.Sequential
    x: torch.Tensor
    target: torch.Tensor
    description: str

    def loss(self, logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits, self.target)

    @property
    def blocks(self) -> list[str]:
        """What the planner plans for: every module but the head."""
        return [str(i) for i in range(len(self.model) - 1)]


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
    block (1x1 conv shortcut) and a head on their 128 channels, as a flat Sequential."""
    torch.manual_seed(seed)
    r = torchvision.models.resnet18(weights=None)
    return nn.Sequential(
        nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool),
        r.layer1[0], r.layer2[0],
        nn.Sequential(r.avgpool, nn.Flatten(), nn.Linear(r.layer2[0].conv2.out_channels, r.fc.out_features)),
    )


def resnet_setup(quick: bool, device: str) -> Setup:
    cuda = device.startswith("cuda")
    depth = 152 if cuda else 18
    batch, size = (2, 32) if quick else (256, 224) if cuda else (8, 128)
    model = (quick_resnet(0) if quick else sequential_resnet(0, depth)).to(device)
    torch.manual_seed(1)
    x = torch.randn(batch, 3, size, size, device=device)
    target = torch.randint(0, 1000, (batch,), device=device)
    what = "resnet18 stem + layer1.0 + layer2.0 (--quick)" if quick else f"resnet{depth}"
    return Setup("resnet", model, x, target, f"{what}, batch {batch}, {size}x{size}")


class _Embed(nn.Module):
    """GPT-2's token and position embeddings (and their dropout), as the first block."""

    def __init__(self, transformer: nn.Module) -> None:
        super().__init__()
        self.wte, self.wpe, self.drop = transformer.wte, transformer.wpe, transformer.drop

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device)))


class _Head(nn.Module):
    """GPT-2's final layer norm and LM head; logits flattened to (batch x tokens, vocabulary)."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.ln_f, self.lm_head = lm.transformer.ln_f, lm.lm_head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(h)).flatten(0, 1)


def gpt2_setup(quick: bool, device: str) -> Setup:
    """A GPT-2 from a config (random weights, no dropout, SDPA attention), flattened: embeddings, the blocks (each
    gets and returns the hidden states; causal attention without a mask), head. Checked against the model's own
    forward."""
    from transformers import GPT2Config, GPT2LMHeadModel

    layers, width, heads, vocab, batch, tokens = (2, 32, 2, 64, 2, 16) if quick else (6, 128, 4, 1024, 8, 128)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=tokens,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    lm = GPT2LMHeadModel(config).to(device)
    model = nn.Sequential(_Embed(lm.transformer), *lm.transformer.h, _Head(lm))
    torch.manual_seed(1)
    ids = torch.randint(0, vocab, (batch, tokens + 1), device=device)
    x, target = ids[:, :-1].contiguous(), ids[:, 1:].flatten()
    with torch.no_grad():
        if not torch.allclose(model(x), lm(x).logits.flatten(0, 1), atol=1e-5):
            raise AssertionError("the flattened GPT-2 does not compute what GPT2LMHeadModel computes")
    return Setup("gpt2", model, x, target, f"GPT-2 from a config ({layers} layers, width {width}, {heads} heads, "
                 f"vocabulary {vocab}), batch {batch} x {tokens} tokens, {config._attn_implementation} attention")


# ----------------------------------------------------------------------------------------- variants
@dataclass
class Variant:
    """One way to run the forward: ``run()`` returns the loss (backward is run outside)."""

    name: str
    run: Callable[[], torch.Tensor]
    kind: str = "eager"           # "eager", "compiled" (bytes by the graph walk) or "reference" (not compared)
    codes: str = ""               # a plan's codes, one per block
    saved: int = 0
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


def eager_variants(s: Setup, cuda: bool) -> list[Variant]:
    model, x = s.model, s.x
    keep = [model, x, s.target]

    def under(make: Callable[[], Any]) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            with make():
                return s.loss(model(x))
        return run

    out = [Variant("baseline", under(contextlib.nullcontext)),
           Variant("ledger", under(lambda: hooklab.SavedTensorLedger(model)), kind="reference")]
    if cuda:  # tens of GB to disk is not a variant anyone would run; the plain copy to the CPU is
        out.append(Variant("cpu", under(lambda: hooklab.SaveOnCpu(min_bytes=16 * 1024, pin_memory=True, keep=keep))))
    else:
        out.append(Variant("disk", under(lambda: hooklab.SaveOnDisk(min_bytes=16 * 1024, keep=keep))))
    out += [Variant("bf16", under(lambda: hooklab.CompressSaved("bf16", keep=keep))),
            Variant("int8", under(lambda: hooklab.CompressSaved("int8", keep=keep))),
            Variant("checkpoint", under(lambda: hooklab.checkpoint_modules(model, s.blocks))),
            Variant("overlap", under(lambda: hooklab.OverlappedOffload(min_bytes=16 * 1024, keep=keep, keep_last=2)),
                    kind="eager" if cuda else "reference")]
    for n in range(2, len(model) + 1):
        out.append(Variant(f"seq_{n}", under(lambda n=n: sequential_checkpoints(model, n))))
    return out


class _Compiled(nn.Module):
    """A wrapper whose forward has a code object of its own: dynamo caches compiled code per code object and does
    not guard on the partitioner's settings, so each budget and backend needs its own (see ``_fresh``)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner


def _fresh(tag: str) -> type[_Compiled]:
    def forward(self: _Compiled, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)
    forward.__code__ = forward.__code__.replace(co_name=f"forward_{tag}")
    return type(f"Compiled_{tag}", (_Compiled,), {"forward": forward})


def compiled_variants(s: Setup, backends: list[str], print_fn: Callable[[str], Any]) -> list[Variant]:
    """torch.compile at activation_memory_budget 1, 1/2, 1/4, 1/10 per backend, each compiled now (not timed)."""
    from torch._functorch import config as functorch_config

    out = []
    for backend in backends:
        for budget in (1.0, *(1 / n for n in BUDGETS)):
            tag = f"{backend}_{budget:.2f}".replace(".", "_")
            compiled = torch.compile(_fresh(tag)(s.model), backend=backend)
            start = time.process_time()
            with functorch_config.patch(activation_memory_budget=budget):
                torch.manual_seed(0)
                s.loss(compiled(s.x)).backward()  # compiles here, with this budget
            s.model.zero_grad(set_to_none=False)
            print_fn(f"  compiled {backend} at budget {budget:.2f}: {time.process_time() - start:.1f} s of CPU")

            def run(compiled: Any = compiled) -> torch.Tensor:
                return s.loss(compiled(s.x))
            out.append(Variant(f"{backend}@{budget:.2f}", run, kind="compiled"))
    return out


def planner_variants(s: Setup, base_saved: int, repeats: int, quick: bool,
                     print_fn: Callable[[str], Any]) -> tuple[list[Variant], list[str]]:
    """One plan per budget from a MemoryPlanner with its measured costs; a second, independent planner's plans
    say whether they are stable."""
    def make() -> hooklab.MemoryPlanner:
        # quick: a small probe (the smoke test's seconds); otherwise MeasuredCosts.measure's defaults, as a user gets
        costs = hooklab.MeasuredCosts.measure(s.x.device, probe_bytes=1 << 18, repeats=3) if quick else None
        return hooklab.MemoryPlanner(s.model, lambda: s.loss(s.model(s.x)), s.blocks, choices=PLAN_CHOICES,
                                     max_error=MAX_ERROR, min_bytes=16 * 1024, repeats=repeats, keep=[s.x, s.target],
                                     costs=costs)

    start = time.process_time()
    planner = make()
    print_fn(f"  planner measured in {time.process_time() - start:.1f} s of CPU; {describe_costs(planner.costs)}")
    second = make()
    print_fn(f"  a second planner, measured again: {describe_costs(second.costs)}")
    # the meter also counts what the planner's model leaves out (the logits, the loss): the same for every plan
    overhead = max(base_saved - planner.baseline_bytes, 0)
    out, notes = [], []
    for n in BUDGETS:
        budget = max(base_saved // n - overhead, 0)
        try:
            plan = planner.plan(budget)
        except hooklab.BudgetError as error:
            notes.append(f"plan 1/{n}: cannot be met: {str(error).split('. ')[0]}")
            continue
        codes = "".join(CODES[c] for c in plan.choices.values())
        try:
            other = second.plan(budget)
            again = "".join(CODES[c] for c in other.choices.values())
        except hooklab.BudgetError:
            other, again = None, "none"
        same = "the same"
        if again != codes and other is not None:  # how far apart the two are, both priced by the first measurement
            first_s, second_s = plan.seconds_added, planner.search.seconds(tuple(other.choices.values()))
            same = (f"another plan: by the first measurement it adds {second_s * 1e3:.1f} ms where the first adds "
                    f"{first_s * 1e3:.1f} ms")
        notes.append(f"plan 1/{n}: {codes}; a second planner's measurement: {again} ({same})")

        def run(plan: hooklab.MemoryPlan = plan) -> torch.Tensor:
            with plan.apply():
                return s.loss(s.model(s.x))
        out.append(Variant(f"plan_1/{n}", run, codes=codes))
    return out, notes


def describe_costs(costs: Any) -> str:
    if not isinstance(costs, hooklab.MeasuredCosts):
        return type(costs).__name__
    speeds = ", ".join(f"{k} {v / 1e9:.2f} GB/s" for k, v in costs.encode_bytes_per_s.items())
    tensors = ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in costs.per_tensor_s.items())
    return (f"measured costs ({costs.clock} clock): offload {costs.copy_bytes_per_s / 1e9:.2f} GB/s each way, "
            f"{speeds}; per tensor {tensors}; memory copy {costs.memory_bytes_per_s / 1e9:.2f} GB/s (the bound)")


# --------------------------------------------------------------------------------------- measuring
def graph_saved_bytes(loss: torch.Tensor, alive: set[int]) -> int:
    """Bytes of the storages the autograd graph from ``loss`` saves (each once), leaving out ``alive``: what a
    compiled graph holds (its ops run below MemoryMeter). Reading an eager node's ``_saved_*`` attribute would
    unpack a saved-tensor hook; this is used for graphs without hooks only."""
    seen_nodes, storages = set(), {}
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        values: list[Any] = list(getattr(node, "saved_tensors", ()) or ())
        values += [getattr(node, a) for a in dir(node) if a.startswith("_saved_")]
        for value in values:
            for t in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in alive:
                    storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        stack.extend(fn for fn, _ in node.next_functions)
    return sum(storages.values())


def measure_memory(s: Setup, v: Variant) -> None:
    model = s.model
    model.zero_grad(set_to_none=False)  # gradients already allocated: not counted
    ignore = [*model.parameters(), *model.buffers(), s.x, s.target,
              *(p.grad for p in model.parameters() if p.grad is not None)]
    if v.kind == "compiled":
        loss = v.run()
        v.saved = graph_saved_bytes(loss, {t.untyped_storage().data_ptr() for t in ignore})
        loss.backward()
        return
    with hooklab.MemoryMeter(ignore=ignore) as meter:
        loss = v.run()
        v.saved = meter.mark()
        loss.backward()
        del loss
    v.peak = meter.peak_bytes


def measure_grad_errors(s: Setup, variants: list[Variant]) -> None:
    """Each variant's relative gradient error against the baseline's (same seed; buffers put back each run)."""
    params = list(s.model.parameters())
    buffers = {name: b.detach().clone() for name, b in s.model.named_buffers()}

    def grads(v: Variant) -> torch.Tensor:
        s.model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        v.run().backward()
        with torch.no_grad():
            for name, b in s.model.named_buffers():
                b.copy_(buffers[name])
        return torch.cat([p.grad.flatten().double() for p in params if p.grad is not None])

    reference = grads(variants[0])
    for v in variants[1:]:
        v.grad_err = ((grads(v) - reference).norm() / reference.norm()).item()
    s.model.zero_grad(set_to_none=False)


def time_rounds(s: Setup, variants: list[Variant], rounds: int, repeats: int, cuda: bool) -> None:
    """Steps of every variant in interleaved rounds (each round starts one variant later), both clocks."""
    opt = torch.optim.SGD(s.model.parameters(), lr=1e-4)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step(v: Variant) -> None:
        loss = v.run()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

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


# ---------------------------------------------------------------------------------------- the report
def report(s: Setup, variants: list[Variant], notes: list[str], cuda: bool, clock: str,
           print_fn: Callable[[str], Any]) -> None:
    base = variants[0]
    header = (f"{'variant':<16} {'saved MiB':>9} {'x less':>7} {'peak MiB':>9} {'time x (' + clock + ')':>19} "
              f"{'wall x':>6} {'grad err':>9}")
    print_fn(header)
    print_fn("-" * len(header))
    for v in variants:
        less = base.saved / max(v.saved, 1)
        peak = "-" if v.peak is None else f"{v.peak / MiB:.2f}"
        wall = statistics.median(a / b for a, b in zip(v.wall, base.wall, strict=True))
        print_fn(f"{v.name:<16} {v.saved / MiB:>9.2f} {less:>7.{2 if less < 100 else 0}f} {peak:>9} "
                 f"{str(ratio(v, base)):>19} {wall:>6.2f} {v.grad_err:>9.1e}")
    print_fn("")
    by_name = {v.name: v for v in variants}
    for name, (min_less, max_time, max_err) in {**TARGETS, **(GPU_TARGETS if cuda else {})}.items():
        v = by_name[name]
        less, slow = base.saved / max(v.saved, 1), ratio(v, base)
        ok_err = max_err is None or v.grad_err < max_err
        judged = ("met" if less >= min_less and slow.high <= max_time and ok_err else
                  "NOT met" if less < min_less or slow.low > max_time or not ok_err else "within noise")
        err_part = f", grad err < {max_err:g}" if max_err is not None else ""
        print_fn(f"target {name}: >= {min_less:g}x less at <= {max_time:g}x time{err_part}: {judged} "
                 f"({less:.2f}x less, {slow}x time)")
    if not cuda:
        print_fn("target overlap: >= 10x less at <= 1.5x time: not measured (no GPU: run --device cuda where one is)")
    for line in notes:
        print_fn(line)
    for n in BUDGETS:
        budget = base.saved // n
        plan = by_name.get(f"plan_1/{n}")
        rivals = [v for v in variants[1:] if v.kind != "reference" and not v.name.startswith("plan_")
                  and v.saved <= budget and v.grad_err < MAX_ERROR]
        rivals.sort(key=lambda v: ratio(v, base).median)
        listed = ", ".join(f"{v.name} {ratio(v, base)}" for v in rivals) or "none"
        prefix = f"budget 1/{n} ({budget / MiB:.2f} MiB):"
        if plan is None:
            print_fn(f"{prefix} no plan; alternatives that meet it: {listed}")
            continue
        met = "met" if plan.saved <= budget else "NOT met"
        verdicts = []
        # the fastest alternative, and the fastest that runs the same eager kernels (inductor generates its own)
        eager_kernels = [v for v in rivals if not v.name.startswith("inductor")][:1]
        for best in rivals[:1] + [v for v in eager_kernels if v is not rivals[0]]:
            per_round = Spread.of([a / b for a, b in zip(plan.times, best.times, strict=True)])
            verdicts.append(f"x {best.name}, per round: {per_round}: "
                            + ("slower" if per_round.low > 1 else "faster" if per_round.high < 1 else
                               "tie (within the spread)"))
        verdict = "; ".join(verdicts) or "no alternative meets it"
        print_fn(f"{prefix} plan {plan.codes} {met} ({plan.saved / MiB:.2f} MiB), {ratio(plan, base)}x time; "
                 f"{verdict}; alternatives that meet it, fastest first: {listed}")
    print_fn(f"plan codes per block: {', '.join(f'{c} {k}' for k, c in CODES.items())} (s: checkpointed together "
             "with the block before it; offload: disk on a CPU, CPU memory on a GPU; compression only where the "
             f"block's gradient error < {MAX_ERROR:g}); seq_n: checkpoint_sequential with n segments; "
             "backend@b: torch.compile at activation_memory_budget b")


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


def run_model(s: Setup, *, backends: list[str], planner: bool, rounds: int, repeats: int, quick: bool,
              cuda: bool, print_fn: Callable[[str], Any]) -> list[Variant]:
    print_fn(f"== {s.description}")
    s.loss(s.model(s.x)).backward()  # a first step allocates the gradients (kept allocated from then on)
    variants = eager_variants(s, cuda)
    for v in variants:
        measure_memory(s, v)
    notes: list[str] = []
    if planner:
        plans, notes = planner_variants(s, variants[0].saved, 1 if quick else 5, quick, print_fn)
        variants += plans
        for v in plans:
            measure_memory(s, v)
    if backends:
        compiled = compiled_variants(s, backends, print_fn)
        for v in compiled:
            measure_memory(s, v)
        variants += compiled
    measure_grad_errors(s, variants)
    time_rounds(s, variants, rounds, repeats, cuda)
    clock = "wall" if cuda else "cpu"
    print_fn(f"{rounds} interleaved rounds x {repeats} step(s), median [min-max] of the per-round ratios, {clock} "
             f"clock; {load()}")
    report(s, variants, notes, cuda, clock, print_fn)
    torch._dynamo.reset()
    return variants


def run(models: tuple[str, ...] = ("resnet", "gpt2"), *, quick: bool = False, rounds: int | None = None,
        repeats: int | None = None, threads: int = 1, device: str = "cpu", planner: bool = True,
        backends: list[str] | None = None, print_fn: Callable[[str], Any] = print) -> dict[str, list[Variant]]:
    cuda = device.startswith("cuda")
    rounds = rounds or (2 if quick else 7)
    repeats = repeats or (1 if quick else 2)
    torch.set_num_threads(threads)
    print_fn(f"torch {torch.__version__.split('+')[0]}, {threads} thread(s), {'GPU' if cuda else 'CPU'}; "
             f"{load()} at the start")
    results = {}
    for name in models:
        setup = resnet_setup(quick, device) if name == "resnet" else gpt2_setup(quick, device)
        results[name] = run_model(setup, backends=backends or [], planner=planner, rounds=rounds, repeats=repeats,
                                  quick=quick, cuda=cuda, print_fn=print_fn)
        print_fn("")
    if not cuda:
        for line in gpu_save_on_cpu(batch=32 if quick else 128, size=32 if quick else 224, repeats=repeats):
            print_fn(line)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("resnet", "gpt2", "all"), default="all",
                        help="resnet (ResNet-18; ResNet-152 on a GPU), gpt2 (from a config), or all (default)")
    parser.add_argument("--quick", action="store_true", help="cut models, tiny inputs, two rounds (smoke test)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 7; quick: 2)")
    parser.add_argument("--repeats", type=int, help="steps per variant per round (default 2; quick: 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (ResNet-152, batch 256, 224x224)")
    parser.add_argument("--no-planner", action="store_true", help="skip the planner rows")
    parser.add_argument("--compile", action="store_true",
                        help="also torch.compile at activation_memory_budget 1, 1/2, 1/4, 1/10 (minutes); backends "
                             "aot_eager and inductor (quick: aot_eager)")
    parser.add_argument("--backends", help="comma-separated torch.compile backends for --compile")
    args = parser.parse_args(argv)
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        parser.error(f"--device must be cpu or cuda, got {args.device!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU is visible here (torch.cuda.is_available() is False)")
    for name in ("rounds", "repeats", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be a positive integer, got {value}")
    backends: list[str] = []
    if args.compile:
        backends = args.backends.split(",") if args.backends else (["aot_eager"] if args.quick
                                                                   else ["aot_eager", "inductor"])
    models = ("resnet", "gpt2") if args.model == "all" else (args.model,)
    run(models, quick=args.quick, rounds=args.rounds, repeats=args.repeats, threads=args.threads,
        device=args.device, planner=not args.no_planner, backends=backends)
    return 0


if __name__ == "__main__":
    sys.exit(main())
