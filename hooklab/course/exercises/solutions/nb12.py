"""Hints and reference solutions of notebook 12 (transformer language models)."""
import torch

import hooklab

HINTS = {
    "12.1": ("在第 `layer` 层的 `self_attn.o_proj` 上挂一个前向前置钩子，`args[0][:, :, head*d:(head+1)*d]` 是这个头在这次调用"
             "的所有行、所有位置上的输出（d = 隐藏维度 / 头数）。第一次调用送进整个（带填充的）提示：每行只留 "
             "`attention_mask[row] == 1` 的那些列；之后每次调用每行只有一个新位置，都是真实的。每行一个列表，"
             "`generate()` 结束后各自 `torch.cat`，并移除钩子。",
             "hang a forward pre-hook on layer `layer`'s `self_attn.o_proj`: `args[0][:, :, head*d:(head+1)*d]` is this "
             "head's output for every row and position of the call (d = hidden size / number of heads). The first "
             "call feeds the whole (padded) prompt: keep, for each row, the columns where `attention_mask[row] == 1`; "
             "every later call has one new position per row, all real. Keep one list per row, `torch.cat` each after "
             "`generate()`, and remove the hook."),
    "12.2": ("在 `model.model.layers[layer].self_attn` 上挂 `with_kwargs=True` 的前向前置钩子。`kwargs[\"attention_mask\"]` "
             "在 SDPA 下没有填充时是 None，在 eager 下是一个各层共用的浮点张量 `[批, 1, 查询, 键]`。做一个新的浮点掩码："
             "有原来的就 `clone()`，没有就自己造因果掩码（能看为 0，不能看为 `-inf`）；再把 `[..., key_position+1:, key_position]` "
             "设成 `-inf`，返回 `(args, {**kwargs, \"attention_mask\": mask})`。",
             "hang a `with_kwargs=True` forward pre-hook on `model.model.layers[layer].self_attn`. Its "
             "`kwargs[\"attention_mask\"]` is None under SDPA without padding, and under eager a float tensor "
             "`[batch, 1, query, key]` that all layers share. Make a new float mask: `clone()` the one you got, or "
             "build the causal mask yourself (0 where a query may look, `-inf` where not); set "
             "`[..., key_position+1:, key_position]` to `-inf`, and return `(args, {**kwargs, \"attention_mask\": mask})`."),
    "12.3": ("先看输出是哪一种：张量就返回 `output * factor`；元组就返回 `(output[0] * factor, *output[1:])`；"
             "`ModelOutput`（一个 dataclass）就返回 `dataclasses.replace(output, last_hidden_state=...)`。"
             "都是新对象，不要原地修改收到的那个。",
             "look at which form the output has: for a tensor return `output * factor`; for a tuple "
             "`(output[0] * factor, *output[1:])`; for a `ModelOutput` (a dataclass) "
             "`dataclasses.replace(output, last_hidden_state=...)`. All new objects: never change the one you got in place."),
}

# [12.1]
def head_per_row(model, prompts, attention_mask, layer, head, max_new_tokens):
    d = model.config.hidden_size // model.config.num_attention_heads
    rows = [[] for _ in range(len(prompts))]

    def grab(module, args):
        heads = args[0][:, :, head * d:(head + 1) * d].detach()
        first_call = not rows[0]
        for r, row in enumerate(rows):
            row.append(heads[r, attention_mask[r] == 1] if first_call else heads[r])

    with hooklab.HookScope() as scope, torch.no_grad():
        scope.add(model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(grab))
        model.generate(prompts, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=False,
                       pad_token_id=0)
    return [torch.cat(row) for row in rows]

# [12.2]
def block_attention(model, ids, layer, key_position):
    def knock_out(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is None:  # SDPA without padding: causal attention, no mask tensor; build the causal mask
            length = kwargs["hidden_states"].shape[1]
            mask = torch.zeros(1, 1, length, length).masked_fill(
                ~torch.ones(length, length, dtype=torch.bool).tril(), float("-inf"))
        else:
            mask = mask.clone()  # shared by every layer: never change it in place
        mask[..., key_position + 1:, key_position] = float("-inf")
        return args, {**kwargs, "attention_mask": mask}

    with hooklab.HookScope() as scope, torch.no_grad():
        scope.add(model.model.layers[layer].self_attn.register_forward_pre_hook(knock_out, with_kwargs=True))
        return model(ids).logits

# [12.3]
import dataclasses


def make_scaling_hook(factor):
    def hook(module, args, output):
        if isinstance(output, torch.Tensor):
            return output * factor
        if isinstance(output, tuple):
            return (output[0] * factor, *output[1:])
        return dataclasses.replace(output, last_hidden_state=output.last_hidden_state * factor)  # a ModelOutput
    return hook
