"""The hook atlas as the course ships it: which container of each model holds its blocks, what a block's hook
receives, which hooks never fire, and one level down where each block's attention, MLP and residual stream are
(:func:`atlas`, read as ``course.atlas``; measured by ``python -m tools.atlas``)."""
from __future__ import annotations

from typing import Any, cast


def atlas(zoo: str = "transformers") -> dict[str, Any]:
    """The hook atlas of one zoo as the course ships it (``hooklab/course/assets/atlas/<zoo>.json``, measured by
    ``python -m tools.atlas``): model name -> what running it showed (its block stacks, what a block's forward hook
    receives, the modules whose hooks never fire and why, ``generate``, gradient checkpointing, and ``inside``: where
    the attention, the MLP and the residual stream are inside each block, read with ``where``). ``zoo``:
    ``"transformers"``, ``"diffusers"``, ``"timm"`` or ``"torchvision"``. Notebook 15, section 9, reads it.
    A model name the atlas lacks (a typo, another case) raises a ``KeyError`` naming the close ones;
    ``sorted(course.atlas(zoo))`` lists them all.

    >>> from hooklab import course
    >>> llama = course.atlas("transformers")["llama"]
    >>> llama["stacks"][0]["path"], llama["block_calls"]["model.layers"]["hidden_states"]
    ('model.layers', 'args[0]')
    >>> try:
    ...     course.atlas("transformers")["Llama"]
    ... except KeyError as error:
    ...     print(error)
    course.atlas('transformers') has no model 'Llama' (names are case-sensitive): did you mean 'llama', ...

    One level down, ``where(block, what)`` says where a hook gets a part of a block: the attention output, the MLP
    (or experts') output, the residual stream after each (each place proved by the block's residual identity, found
    by running the model: ``python -m tools.atlas``).

    >>> place = llama.where(3, "attention")
    >>> place["module"], place["hook"], place["take"]
    ('model.layers.3.self_attn', 'forward', 'output[0]')
    >>> place["receives"]
    {'eager': 'tuple[Tensor, Tensor]', 'sdpa': 'tuple[Tensor, None]'}
    >>> print(llama.where(3, "residual_after_attention"))
    model.layers.3.post_attention_layernorm: a forward pre-hook, take args[0] (the atlas built llama small, ...)
    >>> print(course.atlas("transformers")["gpt_neox"].where(0, "residual_after_attention"))
    not a tensor any hook sees: compute block input + attention output (a parallel block: ...)
    >>> try:
    ...     course.atlas("timm")["vit_base_patch16_224"].where(0, "attention")
    ... except LookupError as error:
    ...     print(error)
    course.atlas('timm')['vit_base_patch16_224'] has no lookups inside its blocks: it was not run (too large ...
    """
    import json
    from importlib import resources

    folder = resources.files("hooklab.course") / "assets" / "atlas"
    found = sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))
    if zoo not in found:
        raise ValueError(f"course.atlas: no atlas for {_shown(zoo)}; the course ships {', '.join(found)}")
    data = json.loads(folder.joinpath(f"{zoo}.json").read_text(encoding="utf-8"))
    atlas = _Atlas(zoo, data["models"])
    atlas.place_kinds = data.get("place_kinds", {})  # kind of place -> {"en": ..., "zh": ...}: one line each
    return atlas


class _Atlas(dict):
    """One zoo's atlas (a dict); a missing model name raises a KeyError that names the close ones."""

    # what a zoo's model names are
    NAMED_BY = {"transformers": "model.config.model_type", "diffusers": "type(model).__name__",
                "timm": "the name given to timm.create_model", "torchvision": "the name of its builder (resnet18)"}

    place_kinds: dict[str, dict[str, str]]

    def __init__(self, zoo: str, models: dict[str, Any]) -> None:
        super().__init__({name: _AtlasModel(zoo, name, entry) for name, entry in models.items()})
        self.zoo = zoo
        self.place_kinds: dict[str, dict[str, str]] = {}

    def __missing__(self, key: Any) -> Any:
        import difflib

        names = sorted(self)
        listing = f"sorted(course.atlas({self.zoo!r})) lists its {len(names)} model names"
        named_by = self.NAMED_BY.get(self.zoo)
        listing += f"; a model's name here is {named_by}" if named_by else ""
        if not isinstance(key, str):
            raise _AtlasKeyError(f"course.atlas({self.zoo!r}) is keyed by model name, a str, got "
                                 f"{type(key).__name__} {_shown(key)}. {listing}")
        folded = {n.casefold(): n for n in names}
        same = [n for n in names if n.casefold() == key.casefold()]
        close = same + [folded[n] for n in difflib.get_close_matches(key.casefold(), list(folded), n=5, cutoff=0.6)
                        if folded[n] not in same]
        hint = f": did you mean {', '.join(map(repr, close[:5]))}?" if close else "."
        raise _AtlasKeyError(f"course.atlas({self.zoo!r}) has no model {_shown(key)}"
                             f"{' (names are case-sensitive)' if same else ''}{hint} {listing}")


def _shown(value: Any) -> str:
    """A value a caller passed, as an error message shows it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _block_index(block: Any) -> int:
    """``block`` as a block index, or a TypeError / ValueError that says what is wanted (a bool is no index)."""
    import operator

    if isinstance(block, bool) or not hasattr(type(block), "__index__"):
        raise TypeError(f"block is the index of a block in its stack (0, 1, ...), an int, got "
                        f"{type(block).__name__} {_shown(block)}")
    index = operator.index(block)
    if index < 0:  # the atlas built the model small: its last block is not the last block of yours
        raise ValueError(f"block is counted from 0, got {index}: negative indices are refused because the atlas "
                         f"built the model small, so its last block is not your model's; pass your model's index "
                         f"(the last is your config's number of layers - 1)")
    return index


def _name_arg(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"{what} is a non-empty str or None, got {type(value).__name__} {_shown(value)}")
    return value


class _AtlasModel(dict):
    """One model of the atlas (a dict: its fields as the JSON file has them) that also answers where a hook gets a
    part of block ``i``: :meth:`where`."""

    ALIASES = {"attn": "attention", "self_attention": "attention", "ffn": "mlp", "feed_forward": "mlp", "moe": "mlp",
               "conv": "branch", "transformer_block": "transformer"}

    def __init__(self, zoo: str, name: str, entry: dict[str, Any]) -> None:
        super().__init__(entry)
        self.zoo, self.name = zoo, name

    def where(self, block: int, what: str | None = None, *, stack: str | None = None,
              stream: str | None = None) -> Any:
        """Where a forward hook gets ``what`` of block ``block``, measured by running the model
        (``python -m tools.atlas``; the block's residual identity, block output = block input + attention + mlp,
        proves each place, and each part is named by what it computes: perturbing its input at one position
        changes its output at others for ``"attention"`` (an attention op ran) and ``"branch"`` (a convolution),
        not for the position-wise ``"mlp"``): ``"attention"``, ``"cross_attention"``, ``"mlp"``, ``"experts"``,
        ``"router"``, ``"mixer"`` (a state-space mixer), ``"branch"`` (a ResNet block's convolutions),
        ``"transformer"`` (a whole transformer block inside a UNet's block: its attention and feed-forward are
        asked for with ``stack=`` its ``inner_stack``), ``"shortcut"`` (where the block changes the shape: the
        module whose output a branch adds to, a downsample; or, after sums of the block's own, a patch merging),
        ``"residual_before_attention"`` (where the first part adds to a stream made inside the block, not to its
        input: MiniMax's normalized input), ``"residual_after_attention"``, ``"residual_after_mlp"``, ... (the
        residual stream after each part), ``"residual"`` (the stream after the block: its last
        ``residual_after_*``, on a convolution net too), ``"input"``; ``what=None`` gives them all.

        ``block`` counts the blocks in the order the forward runs them: without ``stack``, across the model's
        top-level stacks in the order the input meets them (resnet50: blocks 0-2 are ``layer1``, 3-6 ``layer2``
        ...); the place says which (``stack``, and ``block`` within it). A model with one stack of blocks built
        alike answers for blocks beyond the small model the atlas built (``block`` 40 of Llama). A negative index
        is refused (the atlas built the model small: its last block is not yours), so is a bool or a float.
        ``stack``: one stack (its path; inner stacks too: ``up_blocks.1.attentions``); ``stream``: a block's
        second stream (SD3's joint blocks: ``"encoder_hidden_states"``). A place is a dict: ``module`` (the full
        name to ``get_submodule``, or None where no tensor holds it: then ``compute`` says how), ``hook``
        (``forward`` or ``forward_pre``), ``take`` (where in the hook's output or arguments), ``receives`` (what
        the hook's output is, per attention implementation where they differ), ``clone`` (True where a later
        in-place op of the same forward changes the tensor: keep ``.clone()`` of it), ``computes`` (what the
        measurement showed), ``added`` (a branch added times a number, a gate, or a scalar of the model:
        ``scale_by`` says which and where your model holds it, as the identity does: Granite's ``block input +
        residual_multiplier * attention + residual_multiplier * mlp``), and notes. A model or block the atlas
        cannot answer for raises a ``LookupError`` that says why, and names the stacks that answer where there
        are some.
        """
        block = _block_index(block)
        if what is not None and not isinstance(what, str):
            raise TypeError(f"what is a str (attention, mlp, residual, ...) or None, got {type(what).__name__} "
                            f"{_shown(what)}")
        stack, stream = _name_arg(stack, "stack"), _name_arg(stream, "stream")
        pattern, name, note, where = self._block(block, stack)
        if stack is None and where[1] != block:  # counted across the stacks, in the order they run
            extra = f"block {block} in the order the blocks run is block {where[1]} of stack {where[0]!r}"
            note = f"{note}; {extra}" if note else extra
        streams = pattern["streams"]
        chosen = streams[0] if stream is None else next((s for s in streams if s["input"] is not None and (
            stream == s["input"] or f"'{stream}'" in s["input"])), None)
        if chosen is None:
            raise LookupError(f"{self._label(where)} block {where[1]} has no stream {_shown(stream)}; its streams "
                              f"start at {', '.join(str(s['input']) for s in streams)}")
        if not chosen["identity"]["holds"]:
            raise LookupError(f"{self._label(where)} block {where[1]} ({name}): no lookups inside it, because "
                              f"{chosen['identity']['why']}{self._answering(where[0])}")
        found = chosen["lookups"]
        scalars = pattern.get("scalars") or {}
        if scalars.get("places_hold") is False:
            extra = (f"these places were proved with the block's scalars at their defaults only: with "
                     f"{', '.join(scalars['changed'][:5])} changed they moved")
            note = f"{note}; {extra}" if note else extra
        if what is None:
            return {role: _AtlasPlace(name, place, note, chosen["identity"]["text"], where)
                    for role, place in found.items()}
        residuals = [k for k in found if k.startswith("residual_after_")]
        key = residuals[-1] if what == "residual" and residuals else self.ALIASES.get(what, what)
        nested = {k: v[k] for v in found.values() for k in ("experts", "router") if isinstance(v.get(k), dict)}
        if key not in found and key not in nested:
            inner = [f"its {role} holds blocks of its own: ask where(0, {what!r}, stack="
                     f"{name + '.' + place['blocks_inside']!r})" for role, place in found.items()
                     if place.get("blocks_inside")]
            raise _AtlasKeyError(f"{self._label(where)} block {where[1]} has no {_shown(what)}: it has "
                                 f"{', '.join(sorted(found) + sorted(nested))} ({chosen['identity']['text']})"
                                 + (f"; {inner[0]}" if inner else ""))
        return _AtlasPlace(name, found.get(key) or nested[key], note, chosen["identity"]["text"], where)

    def _label(self, where: tuple[str, int] | str | None) -> str:
        stack = where[0] if isinstance(where, tuple) else where
        return f"course.atlas({self.zoo!r})[{self.name!r}]" + (f" (stack {stack!r})" if stack else "")

    def _answering(self, but: str | None = None) -> str:
        """``; stacks that answer: ...`` (those with a block whose identity holds), or nothing."""
        inside = self.get("inside") or {}
        answer = [path for path, st in inside.items() if path != but and any(
            s["identity"]["holds"] for p in st.get("patterns", []) for s in p["streams"])]
        answer.sort(key=lambda p: (not (but and p.startswith(but + ".")), p))  # the stacks inside this one first
        if not answer:
            return ""
        shown = ", ".join(repr(p) for p in answer[:8]) + (f" and {len(answer) - 8} more" if len(answer) > 8 else "")
        return f". Stacks whose blocks answer: {shown} (ask with stack=..., e.g. where(0, stack={answer[0]!r}))"

    def _chain(self) -> list[str]:
        """The top-level stacks in the order the forward first runs them (the atlas measured the order), else
        the main one alone (the largest that ran)."""
        inside = self["inside"]
        ran = [p for p in inside if inside[p].get("patterns")]
        top = [p for p in ran if not inside[p].get("inner_of") and not any(
            p.startswith(q + ".") for q in inside if q != p)]
        ordered = sorted((p for p in top if isinstance(inside[p].get("order"), int)), key=lambda p: inside[p]["order"])
        if ordered:
            return ordered
        main = next((s["path"] for s in self.get("stacks", []) if s["path"] in ran), ran[0] if ran else None)
        return [main] if main is not None else []

    def _block(self, block: int, stack: str | None) -> tuple[dict[str, Any], str, str | None, tuple[str, int]]:
        """The measured pattern of block ``block``, its name, a note where it is taken from the blocks alike, and
        (the stack, the block's index in it)."""
        inside = self.get("inside")
        if not inside:
            status = self.get("status")
            why = f"it was not built ({self.get('reason')})" if status == "not built" else \
                f"it was not run ({self.get('not_run', 'too large to run here')}): the atlas has its structure only" \
                if status == "structure only" else "hooklab.find_blocks finds no block stack in it" \
                if inside == {} else self.get("inside_why") or "its blocks were not measured inside"
            raise LookupError(f"{self._label(None)} has no lookups inside its blocks: {why}")
        chain = [stack] if stack is not None else self._chain()
        if stack is not None and stack not in inside:
            raise _AtlasKeyError(f"{self._label(None)} has no block stack {_shown(stack)}; measured: "
                                 f"{', '.join(sorted(inside))}")
        if not chain:
            raise LookupError(f"{self._label(None)}: its blocks are not called in this forward")
        local = block
        for path in chain[:-1]:  # blocks counted across the stacks, in the order they run
            if local < inside[path]["blocks"]:
                break
            local -= inside[path]["blocks"]
        else:
            path = chain[-1]
        found = inside[path]
        if found.get("why"):
            raise LookupError(f"{self._label(path)}: {found['why']}{self._answering(path)}")
        count, of = found["blocks"], found["block_pattern"]
        template = found["names"] if isinstance(found["names"], str) else None
        if local < count:
            if of[local] is None:
                raise LookupError(f"{self._label(path)} block {local} was not measured, and is built like none of "
                                  f"the blocks that were")
            name = template.format(i=local) if template else found["names"][local]
            return found["patterns"][of[local]], name, None, (path, local)
        total = sum(inside[p]["blocks"] for p in chain)
        if len(chain) > 1:
            runs = ", ".join(f"{p} ({inside[p]['blocks']})" for p in chain)
            raise LookupError(f"{self._label(None)}: the atlas built {self.name} small; its blocks run in "
                              f"{runs}, {total} in all, so "
                              f"block {block} is past them: ask for a block of one stack with stack=...")
        kinds = set(of)
        if template is None or len(kinds) != 1 or None in kinds:
            raise LookupError(f"{self._label(path)}: the atlas built {self.name} small, with {count} blocks in "
                              f"{path}, not all built alike; which kind block {local} of a larger one is depends on "
                              f"its config (its layer types): ask for a block of the same kind below {count}")
        note = (f"the atlas built {self.name} small, with {count} blocks in {path}, all built alike: block {local} "
                f"of a larger {self.name} is taken to be built the same")
        return found["patterns"][kinds.pop()], template.format(i=local), note, (path, local)


class _AtlasPlace(dict):
    """Where a hook gets one part of a block (a dict); prints as one line."""

    NESTED = ("inside", "experts", "router", "sum")  # places within a place (the module in a branch, ...)

    def __init__(self, block: str, place: dict[str, Any], note: str | None, identity: str,
                 where: tuple[str, int] | None = None) -> None:
        def full(rel: Any) -> Any:
            return None if rel is None else f"{block}.{rel}" if rel else block
        found = {k: ({**v, "module": full(v.get("module"))} if k in self.NESTED and isinstance(v, dict) else v)
                 for k, v in place.items()}
        found["module"] = full(place.get("module"))
        found["identity"] = identity
        if where is not None:
            found["stack"], found["block"] = where
        notes: list[str | None] = [cast("str | None", found.get("note"))]
        if isinstance(place.get("sum"), dict) and place["sum"].get("clone"):  # ReLU(inplace=True) after the sum
            notes.append("clone the sum in its hook: a later in-place op of the forward changes it")
        if place.get("blocks_inside"):
            found["inner_stack"] = f"{block}.{place['blocks_inside']}"
            found.pop("blocks_inside", None)
            notes.append(f"a whole transformer block (attention, feed-forward ...): its parts are asked for with "
                         f"where(j, 'attention', stack={found['inner_stack']!r})")
        if place.get("scale_by"):  # the scalars the branch's coefficient is: where your model holds them
            found["scale_by"] = [{**s, "of": full(s["of"]) if s["of"] != "config" else "config"}
                                 for s in place["scale_by"]]
            held = ", ".join(f"{s['scalar']} is " + (f"config.{s['scalar']}" if s["of"] == "config" else
                                                     f"`{s['of']}.{s['scalar']}`" + (
                                                         f" (from config.{s['config']})" if s.get("config") else ""))
                             + f", {s['value']:g} in the model the atlas built" for s in found["scale_by"])
            notes.append(f"{held}: read your model's value")
        elif place.get("scale_follows_scalars"):
            notes.append("this scale follows a scalar of the block or its config (it changed when they were "
                         "changed): read your model's value")
        notes.append(note)
        if any(notes):
            found["note"] = "; ".join(n for n in notes if n)
        super().__init__(found)

    def __str__(self) -> str:
        if self["module"] is None:
            text = f"not a tensor any hook sees: compute {self['compute']}"
        else:
            hook = "forward hook" if self["hook"] == "forward" else "forward pre-hook"
            text = f"{self['module']}: a {hook}, take {self.get('take', 'output')}"
            if self.get("call"):
                text += f" (at its call {self['call']} in the block)"
            got = self.get("receives")
            if isinstance(got, dict):
                got = ", ".join(f"{kind} under {impl}" for impl, kind in got.items())
            if got and self["hook"] == "forward":
                text += f"; the hook's output is {got}"
            if self.get("flattened"):
                text += " (flattened to (batch * tokens, channels): view it in the block's shape)"
            if self.get("added"):
                text += f"; added {self['added']}"
            if self.get("clone"):
                text += "; clone it in the hook (a later in-place op of the forward changes this tensor)"
        return text + (f" ({self['note']})" if self.get("note") else "")


class _AtlasKeyError(KeyError):
    """A KeyError whose message prints as text (KeyError prints the repr of its argument)."""

    def __str__(self) -> str:
        return str(self.args[0])
