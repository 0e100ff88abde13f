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
from . import exercise
from ._support import call_answer, expect, fail, guarded, run


def _fresh_model(seed: int) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(induction.config()).eval()


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
    expect(isinstance(result, torch.Tensor), "not-a-tensor", f"你的函数应返回一个张量（{what[0]}），收到的是 {type(result).__name__}。",
           f"your function should return a tensor ({what[1]}), got a {type(result).__name__}.")
    return result.detach()


# ---- 12.1 one head's output during generate() ------------------------------------------------

@exercise("12.1", answer="head_during_generate")
def head_during_generate(answer: Any) -> None:
    for trial, (layer, head, prompt_len, new) in enumerate([(1, 2, 9, 4), (0, 1, 6, 5)]):
        model = _fresh_model(1200 + trial)
        prompt = induction.make_batch(1, seed=3100 + trial)[:, :prompt_len]
        with torch.no_grad():
            generated = model.generate(prompt, max_new_tokens=new, do_sample=False)
        d, n = model.config.hidden_size // model.config.num_attention_heads, generated.shape[1] - 1
        everything = _o_proj_input(model, generated[:, :-1], layer)[0]        # [positions, heads * d]
        result = run(answer, model, prompt, layer, head, new, leak_free=(model,), returns=(
            "这个头在每个位置上的输出拼成的张量", "the head's outputs at every position, concatenated"))
        got = _as_tensor(result, ("形状为 [位置数, 头维度]", "of shape [positions, head_dim]"))
        got = got[0] if got.dim() == 3 and got.shape[0] == 1 else got
        expect(got.dim() == 2 and got.shape[1] == d, "head-dim", f"返回的形状是 {list(got.shape)}，应为 [位置数, {d}]："
               f"一个头的输出有 {d} 维（`o_proj` 输入的第 head*{d} 到 (head+1)*{d} 维）。",
               f"the result has shape {list(got.shape)}, expected [positions, {d}]: one head's output has {d} dims "
               f"(dims head*{d} to (head+1)*{d} of `o_proj`'s input).")
        positions = got.shape[0]
        expect(positions != 1, "last-step-only", "只有一个位置：你是不是每次调用都覆盖了上一次的结果，只留下了最后一步？",
               "only one position: did each call overwrite the previous one, keeping the last step only?")
        expect(positions != prompt_len, "prompt-only", "只有提示的位置：第一次调用之后，`generate()` 每步只送进一个新词元，这些也要收集。",
               "only the prompt's positions: after the first call `generate()` feeds one new token per step, and "
               "those must be collected too.")
        expect(positions != n + 1, "one-too-many", f"有 {n + 1} 个位置，比实际多一个：最后生成的那个词元从来没有送进模型。",
               f"{n + 1} positions, one too many: the last generated token is never fed to the model.")
        expect(positions == n, "positions", f"有 {positions} 个位置，应为 {n}（提示 {prompt_len} 个，加上之后每步 1 个，"
               f"共 {new - 1} 步）。", f"{positions} positions, expected {n} (the prompt's {prompt_len}, plus one per "
               f"later step, {new - 1} steps).")
        heads = [h for h in range(model.config.num_attention_heads)
                 if torch.allclose(got, everything[:, h * d:(h + 1) * d], atol=1e-5)]
        if head in heads:
            continue
        if heads:
            fail("other-head", f"这是第 {heads[0]} 个头的输出，不是第 {head} 个：检查切片的起止位置。",
                 f"that is head {heads[0]}'s output, not head {head}'s: check where your slice starts and ends.")
        fail("values", f"第 {layer} 层第 {head} 个头的值不对：要取 `o_proj` 的**输入**（各头输出并排），不是它的输出，"
             "也不是 q、k、v 的投影。", f"the values of layer {layer}, head {head} are wrong: take `o_proj`'s **input** "
             "(the heads' outputs side by side), not its output, nor the q, k or v projections.")


# ---- 12.2 patch one position of the residual stream ----------------------------------------------

def _patched_logits(model: Any, clean: torch.Tensor, corrupted: torch.Tensor, layer: int,
                    position: int) -> torch.Tensor:
    """Corrupted logits with decoder layer ``layer``'s output at ``position`` from the clean run; no hooks: the
    model's modules are run one by one."""
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
        return run(corrupted, None, run(clean, layer, None))


def _logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


@exercise("12.2", answer="patch_residual")
def patch_residual(answer: Any) -> None:
    for trial, (layer, position) in enumerate([(0, 4), (1, 9), (0, 11)]):
        model = _fresh_model(1220 + trial)
        clean = induction.make_batch(3, seed=3200 + trial)
        corrupted = clean.clone()
        corrupted[:, 2 + trial] = (corrupted[:, 2 + trial] % (induction.VOCAB - 1)) + 1  # another token
        truth = _patched_logits(model, clean, corrupted, layer, position)
        result = run(answer, model, clean, corrupted, layer, position, leak_free=(model,),
                     returns=("修补后的损坏运行的 logits", "the patched corrupted run's logits"))
        got = _as_tensor(getattr(result, "logits", result), ("logits，形状 [批, 序列, 词表]", "logits, shape [batch, seq, vocab]"))
        expect(got.shape == truth.shape, "shape", f"返回的形状是 {list(got.shape)}，logits 的形状应为 {list(truth.shape)}。",
               f"the result has shape {list(got.shape)}; the logits have shape {list(truth.shape)}.")
        if torch.allclose(got, truth, atol=1e-4):
            continue
        like = lambda other: torch.allclose(got, other, atol=1e-4)  # noqa: E731
        expect(not like(_logits(model, corrupted)), "no-effect", "结果等于没有修补的损坏运行：修补没有起作用。钩子返回了新的输出吗？"
               f"还是修补的地方干净和损坏的值本来就一样（比如第 {layer} 层的输入，而不是它的输出）？",
               "the result equals the corrupted run without any patch: the patch had no effect. Does your hook return "
               "the new output? Or did you patch a place where the clean and corrupted values agree (layer "
               f"{layer}'s input, say, instead of its output)?")
        expect(not like(_logits(model, clean)), "every-position", "返回的等于干净运行的 logits：是不是在损坏的运行里替换了**所有**位置，"
               "或者运行的是干净的输入？只替换一个位置（`[:, position]`）。",
               "those equal the clean run's logits: did you replace **every** position in the corrupted run, or run "
               "the clean input? Replace one position only (`[:, position]`).")
        expect(layer == 0 or not like(_patched_logits(model, clean, corrupted, layer - 1, position)), "layer-input",
               f"你修补的是第 {layer} 层的输入（第 {layer - 1} 层的输出）：要替换的是第 {layer} 层的输出。",
               f"you patched layer {layer}'s input (layer {layer - 1}'s output): replace layer {layer}'s output.")
        expect(layer + 1 == len(model.model.layers) or not like(_patched_logits(model, clean, corrupted, layer + 1, position)),
               "next-layer", f"你修补的是第 {layer + 1} 层的输出：要替换的是第 {layer} 层的输出（`model.model.layers[layer]`）。",
               f"you patched layer {layer + 1}'s output: replace layer {layer}'s output (`model.model.layers[layer]`).")
        fail("logits", f"logits 与第 {layer} 层输出在位置 {position} 被替换后的结果不一致。",
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
    layer, rope = model.model.layers[0], {"position_embeddings": cos_sin}
    return [(("解码器层（返回张量）", "a decoder layer (returns a tensor)"), layer, (hidden,), rope),
            (("旧版本式的解码器层（返回元组）", "an older-style decoder layer (returns a tuple)"), _TupleLayer(layer), (hidden,), rope),
            (("注意力模块（返回 (输出, None)）", "an attention module (returns (output, None))"), layer.self_attn, (),
             {"hidden_states": hidden, "attention_mask": None, **rope})]


def _hidden_in(got: Any, reference: Any, zh: str, en: str) -> Any:
    """The hidden state in the hooked module's output ``got``, once its form (tensor or tuple) is as it came."""
    if not isinstance(reference, tuple):
        expect(not isinstance(got, tuple), "tensor-to-tuple", f"在{zh}上，你的钩子返回了元组，而这个模块返回的是张量"
               "（对张量来说，`output[0]` 是第一个样本，`output[1:]` 是其余的样本）：按原来的形式返回。",
               f"on {en}, your hook returned a tuple for a module that returns a tensor (of a tensor, `output[0]` is "
               "the first sample and `output[1:]` the rest): return the form that came in.")
        return got
    expect(not isinstance(got, torch.Tensor), "tuple-to-tensor", f"在{zh}上，你的钩子把元组换成了一个张量：调用者要拆开元组"
           "（`hidden, weights = ...`），其余元素也要原样放回。", f"on {en}, your hook replaced the tuple with a tensor: "
           "the caller unpacks the tuple (`hidden, weights = ...`), so put the other elements back unchanged.")
    expect(isinstance(got, tuple) and len(got) == len(reference), "tuple-length",
           f"在{zh}上，输出应是和原来一样长的元组（{len(reference)} 个元素）。",
           f"on {en}, the output must be a tuple as long as the original ({len(reference)} elements).")
    expect(all(a is b or (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b))
               for a, b in zip(got[1:], reference[1:])), "rest-changed",
           f"在{zh}上，元组的其余元素被改动了：只缩放第一个元素（隐藏状态）。",
           f"on {en}, the tuple's other elements changed: scale only the first one (the hidden state).")
    return got[0]


@exercise("12.3", answer="make_scaling_hook")
def scaling_hook(answer: Any) -> None:
    for trial, factor in enumerate((0.5, 3.0)):
        for (zh, en), module, args, kwargs in _scaling_cases(1230 + trial):
            with torch.no_grad():
                reference = module(*args, **kwargs)
            hook = call_answer(answer, factor, returns=("一个前向钩子", "a forward hook"))
            expect(callable(hook), "not-a-hook", f"`make_scaling_hook` 应返回一个前向钩子函数，收到的是 {type(hook).__name__}。",
                   f"`make_scaling_hook` must return a forward hook function, got a {type(hook).__name__}.")
            handle = module.register_forward_hook(hook)
            try:
                with torch.no_grad(), guarded("raised", f"在{zh}上，你的钩子", f"on {en}, your hook"):
                    got = _hidden_in(module(*args, **kwargs), reference, zh, en)
            finally:
                handle.remove()
            hidden = reference[0] if isinstance(reference, tuple) else reference
            shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            expect(shape == list(hidden.shape), "hidden-shape", f"在{zh}上，隐藏状态的形状变成了 {shape}（应为 {list(hidden.shape)}）："
                   "对一个张量取 `output[0]`，得到的是第一个样本，不是隐藏状态。",
                   f"on {en}, the hidden state's shape became {shape} (expected {list(hidden.shape)}): `output[0]` of "
                   "a tensor is the first sample, not the hidden state.")
            expect(not torch.allclose(got, hidden), "unchanged", f"在{zh}上，输出没有变：前向钩子只有**返回**新的输出才会替换原来的"
                   "（返回 None 表示不改）。", f"on {en}, the output did not change: a forward hook replaces the output "
                   "only by **returning** the new one (returning None changes nothing).")
            expect(torch.allclose(got, hidden * factor, atol=1e-6), "not-scaled", f"在{zh}上，隐藏状态不是原来的 {factor} 倍。",
                   f"on {en}, the hidden state is not {factor} times the original.")
