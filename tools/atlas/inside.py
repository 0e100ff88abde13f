"""The atlas one level down: inside each block, which submodule's forward hook gives the attention output, the MLP
(or experts') output, and the residual stream after each, what that hook receives, and which of the block's modules
fire under which attention implementation.

Measured, not read from names: each lookup is a place where a hook saw a term of the block's residual identity
(:mod:`tools.atlas.identity`: block output = block input + attention + mlp, found in the tensors the hooks saw). A
branch's role is named by what it computes (:class:`Probe`: the model is run again with the branch's input perturbed
at one position): ``attention`` where an attention op (``scaled_dot_product_attention``, a softmax over 3 or more
dimensions) ran and the branch mixes positions, ``cross_attention`` where an attention op ran and the branch is
position-wise in this stream (its keys come from another) or is named so, ``transformer`` where an attention op ran
and the branch holds residual blocks of its own (measured as a stack: ``inner_of``), ``mixer`` (a state-space mixer)
or ``branch`` (a convolution: a ResNet block, XCiT's LPI) for a branch that mixes positions with no attention op,
``mlp`` for the position-wise one (with its experts and router, where it has them); each such place records
``computes``. Where the block changes the shape, the first branch adds to a ``shortcut`` (a ResNet's downsample,
RepGhost's shortcut beside two parallel branches): a module without a residual sum inside it; where the stream
changes shape after sums of its own (EfficientViT's and SHViT's downsampling stages), the shortcut is the module
that makes the stream into the output's shape, and its ``note`` names the stream it reads. A place whose tensor a
later in-place op of the same forward changes (``out += identity``, ``ReLU(inplace=True)``) has ``clone``: the
hooks' tensors are compared, after the forward, with the copies taken when they ran. The float scalars of a block
and its config that may scale a branch (a residual multiplier, a layer scale) are set to other values and the
identity found again (:func:`other_scalars`): a pattern's ``scalars`` says whether its places still hold, and a
branch whose scale changed with them has ``scale_follows_scalars`` and ``scale_by``: the scalars it is, found by
changing them alone (Granite's ``residual_multiplier``, 1.0 by default), written into the identity and ``added``
(``block input + residual_multiplier * attention``). Each stack records ``order``, its rank in the order the forward
first runs it.

Parameters that hold one constant are given random values first (a zero-initialised gate or a layer scale of 1e-5
leaves no trace of its branch), unless the model's output is then not finite. Each stack is run again under every
attention implementation the model has on a CPU (transformers: ``eager`` and ``sdpa``; timm: ``fused_attn`` on and
off; PyTorch's ``nn.MultiheadAttention``: the fast path on and off; diffusers: the default processors and
``set_default_attn_processor()``), recording which modules fire and what their hooks receive. A stack whose
blocks hold sequences of blocks (a stage list: ``stages.2.blocks``) has those measured as stacks of their own
(``inner_of``). ``tools/atlas/generate.py`` stores the result as a model's ``inside``; ``hooklab.course.atlas``
answers ``where(block, what)`` from it.
"""
from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from .identity import (
    Call,
    Identity,
    Place,
    Value,
    _channel_dim,
    _elementwise,
    attention_ops,
    block_shapes,
    close,
    decompose,
    first_call,
    is_norm,
    recording,
)
from .probe import kind_of, main_tensor

MAX_BLOCKS = 8  # blocks measured per stack; the others get the pattern of a measured block built alike
# what this measurement checks, recorded with each model it measures (``inside_checks``): a check added later is
# appended, so that the models measured before it are found (``python -m tools.atlas stale``) and measured again
CHECKS = ("identity", "what each branch computes", "clone", "scalars", "run order", "scalars named",
          "what parallel branches read")
_CROSS = re.compile(r"cross|encoder_attn|encdec|enc_dec|attn2(\b|_|$)", re.I)
_ATTENTION = re.compile(r"attn|attention", re.I)
_MLP = re.compile(r"mlp|ffn|feed_?forward|(^|\.|_)ff(\b|_|$)|intermediate|moe|expert|(^|\.)fc\d|dense_h_to_4h|"
                  r"channel_mix", re.I)
_MIXER = re.compile(r"mixer|mamba|ssm|token_mix", re.I)
_EXPERTS = re.compile(r"expert", re.I)
_ROUTER = re.compile(r"(^|\.)(router|gate|gating|switch)$", re.I)


# ------------------------------------------------------------------------------------------------ one block
def _best(places: list[Place], kinds: tuple[str, ...] = ("out",)) -> Place | None:
    """The place a hook reaches most simply: the block's own output, else the shallowest module (the first
    called) whose output it is, else the shallowest module whose input it is (a forward pre-hook)."""
    for kind in kinds:
        if kind == "out" and any(p.kind == "out" and p.path == "" for p in places):
            return next(p for p in places if p.kind == "out" and p.path == "")
        inner = sorted((p for p in places if p.kind == kind and p.path), key=lambda p: (p.depth, p.time))
        if inner:
            return inner[0]
        own = [p for p in places if p.kind == kind and p.path == ""]
        if own:
            return own[0]
    return None


def _place(p: Place, kinds: dict[tuple[str, str], str]) -> dict[str, Any]:
    found = {"module": p.path, "hook": "forward" if p.kind == "out" else "forward_pre", "take": p.access,
             "receives": kinds.get((p.kind, p.path), "")}
    if p.total > 1:
        found["call"] = f"{p.nth} of {p.total}"
    if p.access.startswith("kwargs"):
        found["with_kwargs"] = True  # register the hook with with_kwargs=True to get the keywords
    if p.flattened:
        found["flattened"] = True    # the hook gets it as (batch * tokens, channels): view it in the block's shape
    if p.overwritten:
        found["clone"] = True        # a later in-place op of the forward changes it: keep output.clone()
    return found


def _role(names: list[str], ops: list[str], experts: bool, earlier: list[str], mixes: bool | None = None,
          blocks_inside: bool = False) -> str:
    """A branch's role, from what it computes (``mixes``: whether perturbing the branch's input at one position
    changed its output at other positions, :func:`mixes_positions`): ``attention`` where an attention op ran and it
    mixes positions (``cross_attention`` where it is named so, or where an attention op ran and the branch is
    position-wise in this stream: its keys come from another one); ``transformer`` where an attention op ran and
    the branch holds blocks of its own (diffusers' ``Transformer2DModel``: attention, cross-attention and a
    feed-forward); a branch that mixes positions with no attention op is a ``mixer`` (a state-space mixer, named
    so), an ``attention`` (named so: linear attention) or a ``branch`` (a convolution, a pooling gate); a
    position-wise branch is the ``mlp`` (with its experts and router, where it has them). Where the test could not
    run (``mixes`` None), the names decide, as they did before it existed."""
    text = " ".join(names)
    if mixes is None:
        if (ops or _ATTENTION.search(text)) and _CROSS.search(text):
            return "cross_attention"
        if experts or (_MLP.search(text) and not ops):
            return "mlp"
        if ops or _ATTENTION.search(text):
            return "attention"
        if _MIXER.search(text):
            return "mixer"
        return "mlp" if any(r.startswith(("attention", "mixer")) for r in earlier) else "branch"
    if ops:
        if blocks_inside:
            return "transformer"
        return "cross_attention" if _CROSS.search(text) or not mixes else "attention"
    if mixes:
        return "mixer" if _MIXER.search(text) else "attention" if _ATTENTION.search(text) and \
            not _MLP.search(text) else "branch"
    return "mlp"


def _experts(window: list[Call], modules: dict[str, nn.Module], kinds: dict, summand: torch.Tensor
             ) -> dict[str, Any] | None:
    """The experts of an MoE branch: the module holding them (a fused module, or a list whose expert ``i`` fires
    only for the tokens routed to it), what its hook receives, and whether its output is the branch's output."""
    named = [c.path for c in window if _EXPERTS.search(c.path.rpartition(".")[2])]
    if not named:
        return None
    top = min(named, key=lambda e: (e.count("."), e))
    holder = top.rpartition(".")[0] if top.rpartition(".")[2].isdigit() else top
    found: dict[str, Any] = {"module": holder, "class": type(modules[holder]).__name__}
    fired = {c.path for c in window if c.path.rpartition(".")[0] == holder and c.path.rpartition(".")[2].isdigit()}
    if fired:
        found["note"] = (f"a list of {len(list(modules[holder].children()))} expert modules, never called itself: "
                         f"expert i's hook fires only when a token is routed to it ({len(fired)} fired here)")
        return found
    found.update(hook="forward", take="output", receives=kinds.get(("out", holder), ""))
    out = next((c.outputs for c in window if c.path == holder), [])
    found["is_the_mlp_output"] = any(close(t, summand) for _, t in out)
    return found


def _lists_in(window: list[Call], modules: dict[str, nn.Module]) -> list[str]:
    """The lists (``ModuleList`` / ``Sequential``) whose items, modules with submodules, ran in a branch."""
    found: list[str] = []
    for c in window:
        parent, _, last = c.path.rpartition(".")
        if parent and last.isdigit() and isinstance(modules.get(parent), (nn.ModuleList, nn.Sequential)) and \
                next(modules[c.path].children(), None) is not None and parent not in found:
            found.append(parent)
    return found


def block_lookups(block: Call, inner: list[Call], ident: Identity, modules: dict[str, nn.Module],
                  ops: list[tuple[int, str]], probe: Probe | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One stream's lookups (role -> where a hook gets it) and the identity that proves them (``probe``: runs the
    model to tell what each branch computes, :class:`Probe`)."""
    kinds: dict[tuple[str, str], str] = {("out", ""): block.output_kind, ("in", ""): block.input_kind}
    for c in inner:
        kinds.setdefault(("out", c.path), c.output_kind)
        kinds.setdefault(("in", c.path), c.input_kind)
    params = {path: sum(p.numel() for p in m.parameters()) for path, m in modules.items()}
    found: dict[str, Any] = {}
    roles: list[str] = []
    producers: list[Place] = []
    begin = previous_end = block.start
    if ident.shortcut is not None:
        found["shortcut"] = _place(_best([p for p in ident.shortcut.places if p.path]), kinds)
    shortcut_text = "shortcut(block input)"
    if ident.shortcut_is_block:
        found["shortcut"]["note"] = ("this module is a residual block of its own that changes the stream's shape, "
                                     "with a sum no hook sees whole (a shortcut computed outside any module, as "
                                     "Hiera's pooled projection); the identity starts from its output")
    for b in ident.branches:
        producer = _best([p for p in b.summand.places if p.path])
        if producer is None:
            return {}, {"holds": False, "why": "a branch's output is no module's output"}
        producers.append(producer)
        if roles:  # the branch begins where the stream it reads begins (a parallel one: after the previous branch)
            begin = previous_end if b.parallel else max(previous_end, min(p.time for p in b.base.places))
        window = [c for c in inner if begin < c.start and c.end <= producer.time]
        parent = producer.path.rpartition(".")[0]
        siblings = [c.path for c in window if c.path.rpartition(".")[0] == parent and not is_norm(modules[c.path])]
        core = max(siblings, key=lambda s: params.get(s, 0), default=producer.path)  # most of the window's weights
        core = core if 2 * params.get(core, 0) > sum(params.get(s, 0) for s in set(siblings)) and \
            params.get(core, 0) > 1.5 * params.get(producer.path, 0) else producer.path
        previous_end = producer.time
        ops_here = attention_ops(ops, begin, producer.time)
        experts = _experts(window, modules, kinds, b.summand.tensor)
        mixes = None if probe is None else probe.mixes(b.base, producer, b.summand.tensor)
        if mixes is None and probe is not None and ident.start is not None and b.base is not ident.start and (
                b.parallel or b.base is ident.shortcut):
            mixes = probe.mixes(ident.start, producer, b.summand.tensor)  # a branch beside a shortcut reads the input
        lists = _lists_in(window, modules) if ops_here and probe is not None else []
        inner_blocks = next((rel for rel in lists if probe.residual(rel)), None) if lists else None
        role = _role([producer.path, core], ops_here, experts is not None, roles, mixes, inner_blocks is not None)
        role = role if role not in roles else \
            f"{role}_{sum(r == role or (r.startswith(role + '_') and r[len(role) + 1:].isdigit()) for r in roles) + 1}"
        roles.append(role)
        entry = _place(producer, kinds)
        if mixes is not None:  # measured: perturbing the branch's input at one position, the others changed or not
            entry["computes"] = "mixes positions" if mixes else "position-wise"
        if inner_blocks is not None:
            entry["blocks_inside"] = inner_blocks
        if b.coefficient[0] == "per channel":
            entry["added"] = "times a gate per channel (the sum is input + gate * this output)"
            entry["scale"] = "per channel"
        elif b.coefficient[1] != 1.0:
            c = _shown(b.coefficient[1])
            entry["added"] = f"times {c} (the sum is input + {c} * this output)"
            entry["scale"] = b.coefficient[1]
        if b.base_scale is not None:  # Doge: the stream is scaled (per channel) before the branch is added
            entry["base_scale"] = b.base_scale[1] if b.base_scale[0] == "scalar" else "per channel"
            entry["added"] = f"to the stream it adds to, first multiplied by " \
                f"{'a gate per channel' if b.base_scale[0] != 'scalar' else _shown(b.base_scale[1])}"
        if core != producer.path:
            entry["inside"] = {"module": core, "class": type(modules[core]).__name__, "hook": "forward",
                               "take": "output", "receives": kinds.get(("out", core), "")}
        if ops_here:
            entry["evidence"] = ops_here
        if experts:
            entry["experts"] = experts
        routers = [c.path for c in window if _ROUTER.search(c.path)] if experts else []
        if routers:
            r = min(routers, key=lambda e: (e.count("."), e))
            entry["router"] = {"module": r, "class": type(modules[r]).__name__, "hook": "forward",
                               "take": "output", "receives": kinds.get(("out", r), "")}
        found[role] = entry
    expressions: dict[Any, str] = {}  # value -> how it is made of the block input and the branches
    holder: dict[Any, str] = {}       # value -> the lookup that holds it (what the next branch adds to)
    for k, (role, b) in enumerate(zip(roles, ident.branches)):
        if not (b.parallel and b.stream is not None) and b.base not in holder and b.base is not ident.shortcut:
            _stream_made_inside(role, b.base, ident, inner, modules, kinds, found, holder, expressions)
        found[role]["adds_to"] = f"residual_after_{roles[k - 1]}" if b.parallel and b.stream is not None else \
            holder.get(b.base, "shortcut" if ident.shortcut is not None and b.base is ident.shortcut else "input")
        gate = "gate * " if b.coefficient[0] == "per channel" else "" if b.coefficient[1] == 1.0 else \
            f"{_shown(b.coefficient[1])} * "
        if ident.shortcut_reads is not None and b.base is ident.shortcut and shortcut_text.endswith("(block input)"):
            read = holder.get(ident.shortcut_reads, "input")  # the stream changes shape inside the block (once)
            shortcut_text = f"shortcut({expressions.get(ident.shortcut_reads, 'block input')})"
            found["shortcut"]["note"] = (f"the block changes the stream's shape here, after residual sums of its own: "
                                         f"this module makes `{read}` into the output's shape, and the next branch "
                                         f"adds to its output")
        base = expressions.get(b.base, shortcut_text if b.base is ident.shortcut and ident.shortcut
                               else "block input")
        if b.parallel and b.stream is not None:  # the second of two parallel branches: added to the first's sum
            base = expressions.get(b.after, base)
        if b.base_scale is not None:
            base = f"{'gate' if b.base_scale[0] != 'scalar' else _shown(b.base_scale[1])} * ({base})"
        expression = expressions[b.after] = f"{base} + {gate}{role}"
        if b.stream is None:  # the first of two parallel branches: its sum is never a tensor
            found[f"residual_after_{role}"] = {
                "module": None, "compute": f"{'shortcut output' if b.base is ident.shortcut and ident.shortcut else 'block input'} + {role} output",
                "note": _parallel_note(roles[k:k + 2], producers[k:k + 2], inner, ident, modules)}
            continue
        where = _place(_best(b.stream.places, ("out", "in")), kinds)
        holder[b.stream] = holder[b.after] = f"residual_after_{role}"
        if b.stream is not b.after:
            through = modules.get(b.through or "")
            where["sum"] = _place(_best(b.after.places, ("out", "in")), kinds)
            expressions[b.stream] = f"{'norm' if is_norm(through) else b.through}({expression})"
            where["note"] = (f"the sum goes through `{b.through}` ({type(through).__name__}) before the next part; "
                             f"the sum itself: {_describe(_best(b.after.places, ('out', 'in')))}")
        if b.aside:
            where["note"] = ("this sum is not carried on: the next branch reads it, but adds its output to an earlier "
                             "stream, so it reaches the block's output only through that branch")
        found[f"residual_after_{role}"] = where
    end = ident.branches[-1].stream if ident.branches[-1].stream is not None else ident.branches[-1].after
    expression = expressions.get(end, expression)
    for following, b in zip(roles[1:], ident.branches):
        if b.aside:
            expression += f"; the {following} reads {expressions[b.after]}"
    form = "parallel" if any(b.parallel for b in ident.branches) else \
        "post-norm" if any(b.stream is not b.after and is_norm(modules.get(b.through or "")) for b in ident.branches) \
        else "sequential"
    return found, {"holds": True, "form": form, "text": f"block {ident.output} = {expression}"}


def _stream_made_inside(role: str, base: Value, ident: Identity, inner: list[Call], modules: dict[str, nn.Module],
                        kinds: dict[tuple[str, str], str], found: dict[str, Any], holder: dict[Any, str],
                        expressions: dict[Any, str]) -> None:
    """A first branch that adds to a stream made inside the block, not to the block's input: MiniMax adds its
    attention to ``input_layernorm``'s output (``residual = input_layernorm(x)``). Its lookup is
    ``residual_before_<role>``, the module whose output it is, and the identity reads ``norm(block input) + ...``."""
    if ident.start is None or close(base.tensor, ident.start.tensor):
        return  # the block's input, seen at another place (dropout in eval, an Identity)
    place = _best([p for p in base.places if p.path], ("out", "in"))
    if place is None:
        return
    name = f"residual_before_{role}"
    found[name] = {**_place(place, kinds), "note": f"the {role} adds its output to this module's output, a stream "
                                                    f"made inside the block, not to the block's input"}
    holder[base] = name
    call = next((c for c in inner if c.path == place.path and any(close(t, base.tensor) for _, t in c.outputs)), None)
    reads_input = call is not None and bool(call.inputs) and close(call.inputs[0][1], ident.start.tensor)
    maker = "norm" if is_norm(modules.get(place.path)) else place.path
    expressions[base] = f"{maker}(block input)" if reads_input and place.kind == "out" else f"`{place.path}`'s output"


def _reads(producer: Place, inner: list[Call], ident: Identity, modules: dict[str, nn.Module]) -> str | None:
    """What the module that makes a branch's output reads, in words, told by where that tensor comes from: the
    block's input, the shortcut's output, or the module (the shallowest, the first) whose output it is; None where
    the hooks saw no such tensor (the module reads a tensor of another shape)."""
    call = next((c for c in inner if c.path == producer.path and c.end == producer.time), None)
    if call is None or not call.inputs:
        return None
    read = call.inputs[0][1]
    if ident.start is not None and close(read, ident.start.tensor):
        return "the block's input"
    if ident.shortcut is not None and close(read, ident.shortcut.tensor):
        return "the shortcut's output"
    makers = [c for c in inner if c.end < call.start and any(close(t, read) for _, t in c.outputs)]
    if not makers:
        return None
    maker = min(makers, key=lambda c: (c.path.count("."), c.start))
    through = ident.start is not None and bool(maker.inputs) and close(maker.inputs[0][1], ident.start.tensor) and \
        _elementwise(maker, modules, maker.inputs[0][1].shape[_channel_dim(maker.inputs[0][1])])
    return f"`{maker.path}`'s output" + (" (the block's input through it)" if through else "")


def _parallel_note(roles: list[str], producers: list[Place], inner: list[Call], ident: Identity,
                   modules: dict[str, nn.Module]) -> str:
    """The note on the sum of two parallel branches that no tensor holds: what each branch reads, as measured
    (GPT-J's both read ``ln_1``'s output, GPT-NeoX's each its own norm's, RepGhost's both the output of the ghost
    module's primary convolution, not the block's input)."""
    reads = [_reads(p, inner, ident, modules) for p in producers]
    if len(reads) == 2 and None not in reads:
        if reads[0] == reads[1]:
            return f"a parallel block: both branches read {reads[0]}; no tensor holds this sum"
        return (f"a parallel block: the {roles[0]} reads {reads[0]}, the {roles[1]} {reads[1]}; no tensor holds "
                f"this sum")
    return "a parallel block: its two branches' outputs are added together; no tensor holds this sum"


def _describe(p: Place | None) -> str:
    if p is None:
        return "no tensor a hook sees"
    where = f"`{p.path}`" if p.path else "the block"
    return f"{where}'s {'forward hook' if p.kind == 'out' else 'forward pre-hook'}, {p.access}"


def block_streams(block: Call, inner: list[Call], modules: dict[str, nn.Module], ops: list[tuple[int, str]],
                  probe: Probe | None = None) -> list[dict[str, Any]]:
    """Every residual stream of one block call (SD3's joint blocks have two: the image's and the text's), each
    with its lookups and identity; one stream saying why, where none is found."""
    def rank(access: str) -> tuple:
        return (access not in ("kwargs['hidden_states']", "args[0]", "kwargs['x']"), access)
    out_shapes = {tuple(t.shape) for _, t in block.outputs}
    candidates = sorted((a for a, _ in block.inputs), key=rank)
    candidates = candidates[:1] + [a for a in candidates[1:] if tuple(dict(block.inputs)[a].shape) in out_shapes]
    streams: list[dict[str, Any]] = []
    why, outputs = "the block's input is not a floating tensor", set()
    for access in candidates:
        ident = decompose(block, inner, access, modules)
        if ident.why:
            if access == candidates[0]:  # no second stream where the main one has no identity: what another
                why = ident.why          # input "streams" to is no lookup (Zaya's router state)
                break
            continue
        if ident.output in outputs:
            continue
        found, identity = block_lookups(block, inner, ident, modules, ops, probe)
        if not found:
            why = identity["why"]
            continue
        outputs.add(ident.output)
        streams.append({"input": access, "output": ident.output, "identity": identity,
                        "lookups": {"input": _place(Place("in", "", access, block.start), {("in", ""): block.input_kind}),
                                    **found}})
    if not streams:
        streams.append({"input": candidates[0] if candidates else None, "output": None,
                        "identity": {"holds": False, "why": why}, "lookups": {}})
    return streams


_TAKE = re.compile(r"\[(\d+)\]|\['([^']+)'\]|\.(\w+)")


def taken(value: Any, take: str) -> Any:
    """What an access (``output[0]``, ``args[0]``, ``kwargs['x']``, ``output.sample``) names in ``value`` (the
    hook's output, or ``{"args": args, "kwargs": kwargs}`` for a pre-hook)."""
    root, rest = re.match(r"(\w+)(.*)", take).groups()
    if isinstance(value, dict) and root in ("args", "kwargs") and set(value) == {"args", "kwargs"}:
        value = value[root]
    for index, key, attribute in _TAKE.findall(rest):
        value = value[int(index)] if index else value[key] if key else getattr(value, attribute)
    return value


def _positions(t: torch.Tensor) -> list[int]:
    """The dimensions of positions (tokens, pixels) of a block-shaped tensor: all but the batch and the channels."""
    ch = t.dim() - 1 if t.dim() == 3 else 1
    return [d for d in range(1, t.dim()) if d != ch and t.shape[d] > 1]


def _at_one(t: torch.Tensor) -> tuple:
    """Position 1 (token 1, pixel (1, 1)): one whose neighbours on both sides exist, and that a stride-2
    convolution reads into two outputs along each dimension (position 0 is read into one only)."""
    index: list[Any] = [slice(None)] * t.dim()
    for d in _positions(t):
        index[d] = 1
    return tuple(index)


def _changed_positions(change: torch.Tensor, tolerance: float) -> int:
    """How many positions of a block-shaped difference hold a change above ``tolerance``."""
    ch = change.dim() - 1 if change.dim() == 3 else 1
    keep = [d for d in range(1, change.dim()) if d != ch]
    per = change.amax(dim=[d for d in range(change.dim()) if d not in keep])
    return int((per > tolerance).sum())


class Probe:
    """Runs a model again to tell what a branch of one block computes (the call measured is the block's first)."""

    def __init__(self, block: nn.Module, run: Callable[[], Any], cache: dict | None = None) -> None:
        self.block, self.run = block, run
        self.modules = dict(block.named_modules())
        self.cache = {} if cache is None else cache  # blocks built alike answer alike: (signature, question) -> answer
        self.signature = _signature(block)

    def _once(self, readers: list[Place], producer: Place, bump: bool) -> torch.Tensor | None:
        got: list[torch.Tensor] = []
        counts: dict[tuple[str, str], int] = {}
        handles = []

        def count(kind: str, path: str) -> int:
            counts[(kind, path)] = counts.get((kind, path), 0) + 1
            return counts[(kind, path)]
        for p in readers:
            def pre(m: nn.Module, args: tuple, kwargs: dict, p: Place = p) -> Any:
                if count("in", p.path) != p.nth or not bump:
                    return None
                args, kwargs = list(args), dict(kwargs)
                holder, key = (args, int(p.access[5:-1])) if p.access.startswith("args[") else \
                    (kwargs, p.access[8:-2])
                t = holder[key].clone()
                g = torch.Generator().manual_seed(1)
                spot = t[_at_one(t)]
                t[_at_one(t)] = spot + torch.randn(spot.shape, generator=g).to(t.dtype) * (
                    float(t.float().std()) + 1e-3)
                holder[key] = t
                return tuple(args), kwargs
            handles.append(self.modules[p.path].register_forward_pre_hook(pre, with_kwargs=True))

        def post(m: nn.Module, args: tuple, output: Any) -> None:
            if count("out", producer.path) == producer.nth:
                got.append(taken(output, producer.access).detach().clone())
        handles.append(self.modules[producer.path].register_forward_hook(post))
        try:
            with torch.no_grad():
                self.run()
        finally:
            for h in handles:
                h.remove()
        return got[0] if got else None

    def mixes(self, base: Value, producer: Place, before: torch.Tensor) -> bool | None:
        """Does the branch that reads stream ``base`` and ends at ``producer`` mix positions? Its input is perturbed
        at one position (token 1, pixel (1, 1)) where the block's modules read it (forward pre-hooks), and its
        output compared: changed at more than one position, it mixes positions (attention, a convolution, with a
        stride too); at one only, it is position-wise (an MLP). None: it could not be told (no module reads the
        stream, the tensor has no positions, the perturbation changed nothing)."""
        key = (self.signature, "mixes", tuple(sorted((p.path, p.access, p.nth) for p in base.places if p.kind == "in")),
               producer.path, producer.nth, producer.access)
        if key not in self.cache:
            self.cache[key] = self._mixes(base, producer, before)
        return self.cache[key]

    def _mixes(self, base: Value, producer: Place, before: torch.Tensor) -> bool | None:
        readers = list({p.path: p for p in reversed(base.places) if p.kind == "in" and p.path and
                        p.time <= producer.time and not p.flattened and
                        re.fullmatch(r"args\[\d+\]|kwargs\['\w+'\]", p.access)}.values())
        if not readers or not _positions(base.tensor) or not producer.path:
            return None
        try:  # compared with the branch's output as the recording run saw it (the same model, unperturbed)
            after = self._once(readers, producer, True)
        except Exception:  # noqa: BLE001 - a module that does not take the perturbed input: not told
            return None
        if after is None or after.numel() != before.numel() or not _positions(before):
            return None
        after = after.reshape(before.shape)
        change = (after.double() - before.double()).abs()
        changed = _changed_positions(change, 1e-6 * (float(before.abs().max()) + 1e-30))
        return None if changed == 0 else changed > 1  # 0: the branch did not see the perturbation

    def residual(self, rel: str) -> bool:
        """Are the items of list ``rel`` (inside this block) residual blocks of their own (found by their identity,
        as the block's)? Its first item that runs is measured."""
        key = (self.signature, "residual", rel)
        if key not in self.cache:
            self.cache[key] = self._residual(rel)
        return self.cache[key]

    def _residual(self, rel: str) -> bool:
        items = {f"{rel}.{k}": m for k, m in self.modules[rel].named_children()}
        try:
            shapes = block_shapes(items, self.run)
            with recording(items, shapes) as (calls, _ops):
                self.run()
        except Exception:  # noqa: BLE001 - not told: not claimed
            return False
        for name, module in items.items():
            found = first_call(calls[name])
            if found is None:
                continue
            block, inner = found
            access = next((a for a, _ in block.inputs), None)
            return access is not None and decompose(block, inner, access, dict(module.named_modules())).why is None
        return False


_INT_SCALARS = re.compile(r"(output|residual|rescale).*(scale|factor)|multiplier", re.I)  # 1 written as an int
_NOT_SCALARS = re.compile(r"eps|drop|momentum|^p$|prob|theta|init|range|_token|_id$|temperature|^scale_factor$|"
                          r"^size$|min_val|max_val|threshold", re.I)


def config_scalars(blocks: dict[str, nn.Module]) -> list[tuple[Any, str, float]]:
    """The float scalars a block may scale a sublayer by (a residual multiplier, ``layer_scale``, a gate's value):
    every float attribute of the blocks' modules and of the config objects they hold (and an int one named as an
    output scale or a multiplier: diffusers' ``output_scale_factor=1``), but those that cannot
    (norm epsilons, dropout rates, momenta, rotary bases, init ranges). Returns (object, name, value)."""
    found: dict[tuple[int, str], tuple[Any, str, float]] = {}
    for block in blocks.values():
        for module in block.modules():
            owners = [module] + [v for k, v in vars(module).items() if k == "config" and hasattr(v, "__dict__")]
            for owner in owners:
                for name, value in list(vars(owner).items()):
                    if (type(value) is float or (type(value) is int and _INT_SCALARS.search(name))) and \
                            not name.startswith("__") and not _NOT_SCALARS.search(name):
                        found.setdefault((id(owner), name), (owner, name, value))
    return list(found.values())


@contextlib.contextmanager
def other_scalars(scalars: list[tuple[Any, str, float]]) -> Iterator[list[str]]:
    """The scalars set to values other than their defaults (1.0 -> 1.37, 0 -> 0.37, c -> 1.37 c) while inside."""
    try:
        for owner, name, value in scalars:
            setattr(owner, name, value * 1.37 if value else 0.37)
        yield sorted({name for _, name, _ in scalars})
    finally:
        for owner, name, value in scalars:
            setattr(owner, name, value)


# ------------------------------------------------------------------------------------------------ a model
@torch.no_grad()
def unconstant(model: nn.Module) -> list[tuple[nn.Parameter, torch.Tensor]]:
    """Gives every parameter that holds one constant ``c`` random values near it, on the scale of an initialised
    weight (``c`` plus noise of 0.02, or of a tenth of ``c`` where that is larger: a zero gate or a layer scale of
    1e-5 becomes a small gate, a norm's weight of one stays about one; larger values would drown the tokens'
    differences in the biases); returns what to put back."""
    g = torch.Generator().manual_seed(0)
    saved = []
    for p in model.parameters():
        if p.is_floating_point() and p.device.type != "meta" and p.numel() and bool((p == p.flatten()[0]).all()):
            saved.append((p, p.detach().clone()))
            c = float(p.flatten()[0])
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32) * max(0.02, abs(c) / 10)
            p.copy_((noise + (c if abs(c) >= 0.01 else 0.0)).to(p.dtype))
    return saved


def _switch(enter: Callable[[], Any], leave: Callable[[], Any]) -> Callable[[], Any]:
    @contextlib.contextmanager
    def switched() -> Iterator[None]:
        enter()
        try:
            yield
        finally:
            leave()
    return switched


def variants(model: nn.Module) -> tuple[list[tuple[str, Callable[[], Any]]], dict[str, str]]:
    """The attention implementations this model switches between on a CPU, as context managers (the first: as
    built), and those not measured here, with why."""
    found: list[tuple[str, Callable[[], Any]]] = []
    absent: dict[str, str] = {}
    config = getattr(model, "config", None)
    base = getattr(config, "_attn_implementation", None) if hasattr(model, "set_attn_implementation") else None
    if isinstance(base, str):
        for impl in dict.fromkeys([base, "eager", "sdpa"]):
            found.append((impl, _switch(lambda impl=impl: model.set_attn_implementation(impl),
                                        lambda: model.set_attn_implementation(base))))
        absent["flash_attention_2"] = "n/a: needs a GPU" if getattr(model, "_supports_flash_attn", False) else \
            "not supported by this model"
    fused = [m for m in model.modules() if isinstance(getattr(m, "fused_attn", None), bool)]
    if fused:
        before = [m.fused_attn for m in fused]

        def put(values: list[bool]) -> None:
            for m, v in zip(fused, values):
                m.fused_attn = v
        for on in (before[0], not before[0]):
            found.append(("fused_attn" if on else "fused_attn off",
                          _switch(lambda on=on: put([on] * len(fused)), lambda: put(before))))
    if any(isinstance(m, (nn.MultiheadAttention, nn.TransformerEncoderLayer)) for m in model.modules()):
        was = torch.backends.mha.get_fastpath_enabled()
        for on in (True, False):
            found.append(("fast path" if on else "fast path off",
                          _switch(lambda on=on: torch.backends.mha.set_fastpath_enabled(on),
                                  lambda: torch.backends.mha.set_fastpath_enabled(was))))
    if hasattr(model, "set_default_attn_processor") and hasattr(model, "attn_processors"):
        saved = dict(model.attn_processors)
        found += [("default processors", _switch(lambda: None, lambda: None)),
                  ("set_default_attn_processor()", _switch(model.set_default_attn_processor,  # it empties a dict
                                                           lambda: model.set_attn_processor(dict(saved))))]
    return found or [("as built", _switch(lambda: None, lambda: None))], absent


def _fires(blocks: dict[str, nn.Module], run: Callable[[], Any]) -> dict[tuple[str, str], tuple[int, str, str]]:
    """(block, module) -> (calls, what its forward pre-hook and forward hook received first), in one run."""
    seen: dict[tuple[str, str], list] = {}
    handles = []
    for bname, block in blocks.items():
        for rel, module in block.named_modules():
            def pre(m: nn.Module, args: tuple, key: tuple = (bname, rel)) -> None:
                seen.setdefault(key, [0, kind_of(args), ""])[0] += 1

            def post(m: nn.Module, args: tuple, output: Any, key: tuple = (bname, rel)) -> None:
                if key in seen and not seen[key][2]:
                    seen[key][2] = kind_of(output)
            handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return {k: (v[0], v[1], v[2]) for k, v in seen.items()}


def _signature(block: nn.Module) -> str:
    return json.dumps([(n, type(m).__name__) for n, m in block.named_modules()])


def _template(path: str, names: list[str]) -> str | None:
    """How block i is named (``model.layers.{i}``), where the names say it."""
    match = [re.fullmatch(r"(.*?)(\d+)", n) for n in names]
    if all(match) and len({m.group(1) for m in match}) == 1 and all(int(m.group(2)) == i for i, m in enumerate(match)):
        return match[0].group(1) + "{i}"
    return None


def inner_stacks(model: nn.Module, stack: Any) -> list[Any]:
    """The sequences of blocks inside a stage list's blocks (``stages.2.blocks``): a ModuleList or Sequential
    child of a stage whose children all have submodules of their own."""
    found = []
    for name in stack.names:
        for child_name, child in model.get_submodule(name).named_children():
            if isinstance(child, (nn.ModuleList, nn.Sequential)) and len(child) and all(
                    c is not None and any(True for _ in c.children()) for c in child):  # a list may hold None
                path = f"{name}.{child_name}"
                found.append(SimpleNamespace(path=path, names=[f"{path}.{k}" for k, _ in child.named_children()],
                                             inner_of=stack.path))
    return found


def measure(model: nn.Module, run: Callable[[], Any], stacks: list) -> dict[str, Any]:
    """A model's ``inside``: stack path -> its blocks' lookups (see the module docstring)."""
    saved = unconstant(model)
    try:
        value = main_tensor(run())
        if value is not None and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise FloatingPointError("not finite")
    except Exception:  # noqa: BLE001 - values the model cannot take: measured as built
        with torch.no_grad():
            for p, old in saved:
                p.copy_(old)
    implementations, absent = variants(model)
    result: dict[str, Any] = {}
    todo = list(stacks)
    while todo:
        s = todo.pop(0)
        try:
            result[s.path] = _stack(model, s, run, implementations, dict(absent))
        except Exception as exc:  # noqa: BLE001 - recorded: this stack's lookups are missing, and why
            result[s.path] = {"blocks": len(s.names), "patterns": [], "block_pattern": [None] * len(s.names),
                              "why": f"the measurement failed: {type(exc).__name__}: {str(exc)[:160]}"}
            continue
        if getattr(s, "inner_of", None) is None:  # a stage list: the blocks inside each stage as well
            todo += [inner for inner in inner_stacks(model, s) if inner.path not in result]
        todo += [inner for inner in held_blocks(model, s, result[s.path]) if inner.path not in result and
                 all(inner.path != t.path for t in todo)]
    kept = {path: st for path, st in result.items()  # an inner sequence with no residual identity says nothing
            if "inner_of" not in st or any(stream["identity"]["holds"] for p in st["patterns"] for stream in p["streams"])}
    for path, rank in run_order(model, [s for s in stacks if s.path in kept], run).items():
        kept[path]["order"] = rank
    return kept


def held_blocks(model: nn.Module, stack: Any, measured: dict[str, Any]) -> list[Any]:
    """The lists of blocks inside a branch that is a whole transformer block (``blocks_inside``: diffusers'
    ``Transformer2DModel`` holds ``transformer_blocks``), for each block of ``stack`` built like a measured one:
    measured as stacks of their own, so their attention and feed-forward can be asked for."""
    found = []
    for i, index in enumerate(measured.get("block_pattern", [])):
        if index is None:
            continue
        for stream in measured["patterns"][index]["streams"]:
            for entry in stream["lookups"].values():
                if entry.get("blocks_inside"):
                    path = f"{stack.names[i]}.{entry['blocks_inside']}"
                    names = [f"{path}.{k}" for k, _ in model.get_submodule(path).named_children()]
                    found.append(SimpleNamespace(path=path, names=names, inner_of=stack.path))
    return found


def run_order(model: nn.Module, stacks: list[Any], run: Callable[[], Any]) -> dict[str, int]:
    """Stack path -> its rank in the order the forward first calls its first block (0: the first the input
    meets); a stack not called is left out."""
    first: dict[str, int] = {}
    handles = []
    for s in stacks:
        def pre(m: nn.Module, args: tuple, path: str = s.path) -> None:
            first.setdefault(path, len(first))
        handles.append(model.get_submodule(s.names[0]).register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    return first


def _stack(model: nn.Module, s: Any, run: Callable[[], Any], implementations: list, absent: dict[str, str]
           ) -> dict[str, Any]:
    blocks = {n: model.get_submodule(n) for n in s.names[:MAX_BLOCKS]}
    with implementations[0][1]():
        shapes = block_shapes(blocks, run)
        with recording(blocks, shapes) as (calls, ops):
            run()
    fired = {}
    for name, enter in implementations:
        try:
            with enter():
                fired[name] = _fires(blocks, run)
        except Exception as exc:  # noqa: BLE001 - an implementation this model does not take
            absent[name] = f"{type(exc).__name__}: {str(exc)[:120]}"
    patterns: list[dict[str, Any]] = []
    keys: list[str] = []
    index_of: dict[str, int | None] = {}
    first_of: list[str] = []  # the first block of each pattern
    cache: dict = {}
    for i, (bname, block) in enumerate(blocks.items()):
        found = first_call(calls[bname])
        if found is None:
            index_of[bname] = None
            continue
        modules = dict(block.named_modules())
        probe = Probe(block, run, cache)
        pattern = {"class": type(block).__name__, "streams": block_streams(*found, modules, ops.seen, probe)}
        by_impl = _by_variant(bname, modules, fired)
        for stream in pattern["streams"]:
            for entry in stream["lookups"].values():
                _receives(entry, by_impl)
        differs = {rel: {impl: n for impl, (n, _, _) in per.items()} for rel, per in by_impl.items()
                   if len({n for n, _, _ in per.values()}) > 1}
        if differs:
            pattern["fires_by_implementation"] = differs
        never = [rel for rel, per in by_impl.items() if rel and not any(n for n, _, _ in per.values())
                 and not isinstance(modules[rel], (nn.ModuleList, nn.ModuleDict))]
        if never:
            pattern["never_fire"] = never
        if sum(1 for c in calls[bname] if c.path == "") > 1:
            pattern["calls_per_forward"] = sum(1 for c in calls[bname] if c.path == "")
        key = json.dumps(_as_shown(pattern), sort_keys=True, default=str)
        if key not in keys:
            keys.append(key)
            patterns.append({**pattern, "blocks": []})
            first_of.append(bname)
        patterns[keys.index(key)]["blocks"].append(i)
        index_of[bname] = keys.index(key)
    _check_scalars(blocks, patterns, first_of, shapes, run)
    alike = {_signature(b): index_of[n] for n, b in blocks.items() if index_of.get(n) is not None}
    out: dict[str, Any] = {
        "blocks": len(s.names), "names": _template(s.path, s.names) or s.names, "measured": len(blocks),
        "implementations": list(fired), "not_measured": absent,
        "block_pattern": [index_of[n] if n in blocks else alike.get(_signature(model.get_submodule(n)))
                          for n in s.names],
        "patterns": patterns}
    if getattr(s, "inner_of", None):
        out["inner_of"] = s.inner_of
    if not patterns:
        out["why"] = "its blocks are not called in this forward"
    return out


def _as_shown(found: Any) -> Any:
    """A block's measurement with its coefficients as a sentence shows them: blocks built alike are one pattern
    though their scales, kept to 8 digits, differ in the last (the pattern keeps its first block's)."""
    if isinstance(found, dict):
        return {k: _shown(v) if k in _COEFFICIENTS and isinstance(v, float) else _as_shown(v) for k, v in found.items()}
    if isinstance(found, list):
        return [_as_shown(v) for v in found]
    return found


_COEFFICIENTS = ("scale", "base_scale", "scale_by_factor")


def _nested(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A lookup and the places within it (its ``sum``, the module inside a branch, experts, router)."""
    return [entry] + [v for k, v in entry.items() if k in ("inside", "experts", "router", "sum") and isinstance(v, dict)]


def _places_of(streams: list[dict[str, Any]]) -> list[Any]:
    """Where each term is (module, hook, take, what it adds to), in order: not the roles' names (the run with other
    scalars does not measure what each branch computes)."""
    return [(e.get("module"), e.get("hook"), e.get("take"), e.get("call")) for st in streams
            for e in st["lookups"].values()] + [st["identity"]["holds"] for st in streams]


def _streams_with(blocks: dict[str, nn.Module], first_of: list[str], shapes: dict[str, set], run: Callable[[], Any],
                  scalars: list[tuple[Any, str, float]]) -> dict[str, list[dict[str, Any]] | None]:
    """The first block of each pattern measured again (its streams, without the roles' probe) with ``scalars`` set
    to other values; raises where the model does not run so or its output is not finite."""
    with other_scalars(scalars):
        picked = {n: blocks[n] for n in first_of}
        with recording(picked, {n: shapes[n] for n in first_of}) as (calls, ops):
            value = main_tensor(run())
        if value is not None and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise FloatingPointError("not finite")
        again: dict[str, list[dict[str, Any]] | None] = {}
        for bname in first_of:
            found = first_call(calls[bname])
            again[bname] = None if found is None else \
                block_streams(*found, dict(blocks[bname].named_modules()), ops.seen)
    return again


def _scale(entry: dict[str, Any]) -> Any:
    return entry.get("scale", 1.0)


def _differ(a: Any, b: Any) -> bool:
    """Two coefficients differ: beyond a relative 1e-5 if both are numbers (kept to 8 digits, the same
    coefficient measured in two runs differs in the last), else unequal ("per channel", None)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) > 1e-5 * max(abs(a), abs(b))
    return a != b


def _moved(patterns: list[dict[str, Any]], first_of: list[str], follow: dict[int, list[tuple[int, str]]],
           again: dict[str, list[dict[str, Any]] | None]) -> dict[tuple[int, int, str], Any]:
    """The followed branches whose coefficient differs in ``again`` from the pattern's: (pattern, stream, role) ->
    the coefficient measured in ``again`` (a run whose places moved says nothing and counts as none moved)."""
    moved = {}
    for k, pairs in follow.items():
        other = again.get(first_of[k])
        if other is None or _places_of(other) != _places_of(patterns[k]["streams"]):
            continue
        for s, role in pairs:
            entries = list(patterns[k]["streams"][s]["lookups"].items())
            index = next(i for i, (r, _) in enumerate(entries) if r == role)
            got = list(other[s]["lookups"].values())[index]
            if _differ(_scale(got), _scale(entries[index][1])):
                moved[(k, s, role)] = _scale(got)
    return moved


def _culprits(scalars: list[tuple[Any, str, float]], measure: Callable[[list], dict]) -> list[tuple[tuple, dict]]:
    """The scalars that move a followed branch's coefficient on their own, each with what moved when it alone was
    changed: halves of the scalars changed in turn (a few runs for a config with many floats)."""
    found: list[tuple[tuple, dict]] = []

    def search(group: list) -> None:
        halves = [group[:len(group) // 2], group[len(group) // 2:]] if len(group) > 1 else [group]
        for half in halves:
            if not half:
                continue
            try:
                moved = measure(half)
            except Exception:  # noqa: BLE001 - a part of the scalars the model does not run with: not named
                continue
            if moved and len(half) == 1:
                found.append((half[0], moved))
            elif moved:
                search(half)
    search(list(scalars))
    return found


def _where_scalar(owner: Any, name: str, block: nn.Module) -> dict[str, Any]:
    """Where a scalar lives, for a reader: ``of`` the module of the block that holds it (its path in the block,
    ``""`` the block itself) or ``"config"``; ``config``: the config field of the same name and value it copies."""
    path = next((rel for rel, m in block.named_modules() if m is owner), None)
    if path is None:
        return {"of": "config"}
    configs = [getattr(m, "config", None) for m in block.modules()]
    same = any(c is not None and getattr(c, name, None) == getattr(owner, name) for c in configs)
    return {"of": path, **({"config": name} if same else {})}


def _shown(c: float) -> str:
    """A coefficient as a sentence gives it, to 4 significant digits (the data keep it as measured)."""
    return f"{c:.4g}"


def _term(factor: float | None, names: list[str]) -> str:
    """How a branch's coefficient reads: ``residual_multiplier``, ``0.7071 * scale_depth``, or a note that it
    depends on them (not in proportion)."""
    if factor is None:
        return f"f({', '.join(names)})"
    return " * ".join(([_shown(factor)] if factor != 1.0 else []) + names)


def _name_scalars(blocks: dict[str, nn.Module], patterns: list[dict[str, Any]], first_of: list[str],
                  shapes: dict[str, set], run: Callable[[], Any], scalars: list[tuple[Any, str, float]],
                  follow: dict[int, list[tuple[int, str]]]) -> None:
    """Which scalar each followed branch's coefficient is, found by changing the scalars alone (in halves), and
    whether it is in proportion to it: the branch's lookup gets ``scale_by`` and ``added``, and the identity its
    term (``block input + residual_multiplier * attention``): at a default of 1.0 the coefficient measured is 1,
    and the identity proved at the default alone would leave the multiplier out."""
    def measure(group: list) -> dict:
        return _moved(patterns, first_of, follow, _streams_with(blocks, first_of, shapes, run, group))
    named: dict[tuple[int, int, str], list[tuple[tuple, Any]]] = {}
    for scalar, moved in _culprits(scalars, measure):
        for key, coefficient in moved.items():
            named.setdefault(key, []).append((scalar, coefficient))
    for (k, s, role), found in named.items():
        stream = patterns[k]["streams"][s]
        entry = stream["lookups"][role]
        before = _scale(entry)
        if not isinstance(before, (int, float)):
            continue
        factor: float | None = float(before)
        for (_owner, _name, value), coefficient in found:  # c = factor * s1 * s2 ...: each moved in proportion
            changed = value * 1.37 if value else 0.37
            if not value or not isinstance(coefficient, (int, float)) or \
                    abs(coefficient * value - before * changed) > 2e-3 * abs(before * changed):
                factor = None
                break
            factor /= value
        names = [name for (_owner, name, _value), _ in found]
        term = _term(None if factor is None else float(_shown(factor)), names)
        block = blocks[first_of[k]]
        entry["scale_by"] = [{"scalar": name, **_where_scalar(owner, name, block), "value": value}
                             for (owner, name, value), _ in found]
        if factor is not None:
            entry["scale_by_factor"] = float(_shown(factor))
        entry["added"] = f"times {term} (the sum is input + {term} * this output)"
        old = "" if before == 1.0 else f"{_shown(before)} * "
        stream["identity"]["text"] = re.sub(rf"(?<=\+ ){re.escape(old)}{re.escape(role)}(?![\w])",
                                            f"{term} * {role}", stream["identity"]["text"], count=1)
        patterns[k]["scalars"].setdefault("scale_by", {})[role] = term


def _check_scalars(blocks: dict[str, nn.Module], patterns: list[dict[str, Any]], first_of: list[str],
                   shapes: dict[str, set], run: Callable[[], Any]) -> None:
    """The places proved again with the blocks' scalars (:func:`config_scalars`) set to other values: a place that
    held only at a default (a residual multiplier of 1.0) is caught. Each pattern gets ``scalars``: which were
    changed, whether its places still hold, and which branches' scale follows them (it changed with them); each
    such branch is told which scalar it is (:func:`_name_scalars`)."""
    scalars = config_scalars({n: blocks[n] for n in first_of})
    if not scalars or not patterns:
        return
    try:
        again = _streams_with(blocks, first_of, shapes, run, scalars)
        names = sorted({name for _, name, _ in scalars})
    except Exception as exc:  # noqa: BLE001 - recorded: proved at the defaults only
        for pattern in patterns:
            pattern["scalars"] = {"changed": [], "why": f"the model does not run with its scalars changed "
                                                        f"({type(exc).__name__})"}
        return
    follows: dict[int, list[tuple[int, str]]] = {}
    for k, (pattern, bname) in enumerate(zip(patterns, first_of)):
        other = again.get(bname)
        same = other is not None and _places_of(other) == _places_of(pattern["streams"])
        record: dict[str, Any] = {"changed": names[:16], "count": len(names), "places_hold": same}
        if same:
            follow = []
            for s, (st, st2) in enumerate(zip(pattern["streams"], other)):  # the same places in the same order
                for (role, entry), measured in zip(st["lookups"].items(), st2["lookups"].values()):
                    if _differ(_scale(entry), _scale(measured)) or \
                            _differ(entry.get("base_scale"), measured.get("base_scale")):
                        entry["scale_follows_scalars"] = True
                        follow.append(role)
                        if _differ(_scale(entry), _scale(measured)):
                            follows.setdefault(k, []).append((s, role))
            if follow:
                record["scale_follows"] = follow
        pattern["scalars"] = record
    if follows:
        _name_scalars(blocks, patterns, first_of, shapes, run, scalars, follows)


def _by_variant(bname: str, modules: dict[str, nn.Module], fired: dict[str, dict]
                ) -> dict[str, dict[str, tuple[int, str, str]]]:
    """module -> implementation -> (calls, what its pre-hook got, what its forward hook got)."""
    return {rel: {impl: table.get((bname, rel), (0, "", "")) for impl, table in fired.items()} for rel in modules}


def _receives(entry: dict[str, Any], by_impl: dict[str, dict[str, tuple[int, str, str]]]) -> None:
    """An entry's ``receives``: one kind, or one per implementation where they differ ('does not fire')."""
    for item in [entry] + [v for k, v in entry.items() if k in ("inside", "experts", "router", "sum") and isinstance(v, dict)]:
        module = item.get("module")
        if module is None or module not in by_impl or "hook" not in item:
            continue
        slot = 1 if item["hook"] == "forward_pre" else 2
        per = {impl: got[slot] if got[0] else "does not fire" for impl, got in by_impl[module].items()}
        kinds = set(per.values())
        item["receives"] = next(iter(kinds)) if len(kinds) == 1 else per
