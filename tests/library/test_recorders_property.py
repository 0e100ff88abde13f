"""Property check: each recorder's results equal an independent plain-hook computation on random small models.

Every seed builds another model from random blocks (Linear, Conv1d, ReLU, LayerNorm, a residual block, a module
called twice, a module returning a tuple, a branch that is never used, a block skipped in some steps, a block that
can make NaN) and checks, on that model, that ``capture``, ``ActivationStats``, ``GradientMonitor``, ``Tracer``,
``SavedTensorLedger`` and ``find_nonfinite`` report exactly what plain ``register_*hook`` /
``saved_tensors_hooks`` code computes on the same run. The truth is written here without hooklab, so the next
silent-wrong case of a recorder (review round 2) shows up as a failing seed, not in a review.
"""
from __future__ import annotations

import math
import random

import pytest
import torch
from torch import nn

import hooklab

SEEDS = range(16)
D = 6


class ConvBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 1, 3, padding=1)

    def forward(self, x):
        return self.conv(x.unsqueeze(1)).squeeze(1)


class Residual(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


class Twice(nn.Module):  # one module called twice per forward
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(D, D)

    def forward(self, x):
        return self.lin(torch.tanh(self.lin(x)))


class TupleOut(nn.Module):  # returns (activation, auxiliary)
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(D, D)

    def forward(self, x):
        y = self.lin(x)
        return y, y.sum(-1)


class Branch(nn.Module):  # `unused` is registered but never called
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(D, D)
        self.unused = nn.Linear(D, D)

    def forward(self, x):
        return self.used(x)


class Poison(nn.Module):  # makes NaN / inf when switched on
    def __init__(self) -> None:
        super().__init__()
        self.on = False

    def forward(self, x):
        return x / torch.zeros_like(x) if self.on else x * 1.0


class Model(nn.Module):
    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.skip: set[int] = set()  # blocks left out of this step (a conditional layer)

    def forward(self, x):
        aux = 0.0
        for i, block in enumerate(self.blocks):
            if i in self.skip:
                continue
            out = block(x)
            if isinstance(out, tuple):
                x, extra = out
                aux = aux + extra.mean()
            else:
                x = out
        return x.square().mean() + 0.1 * aux


def _simple(rng: random.Random) -> nn.Module:
    return rng.choice([lambda: nn.Linear(D, D), nn.ReLU, lambda: nn.LayerNorm(D), ConvBlock, nn.Tanh])()


def make_model(seed: int) -> Model:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    kinds = [lambda: _simple(rng), lambda: Residual(nn.Sequential(*[_simple(rng) for _ in range(rng.randint(1, 2))])),
             Twice, TupleOut, Branch]
    blocks = [nn.Linear(D, D)] + [rng.choice(kinds)() for _ in range(rng.randint(2, 6))]
    if rng.random() < 0.5:
        blocks.insert(rng.randint(1, len(blocks)), Poison())
    return Model(blocks)


def batch(seed: int, step: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * seed + step)
    return torch.randn(4, D, generator=g)


def names_of(model: Model, seed: int, k: int = 4) -> list[str]:
    names = [n for n, _ in model.named_modules() if n.startswith("blocks.")]
    return random.Random(seed + 7).sample(names, min(k, len(names)))


def first(output):  # the tensor of a module's output (TupleOut: its first element)
    return output[0] if isinstance(output, tuple) else output


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-6, abs=1e-7)
                                    for x, y in zip(a, b))


# ----------------------------------------------------------------------------------------- capture
@pytest.mark.parametrize("seed", SEEDS)
def test_capture_equals_plain_forward_and_tensor_hooks(seed):
    model, x = make_model(seed), batch(seed)
    names = names_of(model, seed)
    modules = dict(model.named_modules())
    truth_out, truth_grad, truth_calls, grad_handles, handles = {}, {}, {n: 0 for n in names}, {}, []
    for name in names:
        def hook(module, args, output, name=name):
            y = first(output)
            truth_calls[name] += 1
            truth_out[name] = y.detach().clone()
            if name in grad_handles:  # only the gradient of the last call's output, as capture documents
                grad_handles.pop(name).remove()
            if y.requires_grad:
                grad_handles[name] = y.register_hook(lambda g, name=name: truth_grad.__setitem__(name, g.clone()))
        handles.append(modules[name].register_forward_hook(hook))
    model(x).backward()
    for h in [*handles, *grad_handles.values()]:
        h.remove()
    model.zero_grad(set_to_none=True)

    with hooklab.capture(model, names, grads=True, output=first) as store:
        model(x).backward()
    assert store.calls == truth_calls, seed
    for name in names:
        if truth_calls[name] == 0:
            with pytest.raises(KeyError, match="has not run"):
                store[name]
            continue
        assert torch.equal(store[name], truth_out[name]), (seed, name)
        if name in truth_grad:
            assert torch.equal(store.grads[name], truth_grad[name]), (seed, name)
        else:
            with pytest.raises(KeyError):
                store.grads[name]


# --------------------------------------------------------------------------------- ActivationStats
@pytest.mark.parametrize("seed", SEEDS)
def test_activation_stats_equal_plain_statistics(seed):
    model, x = make_model(seed), batch(seed)
    names = names_of(model, seed)
    modules = dict(model.named_modules())
    truth: dict[str, list[list[float]]] = {n: [] for n in names}
    handles = []
    for name in names:
        def hook(module, args, output, name=name):
            y = first(output).detach().double()
            std = y.std().item() if y.numel() > 1 else float("nan")
            truth[name].append([y.mean().item(), std, (y.abs() <= 1e-3).double().mean().item()])
        handles.append(modules[name].register_forward_hook(hook))
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()

    with pytest.warns(RuntimeWarning) if any(not v for v in truth.values()) else _nothing():
        with hooklab.ActivationStats(model, names, output=first) as stats, torch.no_grad():
            model(x)
    got = stats.stats
    for name in names:
        for column, stat in enumerate(("mean", "std", "near_zero")):
            assert same(got[name][stat], [row[column] for row in truth[name]]), (seed, name, stat)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --------------------------------------------------------------------------------- GradientMonitor
@pytest.mark.parametrize("seed", SEEDS)
def test_gradient_monitor_equals_the_grad_norms_after_each_backward(seed):
    model = make_model(seed)
    skips = [set(), {random.Random(seed).randrange(1, len(model.blocks))}, set()]  # step 1 leaves one block out
    truth: dict[str, list[float]] = {n: [] for n, _ in model.named_parameters()}
    for step, skip in enumerate(skips):
        model.zero_grad(set_to_none=True)
        model.skip = skip
        model(batch(seed, step)).backward()
        for name, p in model.named_parameters():
            truth[name].append(p.grad.norm().item() if p.grad is not None else float("nan"))

    with hooklab.GradientMonitor(model) as gm:
        for step, skip in enumerate(skips):
            model.zero_grad(set_to_none=True)
            model.skip = skip
            model(batch(seed, step)).backward()
    model.skip = set()
    got = gm.norms(per="parameter")
    assert set(got) <= set(truth)
    for name, values in got.items():
        assert same(values, truth[name]), (seed, name, values, truth[name])
    layers: dict[str, list[list[float]]] = {}
    for name, values in truth.items():
        if name in got:
            layers.setdefault(name.rsplit(".", 1)[0], []).append(values)
    for layer, series in layers.items():  # a layer: sqrt of the sum of squares of the parameters that got one
        want = []
        for step in range(len(skips)):
            norms = [s[step] for s in series if not math.isnan(s[step])]
            want.append(math.sqrt(sum(v * v for v in norms)) if norms else float("nan"))
        assert same(gm.norms()[layer], want), (seed, layer)


# ------------------------------------------------------------------------------------------ Tracer
@pytest.mark.parametrize("seed", SEEDS)
def test_tracer_forward_order_and_packs_equal_plain_hooks(seed):
    model, x = make_model(seed), batch(seed)
    names = names_of(model, seed)
    modules = dict(model.named_modules())
    order, handles, packs = [], [], []
    for name in names:
        handles.append(modules[name].register_forward_pre_hook(
            lambda m, a, name=name: order.append(("module_forward_pre", name))))
        handles.append(modules[name].register_forward_hook(
            lambda m, a, o, name=name: order.append(("module_forward", name))))
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packs.append(tuple(t.shape)) or t, lambda t: t):
        model(x)
    for h in handles:
        h.remove()

    with hooklab.Tracer() as tr:
        tr.modules(model, names, backward=False)
        with tr.saved_tensors():
            model(x)
    events = [(e.kind, e.name) for e in tr.events if e.kind != "pack"]
    assert events == order, seed
    assert [e.detail for e in tr.events if e.kind == "pack"] == [str(s) for s in packs], seed


# ------------------------------------------------------------------------------------------ ledger
@pytest.mark.parametrize("seed", SEEDS)
def test_ledger_equals_a_plain_saved_tensors_hooks_count(seed):
    model, x = make_model(seed), batch(seed)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    inputs = {x.untyped_storage().data_ptr()}
    stack, handles, truth = [], [], []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(lambda m, a, name=name: stack.append(name)))
        handles.append(module.register_forward_hook(lambda m, a, o: stack.pop() and None))  # None: output unchanged

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        base = t._base if t._is_view() and t._base is not None else t
        kind = ("parameter" if ptr in params or (base.is_leaf and base.requires_grad)
                else "input" if ptr in inputs else "activation")
        truth.append((stack[-1] if stack else "", kind, tuple(t.shape), ptr, t.untyped_storage().nbytes()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    for h in handles:
        h.remove()
    seen, activation_bytes = set(), 0
    for _, kind, _, ptr, nbytes in truth:
        if kind == "activation" and ptr not in seen:
            activation_bytes += nbytes
        seen.add(ptr)

    with hooklab.SavedTensorLedger(model) as ledger:
        loss = model(x)
    assert [(r.module, r.kind, r.shape) for r in ledger.records] == [t[:3] for t in truth], seed
    assert ledger.activation_bytes == activation_bytes, seed
    assert ledger.live_bytes == activation_bytes
    loss.backward()
    assert ledger.live_bytes == 0  # backward released every saved activation


# ---------------------------------------------------------------------------------- find_nonfinite
@pytest.mark.parametrize("seed", SEEDS)
def test_find_nonfinite_names_the_first_module_plain_hooks_see(seed):
    find_nonfinite = getattr(hooklab, "find_nonfinite", None)
    if find_nonfinite is None:
        from hooklab.nonfinite import find_nonfinite
    model, x = make_model(seed), batch(seed)
    for m in model.modules():
        if isinstance(m, Poison):
            m.on = True
    calls: dict[str, int] = {}
    truth, handles = [], []
    for name, module in model.named_modules():
        def hook(m, a, output, name=name):
            calls[name] = calls.get(name, 0) + 1
            bad = any(not torch.isfinite(t).all() for t in (output if isinstance(output, tuple) else (output,)))
            if bad and not truth:
                truth.append((name, calls[name]))
        handles.append(module.register_forward_hook(hook))
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()

    with find_nonfinite(model, backward=False) as found, torch.no_grad():
        model(x)
    got = (found.forward.module, found.forward.call) if found.forward is not None else None
    assert got == (truth[0] if truth else None), seed
