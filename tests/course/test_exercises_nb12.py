"""Notebook 12's checkers accept right answers written differently and reject the typical wrong ones, each for
its own reason."""
import dataclasses

import pytest
import torch

import hooklab
from exercise_support import judged, run_solution, verdict
from hooklab.course.exercises import nb12


def reason_text(key, answer):
    """The English reason the checker gives."""
    from hooklab.course import exercises
    return exercises.verdict(key, answer)[2]


# ---- 12.1 one head per row during a left-padded generate() ---------------------------------------------

def _per_call(model, prompts, mask, layer, head, max_new_tokens, *, module="o_proj_in"):
    """The head's slice of every call, [batch, positions of the call, head_dim], in call order."""
    d = model.config.hidden_size // model.config.num_attention_heads
    attention = model.model.layers[layer].self_attn
    calls = []
    with hooklab.HookScope() as scope, torch.no_grad():
        if module == "o_proj_in":
            scope.add(attention.o_proj.register_forward_pre_hook(lambda m, args: calls.append(args[0])))
        else:  # o_proj's output: the wrong place
            scope.add(attention.o_proj.register_forward_hook(lambda m, args, out: calls.append(out)))
        model.generate(prompts, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0)
    return [c[..., head * d:(head + 1) * d] for c in calls]


def _real_rows(calls, mask):
    """Per row: the first call's real columns, then every later call's one position."""
    return [torch.cat([calls[0][r, mask[r] == 1], *(c[r] for c in calls[1:])]) for r in range(len(mask))]


def by_position_ids(model, prompts, attention_mask, layer, head, max_new_tokens):
    # written differently: keyed by each row's own position_ids from the attention's keywords
    d = model.config.hidden_size // model.config.num_attention_heads
    attention = model.model.layers[layer].self_attn
    stores, positions = [{} for _ in range(len(prompts))], {}

    def remember(module, args, kwargs):
        positions["now"] = kwargs["position_ids"].tolist()

    def grab(module, args):
        prompt_call = not any(stores)
        for r, store in enumerate(stores):
            for i, p in enumerate(positions["now"][r]):
                if not prompt_call or attention_mask[r, i]:  # the prompt call: real columns only
                    store[p] = args[0][r, i, head * d:(head + 1) * d].detach()

    handles = [attention.register_forward_pre_hook(remember, with_kwargs=True),
               attention.o_proj.register_forward_pre_hook(grab)]
    try:
        with torch.no_grad():
            model.generate(prompts, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=False,
                           pad_token_id=0)
    finally:
        for h in handles:
            h.remove()
    return [torch.stack([store[p] for p in sorted(store)]) for store in stores]


def with_intervene(model, prompts, attention_mask, layer, head, max_new_tokens):
    # written differently: hooklab.intervene on o_proj's input, an edit function that returns the value unchanged
    d = model.config.hidden_size // model.config.num_attention_heads
    calls = []

    def keep(value, call):
        calls.append(value[..., head * d:(head + 1) * d].detach())
        return value

    with hooklab.intervene(model, {f"model.layers.{layer}.self_attn.o_proj": keep}, on="input"), torch.no_grad():
        model.generate(prompts, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=False,
                       pad_token_id=0)
    return _real_rows(calls, attention_mask)


def keeps_padding(model, prompts, attention_mask, layer, head, max_new_tokens):
    calls = _per_call(model, prompts, attention_mask, layer, head, max_new_tokens)
    return [torch.cat([c[r] for c in calls]) for r in range(len(prompts))]


def row_zero_positions(model, prompts, attention_mask, layer, head, max_new_tokens):
    # row 0's mask for every row: row 0 is the longest, so every row keeps all of its columns, padding included
    calls = _per_call(model, prompts, attention_mask, layer, head, max_new_tokens)
    return [torch.cat([calls[0][r, attention_mask[0] == 1], *(c[r] for c in calls[1:])]) for r in range(len(prompts))]


def last_step_only(model, prompts, attention_mask, layer, head, max_new_tokens):
    return [c for c in _per_call(model, prompts, attention_mask, layer, head, max_new_tokens)[-1]]


def prompt_only(model, prompts, attention_mask, layer, head, max_new_tokens):
    calls = _per_call(model, prompts, attention_mask, layer, head, max_new_tokens)
    return [calls[0][r, attention_mask[r] == 1] for r in range(len(prompts))]


def one_too_many(model, prompts, attention_mask, layer, head, max_new_tokens):  # the last token, fed to nobody
    rows = nb12_reference(model, prompts, attention_mask, layer, head, max_new_tokens)
    return [torch.cat([row, row[-1:]]) for row in rows]


def one_short(model, prompts, attention_mask, layer, head, max_new_tokens):
    return [row[1:] for row in nb12_reference(model, prompts, attention_mask, layer, head, max_new_tokens)]


def wrong_head(model, prompts, attention_mask, layer, head, max_new_tokens):
    other = (head + 1) % model.config.num_attention_heads
    return nb12_reference(model, prompts, attention_mask, layer, other, max_new_tokens)


def after_o_proj(model, prompts, attention_mask, layer, head, max_new_tokens):
    return _real_rows(_per_call(model, prompts, attention_mask, layer, head, max_new_tokens, module="o_proj_out"),
                      attention_mask)


def all_heads(model, prompts, attention_mask, layer, head, max_new_tokens):
    calls = _per_call(model, prompts, attention_mask, layer, 0, max_new_tokens)
    return [torch.cat([row, row, row, row], dim=-1) for row in _real_rows(calls, attention_mask)]  # 4 * d wide


def stacked(model, prompts, attention_mask, layer, head, max_new_tokens):
    return torch.nn.utils.rnn.pad_sequence(nb12_reference(model, prompts, attention_mask, layer, head, max_new_tokens),
                                           batch_first=True)


def first_row_only(model, prompts, attention_mask, layer, head, max_new_tokens):
    return nb12_reference(model, prompts, attention_mask, layer, head, max_new_tokens)[:1]


def as_lists(model, prompts, attention_mask, layer, head, max_new_tokens):
    return [row.tolist() for row in nb12_reference(model, prompts, attention_mask, layer, head, max_new_tokens)]


def leaves_hook(model, prompts, attention_mask, layer, head, max_new_tokens):
    calls = []
    model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(lambda m, args: calls.append(args[0]))
    return nb12_reference(model, prompts, attention_mask, layer, head, max_new_tokens)


def forgets_return(model, prompts, attention_mask, layer, head, max_new_tokens):
    nb12_reference(model, prompts, attention_mask, layer, head, max_new_tokens)


def blank_12_1(model, prompts, attention_mask, layer, head, max_new_tokens):
    pass


def nb12_reference(*args):
    return run_solution("12.1")["head_per_row"](*args)


def test_12_1():
    assert verdict("12.1", run_solution("12.1")["head_per_row"]) == "correct"
    assert verdict("12.1", by_position_ids) == "correct"
    assert verdict("12.1", with_intervene) == "correct"
    assert judged("12.1", blank_12_1) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (keeps_padding, "padding-included"), (row_zero_positions, "padding-included"), (last_step_only, "last-step-only"),
    (prompt_only, "prompt-only"), (one_too_many, "one-too-many"), (one_short, "positions"), (wrong_head, "other-head"),
    (after_o_proj, "values"), (all_heads, "head-dim"), (stacked, "not-a-list"), (first_row_only, "row-count"),
    (as_lists, "not-a-tensor"), (leaves_hook, "hook-left"), (forgets_return, "returned-none"), (3, "not-a-function")])
def test_12_1_rejects_wrong_answers(answer, reason):
    assert judged("12.1", answer) == ("wrong", reason)


def test_12_1_reasons_name_the_mistake():
    assert "padding" in reason_text("12.1", keeps_padding) and "position_ids[0]" in reason_text("12.1", keeps_padding)
    assert "last step" in reason_text("12.1", last_step_only)
    assert "different numbers of real positions" in reason_text("12.1", stacked)
    assert "slice" in reason_text("12.1", wrong_head)
    assert "input" in reason_text("12.1", after_o_proj)
    assert "hook is still registered" in reason_text("12.1", leaves_hook)


# ---- 12.2 attention knockout -----------------------------------------------------------------------------

def _knockout(mask_for, *, layers=None, in_place=False):
    """An answer whose pre-hook on each attention in ``layers`` (default: the asked one) puts ``mask_for(kwargs,
    key)`` into ``attention_mask`` (changed in place and returned as is when ``in_place``)."""
    def answer(model, ids, layer, key_position):
        def hook(module, args, kwargs):
            mask = mask_for(kwargs, key_position)
            if in_place:
                return None
            return args, {**kwargs, "attention_mask": mask}

        chosen = [layer] if layers is None else layers(model, layer)
        with hooklab.HookScope() as scope, torch.no_grad():
            for i in chosen:
                scope.add(model.model.layers[i].self_attn.register_forward_pre_hook(hook, with_kwargs=True))
            return model(ids).logits
    return answer


def _causal(kwargs, *, causal=True):
    length = kwargs["hidden_states"].shape[1]
    allowed = torch.ones(length, length, dtype=torch.bool)
    allowed = allowed.tril() if causal else allowed
    return torch.zeros(1, 1, length, length).masked_fill(~allowed, float("-inf"))


def _given_or_causal(kwargs):
    mask = kwargs.get("attention_mask")
    return _causal(kwargs) if mask is None else mask.clone()


def _block(mask, query_from, key):
    mask[..., query_from:, key] = float("-inf")
    return mask


def with_min_value(model, ids, layer, key_position):
    # written differently: torch.finfo's min instead of -inf, a fresh causal mask even when one is given, and
    # hooklab.intervene(on="kwargs")
    def edit(kwargs, call):
        length = kwargs["hidden_states"].shape[1]
        lowest = torch.finfo(kwargs["hidden_states"].dtype).min
        mask = torch.triu(torch.full((length, length), lowest), diagonal=1)
        mask[key_position + 1:, key_position] = lowest
        batch = kwargs["hidden_states"].shape[0]  # intervene wants a replaced tensor's shape kept: [batch, 1, q, k]
        return {**kwargs, "attention_mask": mask[None, None].expand(batch, 1, length, length)}

    with hooklab.intervene(model, {f"model.layers.{layer}.self_attn": edit}, on="kwargs"), torch.no_grad():
        return model(ids).logits


no_edit = _knockout(lambda kwargs, key: kwargs.get("attention_mask"))
every_layer = _knockout(lambda kwargs, key: _block(_given_or_causal(kwargs), key + 1, key),
                        layers=lambda model, layer: range(len(model.model.layers)))
whole_column = _knockout(lambda kwargs, key: _block(_given_or_causal(kwargs), key, key))
eager_whole_column = _knockout(  # right where no mask is given (SDPA); a -inf mask, whole column, where one is (eager)
    lambda kwargs, key: _block(_causal(kwargs), key + (kwargs.get("attention_mask") is None), key))
not_causal = _knockout(lambda kwargs, key: _block(_causal(kwargs, causal=False), key + 1, key))
next_key = _knockout(lambda kwargs, key: _block(_given_or_causal(kwargs), key + 2, key + 1))
other_layer = _knockout(lambda kwargs, key: _block(_given_or_causal(kwargs), key + 1, key),
                        layers=lambda model, layer: [1 - layer])


def _lowest_whole_column(kwargs, key):  # finfo.min rather than -inf: a query with every key blocked looks everywhere
    mask = _causal(kwargs).clamp(min=torch.finfo(torch.float32).min)
    mask[..., key:, key] = torch.finfo(torch.float32).min
    return mask


def _row_after(kwargs, key):  # the keys after query `key`: hidden by the causal part already
    mask = _causal(kwargs)
    mask[..., key, key + 1:] = float("-inf")
    return mask


lowest_whole_column = _knockout(_lowest_whole_column)
row_not_column = _knockout(_row_after)
boolean_mask = _knockout(lambda kwargs, key: _block(_causal(kwargs), key + 1, key) == 0)  # True: may look


def in_place_when_given(model, ids, layer, key_position):
    # right under SDPA (no mask: builds one); under eager it changes the shared mask in place
    def hook(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is None:
            return args, {**kwargs, "attention_mask": _block(_causal(kwargs), key_position + 1, key_position)}
        mask[..., key_position + 1:, key_position] = torch.finfo(mask.dtype).min
        return None

    with hooklab.HookScope() as scope, torch.no_grad():
        scope.add(model.model.layers[layer].self_attn.register_forward_pre_hook(hook, with_kwargs=True))
        return model(ids).logits


def last_position_only(model, ids, layer, key_position):
    return run_solution("12.2")["block_attention"](model, ids, layer, key_position)[:, -1]


def blank_12_2(model, ids, layer, key_position):
    pass


def test_12_2_truth_is_the_model_itself():
    model = nb12._fresh_model(5)
    ids = torch.randint(1, 64, (2, 9))
    with torch.no_grad():
        assert torch.allclose(nb12._by_hand(model, ids, {}), model(ids).logits, atol=1e-5)


def test_12_2():
    assert verdict("12.2", run_solution("12.2")["block_attention"]) == "correct"
    assert verdict("12.2", with_min_value) == "correct"
    assert judged("12.2", blank_12_2) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (no_edit, "no-effect"), (every_layer, "every-layer"), (in_place_when_given, "in-place"), (whole_column, "diagonal"),
    (eager_whole_column, "nan"),
    (lowest_whole_column, "diagonal"), (row_not_column, "already-hidden"),
    (not_causal, "not-causal"), (next_key, "wrong-key"), (other_layer, "wrong-layer"), (boolean_mask, "logits"),
    (last_position_only, "shape")])
def test_12_2_rejects_wrong_answers(answer, reason):
    assert judged("12.2", answer) == ("wrong", reason)


def test_12_2_reasons_name_the_mistake():
    assert "all layers share" in reason_text("12.2", in_place_when_given)
    assert "clone" in reason_text("12.2", in_place_when_given)
    assert "itself" in reason_text("12.2", whole_column)
    assert "NaN" in reason_text("12.2", eager_whole_column)
    assert "replaces the causal mask" in reason_text("12.2", not_causal)
    assert "True/False" in reason_text("12.2", boolean_mask)


# ---- 12.3 one hook for a tensor, a tuple and a ModelOutput ---------------------------------------------------

def scaling_by_type_check(factor):
    # written differently: one branch per form, the ModelOutput rebuilt from its own class and a dict
    def hook(module, args, output):
        if isinstance(output, tuple):
            return (output[0] * factor, *output[1:])
        if isinstance(output, dict):
            first = next(iter(output))
            return type(output)(**{**output, first: output[first] * factor})
        return output.clone().mul_(factor)  # in place, but on a copy: fine
    return hook


def tensor_and_tuple_only(factor):  # notebook 12 c14's with_hidden: a ModelOutput is treated as a tensor
    def hook(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        return (hidden * factor, *output[1:]) if isinstance(output, tuple) else hidden * factor
    return hook


def mul_in_place(factor):
    def hook(module, args, output):
        hidden = output if isinstance(output, torch.Tensor) else output[0]
        hidden.mul_(factor)
    return hook


def mul_in_place_and_return(factor):
    def hook(module, args, output):
        if isinstance(output, torch.Tensor):
            return output.mul_(factor)
        return run_solution("12.3")["make_scaling_hook"](factor)(module, args, output)
    return hook


def assigns_field(factor):
    def hook(module, args, output):
        if isinstance(output, torch.Tensor):
            return output * factor
        if isinstance(output, tuple):
            return (output[0] * factor, *output[1:])
        output.last_hidden_state = output.last_hidden_state * factor  # changes the ModelOutput it received
        return output
    return hook


def _forms(tensor, tuple_, model_output):
    """A hook made of one function per form of output."""
    def make(factor):
        def hook(module, args, output):
            if isinstance(output, torch.Tensor):
                return tensor(output, factor)
            if isinstance(output, tuple):
                return tuple_(output, factor)
            return model_output(output, factor)
        return hook
    return make


def _right_model_output(output, factor):
    return dataclasses.replace(output, last_hidden_state=output.last_hidden_state * factor)


def _right_tuple(output, factor):
    return (output[0] * factor, *output[1:])


always_index_zero = _forms(lambda o, f: (o[0] * f, *o[1:]), _right_tuple, _right_model_output)
drops_tuple = _forms(lambda o, f: o * f, lambda o, f: o[0] * f, _right_model_output)
tuple_as_list = _forms(lambda o, f: o * f, lambda o, f: [o[0] * f, *o[1:]], _right_model_output)
long_tuple = _forms(lambda o, f: o * f, lambda o, f: (o[0] * f, *o[1:], None), _right_model_output)
scales_weights = _forms(lambda o, f: o * f, lambda o, f: tuple(t * f for t in o), _right_model_output)
model_output_as_tensor = _forms(lambda o, f: o * f, _right_tuple, lambda o, f: o.last_hidden_state * f)
model_output_as_dict = _forms(lambda o, f: o * f, _right_tuple, lambda o, f: {"last_hidden_state": o[0] * f})
drops_cache_field = _forms(lambda o, f: o * f, _right_tuple,
                           lambda o, f: type(o)(last_hidden_state=o.last_hidden_state * f))
wrong_factor = _forms(lambda o, f: o * 2, lambda o, f: (o[0] * 2, *o[1:]),
                      lambda o, f: dataclasses.replace(o, last_hidden_state=o.last_hidden_state * 2))
first_sample = _forms(lambda o, f: o[0] * f, _right_tuple, _right_model_output)


def observes_only(factor):
    def hook(module, args, output):
        _ = (output[0] if isinstance(output, tuple) else output) * factor
    return hook


def raising(factor):
    def hook(module, args, output):
        raise RuntimeError("not today")
    return hook


def blank_12_3(factor):
    pass


def test_12_3():
    assert verdict("12.3", run_solution("12.3")["make_scaling_hook"]) == "correct"
    assert verdict("12.3", scaling_by_type_check) == "correct"
    assert judged("12.3", blank_12_3) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (tensor_and_tuple_only, "raised"), (mul_in_place, "in-place"), (mul_in_place_and_return, "in-place"),
    (assigns_field, "in-place"), (always_index_zero, "tensor-to-tuple"), (drops_tuple, "tuple-to-tensor"),
    (tuple_as_list, "not-a-tuple"), (long_tuple, "tuple-length"), (scales_weights, "rest-changed"),
    (model_output_as_tensor, "modeloutput-type"), (model_output_as_dict, "modeloutput-type"),
    (drops_cache_field, "rest-changed"),
    (wrong_factor, "not-scaled"), (first_sample, "hidden-shape"), (observes_only, "unchanged"), (raising, "raised"),
    (lambda f: "hook", "not-a-hook"), ("hook", "not-a-function")])
def test_12_3_rejects_wrong_answers(answer, reason):
    assert judged("12.3", answer) == ("wrong", reason)


def test_12_3_reasons_name_the_mistake():
    assert "in place" in reason_text("12.3", mul_in_place) and "output_hidden_states" in reason_text("12.3", mul_in_place)
    assert "attention weights" in reason_text("12.3", scales_weights)
    assert "returned a list, not a tuple" in reason_text("12.3", tuple_as_list)
    assert "1 element," in reason_text("12.3", lambda f: _forms(lambda o, f: o * f, lambda o, f: (o[0] * f,),
                                                                    _right_model_output)(f))
    assert "dataclasses.replace" in reason_text("12.3", model_output_as_tensor)
    assert "first sample" in reason_text("12.3", always_index_zero)
    assert "TypeError" in reason_text("12.3", tensor_and_tuple_only)
