"""Hints and reference solutions of notebook 12 (transformer language models)."""
import torch

import hooklab

HINTS = {
    "12.1": ("在第 `layer` 层的 `self_attn.o_proj` 上挂一个前向前置钩子：`args[0][0, :, head*d:(head+1)*d]` "
             "是这个头在这次调用的所有位置上的输出（d = 隐藏维度 / 头数）。第一次调用有整个提示，之后每次一个位置；"
             "把每次的结果按顺序存进列表，`generate()` 结束后用 `torch.cat(..., dim=0)` 拼起来，并移除钩子。",
             "hang a forward pre-hook on layer `layer`'s `self_attn.o_proj`: `args[0][0, :, head*d:(head+1)*d]` is "
             "this head's output at every position of the call (d = hidden size / number of heads). The first call "
             "has the whole prompt, each later one a single position; append each piece to a list, "
             "`torch.cat(..., dim=0)` them after `generate()`, and remove the hook."),
    "12.2": ("两次前向：先在干净的输入上用前向钩子存下 `model.model.layers[layer]` 的输出（解码器层在这个版本返回张量）；"
             "再在损坏的输入上挂一个前向钩子，返回一个 `clone()` 过的输出，只把 `[:, position]` 换成干净的值。"
             "返回第二次前向的 `.logits`，并移除两个钩子。",
             "two forwards: first store `model.model.layers[layer]`'s output on the clean input with a forward hook "
             "(the decoder layer returns a tensor in this release); then, on the corrupted input, a forward hook "
             "returns a `clone()` of the output with only `[:, position]` replaced by the clean value. Return the "
             "second forward's `.logits`, and remove both hooks."),
    "12.3": ("先取出隐藏状态：`h = output[0] if isinstance(output, tuple) else output`；"
             "再按原来的形式返回：元组就返回 `(h * factor, *output[1:])`，张量就返回 `h * factor`。",
             "take the hidden state out first: `h = output[0] if isinstance(output, tuple) else output`; then "
             "return it in the form it came in: for a tuple `(h * factor, *output[1:])`, for a tensor `h * factor`."),
}

# [12.1]
def head_during_generate(model, prompt, layer, head, max_new_tokens):
    d = model.config.hidden_size // model.config.num_attention_heads
    pieces = []

    def grab(module, args):
        pieces.append(args[0][0, :, head * d:(head + 1) * d].detach())

    with hooklab.HookScope() as scope, torch.no_grad():
        scope.add(model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(grab))
        model.generate(prompt, max_new_tokens=max_new_tokens, do_sample=False)
    return torch.cat(pieces, dim=0)

# [12.2]
def patch_residual(model, clean, corrupted, layer, position):
    block = model.model.layers[layer]
    stored = {}

    def keep(module, args, output):
        stored["clean"] = output.detach()

    def patch(module, args, output):
        patched = output.clone()
        patched[:, position] = stored["clean"][:, position]
        return patched

    with torch.no_grad():
        with hooklab.HookScope() as scope:
            scope.add(block.register_forward_hook(keep))
            model(clean)
        with hooklab.HookScope() as scope:
            scope.add(block.register_forward_hook(patch))
            return model(corrupted).logits

# [12.3]
def make_scaling_hook(factor):
    def hook(module, args, output):
        if isinstance(output, tuple):
            return (output[0] * factor, *output[1:])
        return output * factor
    return hook
