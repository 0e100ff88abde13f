"""Notebook 12's checkers accept right answers written differently and reject the typical wrong ones."""
import pytest
import torch

import hooklab

from exercise_support import judged, run_solution, verdict


# ---- 12.1 one head during generate() -----------------------------------------------------------

def _collect(model, prompt, layer, head, max_new_tokens, keep, *, module="o_proj_in"):
    d = model.config.hidden_size // model.config.num_attention_heads
    attention = model.model.layers[layer].self_attn
    pieces = []
    with hooklab.HookScope() as scope, torch.no_grad():
        if module == "o_proj_in":
            scope.add(attention.o_proj.register_forward_pre_hook(lambda m, args: pieces.append(args[0][0])))
        else:  # o_proj's output: the wrong place
            scope.add(attention.o_proj.register_forward_hook(lambda m, args, out: pieces.append(out[0])))
        generated = model.generate(prompt, max_new_tokens=max_new_tokens, do_sample=False)
    return keep(pieces, generated, head * d, (head + 1) * d)


def by_position_dict(model, prompt, layer, head, max_new_tokens):
    # written differently: keyed by the absolute positions from the attention's keyword arguments
    d = model.config.hidden_size // model.config.num_attention_heads
    attention = model.model.layers[layer].self_attn
    store, positions = {}, {}

    def remember_positions(module, args, kwargs):
        positions["now"] = kwargs["position_ids"][0].tolist()

    def grab(module, args):
        for i, p in enumerate(positions["now"]):
            store[p] = args[0][0, i, head * d:(head + 1) * d].detach()

    handles = [attention.register_forward_pre_hook(remember_positions, with_kwargs=True),
               attention.o_proj.register_forward_pre_hook(grab)]
    try:
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=max_new_tokens, do_sample=False)
    finally:
        for h in handles:
            h.remove()
    return torch.stack([store[p] for p in sorted(store)])


def last_step_only(model, prompt, layer, head, max_new_tokens):
    return _collect(model, prompt, layer, head, max_new_tokens, lambda p, g, a, b: p[-1][:, a:b])


def prompt_only(model, prompt, layer, head, max_new_tokens):
    return _collect(model, prompt, layer, head, max_new_tokens, lambda p, g, a, b: p[0][:, a:b])


def wrong_head(model, prompt, layer, head, max_new_tokens):
    other = (head + 1) % model.config.num_attention_heads
    return _collect(model, prompt, layer, other, max_new_tokens, lambda p, g, a, b: torch.cat(p)[:, a:b])


def after_o_proj(model, prompt, layer, head, max_new_tokens):
    return _collect(model, prompt, layer, head, max_new_tokens, lambda p, g, a, b: torch.cat(p)[:, a:b],
                    module="o_proj_out")


def leaves_hook(model, prompt, layer, head, max_new_tokens):
    d = model.config.hidden_size // model.config.num_attention_heads
    pieces = []
    model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(
        lambda m, args: pieces.append(args[0][0, :, head * d:(head + 1) * d].detach()))
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=max_new_tokens, do_sample=False)
    return torch.cat(pieces)


def blank_12_1(model, prompt, layer, head, max_new_tokens):
    pass


def test_12_1():
    assert verdict("12.1", run_solution("12.1")["head_during_generate"]) == "correct"
    assert verdict("12.1", by_position_dict) == "correct"
    assert judged("12.1", blank_12_1) == ("not solved", "blank")


def one_too_many(model, prompt, layer, head, max_new_tokens):  # also the last token, fed to nobody
    d = model.config.hidden_size // model.config.num_attention_heads
    found = by_position_dict(model, prompt, layer, head, max_new_tokens)
    return torch.cat([found, found[-1:]])


def head_as_list(model, prompt, layer, head, max_new_tokens):
    return by_position_dict(model, prompt, layer, head, max_new_tokens).tolist()


def all_heads(model, prompt, layer, head, max_new_tokens):
    return _collect(model, prompt, layer, head, max_new_tokens, lambda p, g, a, b: torch.cat(p))


def one_position_short(model, prompt, layer, head, max_new_tokens):
    return by_position_dict(model, prompt, layer, head, max_new_tokens)[1:]


def forgets_return(model, prompt, layer, head, max_new_tokens):
    by_position_dict(model, prompt, layer, head, max_new_tokens)


@pytest.mark.parametrize("answer, reason", [
    (last_step_only, "last-step-only"), (prompt_only, "prompt-only"), (wrong_head, "other-head"),
    (after_o_proj, "values"), (leaves_hook, "hook-left"), (one_too_many, "one-too-many"), (head_as_list, "not-a-tensor"),
    (all_heads, "head-dim"), (one_position_short, "positions"), (forgets_return, "returned-none"), (3, "not-a-function")])
def test_12_1_rejects_wrong_answers(answer, reason):
    assert judged("12.1", answer) == ("wrong", reason)


def test_12_1_reasons_name_the_mistake():
    from hooklab.course import exercises
    assert "last step" in exercises.verdict("12.1", last_step_only)[2]
    assert "prompt" in exercises.verdict("12.1", prompt_only)[2]
    assert "head" in exercises.verdict("12.1", wrong_head)[2] and "slice" in exercises.verdict("12.1", wrong_head)[2]
    assert "input" in exercises.verdict("12.1", after_o_proj)[2]
    assert "hook is still registered" in exercises.verdict("12.1", leaves_hook)[2]


# ---- 12.2 patch one position ---------------------------------------------------------------------

def _patched(model, clean, corrupted, layer, position, *, where=None, every=False, source=None):
    block = model.model.layers[layer]
    stored = {}
    with torch.no_grad():
        h = block.register_forward_hook(lambda m, a, out: stored.__setitem__("clean", out.detach()))
        try:
            model(clean)
        finally:
            h.remove()

        def patch(module, args, output):
            patched = output.clone()
            if every:
                return stored["clean"]
            patched[:, position] = stored["clean"][:, position]
            return patched

        h = block.register_forward_hook(patch)
        try:
            return model(corrupted if source is None else source).logits
        finally:
            h.remove()


def patch_with_pre_hook_on_next(model, clean, corrupted, layer, position):
    # written differently: for the last layer, patch the final norm's input; otherwise the next layer's input
    trunk = model.model
    consumer = trunk.layers[layer + 1] if layer + 1 < len(trunk.layers) else trunk.norm
    stored = {}
    with torch.no_grad():
        h = consumer.register_forward_pre_hook(lambda m, args: stored.__setitem__("x", args[0].detach()))
        try:
            model(clean)
        finally:
            h.remove()

        def patch(module, args):
            x = args[0].clone()
            x[:, position] = stored["x"][:, position]
            return (x, *args[1:])

        h = consumer.register_forward_pre_hook(patch)
        try:
            return model(corrupted).logits
        finally:
            h.remove()


def every_position(model, clean, corrupted, layer, position):
    return _patched(model, clean, corrupted, layer, position, every=True)


def no_patch(model, clean, corrupted, layer, position):
    with torch.no_grad():
        return model(corrupted).logits


def layer_input(model, clean, corrupted, layer, position):
    if layer == 0:  # patch the embedding instead
        emb = model.model.embed_tokens
        with torch.no_grad():
            clean_emb = emb(clean)
            h = emb.register_forward_hook(lambda m, a, out: torch.where(
                torch.arange(out.shape[1])[None, :, None] == position, clean_emb, out))
            try:
                return model(corrupted).logits
            finally:
                h.remove()
    return _patched(model, clean, corrupted, layer - 1, position)


def next_layer(model, clean, corrupted, layer, position):
    return _patched(model, clean, corrupted, min(layer + 1, len(model.model.layers) - 1), position)


def wrong_position(model, clean, corrupted, layer, position):
    return _patched(model, clean, corrupted, layer, position + 1)


def returns_output_object(model, clean, corrupted, layer, position):
    # a ModelOutput instead of its .logits is accepted
    class Holder:
        pass
    out = Holder()
    out.logits = _patched(model, clean, corrupted, layer, position)
    return out


def blank_12_2(model, clean, corrupted, layer, position):
    pass


def test_12_2():
    assert verdict("12.2", run_solution("12.2")["patch_residual"]) == "correct"
    assert verdict("12.2", patch_with_pre_hook_on_next) == "correct"
    assert verdict("12.2", returns_output_object) == "correct"
    assert judged("12.2", blank_12_2) == ("not solved", "blank")


def input_of_later_layers(model, clean, corrupted, layer, position):  # right for layer 0 only
    return _patched(model, clean, corrupted, max(layer - 1, 0), position)


def last_position_only(model, clean, corrupted, layer, position):
    return _patched(model, clean, corrupted, layer, position)[:, -1]


@pytest.mark.parametrize("answer, reason", [
    (every_position, "every-position"), (no_patch, "no-effect"),
    (layer_input, "no-effect"),  # for layer 0 it patches the embedding, where clean and corrupted agree
    (input_of_later_layers, "layer-input"),
    (next_layer, "next-layer"), (wrong_position, "logits"), (last_position_only, "shape")])
def test_12_2_rejects_wrong_answers(answer, reason):
    assert judged("12.2", answer) == ("wrong", reason)


def test_12_2_reasons_name_the_mistake():
    from hooklab.course import exercises
    assert "every" in exercises.verdict("12.2", every_position)[2]
    assert "without any patch" in exercises.verdict("12.2", no_patch)[2]
    assert "input" in exercises.verdict("12.2", layer_input)[2]
    assert "layer 2" in exercises.verdict("12.2", next_layer)[2] or "layer 1's output" in exercises.verdict("12.2", next_layer)[2]


# ---- 12.3 one hook for a tensor and a tuple output -------------------------------------------------

def scaling_by_type_check(factor):
    # written differently: tuple check via try/except, in place on a clone
    def hook(module, args, output):
        try:
            first, *rest = output if isinstance(output, tuple) else (output,)
        except ValueError:
            return None
        scaled = first.clone().mul_(factor)
        return (scaled, *rest) if isinstance(output, tuple) else scaled
    return hook


def always_index_zero(factor):
    return lambda module, args, output: (output[0] * factor, *output[1:])


def drops_tuple(factor):
    return lambda module, args, output: (output[0] if isinstance(output, tuple) else output) * factor


def observes_only(factor):
    def hook(module, args, output):
        _ = (output[0] if isinstance(output, tuple) else output) * factor
    return hook


def scales_everything(factor):
    def hook(module, args, output):
        if isinstance(output, tuple):
            return tuple(o * factor if o is not None else o for o in output)
        return output * factor
    return hook


def wrong_factor(factor):
    def hook(module, args, output):
        if isinstance(output, tuple):
            return (output[0] * 2, *output[1:])
        return output * 2
    return hook


def blank_12_3(factor):
    pass


def test_12_3():
    from hooklab.course import exercises
    assert verdict("12.3", run_solution("12.3")["make_scaling_hook"]) == "correct"
    assert verdict("12.3", scaling_by_type_check) == "correct"
    assert verdict("12.3", scales_everything) == "correct"  # (output, None): None is left alone either way
    assert "first sample" in exercises.verdict("12.3", always_index_zero)[2]
    assert "replaced the tuple with a tensor" in exercises.verdict("12.3", drops_tuple)[2]
    assert "did not change" in exercises.verdict("12.3", observes_only)[2]
    assert "times the original" in exercises.verdict("12.3", wrong_factor)[2]
    assert "first sample" in exercises.verdict("12.3", lambda f: lambda m, a, out: out[0] * f)[2]
    assert judged("12.3", blank_12_3) == ("not solved", "blank")


def long_tuple(factor):
    def hook(module, args, output):
        if isinstance(output, tuple):
            return (output[0] * factor, *output[1:], None)
        return output * factor
    return hook


def raising(factor):
    def hook(module, args, output):
        raise RuntimeError("not today")
    return hook


def changes_rest(factor):  # the older-style layer's tuple has one element: give it a second
    def hook(module, args, output):
        if isinstance(output, tuple):
            return (output[0] * factor, *(torch.zeros(1) if o is None else o for o in output[1:]))
        return output * factor
    return hook


@pytest.mark.parametrize("answer, reason", [
    (always_index_zero, "tensor-to-tuple"), (drops_tuple, "tuple-to-tensor"), (observes_only, "unchanged"),
    (wrong_factor, "not-scaled"), (lambda f: lambda m, a, out: out[0] * f, "hidden-shape"), (long_tuple, "tuple-length"),
    (changes_rest, "rest-changed"), (raising, "raised"), (lambda f: "hook", "not-a-hook"), ("hook", "not-a-function")])
def test_12_3_rejects_wrong_answers(answer, reason):
    assert judged("12.3", answer) == ("wrong", reason)
