"""The hook atlas as the course ships it: which container of each model holds its blocks, what a block's hook
receives, which hooks never fire, and one level down where each block's attention, MLP and residual stream are
(:func:`atlas`, read as ``course.atlas``; measured by ``python -m tools.atlas``)."""
from __future__ import annotations

from typing import Any


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
        raise ValueError(f"course.atlas: no atlas for {zoo!r}; the course ships {', '.join(found)}")
    return _Atlas(zoo, json.loads(folder.joinpath(f"{zoo}.json").read_text(encoding="utf-8"))["models"])


class _Atlas(dict):
    """One zoo's atlas (a dict); a missing model name raises a KeyError that names the close ones."""

    # what a zoo's model names are
    NAMED_BY = {"transformers": "model.config.model_type", "diffusers": "type(model).__name__",
                "timm": "the name given to timm.create_model", "torchvision": "the name of its builder (resnet18)"}

    def __init__(self, zoo: str, models: dict[str, Any]) -> None:
        super().__init__({name: _AtlasModel(zoo, name, entry) for name, entry in models.items()})
        self.zoo = zoo

    def __missing__(self, key: Any) -> Any:
        import difflib

        names = sorted(self)
        listing = f"sorted(course.atlas({self.zoo!r})) lists its {len(names)} model names"
        named_by = self.NAMED_BY.get(self.zoo)
        listing += f"; a model's name here is {named_by}" if named_by else ""
        if not isinstance(key, str):
            raise _AtlasKeyError(f"course.atlas({self.zoo!r}) is keyed by model name, a str, got "
                                 f"{type(key).__name__} {key!r}. {listing}")
        folded = {n.casefold(): n for n in names}
        same = [n for n in names if n.casefold() == key.casefold()]
        close = same + [folded[n] for n in difflib.get_close_matches(key.casefold(), list(folded), n=5, cutoff=0.6)
                        if folded[n] not in same]
        hint = f": did you mean {', '.join(map(repr, close[:5]))}?" if close else "."
        raise _AtlasKeyError(f"course.atlas({self.zoo!r}) has no model {key!r}"
                             f"{' (names are case-sensitive)' if same else ''}{hint} {listing}")


class _AtlasModel(dict):
    """One model of the atlas (a dict: its fields as the JSON file has them) that also answers where a hook gets a
    part of block ``i``: :meth:`where`."""

    ALIASES = {"attn": "attention", "self_attention": "attention", "ffn": "mlp", "feed_forward": "mlp", "moe": "mlp",
               "residual": "residual_after_mlp"}

    def __init__(self, zoo: str, name: str, entry: dict[str, Any]) -> None:
        super().__init__(entry)
        self.zoo, self.name = zoo, name

    def where(self, block: int, what: str | None = None, *, stack: str | None = None,
              stream: str | None = None) -> Any:
        """Where a forward hook gets ``what`` of block ``block`` (its index in the stack), measured by running the
        model (``python -m tools.atlas``; the block's residual identity, block output = block input + attention +
        mlp, proves each place): ``"attention"``, ``"cross_attention"``, ``"mlp"``, ``"experts"``, ``"router"``,
        ``"mixer"``, ``"branch"`` (a ResNet block's convolutions), ``"shortcut"`` (where the block changes the shape:
        the module whose output its first branch adds to, a downsample or a stage's first block),
        ``"residual_after_attention"``, ``"residual_after_mlp"`` (the residual stream after each), ``"input"``;
        ``what=None`` gives them all. ``stack``: another block stack
        (default: the main one the forward runs); ``stream``: a block's second stream (SD3's joint blocks:
        ``"encoder_hidden_states"``). A place is a dict: ``module`` (the full name to ``get_submodule``, or None
        where no tensor holds it: then ``compute`` says how), ``hook`` (``forward`` or ``forward_pre``), ``take``
        (where in the hook's output or arguments), ``receives`` (what the hook's output is, per attention
        implementation where they differ), and notes. A model or block the atlas cannot answer for raises a
        ``LookupError`` that says why.
        """
        pattern, name, note = self._block(block, stack)
        streams = pattern["streams"]
        chosen = streams[0] if stream is None else next((s for s in streams if stream in str(s["input"])), None)
        if chosen is None:
            raise LookupError(f"{self._label(stack)} block {block} has no stream {stream!r}; its streams start at "
                              f"{', '.join(str(s['input']) for s in streams)}")
        if not chosen["identity"]["holds"]:
            raise LookupError(f"{self._label(stack)} block {block} ({name}): no lookups inside it, because "
                              f"{chosen['identity']['why']}")
        found = chosen["lookups"]
        if what is None:
            return {role: _AtlasPlace(name, place, note, chosen["identity"]["text"]) for role, place in found.items()}
        key = self.ALIASES.get(what, what)
        nested = {k: v[k] for v in found.values() for k in ("experts", "router") if isinstance(v.get(k), dict)}
        if key not in found and key not in nested:
            raise _AtlasKeyError(f"{self._label(stack)} block {block} has no {what!r}: it has "
                           f"{', '.join(sorted(found) + sorted(nested))} ({chosen['identity']['text']})")
        return _AtlasPlace(name, found.get(key) or nested[key], note, chosen["identity"]["text"])

    def _label(self, stack: str | None) -> str:
        return f"course.atlas({self.zoo!r})[{self.name!r}]" + (f" (stack {stack!r})" if stack else "")

    def _block(self, block: int, stack: str | None) -> tuple[dict[str, Any], str, str | None]:
        """The measured pattern of block ``block``, its name, and a note where it is taken from the blocks alike."""
        inside = self.get("inside")
        if not inside:
            status = self.get("status")
            why = f"it was not built ({self.get('reason')})" if status == "not built" else \
                f"it was not run ({self.get('not_run', 'too large to run here')}): the atlas has its structure only" \
                if status == "structure only" else "hooklab.find_blocks finds no block stack in it" \
                if inside == {} else self.get("inside_why") or "its blocks were not measured inside"
            raise LookupError(f"{self._label(None)} has no lookups inside its blocks: {why}")
        if stack is None:
            ran = [p for p in inside if inside[p].get("patterns")]
            stack = next((s["path"] for s in self.get("stacks", []) if s["path"] in ran), ran[0] if ran else None)
        if stack not in inside:
            raise _AtlasKeyError(f"{self._label(None)} has no block stack {stack!r}; measured: "
                                 f"{', '.join(sorted(inside))}")
        found = inside[stack]
        if found.get("why"):
            raise LookupError(f"{self._label(stack)}: {found['why']}")
        if not isinstance(block, int) or block < 0:
            raise TypeError(f"block is the index of a block in its stack (0, 1, ...), got {block!r}")
        count, of = found["blocks"], found["block_pattern"]
        template = found["names"] if isinstance(found["names"], str) else None
        if block < count:
            if of[block] is None:
                raise LookupError(f"{self._label(stack)} block {block} was not measured, and is built like none of "
                                  f"the blocks that were")
            name = template.format(i=block) if template else found["names"][block]
            return found["patterns"][of[block]], name, None
        kinds = set(of)
        if template is None or len(kinds) != 1 or None in kinds:
            raise LookupError(f"{self._label(stack)}: the atlas built {self.name} small, with {count} blocks in "
                              f"{stack}, not all built alike; which kind block {block} of a larger one is depends on "
                              f"its config (its layer types): ask for a block of the same kind below {count}")
        note = (f"the atlas built {self.name} small, with {count} blocks in {stack}, all built alike: block {block} "
                f"of a larger {self.name} is taken to be built the same")
        return found["patterns"][kinds.pop()], template.format(i=block), note


class _AtlasPlace(dict):
    """Where a hook gets one part of a block (a dict); prints as one line."""

    NESTED = ("inside", "experts", "router", "sum")  # places within a place (the module in a branch, ...)

    def __init__(self, block: str, place: dict[str, Any], note: str | None, identity: str) -> None:
        def full(rel: Any) -> Any:
            return None if rel is None else f"{block}.{rel}" if rel else block
        found = {k: ({**v, "module": full(v.get("module"))} if k in self.NESTED and isinstance(v, dict) else v)
                 for k, v in place.items()}
        found["module"] = full(place.get("module"))
        found["identity"] = identity
        if note:
            found["note"] = f"{found['note']}; {note}" if found.get("note") else note
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
        return text + (f" ({self['note']})" if self.get("note") else "")


class _AtlasKeyError(KeyError):
    """A KeyError whose message prints as text (KeyError prints the repr of its argument)."""

    def __str__(self) -> str:
        return str(self.args[0])
