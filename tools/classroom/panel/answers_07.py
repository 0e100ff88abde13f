"""Honest answers to notebook 07's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import functools
import itertools

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint

import hooklab
from tools.classroom.panel import answer

aten = torch.ops.aten

# --- 07.1: count the real forward calls under a checkpoint -----------------------------------------------------------


@answer("07.1", right=True)
def count_forward_calls_with_a_phase_flag(model, x):
    counts = {name: 0 for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    phase = {"forward": True}

    def bump(name, module, args, out):
        if phase["forward"]:
            counts[name] += 1

    with hooklab.HookScope() as scope:
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                scope.add(m.register_forward_hook(functools.partial(bump, name)))
        loss = checkpoint(model, x, use_reentrant=False).square().sum()
        phase["forward"] = False  # from here on, calls are the recomputation
        loss.backward()
    return counts


@answer("07.1", right=True)
def count_forward_calls_with_a_snapshot_after_forward(model, x):
    calls = {}
    handles = []
    try:
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                calls[name] = 0
                handles.append(m.register_forward_hook(
                    lambda m, args, out, name=name: calls.__setitem__(name, calls[name] + 1)))
        loss = checkpoint(model, x, use_reentrant=False).square().sum()
        in_forward = dict(calls)  # what ran before backward started
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    return in_forward


@answer("07.1", mistake="count", says="counts every call, the recomputation during backward included, so most layers "
        "are reported twice as often as they ran in forward")
def count_forward_calls_including_the_recomputation(model, x):
    counts = {name: 0 for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    with hooklab.HookScope() as scope:
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                scope.add(m.register_forward_hook(
                    lambda m, args, out, name=name: counts.__setitem__(name, counts[name] + 1)))
        loss = checkpoint(model, x, use_reentrant=False).square().sum()
        loss.backward()
    return counts


@answer("07.1", mistake="count", says="counts over forward and backward and halves every count, which is wrong for "
        "the last layer: early stopping skips it in the recomputation, so its one call becomes 0")
def count_forward_calls_halving_the_total(model, x):
    counts = {name: 0 for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    with hooklab.HookScope() as scope:
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                scope.add(m.register_forward_hook(
                    lambda m, args, out, name=name: counts.__setitem__(name, counts[name] + 1)))
        loss = checkpoint(model, x, use_reentrant=False).square().sum()
        loss.backward()
    return {name: n // 2 for name, n in counts.items()}


@answer("07.1", mistake="count", says="skips calls made with grad disabled, assuming the recomputation runs under "
        "no_grad, but the non-reentrant recomputation runs with grad enabled and is counted too")
def count_forward_calls_skipping_no_grad_calls(model, x):
    counts = {name: 0 for name, m in model.named_modules() if isinstance(m, nn.Linear)}

    def bump(name, module, args, out):
        if torch.is_grad_enabled():
            counts[name] += 1

    with hooklab.HookScope() as scope:
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                scope.add(m.register_forward_hook(functools.partial(bump, name)))
        loss = checkpoint(model, x, use_reentrant=False).square().sum()
        loss.backward()
    return counts


@answer("07.1", mistake="handle-left", says="registers the forward hooks and never removes them, so they are still "
        "on the model after the function returns")
def count_forward_calls_leaving_the_hooks(model, x):
    counts = {name: 0 for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    phase = {"forward": True}

    def bump(name, module, args, out):
        if phase["forward"]:
            counts[name] += 1

    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            m.register_forward_hook(functools.partial(bump, name))
    loss = checkpoint(model, x, use_reentrant=False).square().sum()
    phase["forward"] = False
    loss.backward()
    return counts


@answer("07.1", mistake="count", says="sets the layer's entry to 1 when its hook fires instead of adding 1, so a "
        "layer called several times in one forward pass (weight sharing) is reported once")
def count_forward_calls_marking_instead_of_counting(model, x):
    counts = {name: 0 for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    phase = {"forward": True}

    def mark(name, module, args, out):
        if phase["forward"]:
            counts[name] = 1

    with hooklab.HookScope() as scope:
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                scope.add(m.register_forward_hook(functools.partial(mark, name)))
        loss = checkpoint(model, x, use_reentrant=False).square().sum()
        phase["forward"] = False
        loss.backward()
    return counts


@answer("07.1", mistake="late-registration", says="registers the hooks after the forward pass, so they only see the "
        "recomputation in backward and report its counts instead of the forward's")
def count_forward_calls_registering_after_forward(model, x):
    counts = {name: 0 for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    loss = checkpoint(model, x, use_reentrant=False).square().sum()
    with hooklab.HookScope() as scope:
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                scope.add(m.register_forward_hook(
                    lambda m, args, out, name=name: counts.__setitem__(name, counts[name] + 1)))
        loss.backward()
    return counts


# --- 07.2: checkpoint and bf16 compression together ----------------------------------------------------------------


@answer("07.2", right=True)
def compressed_checkpoint_loss_compressing_outside(block, x):
    with hooklab.CompressSaved("bf16", keep=[x]):
        out = checkpoint(block, x, use_reentrant=False)
        loss = out.square().sum()
    return loss


@answer("07.2", right=True)
def compressed_checkpoint_loss_with_a_helper_function(block, x):
    def region(t):
        return block(t)

    compress = hooklab.CompressSaved("bf16", keep=[x, block])
    with compress:
        return checkpoint(region, x, use_reentrant=False).square().sum()


@answer("07.2", mistake="wrong-target", says="enters CompressSaved inside the checkpointed function, where its hooks "
        "become the innermost pair and silently turn checkpointing off (consequence 2)")
def compressed_checkpoint_loss_compressing_inside(block, x):
    def compressed_block(t):
        with hooklab.CompressSaved("bf16", keep=[t]):
            return block(t)

    return checkpoint(compressed_block, x, use_reentrant=False).square().sum()


@answer("07.2", mistake="detach-or-graph", says="does not pass keep=[x], so the input the checkpoint keeps for "
        "recomputation is saved as a bf16 copy and the recomputation runs on the rounded input")
def compressed_checkpoint_loss_compressing_the_input_too(block, x):
    with hooklab.CompressSaved("bf16"):
        out = checkpoint(block, x, use_reentrant=False)
        loss = out.square().sum()
    return loss


@answer("07.2", mistake="other", says="computes square() after leaving the CompressSaved block, so the block's output "
        "that square() saves is kept uncompressed")
def compressed_checkpoint_loss_squaring_outside_the_context(block, x):
    with hooklab.CompressSaved("bf16", keep=[x]):
        out = checkpoint(block, x, use_reentrant=False)
    return out.square().sum()


@answer("07.2", mistake="detach-or-graph", says="calls checkpoint with use_reentrant=True, so when the input does not "
        "require grad the output does not either and the block's parameters get no gradient")
def compressed_checkpoint_loss_reentrant(block, x):
    with hooklab.CompressSaved("bf16", keep=[x]):
        out = checkpoint(block, x, use_reentrant=True)
        loss = out.square().sum()
    return loss


@answer("07.2", mistake="logic", says="only compresses and never checkpoints: the block's intermediate results are "
        "kept (in bf16) and nothing is recomputed")
def compressed_checkpoint_loss_without_checkpoint(block, x):
    with hooklab.CompressSaved("bf16", keep=[x]):
        return block(x).square().sum()


# --- 07.3: which k blocks to checkpoint -----------------------------------------------------------------------------


@answer("07.3", right=True)
def choose_blocks_by_measuring_every_combination(model, x, k):
    names = [name for name, _ in model.named_children()]
    ignore = [*model.parameters(), *model.buffers(), x]
    best_bytes, best = None, None
    for chosen in itertools.combinations(names, k):
        with hooklab.MemoryMeter(ignore=ignore) as meter:
            with hooklab.checkpoint_modules(model, list(chosen)):
                loss = model(x).square().sum()
            kept = meter.mark()
            del loss
        if best_bytes is None or kept < best_bytes:
            best_bytes, best = kept, list(chosen)
    return best


@answer("07.3", right=True)
def choose_blocks_with_min_over_combinations(model, x, k):
    def kept_after_forward(names):
        with hooklab.MemoryMeter(ignore=[*model.parameters(), *model.buffers(), x]) as meter:
            with hooklab.checkpoint_modules(model, names):
                out = model(x).square().sum()
            held = meter.mark()
        del out
        return held

    blocks = [name for name, _ in model.named_children()]
    return list(min(itertools.combinations(blocks, k), key=lambda names: kept_after_forward(list(names))))


@answer("07.3", mistake="logic", says="picks the k blocks with the most parameters, but what checkpointing saves is "
        "the activations a block saves, not its parameters")
def choose_blocks_with_the_most_parameters(model, x, k):
    sizes = {name: sum(p.numel() for p in block.parameters()) for name, block in model.named_children()}
    return sorted(sizes, key=sizes.get, reverse=True)[:k]


@answer("07.3", mistake="logic", says="measures each block checkpointed alone and takes the k best, but neighbouring "
        "blocks share tensors (the next block saves this block's output), so the savings do not add up")
def choose_blocks_one_at_a_time(model, x, k):
    ignore = [*model.parameters(), *model.buffers(), x]
    with hooklab.MemoryMeter(ignore=ignore) as meter:
        loss = model(x).square().sum()
        baseline = meter.mark()
    del loss
    saving = {}
    for name, _ in model.named_children():
        with hooklab.MemoryMeter(ignore=ignore) as meter:
            with hooklab.checkpoint_modules(model, [name]):
                loss = model(x).square().sum()
            saving[name] = baseline - meter.mark()
        del loss
    return sorted(saving, key=saving.get, reverse=True)[:k]


@answer("07.3", mistake="logic", says="always returns the first k blocks, from the ResNet lesson where the first "
        "blocks had the largest feature maps, without measuring the model it is given")
def choose_blocks_first_k(model, x, k):
    return [name for name, _ in model.named_children()][:k]


@answer("07.3", mistake="shape-or-dtype", says="returns the chosen blocks' indices as ints instead of their names as "
        "strings")
def choose_blocks_as_indices(model, x, k):
    ignore = [*model.parameters(), *model.buffers(), x]
    best_bytes, best = None, None
    for chosen in itertools.combinations(range(len(model)), k):
        with hooklab.MemoryMeter(ignore=ignore) as meter:
            with hooklab.checkpoint_modules(model, [str(i) for i in chosen]):
                loss = model(x).square().sum()
            kept = meter.mark()
            del loss
        if best_bytes is None or kept < best_bytes:
            best_bytes, best = kept, list(chosen)
    return best


# --- 07.4: a selective-checkpointing policy that keeps the matmuls --------------------------------------------------


@answer("07.4", right=True)
def keep_matmuls_by_overload_packet(ctx, op, *args, **kwargs):
    if op.overloadpacket in {aten.mm, aten.addmm, aten.bmm}:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


@answer("07.4", right=True)
def keep_matmuls_by_default_overload(ctx, op, *args, **kwargs):
    matmuls = (aten.mm.default, aten.addmm.default, aten.bmm.default)
    return CheckpointPolicy.PREFER_SAVE if op in matmuls else CheckpointPolicy.MUST_RECOMPUTE


@answer("07.4", mistake="logic", says="compares the op with the packets aten.mm / aten.addmm / aten.bmm, but the "
        "policy receives an overload such as aten.addmm.default, so nothing matches and everything is recomputed")
def keep_matmuls_comparing_with_packets(ctx, op, *args, **kwargs):
    if op in (aten.mm, aten.addmm, aten.bmm):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


@answer("07.4", mistake="logic", says="lists aten.mm and aten.addmm but forgets aten.bmm, so the batched matrix "
        "multiplications of an attention head are recomputed")
def keep_matmuls_without_bmm(ctx, op, *args, **kwargs):
    if op.overloadpacket in (aten.mm, aten.addmm):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


@answer("07.4", mistake="logic", says="keeps aten.mm and aten.bmm but forgets aten.addmm, which is what a Linear "
        "with a bias runs, so those matmuls are recomputed")
def keep_matmuls_without_addmm(ctx, op, *args, **kwargs):
    if op.overloadpacket in (aten.mm, aten.bmm):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


@answer("07.4", mistake="logic", says="swaps the two policies: it recomputes the matrix multiplications and saves "
        "every other op")
def keep_matmuls_inverted(ctx, op, *args, **kwargs):
    if op.overloadpacket in (aten.mm, aten.addmm, aten.bmm):
        return CheckpointPolicy.PREFER_RECOMPUTE
    return CheckpointPolicy.MUST_SAVE


@answer("07.4", mistake="no-return", says="returns MUST_SAVE for the matmuls but falls off the end (None) for every "
        "other op instead of returning PREFER_RECOMPUTE")
def keep_matmuls_without_an_else(ctx, op, *args, **kwargs):
    if op.overloadpacket in (aten.mm, aten.addmm, aten.bmm):
        return CheckpointPolicy.MUST_SAVE
