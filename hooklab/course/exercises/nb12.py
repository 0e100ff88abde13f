"""Exercises of notebook 12 (transformer language models): one head per row during a left-padded generate(),
attention knockout through the attention's keyword arguments, one hook for a tensor, a tuple and a ModelOutput.

All three run the learner's function on a fresh ``LlamaForCausalLM`` built from
:func:`hooklab.course.induction.config` with seeded random weights (nothing is loaded or downloaded)
and compare it with a truth computed without the learner's hooks: 12.1 with a forward of each row alone
over its real tokens, 12.2 with the model's computation written out by hand from its modules (norms,
projections, rotary embedding, a masked softmax), 12.3 by calling each module without the hook.
"""
from __future__ import annotations

import os
from typing import Any

import torch

from .. import induction
from . import exercise
from ._support import call_answer, expect, fail, guarded, run


def _fresh_model(seed: int, attention: str = "sdpa") -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(induction.config()).eval()
    if attention != "sdpa":
        model.set_attn_implementation(attention)
    return model


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


# ---- 12.1 one head per row during a left-padded generate() ------------------------------------------

PAD = 0  # the token id put into padded columns (the attention mask hides it)


def _left_padded(lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of the given real lengths, padded on the left to the longest, and their attention mask."""
    rows = induction.make_batch(len(lengths), seed=seed)
    width = max(lengths)
    prompts = torch.full((len(lengths), width), PAD, dtype=torch.long)
    mask = torch.zeros_like(prompts)
    for r, n in enumerate(lengths):
        prompts[r, width - n:] = rows[r, :n]
        mask[r, width - n:] = 1
    return prompts, mask


def _wrong_row_length(r: int, positions: int, expected: int, n: int, width: int, new: int) -> None:
    """Row ``r`` of 12.1 has ``positions`` positions instead of ``expected``: say which mistake gives that count."""
    pads = width - n
    expect(positions != 1, "last-step-only", f"第 {r} 行只有一个位置：你是不是每次调用都覆盖了上一次的结果，只留下了最后一步？",
           f"row {r} has one position only: did each call overwrite the previous one, keeping the last step only?")
    expect(positions not in (n, width), "prompt-only", f"第 {r} 行只有提示的位置：第一次调用之后，`generate()` "
           "每步只送进一个新词元，这些也要收集。", f"row {r} has only the prompt's positions: after the first "
           "call `generate()` feeds one new token per step, and those must be collected too.")
    expect(pads == 0 or positions != expected + pads, "padding-included",
           f"第 {r} 行多了 {pads} 个位置：那是左边的填充。只收集 `attention_mask` 为 1 的位置（第一次调用时按传进来的 "
           "`attention_mask` 挑出每行的真实列；`position_ids[0]` 是第 0 行的位置，不能用在别的行上）。",
           f"row {r} has {pads} positions too many: the padding on its left. Collect only positions whose "
           "`attention_mask` is 1 (on the first call, pick each row's real columns with the `attention_mask` "
           "you were given; `position_ids[0]` holds row 0's positions, not every row's).")
    expect(positions != expected + 1, "one-too-many", f"第 {r} 行有 {expected + 1} 个位置，比实际多一个："
           "最后生成的那个词元从来没有送进模型。", f"row {r} has {expected + 1} positions, one too many: the last "
           "generated token is never fed to the model.")
    fail("positions", f"第 {r} 行有 {positions} 个位置，应为 {expected}（提示里 {n} 个真实词元，加上之后每步 1 个，共 {new - 1} 步）。",
         f"row {r} has {positions} positions, expected {expected} (the prompt's {n} real tokens, plus one per later "
         f"step, {new - 1} steps).")


@exercise("12.1", answer="head_per_row")
def head_per_row(answer: Any) -> None:
    for trial, (layer, head, lengths, new) in enumerate([(1, 2, [9, 6, 8], 4), (0, 1, [5, 7], 3)]):
        model = _fresh_model(1200 + trial)
        prompts, mask = _left_padded(lengths, seed=3100 + trial)
        with torch.no_grad():
            generated = model.generate(prompts, attention_mask=mask, max_new_tokens=new, do_sample=False,
                                       pad_token_id=PAD)
        d, width = model.config.hidden_size // model.config.num_attention_heads, prompts.shape[1]
        result = run(answer, model, prompts, mask, layer, head, new, leak_free=(model,), returns=(
            "一个列表，每行一个张量", "a list with one tensor per row"))
        expect(isinstance(result, (list, tuple)), "not-a-list", f"应返回一个列表，每行一个张量，收到的是 {type(result).__name__}："
               "各行的真实位置数不同（提示长短不一），放不进一个矩形张量。",
               f"return a list with one tensor per row, not a {type(result).__name__}: the rows have different "
               "numbers of real positions (their prompts differ in length), which do not fit one rectangular tensor.")
        expect(len(result) == len(lengths), "row-count", f"列表有 {len(result)} 个元素，应为 {len(lengths)}（每行一个）。",
               f"the list has {len(result)} items; expected {len(lengths)} (one per row).")
        for r, n in enumerate(lengths):
            got = _as_tensor(result[r], ("形状为 [位置数, 头维度]", "of shape [positions, head_dim]"))
            got = got[0] if got.dim() == 3 and got.shape[0] == 1 else got
            expect(got.dim() == 2 and got.shape[1] == d, "head-dim", f"第 {r} 行的形状是 {list(got.shape)}，应为 [位置数, {d}]："
                   f"一个头的输出有 {d} 维（`o_proj` 输入的第 head*{d} 到 (head+1)*{d} 维）。",
                   f"row {r} has shape {list(got.shape)}, expected [positions, {d}]: one head's output has {d} dims "
                   f"(dims head*{d} to (head+1)*{d} of `o_proj`'s input).")
            positions, expected, pads = got.shape[0], n + new - 1, width - n
            if positions != expected:
                _wrong_row_length(r, positions, expected, n, width, new)
            alone = torch.cat([prompts[r, pads:], generated[r, width:-1]])  # the row's real tokens, no padding
            everything = _o_proj_input(model, alone[None], layer)[0]           # [positions, heads * d]
            heads = [h for h in range(model.config.num_attention_heads)
                     if torch.allclose(got, everything[:, h * d:(h + 1) * d], atol=1e-5)]
            if head in heads:
                continue
            if heads:
                fail("other-head", f"第 {r} 行：这是第 {heads[0]} 个头的输出，不是第 {head} 个：检查切片的起止位置。",
                     f"row {r}: that is head {heads[0]}'s output, not head {head}'s: check where your slice starts and ends.")
            fail("values", f"第 {r} 行：第 {layer} 层第 {head} 个头的值不对。要取 `o_proj` 的**输入**（各头输出并排），不是它的输出，"
                 "也不是 q、k、v 的投影；每一行只取它自己的那些列，按位置顺序排好。",
                 f"row {r}: the values of layer {layer}, head {head} are wrong. Take `o_proj`'s **input** (the heads' "
                 "outputs side by side), not its output, nor the q, k or v projections; take each row's own columns "
                 "only, in position order.")


# ---- 12.2 attention knockout through the attention's keyword arguments ----------------------------------

def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotary position embedding, as Llama applies it (the two halves of each head rotated together)."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


@torch.no_grad()
def _by_hand(model: Any, ids: torch.Tensor, knockout: dict[int, tuple[int, bool]], *,
             not_causal: int | None = None, uniform: bool = False) -> torch.Tensor:
    """The model's logits written out from its modules, no hooks and no attention function of transformers.

    ``knockout`` maps a layer to ``(key, diagonal)``: in that layer no query after ``key`` (from ``key`` itself
    too when ``diagonal``) may attend to ``key``. Layer ``not_causal`` has no causal mask (a wrong answer's). A
    query left with no key to attend to gets zeros, as SDPA gives it (eager attention gives NaN there), or, when
    ``uniform``, the same weight on every key, as a mask of ``torch.finfo(dtype).min`` instead of ``-inf`` gives.
    """
    trunk = model.model
    hidden = trunk.embed_tokens(ids)
    batch, length = ids.shape
    cos, sin = trunk.rotary_emb(hidden, position_ids=torch.arange(length)[None])
    cos, sin = cos[:, None], sin[:, None]  # broadcast over heads
    for i, layer in enumerate(trunk.layers):
        attention = layer.self_attn
        normed, d = layer.input_layernorm(hidden), attention.head_dim
        split = lambda t: t.view(batch, length, -1, d).transpose(1, 2)  # noqa: E731  [batch, heads, seq, d]
        q = _rotate(split(attention.q_proj(normed)), cos, sin)
        k = _rotate(split(attention.k_proj(normed)), cos, sin)
        v = split(attention.v_proj(normed))
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        allowed = torch.ones(length, length, dtype=torch.bool)
        allowed = allowed if i == not_causal else allowed.tril()
        if i in knockout:
            key, diagonal = knockout[i]
            allowed[key + (0 if diagonal else 1):, key] = False
        scores = (q @ k.transpose(-1, -2) * d ** -0.5).masked_fill(~allowed, float("-inf"))
        weights = scores.softmax(-1).nan_to_num(1 / length if uniform else 0.0)  # a row with every key masked
        hidden = hidden + attention.o_proj((weights @ v).transpose(1, 2).reshape(batch, length, -1))
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    return model.lm_head(trunk.norm(hidden))


def _masks_given(model: Any, layer: int, call: Any) -> list[Any]:
    """``call()``, and the ``attention_mask`` that layer ``layer``'s attention received in each call meanwhile
    (after every pre-hook: seen from its ``forward``)."""
    attention, seen = model.model.layers[layer].self_attn, []
    forward = attention.forward
    def noting(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("attention_mask"))
        return forward(*args, **kwargs)

    attention.forward = noting
    try:
        call()
    finally:
        del attention.forward
    return seen


def _blocks_nothing_new(answer: Any, model: Any, ids: torch.Tensor, layer: int, key: int,
                        where: tuple[str, str]) -> None:
    """The answer changed nothing: when its own mask did reach the attention, it blocks only (query, key) pairs the
    causal mask hides already (keys after their query), the row of query ``key`` say, not the column of key ``key``."""
    with torch.no_grad():
        default = _masks_given(model, layer, lambda: model(ids))
    mine = _masks_given(model, layer, lambda: run(answer, model, ids, layer, key, leak_free=(model,)))
    mask = mine[0] if mine else None
    if not isinstance(mask, torch.Tensor) or not mask.is_floating_point() or mask.dim() < 2:
        return
    # bitwise: copy, the mask the model builds passed on unchanged (the model's own mask: said by "no-effect")
    if isinstance(default[0], torch.Tensor) and default[0].shape == mask.shape and torch.equal(default[0], mask):
        return
    blocked = (mask < torch.finfo(mask.dtype).min / 2).reshape(-1, *mask.shape[-2:]).any(0)  # [query, key]
    hidden = torch.ones_like(blocked).triu(1)
    expect(not blocked.any() or (blocked & ~hidden).any(), "already-hidden",
           f"你的掩码送到了注意力里，但它挡住的（查询, 键）对，因果掩码本来就挡住了（键在查询之后）{where[0]}，所以什么也没变："
           "是不是挡住了查询 `key_position` 那一**行**里它之后的键？要挡的是键 `key_position` 那一**列**里它之后的查询："
           "掩码的最后一维是键，倒数第二维是查询，`mask[..., key_position + 1:, key_position]`。",
           f"your mask reached the attention, but every (query, key) pair it blocks is one the causal mask hides "
           f"already (a key after its query){where[1]}, so nothing changed: did you block the **row** of query "
           "`key_position`, the keys after it? Block the **column** of key `key_position` for the queries after it: "
           "the mask's last dim is the key, the one before it the query, `mask[..., key_position + 1:, key_position]`.")


@exercise("12.2", answer="block_attention")
def block_attention(answer: Any) -> None:
    for trial, (attention, layer, key) in enumerate([("sdpa", 0, 0), ("sdpa", 1, 4), ("eager", 0, 0)]):
        model = _fresh_model(1220 + trial, attention)
        ids = induction.make_batch(3, seed=3200 + trial)
        truth = _by_hand(model, ids, {layer: (key, False)})
        result = run(answer, model, ids, layer, key, leak_free=(model,),
                     returns=("阻断后的 logits", "the logits with the attention blocked"))
        got = _as_tensor(getattr(result, "logits", result), ("logits，形状 [批, 序列, 词表]", "logits, shape [batch, seq, vocab]"))
        expect(got.shape == truth.shape, "shape", f"返回的形状是 {list(got.shape)}，logits 的形状应为 {list(truth.shape)}。",
               f"the result has shape {list(got.shape)}; the logits have shape {list(truth.shape)}.")
        if torch.allclose(got, truth, atol=1e-4):
            continue
        like = lambda *args, **kwargs: torch.allclose(got, _by_hand(model, *args, **kwargs), atol=1e-4)  # noqa: E731
        where = (f"（{attention} 注意力，第 {layer} 层，键位置 {key}）", f" ({attention} attention, layer {layer}, key position {key})")
        expect(not torch.isnan(got).any(), "nan", f"logits 里有 NaN{where[0]}：一个查询的所有键都被挡住时，eager 注意力的 "
               "softmax 得到 NaN（SDPA 在那里给 0，所以在 SDPA 下看不出来）。只挡住**之后**的查询（`key_position` "
               "自己那一行仍能看到自己）。", f"the logits contain NaN{where[1]}: when every key of a query is masked, "
               "eager attention's softmax gives NaN (SDPA gives 0 there, so it goes unnoticed under SDPA). Block the key "
               "for the queries **after** it only (the query at `key_position` still sees itself).")
        if like(ids, {}):
            _blocks_nothing_new(answer, model, ids, layer, key, where)
        expect(not like(ids, {}), "no-effect", f"结果和没有阻断时一样{where[0]}：钩子返回 `(args, kwargs)` 了吗？新的掩码放进 "
               "`attention_mask` 这个关键字了吗？", f"the result equals the run without any block{where[1]}: does your "
               "pre-hook return `(args, kwargs)`? Did the new mask go into the `attention_mask` keyword?")
        every = {i: (key, False) for i in range(len(model.model.layers))}
        if like(ids, every):
            expect(attention != "eager", "in-place", f"结果等于在**每一层**都挡住了这个键{where[0]}：eager 注意力下，"
                   "`attention_mask` 是所有层共用的同一个张量，你在原地修改了它（`mask[...] = ...`），后面的层也收到了改过的掩码。"
                   "先 `clone()` 再改，或者算出一个新张量。", f"the result equals blocking the key in **every** layer{where[1]}: "
                   "under eager attention `attention_mask` is one tensor that all layers share, and you changed it in place "
                   "(`mask[...] = ...`), so the later layers got the changed mask too. `clone()` it first, or compute a new tensor.")
            fail("every-layer", f"结果等于在**每一层**都挡住了这个键{where[0]}：只在第 {layer} 层（`model.model.layers[layer].self_attn`）"
                 "挂钩子。", f"the result equals blocking the key in **every** layer{where[1]}: hook layer {layer} only "
                 "(`model.model.layers[layer].self_attn`).")
        expect(not any(like(ids, {layer: (key, True)}, uniform=uniform) for uniform in (False, True)), "diagonal", f"你把 `key_position` 这一列整个挡住了，连它自己那个查询也看不到自己"
               f"{where[0]}：只挡住它**之后**的查询。", f"you blocked the whole column `key_position`, so even the query at that "
               f"position cannot see itself{where[1]}: block the queries **after** it only.")
        expect(not like(ids, {layer: (key, False)}, not_causal=layer), "not-causal", f"你传入的掩码只挡住了这个键，却没有因果的部分"
               f"{where[0]}：一旦传入 `attention_mask`，它就取代了原来的因果掩码（SDPA 也不再用 `is_causal`），每个位置都看到了"
               "后面的词元。掩码里要同时包含因果的部分。", f"your mask blocks the key but has no causal part{where[1]}: once "
               "you pass an `attention_mask`, it replaces the causal mask (SDPA no longer uses `is_causal` either), and "
               "every position sees the tokens after it. Put the causal part into your mask too.")
        others = [i for i in range(len(model.model.layers)) if i != layer]
        expect(not any(like(ids, {i: (key, False)}) for i in others), "wrong-layer",
               f"你挡住的是另一层{where[0]}：要改的是 `model.model.layers[{layer}].self_attn`。",
               f"you blocked another layer{where[1]}: change `model.model.layers[{layer}].self_attn`.")
        expect(not any(like(ids, {layer: (k, False)}) for k in (key - 1, key + 1) if 0 <= k < ids.shape[1]), "wrong-key",
               f"你挡住的键差了一个位置{where[0]}：掩码的最后一维是键的位置，倒数第二维是查询的位置。",
               f"the key you blocked is off by one{where[1]}: the mask's last dim is the key position, the one "
               "before it the query position.")
        fail("logits", f"logits 与只在第 {layer} 层挡住键 {key} 的结果不一致{where[0]}。掩码是**加**到注意力分数上的："
             "能看的地方是 0，挡住的地方是 `-inf`（或 `torch.finfo(dtype).min`），形状 `[批, 1, 查询, 键]`；"
             "不要用 True/False 的布尔掩码，eager 注意力会把它当成 0 和 1 加上去。",
             f"the logits differ from those with key {key} blocked in layer {layer} only{where[1]}. A mask is **added** "
             "to the attention scores: 0 where a query may look, `-inf` (or `torch.finfo(dtype).min`) where it may "
             "not, shape `[batch, 1, query, key]`; not a True/False mask, which eager attention adds as 0 and 1.")


# ---- 12.3 one hook for a tensor, a tuple and a ModelOutput -----------------------------------------------

class _Scaling:
    """One case of 12.3: a module of a fresh model, how to call it, and what it returns."""

    def __init__(self, zh: str, en: str, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        self.zh, self.en, self.module, self.args, self.kwargs = zh, en, module, args, kwargs

    def output(self) -> Any:
        with torch.no_grad():
            return self.module(*self.args, **self.kwargs)


def _scaling_cases(seed: int) -> list[_Scaling]:
    model = _fresh_model(seed, "eager")  # eager: the attention's second output is a real tensor of weights
    ids = induction.make_batch(2, seed=seed + 100)
    with torch.no_grad():
        hidden = model.model.embed_tokens(ids)
        cos_sin = model.model.rotary_emb(hidden, position_ids=torch.arange(ids.shape[1])[None])
    layer = model.model.layers[0]
    return [_Scaling("解码器层（返回张量）", "a decoder layer (returns a tensor)", layer, (hidden,),
                     {"position_embeddings": cos_sin}),
            _Scaling("eager 注意力（返回 (输出, 权重)）", "eager attention (returns (output, weights))", layer.self_attn, (),
                     {"hidden_states": hidden, "attention_mask": None, "position_embeddings": cos_sin}),
            _Scaling("主干 `model.model`（返回 ModelOutput）", "the trunk `model.model` (returns a ModelOutput)", model.model,
                     (ids,), {})]  # with its KV cache: the ModelOutput has a second field, past_key_values


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors directly inside a module's output (the output itself, a tuple's, a ModelOutput's fields)."""
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else []
    return [t for t in items if isinstance(t, torch.Tensor)]


def _hidden_in(got: Any, reference: Any, zh: str, en: str) -> torch.Tensor:
    """The hidden state in what the hook returned, once its form (tensor, tuple, ModelOutput) is as it came."""
    from transformers.utils import ModelOutput

    if isinstance(reference, ModelOutput):
        expect(isinstance(got, type(reference)), "modeloutput-type",
               f"在{zh}上，你的钩子返回了 {type(got).__name__}，而模块返回的是 {type(reference).__name__}：调用它的模型读的是 "
               "`outputs.last_hidden_state` 这样的字段。返回同一个类的新对象，例如 "
               "`dataclasses.replace(output, last_hidden_state=...)`。",
               f"on {en}, your hook returned a {type(got).__name__} for a module that returns a "
               f"{type(reference).__name__}: the model that calls it reads fields such as `outputs.last_hidden_state`. "
               "Return a new object of the same class, e.g. `dataclasses.replace(output, last_hidden_state=...)`.")
        first = next(iter(reference.keys()))
        expect(list(got.keys()) == list(reference.keys()) and all(got[k] is reference[k] for k in reference if k != first),
               "rest-changed", f"在{zh}上，ModelOutput 的其余字段被改动或丢掉了：只换掉 `{first}`。",
               f"on {en}, the ModelOutput's other fields were changed or dropped: replace `{first}` only.")
        return got[first]
    if not isinstance(reference, tuple):
        expect(not isinstance(got, tuple), "tensor-to-tuple", f"在{zh}上，你的钩子返回了元组，而这个模块返回的是张量"
               "（对张量来说，`output[0]` 是第一个样本，`output[1:]` 是其余的样本）：按原来的形式返回。",
               f"on {en}, your hook returned a tuple for a module that returns a tensor (of a tensor, `output[0]` is "
               "the first sample and `output[1:]` the rest): return the form that came in.")
        return got
    expect(not isinstance(got, torch.Tensor), "tuple-to-tensor", f"在{zh}上，你的钩子把元组换成了一个张量：调用者要拆开元组"
           "（`hidden, weights = ...`），其余元素也要原样放回。", f"on {en}, your hook replaced the tuple with a tensor: "
           "the caller unpacks the tuple (`hidden, weights = ...`), so put the other elements back unchanged.")
    expect(isinstance(got, tuple), "not-a-tuple", f"在{zh}上，你的钩子返回了 {type(got).__name__}，不是元组：调用者拿到的应该和模块"
           "原来返回的一样是元组，写成 `(hidden * factor, *output[1:])`。", f"on {en}, your hook returned a "
           f"{type(got).__name__}, not a tuple: the caller should get a tuple, as the module returns one; write "
           "`(hidden * factor, *output[1:])`.")
    count = len(reference)
    expect(len(got) == count, "tuple-length", f"在{zh}上，你返回的元组有 {len(got)} 个元素，模块原来的元组有 {count} 个：长度要一样。",
           f"on {en}, your tuple has {len(got)} element{'s' * (len(got) != 1)}, the module's has {count}: keep the "
           "length.")
    # bitwise: copy, the other elements passed back (or edited: then far off)
    expect(all(a is b or (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b))
               for a, b in zip(got[1:], reference[1:])), "rest-changed",
           f"在{zh}上，元组的其余元素（比如注意力权重）被改动了：只缩放第一个元素（隐藏状态）。",
           f"on {en}, the tuple's other elements (the attention weights, say) changed: scale only the first one "
           "(the hidden state).")
    return got[0]


@exercise("12.3", answer="make_scaling_hook")
def scaling_hook(answer: Any) -> None:
    for trial, factor in enumerate((0.5, 3.0)):
        for case in _scaling_cases(1230 + trial):
            zh, en = case.zh, case.en
            hook = call_answer(answer, factor, returns=("一个前向钩子", "a forward hook"))
            expect(callable(hook), "not-a-hook", f"`make_scaling_hook` 应返回一个前向钩子函数，收到的是 {type(hook).__name__}。",
                   f"`make_scaling_hook` must return a forward hook function, got a {type(hook).__name__}.")
            received = case.output()  # what the module hands the hook, and a copy to see whether the hook changed it
            fields = dict(received) if isinstance(received, dict) else None
            copies = [t.clone() for t in _tensors(received)]
            with torch.no_grad(), guarded("raised", f"在{zh}上，你的钩子", f"on {en}, your hook"):
                returned = hook(case.module, case.args, received)
            # bitwise: copy, clones taken before the answer ran
            changed = (any(not torch.equal(t, c) for t, c in zip(_tensors(received), copies))
                       or (fields is not None and any(received.get(k) is not v for k, v in fields.items())))
            expect(not changed, "in-place", f"在{zh}上，你的钩子原地修改了它收到的输出（`mul_`、`*=`，或者给 ModelOutput 的字段"
                   "重新赋值）：别的钩子可能已经存下了这个对象（`transformers` 为 `output_hidden_states` 装的钩子就是这样），"
                   "它们会看到你的修改。返回一个新的输出，不要改收到的那个。",
                   f"on {en}, your hook changed the output it received in place (`mul_`, `*=`, or assigning a "
                   "ModelOutput's field): other hooks may already hold that object (the hooks `transformers` installs "
                   "for `output_hidden_states` do) and see your change. Return a new output; leave the one you got alone.")
            expect(returned is not None, "unchanged", f"在{zh}上，你的钩子返回了 None：前向钩子只有**返回**新的输出才会替换原来的"
                   "（返回 None 表示不改）。", f"on {en}, your hook returned None: a forward hook replaces the output only "
                   "by **returning** the new one (returning None changes nothing).")
            got = _hidden_in(returned, received, zh, en)  # received: unchanged, as the rule above checked
            hidden = copies[0]
            shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            expect(shape == list(hidden.shape), "hidden-shape", f"在{zh}上，隐藏状态的形状变成了 {shape}（应为 {list(hidden.shape)}）："
                   "对一个张量取 `output[0]`，得到的是第一个样本，不是隐藏状态。",
                   f"on {en}, the hidden state's shape became {shape} (expected {list(hidden.shape)}): `output[0]` of "
                   "a tensor is the first sample, not the hidden state.")
            expect(torch.allclose(got, hidden * factor, atol=1e-6), "not-scaled", f"在{zh}上，隐藏状态不是原来的 {factor} 倍。",
                   f"on {en}, the hidden state is not {factor} times the original.")
