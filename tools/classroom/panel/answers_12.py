"""Honest answers to notebook 12's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import torch

from tools.classroom.panel import answer

# ---------------------------------------------------------------- 12.1: one head, row by row, in a left-padded batch


@answer("12.1", right=True)
def head_per_row_counting_calls(model, prompts, attention_mask, layer, head, max_new_tokens):
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    columns = slice(head * head_dim, (head + 1) * head_dim)
    calls = []  # one entry per forward of generate(): the prompt first, then one new token each

    def grab(module, args):
        calls.append(args[0][..., columns].detach().clone())

    handle = model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(grab)
    try:
        with torch.no_grad():
            model.generate(prompts, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=False,
                           pad_token_id=0)
    finally:
        handle.remove()
    rows = []
    for r in range(prompts.shape[0]):
        real = attention_mask[r].bool()
        prompt_part = calls[0][r][real]            # the prompt step: drop the padding positions
        later = [step[r] for step in calls[1:]]    # every later step: one real (generated) position
        rows.append(torch.cat([prompt_part, *later], dim=0))
    return rows


@answer("12.1", right=True)
def head_per_row_by_position_ids(model, prompts, attention_mask, layer, head, max_new_tokens):
    import hooklab

    attention = model.model.layers[layer].self_attn
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    columns = slice(head * head_dim, (head + 1) * head_dim)
    batch = prompts.shape[0]
    now = {}
    by_position = [{} for _ in range(batch)]

    def note_positions(module, args, kwargs):
        now["positions"] = kwargs["position_ids"].expand(batch, -1)
        now["first"] = "first" not in now

    def keep(module, args):
        value = args[0][..., columns].detach()
        for r in range(batch):
            real = attention_mask[r].bool() if now["first"] else torch.ones(value.shape[1], dtype=torch.bool)
            for i in torch.nonzero(real).flatten().tolist():
                by_position[r][int(now["positions"][r, i])] = value[r, i]

    with hooklab.HookScope() as scope, torch.no_grad():
        scope.add(attention.register_forward_pre_hook(note_positions, with_kwargs=True))
        scope.add(attention.o_proj.register_forward_pre_hook(keep))
        model.generate(prompts, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=False,
                       pad_token_id=0)
    return [torch.stack([row[p] for p in sorted(row)]) for row in by_position]


@answer("12.1", mistake="logic",
        says="records every row by row 0's position_ids (position_ids[0]), so rows padded differently from row 0 "
             "get their values filed under the wrong positions")
def head_per_row_with_row_zero_positions(model, prompts, attention_mask, layer, head, max_new_tokens):
    import hooklab

    attention = model.model.layers[layer].self_attn
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    columns = slice(head * head_dim, (head + 1) * head_dim)
    batch = prompts.shape[0]
    now = {}
    by_position = [{} for _ in range(batch)]

    def note_positions(module, args, kwargs):
        now["positions"] = kwargs["position_ids"][0].tolist()  # fine for one row

    def keep(module, args):
        value = args[0][..., columns].detach()
        for r in range(batch):
            for i, p in enumerate(now["positions"]):
                by_position[r][p] = value[r, i]

    with hooklab.HookScope() as scope, torch.no_grad():
        scope.add(attention.register_forward_pre_hook(note_positions, with_kwargs=True))
        scope.add(attention.o_proj.register_forward_pre_hook(keep))
        model.generate(prompts, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=False,
                       pad_token_id=0)
    return [torch.stack([row[p] for p in sorted(row)]) for row in by_position]


@answer("12.1", mistake="shape-or-dtype",
        says="keeps every position of the prompt step, the left padding included, so each padded row has too many "
             "positions")
def head_per_row_keeping_the_padding(model, prompts, attention_mask, layer, head, max_new_tokens):
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    columns = slice(head * head_dim, (head + 1) * head_dim)
    calls = []
    handle = model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(
        lambda module, args: calls.append(args[0][..., columns].detach()))
    try:
        with torch.no_grad():
            model.generate(prompts, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=False,
                           pad_token_id=0)
    finally:
        handle.remove()
    everything = torch.cat(calls, dim=1)  # [batch, positions fed, head_dim]
    return [everything[r] for r in range(prompts.shape[0])]


@answer("12.1", mistake="count",
        says="keeps only the last position of every call (args[0][:, -1]), so the prompt step contributes one "
             "position instead of all of its real ones")
def head_per_row_last_position_of_each_call(model, prompts, attention_mask, layer, head, max_new_tokens):
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    columns = slice(head * head_dim, (head + 1) * head_dim)
    newest = []

    def grab(module, args):
        newest.append(args[0][:, -1, columns].detach())  # the newest token of each call

    handle = model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(grab)
    try:
        with torch.no_grad():
            model.generate(prompts, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=False,
                           pad_token_id=0)
    finally:
        handle.remove()
    stacked = torch.stack(newest, dim=1)
    return [stacked[r] for r in range(prompts.shape[0])]


@answer("12.1", mistake="wrong-target",
        says="slices the head's columns out of o_proj's output, where the heads are already mixed, instead of out "
             "of o_proj's input")
def head_per_row_from_o_proj_output(model, prompts, attention_mask, layer, head, max_new_tokens):
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    columns = slice(head * head_dim, (head + 1) * head_dim)
    calls = []

    def grab(module, args, output):
        calls.append(output[..., columns].detach())

    handle = model.model.layers[layer].self_attn.o_proj.register_forward_hook(grab)
    try:
        with torch.no_grad():
            model.generate(prompts, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=False,
                           pad_token_id=0)
    finally:
        handle.remove()
    rows = []
    for r in range(prompts.shape[0]):
        rows.append(torch.cat([calls[0][r][attention_mask[r].bool()], *[c[r] for c in calls[1:]]]))
    return rows


@answer("12.1", mistake="handle-left",
        says="registers the capturing pre-hook on o_proj and never removes its handle, so the hook stays on the "
             "model after the function returns")
def head_per_row_never_removing_the_hook(model, prompts, attention_mask, layer, head, max_new_tokens):
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    columns = slice(head * head_dim, (head + 1) * head_dim)
    calls = []
    model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(
        lambda module, args: calls.append(args[0][..., columns].detach()))
    with torch.no_grad():
        model.generate(prompts, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=False,
                       pad_token_id=0)
    rows = []
    for r in range(prompts.shape[0]):
        rows.append(torch.cat([calls[0][r][attention_mask[r].bool()], *[c[r] for c in calls[1:]]]))
    return rows


# ---------------------------------------------------------------- 12.2: attention knockout


def _causal_allowed(seq):
    return torch.ones(seq, seq, dtype=torch.bool).tril()


@answer("12.2", right=True)
def block_attention_with_an_additive_mask(model, ids, layer, key_position):
    batch, seq = ids.shape
    allowed = _causal_allowed(seq)
    allowed[key_position + 1:, key_position] = False  # queries after key_position no longer see it
    additive = torch.zeros(seq, seq, dtype=model.dtype).masked_fill(~allowed, torch.finfo(model.dtype).min)
    mask = additive[None, None].expand(batch, 1, seq, seq)

    def new_mask(module, args, kwargs):
        return args, {**kwargs, "attention_mask": mask}

    handle = model.model.layers[layer].self_attn.register_forward_pre_hook(new_mask, with_kwargs=True)
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        handle.remove()


@answer("12.2", right=True)
def block_attention_editing_the_mask_it_gets(model, ids, layer, key_position):
    import hooklab

    def knock_out(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        seq = kwargs["hidden_states"].shape[1]
        if mask is None:  # SDPA without padding: causal attention without a mask tensor; make the causal one
            mask = torch.zeros(seq, seq).masked_fill(~_causal_allowed(seq), float("-inf"))[None, None]
        else:
            mask = mask.clone()  # eager: an additive float mask [batch, 1, query, key]
        mask[..., key_position + 1:, key_position] = torch.finfo(mask.dtype).min
        return args, {**kwargs, "attention_mask": mask}

    with hooklab.HookScope() as scope, torch.no_grad():
        scope.add(model.model.layers[layer].self_attn.register_forward_pre_hook(knock_out, with_kwargs=True))
        return model(ids).logits


@answer("12.2", right=True)
def block_attention_with_intervene(model, ids, layer, key_position):
    import hooklab

    batch, seq = ids.shape
    blocked = _causal_allowed(seq)
    blocked[key_position + 1:, key_position] = False
    mask = torch.where(blocked, 0.0, float("-inf"))[None, None].expand(batch, 1, seq, seq)  # intervene checks shapes

    def edit(kwargs, call):
        return {**kwargs, "attention_mask": mask}

    with hooklab.intervene(model, {f"model.layers.{layer}.self_attn": edit}, on="kwargs"), torch.no_grad():
        return model(ids).logits


@answer("12.2", mistake="shape-or-dtype",
        says="hands over a boolean mask: SDPA reads it as allowed/blocked, but eager attention adds it to the scores, "
             "so under eager nothing is blocked at all, not even the future")
def block_attention_with_a_boolean_mask(model, ids, layer, key_position):
    seq = ids.shape[1]
    allowed = _causal_allowed(seq)
    allowed[key_position + 1:, key_position] = False

    def new_mask(module, args, kwargs):
        return args, {**kwargs, "attention_mask": allowed[None, None]}

    handle = model.model.layers[layer].self_attn.register_forward_pre_hook(new_mask, with_kwargs=True)
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        handle.remove()


@answer("12.2", mistake="count",
        says="blocks key_position from the queries at key_position and after (one query too many), so the query at "
             "key_position cannot attend to itself")
def block_attention_from_the_key_position_on(model, ids, layer, key_position):
    batch, seq = ids.shape
    allowed = _causal_allowed(seq)
    allowed[key_position:, key_position] = False
    mask = torch.zeros(seq, seq).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]

    def new_mask(module, args, kwargs):
        return args, {**kwargs, "attention_mask": mask}

    handle = model.model.layers[layer].self_attn.register_forward_pre_hook(new_mask, with_kwargs=True)
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        handle.remove()


@answer("12.2", mistake="logic",
        says="builds a mask that only blocks the one column and forgets the causal part, and since a mask is given "
             "the attention is no longer causal: every query sees the future")
def block_attention_without_the_causal_part(model, ids, layer, key_position):
    seq = ids.shape[1]
    mask = torch.zeros(1, 1, seq, seq)
    mask[..., key_position + 1:, key_position] = float("-inf")

    def new_mask(module, args, kwargs):
        return args, {**kwargs, "attention_mask": mask}

    handle = model.model.layers[layer].self_attn.register_forward_pre_hook(new_mask, with_kwargs=True)
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        handle.remove()


@answer("12.2", mistake="logic",
        says="blocks the row of query key_position from the keys after it instead of the column of key "
             "key_position for the later queries, which the causal mask already hides: nothing changes")
def block_attention_transposed(model, ids, layer, key_position):
    seq = ids.shape[1]
    allowed = _causal_allowed(seq)
    allowed[key_position, key_position + 1:] = False
    mask = torch.zeros(seq, seq).masked_fill(~allowed, float("-inf"))[None, None]

    def new_mask(module, args, kwargs):
        return args, {**kwargs, "attention_mask": mask}

    handle = model.model.layers[layer].self_attn.register_forward_pre_hook(new_mask, with_kwargs=True)
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        handle.remove()


@answer("12.2", mistake="other",
        says="assumes the attention module always receives a mask tensor and edits kwargs['attention_mask'] in "
             "place; under SDPA without padding it is None and the hook fails")
def block_attention_editing_a_mask_that_may_be_none(model, ids, layer, key_position):
    def knock_out(module, args, kwargs):
        mask = kwargs["attention_mask"]
        mask[..., key_position + 1:, key_position] = torch.finfo(mask.dtype).min
        return args, kwargs

    handle = model.model.layers[layer].self_attn.register_forward_pre_hook(knock_out, with_kwargs=True)
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        handle.remove()


# ---------------------------------------------------------------- 12.3: one hook, three kinds of output


@answer("12.3", right=True)
def make_scaling_hook_with_a_closure(factor):
    import dataclasses

    def hook(module, args, output):
        if isinstance(output, torch.Tensor):
            return output * factor
        if isinstance(output, tuple):
            return (output[0] * factor, *output[1:])
        return dataclasses.replace(output, last_hidden_state=output.last_hidden_state * factor)

    return hook


@answer("12.3", right=True)
def make_scaling_hook_as_a_callable_class(factor):
    class ScaleHidden:
        def __init__(self, factor):
            self.factor = factor

        def __call__(self, module, args, output):
            if torch.is_tensor(output):
                return output * self.factor
            if isinstance(output, tuple):
                return type(output)((output[0] * self.factor,) + tuple(output[1:]))
            fields = dict(output)  # a ModelOutput is also a dict of its non-None fields
            fields["last_hidden_state"] = output.last_hidden_state * self.factor
            return type(output)(**fields)

    return ScaleHidden(factor)


@answer("12.3", right=True)
def make_scaling_hook_with_partial(factor):
    import copy
    import functools

    def scale(factor, module, args, output):
        if isinstance(output, torch.Tensor):
            return output * factor
        if isinstance(output, tuple):
            return (output[0] * factor,) + output[1:]
        new = copy.copy(output)  # a new ModelOutput; the one received is left as it is
        new.last_hidden_state = output.last_hidden_state * factor
        return new

    return functools.partial(scale, factor)


@answer("12.3", mistake="shape-or-dtype",
        says="hard-codes output[0] as the hidden state, so on a decoder layer that returns a tensor it scales the "
             "first sample and returns a tuple of per-sample slices")
def make_scaling_hook_with_output_zero(factor):
    def hook(module, args, output):
        if hasattr(output, "last_hidden_state"):
            fields = dict(output)
            fields["last_hidden_state"] = output.last_hidden_state * factor
            return type(output)(**fields)
        return (output[0] * factor, *output[1:])

    return hook


@answer("12.3", mistake="other",
        says="scales the hidden state in place (mul_) and returns the same output object, so the output the hook "
             "received is changed instead of a new one being returned")
def make_scaling_hook_in_place(factor):
    def hook(module, args, output):
        if isinstance(output, torch.Tensor):
            hidden = output
        elif isinstance(output, tuple):
            hidden = output[0]
        else:
            hidden = output.last_hidden_state
        hidden.mul_(factor)
        return output

    return hook


@answer("12.3", mistake="logic",
        says="multiplies every tensor of a tuple output by the factor, the attention weights included, instead of "
             "only the first element")
def make_scaling_hook_scaling_the_whole_tuple(factor):
    import dataclasses

    def hook(module, args, output):
        if isinstance(output, torch.Tensor):
            return output * factor
        if isinstance(output, tuple):
            return tuple(t * factor if isinstance(t, torch.Tensor) else t for t in output)
        return dataclasses.replace(output, last_hidden_state=output.last_hidden_state * factor)

    return hook


@answer("12.3", mistake="no-return",
        says="rebinds output to the new value in every branch but never returns it, so the hook returns None and "
             "changes nothing")
def make_scaling_hook_forgetting_to_return(factor):
    import dataclasses

    def hook(module, args, output):
        if isinstance(output, torch.Tensor):
            output = output * factor
        elif isinstance(output, tuple):
            output = (output[0] * factor, *output[1:])
        else:
            output = dataclasses.replace(output, last_hidden_state=output.last_hidden_state * factor)

    return hook


@answer("12.3", mistake="other",
        says="for a ModelOutput it assigns the scaled last_hidden_state onto the received object and returns it, "
             "changing the output it received instead of building a new object")
def make_scaling_hook_mutating_the_model_output(factor):
    def hook(module, args, output):
        if isinstance(output, torch.Tensor):
            return output * factor
        if isinstance(output, tuple):
            return (output[0] * factor, *output[1:])
        output.last_hidden_state = output.last_hidden_state * factor
        return output

    return hook
