"""Notebook 07's checkers accept right answers written differently and reject the typical wrong ones."""
import collections
import itertools

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict
from hooklab.course.exercises import nb07

# ---- 07.1 count the real forward calls -----------------------------------------------------------

def linear_layers(model):
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]


def calls_snapshot_before_backward(model, x):
    counts = collections.Counter({name: 0 for name, _ in linear_layers(model)})
    handles = [m.register_forward_hook(lambda m, a, o, name=name: counts.update([name]))
               for name, m in linear_layers(model)]
    try:
        loss = checkpoint(model, x, use_reentrant=False).square().sum()
        in_forward = dict(counts)  # read before backward recomputes anything
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return in_forward


def calls_with_a_closure_factory(model, x):
    counts = {}
    backward_started = False

    def counter(name):
        def hook(module, args, out):
            if not backward_started:
                counts[name] = counts.get(name, 0) + 1
        return hook

    with hooklab.HookScope() as scope:
        for name, m in linear_layers(model):
            scope.add(m.register_forward_hook(counter(name)))
        out = checkpoint(model, x, use_reentrant=False)
        backward_started = True
        out.square().sum().backward()
    return counts


def calls_including_recomputation(model, x):
    counts = {name: 0 for name, _ in linear_layers(model)}
    with hooklab.HookScope() as scope:
        for name, m in linear_layers(model):
            scope.add(m.register_forward_hook(lambda m, a, o, name=name: counts.__setitem__(name, counts[name] + 1)))
        checkpoint(model, x, use_reentrant=False).square().sum().backward()
    return counts


def calls_halved(model, x):
    return {name: n // 2 for name, n in calls_including_recomputation(model, x).items()}


def calls_late_binding_lambda(model, x):
    counts = {name: 0 for name, _ in linear_layers(model)}
    phase = ["forward"]

    def bump(name):
        if phase[0] == "forward":
            counts[name] += 1

    with hooklab.HookScope() as scope:
        for name, m in linear_layers(model):
            # `name` is looked up when the hook runs: every call is counted for the last layer
            scope.add(m.register_forward_hook(lambda m, a, o: bump(name)))
        loss = checkpoint(model, x, use_reentrant=False).square().sum()
        phase[0] = "backward"
        loss.backward()
    return counts


def calls_leaving_hooks(model, x):
    counts = {name: 0 for name, _ in linear_layers(model)}
    phase = ["forward"]

    def bump(name):
        if phase[0] == "forward":
            counts[name] += 1

    for name, m in linear_layers(model):
        m.register_forward_hook(lambda m, a, o, name=name: bump(name))
    loss = checkpoint(model, x, use_reentrant=False).square().sum()
    phase[0] = "backward"
    loss.backward()
    return counts


def calls_top_level_children_only(model, x):
    counts = {}
    phase = ["forward"]

    def bump(name):
        if phase[0] == "forward":
            counts[name] += 1

    with hooklab.HookScope() as scope:
        for name, m in model.named_children():
            if isinstance(m, nn.Linear):
                counts[name] = 0
                scope.add(m.register_forward_hook(lambda m, a, o, name=name: bump(name)))
        loss = checkpoint(model, x, use_reentrant=False).square().sum()
        phase[0] = "backward"
        loss.backward()
    return counts


def calls_hook_returns_the_count(model, x):
    counts = {name: 0 for name, _ in linear_layers(model)}
    phase = ["forward"]

    def make_hook(name):
        def hook(module, args, out):
            if phase[0] == "forward":
                counts[name] += 1
            return counts[name]  # a forward hook's return value replaces the layer's output
        return hook

    with hooklab.HookScope() as scope:
        for name, m in linear_layers(model):
            scope.add(m.register_forward_hook(make_hook(name)))
        loss = checkpoint(model, x, use_reentrant=False).square().sum()
        phase[0] = "backward"
        loss.backward()
    return counts


def calls_without_backward(model, x):
    counts = {name: 0 for name, _ in linear_layers(model)}
    with hooklab.HookScope() as scope:
        for name, module in linear_layers(model):
            scope.add(module.register_forward_hook(lambda m, a, out, name=name: counts.__setitem__(name, counts[name] + 1)))
        checkpoint(model, x, use_reentrant=False)  # forward only: nothing is recomputed, no gradient
    return counts


def calls_hooked_once_the_loss_exists(model, x):
    loss = checkpoint(model, x, use_reentrant=False).square().sum()
    counts = {name: 0 for name, _ in linear_layers(model)}
    handles = [m.register_forward_hook(lambda m, a, o, name=name: counts.__setitem__(name, counts[name] + 1))
               for name, m in linear_layers(model)]
    try:
        loss.backward()  # the hooks see the recomputation only
    finally:
        for handle in handles:
            handle.remove()
    return counts


def calls_as_a_list(model, x):
    return list(run_solution("07.1")["count_forward_calls"](model, x).values())


def calls_without_checkpoint(model, x):
    counts = {name: 0 for name, _ in linear_layers(model)}
    with hooklab.HookScope() as scope:
        for name, m in linear_layers(model):
            scope.add(m.register_forward_hook(lambda m, a, o, name=name: counts.__setitem__(name, counts[name] + 1)))
        model(x).square().sum().backward()
    return counts


@pytest.mark.parametrize("answer", [run_solution("07.1")["count_forward_calls"], calls_snapshot_before_backward,
                                    calls_with_a_closure_factory])
def test_07_1_accepts_right_answers(answer):
    assert verdict("07.1", answer) == "correct"


@pytest.mark.parametrize("answer, reason", [
    (calls_including_recomputation, "counted-recomputation"), (calls_halved, "call-count"),
    (calls_late_binding_lambda, "call-count"), (calls_leaving_hooks, "hook-left"),
    (calls_top_level_children_only, "layer-names"), (calls_hook_returns_the_count, "raised"),
    (calls_without_checkpoint, "no-recomputation"), (calls_without_backward, "no-backward"),
    (calls_as_a_list, "not-a-dict"), (calls_hooked_once_the_loss_exists, "registered-after-forward"),
])
def test_07_1_rejects_wrong_answers(answer, reason):
    assert judged("07.1", answer) == ("wrong", reason)


def test_07_1_names_the_recomputation():
    _, zh, en, _ = hooklab.course.exercises.verdict("07.1", calls_including_recomputation)
    assert "recomputation during backward" in en and "重算" in zh


def test_07_1_blank_start_is_not_solved():
    def count_forward_calls(model, x):
        pass
    assert verdict("07.1", count_forward_calls) == "not solved"
    assert verdict("07.1", None) == "not solved"


# ---- 07.2 checkpoint and bf16 together ----------------------------------------------------------

def compress_everything_but_keep_x(block, x):
    with hooklab.CompressSaved("bf16", keep=[block, x]):
        out = checkpoint(block, x, use_reentrant=False)
        return (out * out).sum()


def bf16_hooks_by_hand(block, x):
    out = checkpoint(block, x, use_reentrant=False)

    def pack(t):
        return t.detach().to(torch.bfloat16), t.dtype

    def unpack(packed):
        t, dtype = packed
        return t.to(dtype)

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        return out.square().sum()


def compress_inside_the_region(block, x):  # the notebook's fn_with_inner_hooks
    def fn(t):
        with hooklab.CompressSaved("bf16", min_bytes=0):
            return block(t)
    return checkpoint(fn, x, use_reentrant=False).square().sum()


def checkpoint_without_compression(block, x):
    return checkpoint(block, x, use_reentrant=False).square().sum()


def compression_without_checkpoint(block, x):
    with hooklab.CompressSaved("bf16"):
        return block(x).square().sum()


def compress_everything_including_x(block, x):
    with hooklab.CompressSaved("bf16"):
        out = checkpoint(block, x, use_reentrant=False)
        return out.square().sum()


def reentrant_checkpoint(block, x):
    out = checkpoint(block, x, use_reentrant=True)
    with hooklab.CompressSaved("bf16"):
        return out.square().sum()


def int8_instead_of_bf16(block, x):
    out = checkpoint(block, x, use_reentrant=False)
    with hooklab.CompressSaved("int8"):
        return out.square().sum()


def the_output_not_the_loss(block, x):
    out = checkpoint(block, x, use_reentrant=False)
    with hooklab.CompressSaved("bf16"):
        return out.square()


def a_frozen_block(block, x):  # the block's parameters stop requiring grad: only `x` gets a gradient
    block.requires_grad_(False)
    return run_solution("07.2")["compressed_checkpoint_loss"](block, x)


def bf16_rounded_to_one_decimal(block, x):
    out = checkpoint(block, x, use_reentrant=False)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach().to(torch.bfloat16),
                                                  lambda t: (t.float() * 10).round() / 10):
        return out.square().sum()


def bf16_unpack_forgets_the_tuple(block, x):
    out = checkpoint(block, x, use_reentrant=False)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: (t.detach().to(torch.bfloat16), t.dtype),
                                                  lambda packed: packed.to(torch.float32)):
        return out.square().sum()


def mean_instead_of_sum(block, x):
    out = checkpoint(block, x, use_reentrant=False)
    with hooklab.CompressSaved("bf16"):
        return out.square().mean()


@pytest.mark.parametrize("answer", [run_solution("07.2")["compressed_checkpoint_loss"],
                                    compress_everything_but_keep_x, bf16_hooks_by_hand])
def test_07_2_accepts_right_answers(answer):
    assert verdict("07.2", answer) == "correct"


@pytest.mark.parametrize("answer, reason", [
    (compress_inside_the_region, "checkpoint-bypassed"), (checkpoint_without_compression, "output-in-float32"),
    (compression_without_checkpoint, "checkpoint-bypassed"), (compress_everything_including_x, "input-compressed"),
    (reentrant_checkpoint, "reentrant-no-graph"), (int8_instead_of_bf16, "kept-bytes"),
    (mean_instead_of_sum, "loss-value"), (the_output_not_the_loss, "not-a-scalar-loss"),
    (a_frozen_block, "no-parameter-grad"), (bf16_rounded_to_one_decimal, "gradient-error"),
    (bf16_unpack_forgets_the_tuple, "backward-raised"),
])
@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
def test_07_2_rejects_wrong_answers(answer, reason):
    assert judged("07.2", answer) == ("wrong", reason)


@pytest.mark.parametrize("answer, says", [
    (compress_inside_the_region, "consequence 2"),
    (checkpoint_without_compression, "still kept in float32"),
    (compress_everything_including_x, "keep=[x]"),
    (reentrant_checkpoint, "does not require grad"),
])
@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
def test_07_2_says_why(answer, says):
    assert says in hooklab.course.exercises.verdict("07.2", answer)[2]


def test_07_2_blank_start_is_not_solved():
    def compressed_checkpoint_loss(block, x):
        pass
    assert verdict("07.2", compressed_checkpoint_loss) == "not solved"
    assert verdict("07.2", None) == "not solved"


# ---- 07.3 which blocks -------------------------------------------------------------------------

def kept(model, x, names):
    with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
        with hooklab.checkpoint_modules(model, names):
            loss = model(x).square().sum()
        held = meter.mark()
    del loss
    return held


def blocks_by_exhaustive_search(model, x, k):
    names = [name for name, _ in model.named_children()]
    return list(min(itertools.combinations(names, k), key=lambda choice: kept(model, x, list(choice))))


def blocks_by_saving_as_a_tuple(model, x, k):
    base = kept(model, x, [])
    saving = {name: base - kept(model, x, [name]) for name, _ in model.named_children()}
    return tuple(sorted(saving, key=saving.get, reverse=True)[:k])  # a tuple: accepted


def blocks_as_positions(model, x, k):
    names = [name for name, _ in model.named_children()]
    best = min(itertools.combinations(names, k), key=lambda choice: kept(model, x, list(choice)))
    return [names.index(name) for name in best]  # positions, not names


def blocks_in_definition_order(model, x, k):
    return [name for name, _ in itertools.islice(model.named_children(), k)]


def first_k_blocks(model, x, k):
    return [str(i) for i in range(k)]


def last_k_blocks(model, x, k):
    return [str(i) for i in range(len(model) - k, len(model))]


def blocks_with_most_parameters(model, x, k):
    size = {name: sum(p.numel() for p in m.parameters()) for name, m in model.named_children()}
    return sorted(size, key=size.get, reverse=True)[:k]


def blocks_that_save_least(model, x, k):
    held = {name: kept(model, x, [name]) for name, _ in model.named_children()}
    return sorted(held, key=held.get, reverse=True)[:k]  # sorted the wrong way round


def one_block_too_many(model, x, k):
    held = {name: kept(model, x, [name]) for name, _ in model.named_children()}
    return sorted(held, key=held.get)[:k + 1]


def blocks_patching_forward_by_hand(model, x, k):
    choice = blocks_by_exhaustive_search(model, x, k)
    for name in choice:  # checkpoints the chosen blocks for good: the model is changed after the call
        block = model[int(name)]
        block.forward = lambda *args, f=block.forward: checkpoint(f, *args, use_reentrant=False)
    return choice


def the_best_block_alone(model, x, k):
    return blocks_by_exhaustive_search(model, x, 1)[0]  # one name, not a list


def blocks_swapped_for_wrappers(model, x, k):
    choice = blocks_by_exhaustive_search(model, x, k)
    for name in choice:
        model[int(name)] = hooklab.OffloadWrapper(model[int(name)], lambda: hooklab.CompressSaved("bf16"))
    return choice


@pytest.mark.parametrize("answer", [run_solution("07.3")["choose_blocks"], blocks_by_exhaustive_search,
                                    blocks_by_saving_as_a_tuple])
def test_07_3_accepts_right_answers(answer):
    assert verdict("07.3", answer) == "correct"


@pytest.mark.parametrize("answer, reason", [
    (first_k_blocks, "first-k-blocks"), (blocks_in_definition_order, "first-k-blocks"),
    (blocks_as_positions, "indices-not-names"), (last_k_blocks, "not-the-best"), (blocks_with_most_parameters, "not-the-best"),
    (blocks_that_save_least, "not-the-best"), (one_block_too_many, "not-k-blocks"),
    (blocks_patching_forward_by_hand, "model-changed"), (blocks_swapped_for_wrappers, "model-changed"),
    (the_best_block_alone, "not-a-list"),
])
def test_07_3_rejects_wrong_answers(answer, reason):
    assert judged("07.3", answer) == ("wrong", reason)


def test_07_3_each_case_has_exactly_one_best_choice():
    for seed, spec, k in nb07._BLOCK_CASES:
        model, x = nb07._blocks_case(seed, spec)
        names = [str(i) for i in range(len(spec))]
        measured = [nb07.kept_after_forward(model, x, list(c)) for c in itertools.combinations(names, k)]
        assert measured.count(min(measured)) == 1, (spec, k, measured)


def test_07_3_blank_start_is_not_solved():
    def choose_blocks(model, x, k):
        pass
    assert verdict("07.3", choose_blocks) == "not solved"
    assert verdict("07.3", None) == "not solved"
