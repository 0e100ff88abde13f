"""hooklab.intervene and hooklab.capture_inputs on small Hugging Face models, against hand-written hooks.

Models are built from configs (random init, seeded, tiny): nothing is downloaded.
"""
from __future__ import annotations

import contextlib
import copy
import os
from collections import OrderedDict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch
from torch import nn

import hooklab
from hooklab import Call, ModuleInputs, capture_inputs, intervene, no_hooks_left_behind

transformers = pytest.importorskip("transformers")

PROMPT = torch.tensor([[0, 5, 9, 3, 7, 2], [0, 8, 1, 4, 4, 6]])
NEW = 4
ONES = {"attention_mask": torch.ones_like(PROMPT), "pad_token_id": 31}  # no token of PROMPT is padding


def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                                      bos_token_id=0, eos_token_id=None, pad_token_id=None)
    return transformers.LlamaForCausalLM(config).eval()


def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=32, n_embd=16, n_layer=2, n_head=2, n_positions=64,
                                     bos_token_id=0, eos_token_id=None)
    return transformers.GPT2LMHeadModel(config).eval()


def bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=64)
    return transformers.BertForMaskedLM(config).eval()


MODELS = {"llama": (llama, "model.layers"), "gpt2": (gpt2, "transformer.h")}  # the decoders: generate() too
ALL = {**MODELS, "bert": (bert, "bert.encoder.layer")}
ATTENTION = {"llama": "self_attn", "gpt2": "attn", "bert": "attention"}
HEAD = {"llama": "lm_head", "gpt2": "lm_head", "bert": "cls"}


def with_hook(handle, run):
    """The truth: ``run()`` with one hand-written hook, removed afterwards."""
    try:
        return run()
    finally:
        handle.remove()


def greedy(model, **kwargs):
    out = model.generate(PROMPT, max_new_tokens=NEW, do_sample=False, output_scores=True,
                         return_dict_in_generate=True, **ONES, **kwargs)
    return out.sequences, torch.stack(out.scores)


def steer_vector(dim=16):
    return torch.linspace(-2.0, 2.0, dim)


# --- output edits -------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ALL)
def test_replacing_a_layer_output_equals_a_hand_written_hook(arch):
    make, layers = ALL[arch]
    model, v = make(), steer_vector()
    layer = model.get_submodule(f"{layers}.1")
    expected = with_hook(layer.register_forward_hook(lambda m, args, out: out + v), lambda: model(PROMPT).logits)
    with no_hooks_left_behind(model):
        with intervene(model, {f"{layers}.1": lambda h, call: h + v}) as iv:
            got = model(PROMPT).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert not torch.allclose(got, model(PROMPT).logits)  # the edit changed something
    assert iv.calls == {f"{layers}.1": 1} and iv.edited == {f"{layers}.1": 1}
    assert "(2, 6, 16)" in iv.table() and "tensor" in iv.table()


@pytest.mark.parametrize("arch", ALL)
def test_a_tuple_output_is_edited_at_its_first_tensor_and_rebuilt(arch):
    make, layers = ALL[arch]
    model = make()
    attn = f"{layers}.0.{ATTENTION[arch]}"

    def by_hand(m, args, out):
        assert isinstance(out, tuple)  # (attention output, weights or None) on the pinned transformers
        return (out[0] * 0.5, *out[1:])

    expected = with_hook(model.get_submodule(attn).register_forward_hook(by_hand), lambda: model(PROMPT).logits)
    seen = []
    with intervene(model, {attn: lambda value, call: seen.append(type(value)) or value * 0.5}) as iv:
        got = model(PROMPT).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert seen == [torch.Tensor]
    assert "tuple[0]" in iv.table()  # says what it edited


def test_a_model_output_is_edited_at_its_first_tensor():
    model = llama()
    inner = model.model
    expected = model.lm_head(inner(PROMPT).last_hidden_state * 2)
    with intervene(model, {"model": lambda h, call: h * 2}) as iv:
        got = model(PROMPT).logits
    torch.testing.assert_close(got, expected)
    assert "BaseModelOutputWithPast['last_hidden_state']" in iv.table()


def test_returning_none_keeps_the_value_and_counts_no_edit():
    model = llama()
    expected = model(PROMPT).logits
    with intervene(model, {"model.layers.0": lambda h, call: None}) as iv:
        got = model(PROMPT).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert iv.calls == {"model.layers.0": 1} and iv.edited == {"model.layers.0": 0}


# --- generate() and the KV cache ----------------------------------------------------------------------

PATCHED = (2, 7)  # absolute positions: one in the prompt, one generated


def positional_patch(v):
    def fn(h, call):
        assert call.positions is not None, "positions must be known under generate()"
        positions = call.positions.expand(h.shape[0], -1)
        mask = (positions == PATCHED[0]) | (positions == PATCHED[1])
        return h + mask[..., None] * v
    return fn


def hand_written_positional_hook(v):
    """The truth: a with_kwargs forward hook that reads position_ids itself."""
    def hook(module, args, kwargs, out):
        positions = kwargs["position_ids"].expand(out.shape[0], -1)
        mask = (positions == PATCHED[0]) | (positions == PATCHED[1])
        return out + mask[..., None] * v
    return hook


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("arch", MODELS)
def test_an_edit_under_generate_matches_hand_written_hooks(arch, use_cache):
    make, layers = MODELS[arch]
    model, v = make(), steer_vector()
    name = f"{layers}.0"
    handle = model.get_submodule(name).register_forward_hook(hand_written_positional_hook(v), with_kwargs=True)
    expected_tokens, expected_scores = with_hook(handle, lambda: greedy(model, use_cache=use_cache))
    with no_hooks_left_behind(model):
        with intervene(model, {name: positional_patch(v)}) as iv:
            tokens, scores = greedy(model, use_cache=use_cache)
    assert torch.equal(tokens, expected_tokens)
    torch.testing.assert_close(scores, expected_scores)
    plain_tokens, _ = greedy(model, use_cache=use_cache)
    assert iv.calls[name] == NEW and iv.edited[name] == NEW
    shapes = iv.table()
    if use_cache:  # the prompt, then one token per step
        assert "(2, 6, 16), (2, 1, 16)" in shapes
    else:  # the whole sequence again at every step
        assert "(2, 6, 16), (2, 7, 16), (2, 8, 16), (2, 9, 16)" in shapes
    assert tokens.shape == plain_tokens.shape


@pytest.mark.parametrize("arch", MODELS)
def test_cached_and_uncached_generation_and_a_full_forward_agree(arch):
    """The same positional patch is the same intervention in all three ways of running the model."""
    make, layers = MODELS[arch]
    model, v = make(), steer_vector()
    name = f"{layers}.0.mlp"  # takes no positions: they come from the model's own call
    with intervene(model, {name: positional_patch(v)}):
        cached, cached_scores = greedy(model, use_cache=True)
    with intervene(model, {name: positional_patch(v)}):
        uncached, uncached_scores = greedy(model, use_cache=False)
    assert torch.equal(cached, uncached)
    torch.testing.assert_close(cached_scores, uncached_scores, rtol=1e-4, atol=1e-4)
    # plain PyTorch: one forward over the generated sequence with the patch at the same positions
    def hook(module, args, out):
        positions = torch.arange(out.shape[1])
        mask = (positions == PATCHED[0]) | (positions == PATCHED[1])
        return out + mask[None, :, None] * v
    logits = with_hook(model.get_submodule(name).register_forward_hook(hook), lambda: model(cached).logits)
    start = PROMPT.shape[1] - 1
    torch.testing.assert_close(logits[:, start:start + NEW].transpose(0, 1), cached_scores, rtol=1e-4, atol=1e-4)


def test_call_index_and_positions_under_generate():
    model = llama()
    seen = []
    with intervene(model, {"model.layers.1.mlp": lambda h, call: seen.append(call)}):
        model.generate(PROMPT, max_new_tokens=3, do_sample=False, **ONES)
    assert [c.index for c in seen] == [0, 1, 2]
    assert [c.positions.tolist() for c in seen] == [[list(range(6))] * 2, [[6]] * 2, [[7]] * 2]
    assert all(isinstance(c, Call) and c.name == "model.layers.1.mlp" for c in seen)


def test_positions_are_per_row_position_ids_when_a_call_also_has_cache_position():
    """A left-padded batch: cache_position is one slot index for every row, position_ids start at 0 after each
    row's padding. Call.positions is position_ids (what a hand-written hook on a layer reads per row), as a module
    that got both keywords (a layer of transformers 4.x) shows."""
    class Layer(nn.Module):
        def forward(self, h, *, position_ids=None, cache_position=None):
            return h * 1.0

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = Layer()

        def forward(self, h, position_ids, cache_position):
            return self.layer(h, position_ids=position_ids, cache_position=cache_position)

    model, h = Model(), torch.zeros(2, 5, 3)
    cache_position = torch.arange(5)
    position_ids = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])  # row 0: two pads on the left
    late = lambda positions: (positions >= 2)[..., None].expand_as(h)  # noqa: E731
    with intervene(model, {"layer": lambda value, call: value + late(call.positions)}):
        got = model(h, position_ids, cache_position)
    handle = model.layer.register_forward_hook(
        lambda m, args, kwargs, out: out + late(kwargs["position_ids"]), with_kwargs=True)
    expected = with_hook(handle, lambda: model(h, position_ids, cache_position))
    assert torch.equal(got, expected)
    assert got[0, :, 0].tolist() == [0, 0, 0, 0, 1] and got[1, :, 0].tolist() == [0, 0, 1, 1, 1]


# --- input and keyword edits --------------------------------------------------------------------------

def test_input_edit_equals_a_hand_written_pre_hook():
    model = llama()
    name = "model.layers.1.self_attn.o_proj"  # its input holds the heads side by side: zero head 1

    def zero_head(x):
        x = x.clone()
        x[..., 8:16] = 0
        return x

    handle = model.get_submodule(name).register_forward_pre_hook(lambda m, args: (zero_head(args[0]),))
    expected = with_hook(handle, lambda: model(PROMPT).logits)
    with intervene(model, {name: lambda x, call: zero_head(x)}, on="input") as iv:
        got = model(PROMPT).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert "args[0]" in iv.table()


def test_kwargs_edit_equals_a_hand_written_pre_hook():
    model = llama()
    name = "model.layers.0.self_attn"  # called with keywords only, position embeddings among them

    def shift(kwargs):
        cos, sin = kwargs["position_embeddings"]
        return {**kwargs, "position_embeddings": (torch.roll(cos, 1, dims=1), torch.roll(sin, 1, dims=1))}

    handle = model.get_submodule(name).register_forward_pre_hook(lambda m, a, kw: (a, shift(kw)), with_kwargs=True)
    expected = with_hook(handle, lambda: model(PROMPT).logits)
    with intervene(model, {name: lambda kwargs, call: shift(kwargs)}, on="kwargs") as iv:
        got = model(PROMPT).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert not torch.allclose(got, model(PROMPT).logits)
    assert iv.edited == {name: 1} and "hidden_states" in iv.table()


# --- capture_inputs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ALL)
def test_capture_inputs_equals_a_hand_written_pre_hook_and_stops_the_forward(arch):
    make, layers = ALL[arch]
    model = make()
    name = f"{layers}.1"
    truth = []
    handle = model.get_submodule(name).register_forward_pre_hook(
        lambda m, args, kwargs: truth.append((args, dict(kwargs))), with_kwargs=True)
    with_hook(handle, lambda: model(PROMPT))
    (true_args, true_kwargs), = truth
    head_calls = []
    head = model.get_submodule(HEAD[arch]).register_forward_hook(lambda *a: head_calls.append(1))
    try:
        with no_hooks_left_behind(model.get_submodule(name)):
            inputs = capture_inputs(model, name, PROMPT)
    finally:
        head.remove()
    assert isinstance(inputs, ModuleInputs)
    assert head_calls == []  # the forward stopped at the module
    assert len(inputs.args) == len(true_args) and sorted(inputs.kwargs) == sorted(true_kwargs)
    for got, want in zip(inputs.args, true_args):
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            assert not got.requires_grad
        else:
            assert type(got) is type(want)
    for key, want in true_kwargs.items():
        got = inputs.kwargs[key]
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        elif isinstance(want, tuple):
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_capture_inputs_keeps_the_graph_when_asked():
    model = llama()
    inputs = capture_inputs(model, "model.layers.1", PROMPT, detach=False)
    assert inputs.args[0].requires_grad and inputs.args[0].grad_fn is not None
    assert not capture_inputs(model, "model.layers.1", PROMPT).args[0].requires_grad


def test_capture_inputs_passes_keywords_to_the_model():
    model = llama()
    mask = torch.ones_like(PROMPT)
    mask[1, :2] = 0
    inputs = capture_inputs(model, "model.layers.0", input_ids=PROMPT, attention_mask=mask)
    assert inputs.kwargs["attention_mask"] is not None  # the padding mask became a 4-d attention mask


# --- failure paths: a clear error, nothing left behind -------------------------------------------------

def test_unknown_name_suggests_close_matches_and_registers_nothing():
    model = llama()
    with no_hooks_left_behind(model):
        with pytest.raises(hooklab.UnknownModuleError, match=r"Did you mean 'model.layers.1'"):
            intervene(model, {"model.layer.1": lambda h, call: h})
        with pytest.raises(hooklab.UnknownModuleError, match="model.layers.0"):
            capture_inputs(model, "model.layers0", PROMPT)


def test_wrong_shape_names_the_module_and_both_shapes():
    model = llama()
    with no_hooks_left_behind(model):
        with pytest.raises(ValueError, match=r"'model.layers.0' .*returned shape \(2, 6, 8\).*replaces shape "
                                             r"\(2, 6, 16\)"):
            with intervene(model, {"model.layers.0": lambda h, call: h[..., :8]}):
                model(PROMPT)
        with pytest.raises(ValueError, match=r"torch.float64.*replaces shape \(2, 6, 16\) torch.float32"):
            with intervene(model, {"model.layers.0": lambda h, call: h.double()}):
                model(PROMPT)
        with pytest.raises(ValueError, match=r"kwargs\['position_ids'\]"):
            cut = {"model.layers.0": lambda kw, call: {**kw, "position_ids": kw["position_ids"][:, :2]}}
            with intervene(model, cut, on="kwargs"):
                model(PROMPT)
        with pytest.raises(TypeError, match="returned list; return the dict"):
            with intervene(model, {"model.layers.0": lambda kw, call: []}, on="kwargs"):
                model(PROMPT)


def test_a_patch_made_for_the_prompt_fails_clearly_at_the_first_cached_step():
    model = llama()
    prompt_sized = torch.zeros(2, 6, 16)
    with no_hooks_left_behind(model):
        with pytest.raises(ValueError, match=r"call 1\).*replaces shape \(2, 1, 16\).*call.positions"):
            with intervene(model, {"model.layers.0": lambda h, call: h + prompt_sized}):
                model.generate(PROMPT, max_new_tokens=3, do_sample=False, **ONES)


def test_an_edit_that_raises_during_generate_leaves_no_hook():
    model = llama()

    def boom(h, call):
        if call.index == 2:
            raise RuntimeError("edit failed at step 2")
        return h

    with no_hooks_left_behind(model):
        iv = intervene(model, {"model.layers.1": boom})
        with pytest.raises(RuntimeError, match="edit failed at step 2"):
            with iv:
                model.generate(PROMPT, max_new_tokens=4, do_sample=False, **ONES)
    assert iv.calls == {"model.layers.1": 3}
    with pytest.raises(RuntimeError, match="already recorded its block"):
        with iv:
            pass


def test_keywords_the_tool_did_not_expect_are_refused_clearly():
    model = llama()
    with no_hooks_left_behind(model):
        # Llama's attention is called with keywords only: there is no positional input to edit
        with pytest.raises(TypeError, match=r"'model.layers.0.self_attn' was called with keywords only "
                                            r"\(hidden_states, .*use on='kwargs'"):
            with intervene(model, {"model.layers.0.self_attn": lambda x, call: x}, on="input"):
                model(PROMPT)
        # an extra keyword that the model passes down to its layers is shown, not dropped
        inputs = capture_inputs(model, "model.layers.0", PROMPT, no_such_keyword=1)
        assert inputs.kwargs["no_such_keyword"] == 1


def test_a_module_that_never_runs_is_a_clear_error():
    model = llama()
    with no_hooks_left_behind(model):
        with pytest.raises(RuntimeError, match=r"'model.layers' never ran .*nn.ModuleList is never called"):
            capture_inputs(model, "model.layers", PROMPT)


def test_bad_arguments_are_refused_when_made():
    model = llama()
    with no_hooks_left_behind(model):
        with pytest.raises(ValueError, match="on must be 'output', 'input' or 'kwargs', got 'outputs'"):
            intervene(model, {"model.layers.0": lambda h, c: h}, on="outputs")
        with pytest.raises(TypeError, match="non-empty dict"):
            intervene(model, {})
        with pytest.raises(TypeError, match="must be a function"):
            intervene(model, {"model.layers.0": 3})
        with pytest.raises(ValueError, match="needs on='output'"):
            intervene(model, {"model.layers.0": lambda h, c: h}, on="input", output=0)
        with pytest.raises(TypeError, match="an index or a key"):
            intervene(model, {"model.layers.0": lambda h, c: h}, output=lambda out: out[0])
        with pytest.raises(RuntimeError, match="has recorded nothing"):
            intervene(model, {"model.layers.0": lambda h, c: h}).table()


def test_an_output_without_a_tensor_is_refused():
    class NoTensor(nn.Module):
        def forward(self, x):
            return ("label", 3)

    model = nn.Sequential(NoTensor())
    with no_hooks_left_behind(model):
        with pytest.raises(TypeError, match="'0' returned tuple holding no tensor; choose what to edit with output="):
            with intervene(model, {"0": lambda v, c: v}):
                model(torch.ones(1))


def test_compiled_models_are_refused():
    model = nn.Sequential(nn.Linear(2, 2))
    compiled = torch.compile(model)
    with pytest.raises(TypeError, match="torch.compile"):
        intervene(compiled, {"0": lambda v, c: v})
    with pytest.raises(TypeError, match="torch.compile"):
        capture_inputs(compiled, "0", torch.ones(1, 2))


# --- the one lifecycle (tests/library/test_contract.py checks every tool the same way) ---------------

def test_lifecycle_made_registers_nothing_entered_registers_exit_removes():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with no_hooks_left_behind(model):  # made: registers nothing
        iv = intervene(model, {"0": lambda out, call: out * 2})
    with iv:
        assert len(hooklab.hook_inventory(model)) == 2  # the edit's hook, and the model's (it reads positions)
        model(torch.ones(1, 4))
        iv.remove()  # ends the block's edits early: the hooks are gone already inside the block
        assert hooklab.hook_inventory(model) == []
        model(torch.ones(1, 4))
    assert iv.calls == {"0": 1}
    iv.remove()  # again: nothing happens


@pytest.mark.parametrize("on", ["output", "input", "kwargs"])
def test_a_model_that_fails_leaves_nothing_behind(on):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with no_hooks_left_behind(model):
        with pytest.raises(RuntimeError):
            with intervene(model, {"1": lambda v, call: v}, on=on):
                model(torch.ones(1, 3))  # the wrong width: the Linear raises
        with pytest.raises(RuntimeError):
            capture_inputs(model, "1", torch.ones(1, 3))


# --- under activation checkpointing, copies, names that never run (review round 3: N2, N3, N9) ----------------------
def _block_and_head():
    torch.manual_seed(0)
    return nn.Sequential(OrderedDict(block=nn.Sequential(nn.Linear(4, 8), nn.Tanh()), head=nn.Linear(8, 3)))


def _grads_with(model, x, *blocks):
    model.zero_grad(set_to_none=True)
    with contextlib.ExitStack() as stack:
        tools = [stack.enter_context(b) for b in blocks]
        model(x).pow(2).sum().backward()
    return [p.grad.clone() for p in model.parameters()], tools


@pytest.mark.parametrize("nested", [False, True], ids=["one block", "block called twice"])
def test_a_checkpoints_recomputation_is_not_a_new_call_and_is_edited_as_the_call_it_recomputes(nested):
    """N3: the recompute in backward counted as call 1, so an edit of call 0 only was left out of it: gradient
    off by 144 %, and calls == 2."""
    model, x = _block_and_head(), torch.randn(5, 4)
    if nested:  # the block runs twice per forward: calls 0 and 1, recomputed in the reverse order
        model.forward = lambda t: model.head(model.block(model.block[0](t)[..., :4]))
    by_index = {"block.0": lambda out, call: out * (call.index + 2)}  # each call its own factor
    truth, (iv,) = _grads_with(model, x, intervene(model, by_index))
    got, (_, iv_ckpt) = _grads_with(model, x, hooklab.checkpoint_modules(model, ["block"]), intervene(model, by_index))
    assert all(torch.allclose(g, t, rtol=1e-5, atol=1e-7) for g, t in zip(got, truth))
    assert iv_ckpt.calls == iv.calls == iv_ckpt.edited == {"block.0": 2 if nested else 1}


def test_a_recomputed_random_edit_draws_the_same_numbers():
    """The checkpoint restores the random-number state for its recomputation, and the edit gets the same Call."""
    model, x = _block_and_head(), torch.randn(5, 4)
    noise = {"block.0": lambda out, call: out + torch.randn_like(out)}
    torch.manual_seed(1)
    truth, _ = _grads_with(model, x, intervene(model, noise))
    torch.manual_seed(1)
    got, _ = _grads_with(model, x, hooklab.checkpoint_modules(model, ["block"]), intervene(model, noise))
    assert all(torch.allclose(g, t, rtol=1e-5, atol=1e-7) for g, t in zip(got, truth))


def test_a_reentrant_checkpoints_recomputation_is_refused():
    model, x = _block_and_head(), torch.randn(5, 4, requires_grad=True)
    with no_hooks_left_behind(model), pytest.raises(RuntimeError, match=r"'block.0' ran inside a backward pass.*"
                                                                          r"use_reentrant=False"):
        _grads_with(model, x, hooklab.checkpoint_modules(model, ["block"], use_reentrant=True),
                    intervene(model, {"block.0": lambda out, call: out * 3}))


def test_a_backward_left_for_after_the_block_under_checkpointing_is_warned_about():
    model, x = _block_and_head(), torch.randn(5, 4)
    with pytest.warns(RuntimeWarning, match=r"'block.0' inside an activation-checkpointed region have not been "
                                            r"recomputed yet.*Run backward inside"):
        with hooklab.checkpoint_modules(model, ["block"]), intervene(model, {"block.0": lambda o, c: o * 3}):
            loss = model(x).pow(2).sum()
    loss.backward()


def test_a_copy_made_inside_the_block_is_not_edited_after_it():
    """N2 (the review's example): the copy's output stayed zero for ever, and its calls were counted."""
    model, x = _block_and_head(), torch.randn(5, 4)
    with intervene(model, {"head": lambda out, call: out * 0}) as iv:
        model(x)
        ema = copy.deepcopy(model)
    assert not torch.equal(ema(x), torch.zeros(5, 3)) and iv.calls == {"head": 1}


def test_a_name_that_never_runs_gets_a_warning():
    """N9: a container that is never called itself (a ModuleList) was a silent no-op."""
    class Blocks(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    model = Blocks()
    with pytest.warns(RuntimeWarning, match=r"intervene edited nothing of 'layers': it never ran inside the block.*"
                                            r"container that is never called itself"):
        with intervene(model, {"layers": lambda out, call: out * 0, "layers.0": lambda out, call: None}) as iv:
            model(torch.ones(1, 4))
    assert iv.calls == {"layers": 0, "layers.0": 1}


class _CatchesEverything(nn.Module):
    def __init__(self, catch):
        super().__init__()
        self.first, self.second, self.catch = nn.Linear(4, 4), nn.Linear(4, 4), catch
        self.ran_second = 0

    def forward(self, x):
        try:
            x = self.first(x)
        except self.catch:  # a forward that recovers from a failing submodule
            pass
        self.ran_second += 1
        return self.second(x)


def test_capture_inputs_stops_a_forward_that_catches_exception():
    """Review: the stop was an Exception, swallowed by such a forward, which then ran on without a word."""
    model = _CatchesEverything(Exception)
    inputs = capture_inputs(model, "first", torch.ones(2, 4))
    assert model.ran_second == 0 and tuple(inputs.args[0].shape) == (2, 4)


def test_capture_inputs_says_when_a_forward_swallowed_the_stop():
    model = _CatchesEverything(BaseException)
    with pytest.warns(RuntimeWarning, match=r"caught the stop raised when 'first' was called .* the rest of the "
                                            r"forward ran"):
        inputs = capture_inputs(model, "first", torch.ones(2, 4))
    assert model.ran_second == 1 and tuple(inputs.args[0].shape) == (2, 4)
