"""Exercises of notebook 12 (transformer language models): one head during generate(), a residual patch,
one hook for a tensor and a tuple output.

All three run the learner's function on a fresh ``LlamaForCausalLM`` built from
:func:`hooklab.course.induction.config` with seeded random weights (nothing is loaded or downloaded)
and compare it with a truth computed without the learner's hooks: 12.1 with one forward over the whole
generated sequence, 12.2 by running the model's modules one by one and patching between them, 12.3 by
calling each module without the hook.
"""
from __future__ import annotations

import os
from typing import Any

import torch

from .. import induction
from . import Wrong, call_answer, exercise, no_hooks_left, require_callable


def _fresh_model(seed: int) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(induction.config()).eval()


def _head_dim(model: Any) -> int:
    return model.config.hidden_size // model.config.num_attention_heads


def _o_proj_input(model: Any, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """Layer ``layer``'s o_proj input [batch, seq, heads * head_dim] in one forward without cache."""
    got = []
    handle = model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(
        lambda module, args: got.append(args[0].detach()))
    try:
        with torch.no_grad():
            model(ids, use_cache=False)
    finally:
        handle.remove()
    return got[0]


def _as_tensor(result: Any, what: tuple[str, str]) -> torch.Tensor:
    if not isinstance(result, torch.Tensor):
        raise Wrong(f"你的函数应返回一个张量（{what[0]}），收到的是 {type(result).__name__}。",
                    f"your function should return a tensor ({what[1]}), got a {type(result).__name__}.")
    return result.detach()


# ---- 12.1 one head's output during generate() ------------------------------------------------

@exercise("12.1",
          hint=("在第 `layer` 层的 `self_attn.o_proj` 上挂一个前向前置钩子：`args[0][0, :, head*d:(head+1)*d]` "
                "是这个头在这次调用的所有位置上的输出（d = 隐藏维度 / 头数）。第一次调用有整个提示，之后每次一个位置；"
                "把每次的结果按顺序存进列表，`generate()` 结束后用 `torch.cat(..., dim=0)` 拼起来，并移除钩子。",
                "hang a forward pre-hook on layer `layer`'s `self_attn.o_proj`: `args[0][0, :, head*d:(head+1)*d]` is "
                "this head's output at every position of the call (d = hidden size / number of heads). The first call "
                "has the whole prompt, each later one a single position; append each piece to a list, "
                "`torch.cat(..., dim=0)` them after `generate()`, and remove the hook."),
          solution='''
def head_during_generate(model, prompt, layer, head, max_new_tokens):
    d = model.config.hidden_size // model.config.num_attention_heads
    pieces = []

    def grab(module, args):
        pieces.append(args[0][0, :, head * d:(head + 1) * d].detach())

    with hooklab.HookScope() as scope, torch.no_grad():
        scope.add(model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(grab))
        model.generate(prompt, max_new_tokens=max_new_tokens, do_sample=False)
    return torch.cat(pieces, dim=0)
''')
def head_during_generate(answer: Any) -> None:
    require_callable(answer, "head_during_generate")
    for trial, (layer, head, prompt_len, new) in enumerate([(1, 2, 9, 4), (0, 1, 6, 5)]):
        model = _fresh_model(1200 + trial)
        prompt = induction.make_batch(1, seed=3100 + trial)[:, :prompt_len]
        with torch.no_grad():
            generated = model.generate(prompt, max_new_tokens=new, do_sample=False)
        d = _head_dim(model)
        everything = _o_proj_input(model, generated[:, :-1], layer)[0]        # [positions, heads * d]
        truth = everything[:, head * d:(head + 1) * d]
        with no_hooks_left(model):
            result = call_answer(answer, model, prompt, layer, head, new,
                                 returns=("这个头在每个位置上的输出拼成的张量", "the head's outputs at every position, "
                                          "concatenated"))
        got = _as_tensor(result, ("形状为 [位置数, 头维度]", "of shape [positions, head_dim]"))
        n = generated.shape[1] - 1
        if got.dim() == 3 and got.shape[0] == 1:
            got = got[0]
        if got.dim() != 2 or got.shape[1] != d:
            raise Wrong(f"返回的形状是 {list(got.shape)}，应为 [位置数, {d}]：一个头的输出有 {d} 维"
                        f"（`o_proj` 输入的第 head*{d} 到 (head+1)*{d} 维）。",
                        f"the result has shape {list(got.shape)}, expected [positions, {d}]: one head's output has {d} "
                        f"dims (dims head*{d} to (head+1)*{d} of `o_proj`'s input).")
        if got.shape[0] == 1:
            raise Wrong("只有一个位置：你是不是每次调用都覆盖了上一次的结果，只留下了最后一步？",
                        "only one position: did each call overwrite the previous one, keeping the last step only?")
        if got.shape[0] == prompt_len:
            raise Wrong("只有提示的位置：第一次调用之后，`generate()` 每步只送进一个新词元，这些也要收集。",
                        "only the prompt's positions: after the first call `generate()` feeds one new token per step, "
                        "and those must be collected too.")
        if got.shape[0] == n + 1:
            raise Wrong(f"有 {n + 1} 个位置，比实际多一个：最后生成的那个词元从来没有送进模型。",
                        f"{n + 1} positions, one too many: the last generated token is never fed to the model.")
        if got.shape[0] != n:
            raise Wrong(f"有 {got.shape[0]} 个位置，应为 {n}（提示 {prompt_len} 个，加上之后每步 1 个，"
                        f"共 {new - 1} 步）。",
                        f"{got.shape[0]} positions, expected {n} (the prompt's {prompt_len}, plus one per later step, "
                        f"{new - 1} steps).")
        if torch.allclose(got, truth, atol=1e-5):
            continue
        others = [h for h in range(model.config.num_attention_heads)
                  if torch.allclose(got, everything[:, h * d:(h + 1) * d], atol=1e-5)]
        if others:
            raise Wrong(f"这是第 {others[0]} 个头的输出，不是第 {head} 个：检查切片的起止位置。",
                        f"that is head {others[0]}'s output, not head {head}'s: check where your slice starts and ends.")
        raise Wrong(f"第 {layer} 层第 {head} 个头的值不对：要取 `o_proj` 的**输入**（各头输出并排），不是它的输出，"
                    "也不是 q、k、v 的投影。",
                    f"the values of layer {layer}, head {head} are wrong: take `o_proj`'s **input** (the heads' "
                    "outputs side by side), not its output, nor the q, k or v projections.")


# ---- 12.2 patch one position of the residual stream ----------------------------------------------

def _manual_patched_logits(model: Any, clean: torch.Tensor, corrupted: torch.Tensor, layer: int,
                           position: int) -> torch.Tensor:
    """Corrupted logits with decoder layer ``layer``'s output at ``position`` from the clean run; no hooks."""
    trunk = model.model

    def run(ids: torch.Tensor, stop_after: int | None, replace: torch.Tensor | None) -> torch.Tensor:
        h = trunk.embed_tokens(ids)
        positions = torch.arange(ids.shape[1])[None]
        cos_sin = trunk.rotary_emb(h, position_ids=positions)
        for i, block in enumerate(trunk.layers):
            h = block(h, position_embeddings=cos_sin, position_ids=positions)
            h = h[0] if isinstance(h, tuple) else h
            if i == stop_after and replace is None:
                return h
            if i == layer and replace is not None:
                h = h.clone()
                h[:, position] = replace[:, position]
        return model.lm_head(trunk.norm(h))

    with torch.no_grad():
        clean_residual = run(clean, layer, None)
        return run(corrupted, None, clean_residual)


def _plain_logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


@exercise("12.2",
          hint=("两次前向：先在干净的输入上用前向钩子存下 `model.model.layers[layer]` 的输出（解码器层在这个版本返回张量）；"
                "再在损坏的输入上挂一个前向钩子，返回一个 `clone()` 过的输出，只把 `[:, position]` 换成干净的值。"
                "返回第二次前向的 `.logits`，并移除两个钩子。",
                "two forwards: first store `model.model.layers[layer]`'s output on the clean input with a forward hook "
                "(the decoder layer returns a tensor in this release); then, on the corrupted input, a forward hook "
                "returns a `clone()` of the output with only `[:, position]` replaced by the clean value. Return the "
                "second forward's `.logits`, and remove both hooks."),
          solution='''
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
''')
def patch_residual(answer: Any) -> None:
    require_callable(answer, "patch_residual")
    for trial, (layer, position) in enumerate([(0, 4), (1, 9), (0, 11)]):
        model = _fresh_model(1220 + trial)
        clean = induction.make_batch(3, seed=3200 + trial)
        corrupted = clean.clone()
        corrupted[:, 2 + trial] = (corrupted[:, 2 + trial] % (induction.VOCAB - 1)) + 1  # another token
        truth = _manual_patched_logits(model, clean, corrupted, layer, position)
        with no_hooks_left(model):
            result = call_answer(answer, model, clean, corrupted, layer, position,
                                 returns=("修补后的损坏运行的 logits", "the patched corrupted run's logits"))
        if hasattr(result, "logits"):
            result = result.logits
        got = _as_tensor(result, ("logits，形状 [批, 序列, 词表]", "logits, shape [batch, seq, vocab]"))
        if got.shape != truth.shape:
            raise Wrong(f"返回的形状是 {list(got.shape)}，logits 的形状应为 {list(truth.shape)}。",
                        f"the result has shape {list(got.shape)}; the logits have shape {list(truth.shape)}.")
        if torch.allclose(got, truth, atol=1e-4):
            continue
        if torch.allclose(got, _plain_logits(model, corrupted), atol=1e-4):
            raise Wrong("结果等于没有修补的损坏运行：修补没有起作用。钩子返回了新的输出吗？还是修补的地方干净和损坏的值本来就一样"
                        f"（比如第 {layer} 层的输入，而不是它的输出）？",
                        "the result equals the corrupted run without any patch: the patch had no effect. Does your hook "
                        "return the new output? Or did you patch a place where the clean and corrupted values agree "
                        f"(layer {layer}'s input, say, instead of its output)?")
        if torch.allclose(got, _plain_logits(model, clean), atol=1e-4):
            raise Wrong("返回的等于干净运行的 logits：是不是在损坏的运行里替换了**所有**位置，或者运行的是干净的输入？"
                        "只替换一个位置（`[:, position]`）。",
                        "those equal the clean run's logits: did you replace **every** position in the corrupted run, "
                        "or run the clean input? Replace one position only (`[:, position]`).")
        if layer > 0 and torch.allclose(got, _manual_patched_logits(model, clean, corrupted, layer - 1, position),
                                        atol=1e-4):
            raise Wrong(f"你修补的是第 {layer} 层的输入（第 {layer - 1} 层的输出）：要替换的是第 {layer} 层的输出。",
                        f"you patched layer {layer}'s input (layer {layer - 1}'s output): replace layer {layer}'s output.")
        if layer + 1 < len(model.model.layers) and torch.allclose(
                got, _manual_patched_logits(model, clean, corrupted, layer + 1, position), atol=1e-4):
            raise Wrong(f"你修补的是第 {layer + 1} 层的输出：要替换的是第 {layer} 层的输出（`model.model.layers[layer]`）。",
                        f"you patched layer {layer + 1}'s output: replace layer {layer}'s output "
                        "(`model.model.layers[layer]`).")
        raise Wrong(f"logits 与第 {layer} 层输出在位置 {position} 被替换后的结果不一致。",
                    f"the logits differ from those with layer {layer}'s output replaced at position {position}.")


# ---- 12.3 one hook for a tensor and a tuple output -------------------------------------------------

class _TupleLayer(torch.nn.Module):
    """A decoder layer returning ``(hidden_states,)``, as decoder layers of older releases did."""

    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, *args: Any, **kwargs: Any) -> tuple:
        return (self.layer(*args, **kwargs),)


def _scaling_cases(seed: int) -> list:
    model = _fresh_model(seed)
    ids = induction.make_batch(2, seed=seed + 100)
    with torch.no_grad():
        hidden = model.model.embed_tokens(ids)
        cos_sin = model.model.rotary_emb(hidden, position_ids=torch.arange(ids.shape[1])[None])
    layer = model.model.layers[0]
    return [
        (("解码器层（返回张量）", "a decoder layer (returns a tensor)"), layer, (hidden,),
         {"position_embeddings": cos_sin}),
        (("旧版本式的解码器层（返回元组）", "an older-style decoder layer (returns a tuple)"), _TupleLayer(layer), (hidden,),
         {"position_embeddings": cos_sin}),
        (("注意力模块（返回 (输出, None)）", "an attention module (returns (output, None))"), layer.self_attn, (),
         {"hidden_states": hidden, "position_embeddings": cos_sin, "attention_mask": None}),
    ]


@exercise("12.3",
          hint=("先取出隐藏状态：`h = output[0] if isinstance(output, tuple) else output`；"
                "再按原来的形式返回：元组就返回 `(h * factor, *output[1:])`，张量就返回 `h * factor`。",
                "take the hidden state out first: `h = output[0] if isinstance(output, tuple) else output`; then "
                "return it in the form it came in: for a tuple `(h * factor, *output[1:])`, for a tensor `h * factor`."),
          solution='''
def make_scaling_hook(factor):
    def hook(module, args, output):
        if isinstance(output, tuple):
            return (output[0] * factor, *output[1:])
        return output * factor
    return hook
''')
def scaling_hook(answer: Any) -> None:
    require_callable(answer, "make_scaling_hook")
    for trial, factor in enumerate((0.5, 3.0)):
        for (zh, en), module, args, kwargs in _scaling_cases(1230 + trial):
            with torch.no_grad():
                reference = module(*args, **kwargs)
            hook = call_answer(answer, factor, returns=("一个前向钩子", "a forward hook"))
            if not callable(hook):
                raise Wrong(f"`make_scaling_hook` 应返回一个前向钩子函数，收到的是 {type(hook).__name__}。",
                            f"`make_scaling_hook` must return a forward hook function, got a {type(hook).__name__}.")
            handle = module.register_forward_hook(hook)
            try:
                with torch.no_grad():
                    got = module(*args, **kwargs)
            except Exception as exc:
                raise Wrong(f"在{zh}上，你的钩子抛出了 {type(exc).__name__}: {exc}",
                            f"on {en}, your hook raised {type(exc).__name__}: {exc}") from exc
            finally:
                handle.remove()
            hidden = reference[0] if isinstance(reference, tuple) else reference
            if isinstance(reference, tuple):
                if isinstance(got, torch.Tensor):
                    raise Wrong(f"在{zh}上，你的钩子把元组换成了一个张量：调用者要拆开元组（`hidden, weights = ...`），"
                                "其余元素也要原样放回。",
                                f"on {en}, your hook replaced the tuple with a tensor: the caller unpacks the tuple "
                                "(`hidden, weights = ...`), so put the other elements back unchanged.")
                if not isinstance(got, tuple) or len(got) != len(reference):
                    raise Wrong(f"在{zh}上，输出应是和原来一样长的元组（{len(reference)} 个元素）。",
                                f"on {en}, the output must be a tuple as long as the original ({len(reference)} "
                                "elements).")
                if any(a is not b and not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                                           and torch.equal(a, b)) for a, b in zip(got[1:], reference[1:])):
                    raise Wrong(f"在{zh}上，元组的其余元素被改动了：只缩放第一个元素（隐藏状态）。",
                                f"on {en}, the tuple's other elements changed: scale only the first one (the hidden "
                                "state).")
                got_hidden = got[0]
            else:
                if isinstance(got, tuple):
                    raise Wrong(f"在{zh}上，你的钩子返回了元组，而这个模块返回的是张量（对张量来说，`output[0]` 是第一个样本，"
                                "`output[1:]` 是其余的样本）：按原来的形式返回。",
                                f"on {en}, your hook returned a tuple for a module that returns a tensor (of a tensor, "
                                "`output[0]` is the first sample and `output[1:]` the rest): return the form that came "
                                "in.")
                got_hidden = got
            if not isinstance(got_hidden, torch.Tensor) or got_hidden.shape != hidden.shape:
                shape = list(got_hidden.shape) if isinstance(got_hidden, torch.Tensor) else type(got_hidden).__name__
                raise Wrong(f"在{zh}上，隐藏状态的形状变成了 {shape}（应为 {list(hidden.shape)}）：对一个张量取 `output[0]`，"
                            "得到的是第一个样本，不是隐藏状态。",
                            f"on {en}, the hidden state's shape became {shape} (expected {list(hidden.shape)}): "
                            "`output[0]` of a tensor is the first sample, not the hidden state.")
            if torch.allclose(got_hidden, hidden):
                raise Wrong(f"在{zh}上，输出没有变：前向钩子只有**返回**新的输出才会替换原来的（返回 None 表示不改）。",
                            f"on {en}, the output did not change: a forward hook replaces the output only by "
                            "**returning** the new one (returning None changes nothing).")
            if not torch.allclose(got_hidden, hidden * factor, atol=1e-6):
                raise Wrong(f"在{zh}上，隐藏状态不是原来的 {factor} 倍。",
                            f"on {en}, the hidden state is not {factor} times the original.")
