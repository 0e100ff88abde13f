"""The library profiles as the course ships them: what a library does to a model's hooks, measured by running it
(``hooklab/course/assets/profiles/library_profiles.json``, written by ``python -m tools.profiles``), opening with
the summary of its library's rows in the library matrix (``library_rows.json`` beside it, made from
``docs/library_matrix.json``): which of its operations change what a hook of yours does, the worst first.

:func:`profile` returns one library's record; printing it gives a short reading in the course's language (which
hooks the library puts on the model, when they run against yours, what survives a copy, a state dict, compiling and
checkpointing, how to take them off). Notebook 15, section 10, reads one.

>>> from hooklab import course
>>> record = course.profile("accelerate")
>>> record["status"], record["measured"]["probe"]["survives"]["deepcopy"].endswith("kept")
('measured', True)
>>> worst = record["library_matrix"]["operations"][0]
>>> worst["name"], len(worst["before"]), worst["fixed"] == worst["before"]
('Accelerator.backward', 11, True)
"""
from __future__ import annotations

import difflib
import json
import re
from functools import cache
from importlib import resources
from typing import Any

from .lang import LANGS, course_language

__all__ = ["aliases", "names", "profile", "profiles"]

LABELS = {
    "en": {"installs": "puts on the model", "during": "while it runs", "order": "one step, in firing order",
           "survives": "survives", "removed": "its own removal", "source": "read from its source, not run: ",
           "nothing": "nothing", "remove": "to take it off", "api": "its own API", "surprises": "unexpected",
           "swapped": "modules it replaced", "yours": "your hooks registered before it",
           "rows": "its operations that change what a hook of yours does ({changing} of {observed} observed, the worst "
                   "first; of {families} kinds of hook: how many behave otherwise registered before it, after it, "
                   "fixed by registering after it; the differences seen most)",
           "row": "  {name}: {before} before, {after} after, {fixed} fixed by registering after; {most}",
           "more": "  … and {n} more: course.profile({slug!r})[\"library_matrix\"][\"operations\"]",
           "same": "operations that change no hook: {names}"},
    "zh": {"installs": "装到模型上的", "during": "运行期间", "order": "一步之内，按触发顺序", "survives": "能否保留",
           "removed": "用它自己的方法移除后", "source": "读源码得来，未运行：", "nothing": "没有",
           "remove": "如何移除", "api": "它自己的接口", "surprises": "出人意料之处",
           "swapped": "它换掉的模块", "yours": "你在它之前注册的钩子",
           "rows": "会改变你的钩子行为的操作（观察过的 {observed} 个中有 {changing} 个，最严重的在前；{families} 种钩子中："
                   "在它之前注册后行为不同的、在它之后注册仍不同的、改在它之后注册就修好的各有几种；最常见的不同）",
           "row": "  {name}：之前 {before} 种，之后 {after} 种，改在之后注册修好 {fixed} 种；{most}",
           "more": "  …… 还有 {n} 个：course.profile({slug!r})[\"library_matrix\"][\"operations\"]",
           "same": "不改变任何钩子的操作：{names}"},
}


# How many operations a printed profile lists; the record holds them all
SHOWN = 5


@cache
def _all() -> dict[str, Any]:
    folder = resources.files("hooklab.course") / "assets" / "profiles"
    found = json.loads((folder / "library_profiles.json").read_text(encoding="utf-8"))["libraries"]
    rows = json.loads((folder / "library_rows.json").read_text(encoding="utf-8"))
    for slug, row in rows["libraries"].items():
        found[slug]["library_matrix"] = {**row, "families": rows["families"]}
    return found


def profiles() -> list[str]:
    """The slugs of every library profile the course ships, in order."""
    return list(_all())


# Names users type that no profile's data holds (the data gives the rest: see :func:`names`)
ALIASES = {"pyg": "torch_geometric", "lightning": "lightning", "pl": "lightning", "tl": "transformer_lens",
           "ds": "deepspeed", "hf accelerate": "accelerate", "huggingface accelerate": "accelerate"}
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_NOT_IMPORTS = frozenset({"torch", "model", "nn", "self", "module"})


def _key(name: str) -> str:
    """A name as compared: any case, ``-`` / ``_`` / spaces alike (pytorch_lightning, PyTorch-Lightning), no ``()``."""
    return re.sub(r"[-_\s]+", "", name.strip().removesuffix("()").casefold())


def _api_name(name: str) -> bool:
    """A name of the library's API rather than a word: snake_case, dotted or CamelCase (``cpu_offload``,
    ``AveragedModel``, ``YOLO``), not private; a plain word (``Trainer``, ``summary``) names no one library."""
    return not name.startswith("_") and ("_" in name or "." in name or any(c.isupper() for c in name[1:]))


def _names_of(slug: str, record: dict[str, Any]) -> list[list[str]]:
    """A profile's names, most specific first: its slug, PyPI name and title; the parts of its title, the modules
    its entry imports; the API names its facts name."""
    title_parts = [part.strip() for part in re.split(r"[()/]", record["title"])
                   if re.search(r"[._A-Z0-9]", part.strip())]  # FSDP2, AveragedModel, fully_shard; not "prepare"
    title_parts += [re.sub(r"\d+$", "", part) for part in title_parts if re.fullmatch(r"[A-Z]+\d+", part)]  # FSDP2
    imports: list[str] = []
    for dotted in _DOTTED.findall(record["entry"]):
        parts = dotted.split(".")
        # accelerate, bnb, pytorch_lightning: a module path, or the first part of the library's own name (thop);
        # not a variable of the example (trainer.train())
        if parts[0] not in _NOT_IMPORTS and (len(parts) > 2 or _key(parts[0]) in _key(record["name"] + slug)):
            imports.append(parts[0])
        if parts[0] == "torch" and len(parts) > 2:
            imports.append(".".join(parts[:-1]))  # torch.optim.swa_utils, torch.ao.quantization
    return [[slug, record["name"], record["title"]],
            [p for p in title_parts if " " not in p or p.startswith("torch")] + imports,
            [n for n in record["names"] if _api_name(n)]]


@cache
def names() -> dict[str, tuple[str, ...]]:
    """Every name :func:`profile` knows (compared as :func:`_key` does) and the slugs it names: one, or several
    when the name is shared at its level (``FSDP``: FSDP1 and FSDP2). A name of a more specific level (a slug, a
    title) wins over a less specific one (an API name two libraries share)."""
    found: dict[str, tuple[int, list[str]]] = {}
    for slug, record in _all().items():
        for level, group in enumerate(_names_of(slug, record)):
            for name in group:
                key = _key(name)
                if not key:
                    continue
                held = found.get(key)
                if held is None or level < held[0]:
                    found[key] = (level, [slug])
                elif level == held[0] and slug not in held[1]:
                    held[1].append(slug)
    for alias, slug in ALIASES.items():
        found.setdefault(_key(alias), (0, [slug]))
    return {key: tuple(slugs) for key, (_, slugs) in found.items()}


def aliases(slug: str) -> list[str]:
    """The names a user may type for one profile beyond its API's, as written (its import names, its title's parts,
    the short list's aliases) that name it alone: ``course.ask`` indexes them."""
    record = _all()[slug]
    typed = _names_of(slug, record)[1] + [alias for alias, to in ALIASES.items() if to == slug]
    own = [name for name in typed if names().get(_key(name)) == (slug,)]
    joined = [re.sub(r"[-_]", "", name) for name in own + [record["name"]]
              if "." not in name and re.search(r"[a-z][-_][a-z]", name)]
    return list(dict.fromkeys(own + joined))  # transformer-lens, also as typed together: transformerlens


def profile(name: str, *, lang: str | None = None) -> Profile:
    """The profile of library ``name``, under any name a user types: its slug, PyPI name or title, its import name
    (``pytorch_lightning``, ``bnb``, ``torch.ao.quantization``), a class or function of its API (``fully_shard``,
    ``AveragedModel``, ``cpu_offload``), any case; an unknown name raises a ``LookupError`` naming the close ones,
    a name two profiles share one naming both.

    >>> from hooklab import course
    >>> course.profile("fully_shard")["slug"], course.profile("bnb")["slug"], course.profile("TransformerLens")["slug"]
    ('fsdp2', 'bitsandbytes', 'transformer_lens')
    """
    if not isinstance(name, str):
        raise TypeError(f"course.profile takes a library's name, a str, got {type(name).__name__}")
    if len(name) > 200:
        raise ValueError(f"course.profile takes a library's name, got {len(name):,} characters")
    chosen = _checked_lang(lang)
    found = _all()
    slugs = names().get(_key(name), ())
    if len(slugs) == 1:
        return Profile(found[slugs[0]], lang=chosen)
    if slugs:
        which = ", ".join(f"course.profile({s!r}) for {found[s]['title']}" for s in slugs)
        raise LookupError(f"course.profile: {name!r} names {len(slugs)} profiles: {which}")
    close = difflib.get_close_matches(_key(name), list(names()), n=4, cutoff=0.6)
    hint = (f": did you mean {', '.join(dict.fromkeys(repr(names()[c][0]) for c in close))}?" if close else ".")
    raise LookupError(f"course.profile: no profile of {name[:60]!r}{hint} course.profiles() lists all {len(found)}")


def _checked_lang(lang: object) -> str | None:
    if lang is None or (isinstance(lang, str) and lang in LANGS):
        return lang
    shown = repr(lang[:20]) if isinstance(lang, str) else type(lang).__name__
    raise ValueError(f"course.profile: lang is one of {', '.join(map(repr, LANGS))} (or None: the course's setting), "
                     f"got {shown}")


class Profile(dict):
    """One library's profile (a dict, as in the JSON file); ``str()`` reads it in the learner's language: the
    ``lang`` it was asked in, else the course's setting (:func:`course_language`)."""

    def __init__(self, record: dict[str, Any], *, lang: str | None = None) -> None:
        super().__init__(record)
        self.lang = lang

    def __str__(self) -> str:
        lang = self.lang or course_language()
        if lang != "both":
            return self.reading(lang)
        # two blocks under the headers a one-language copy of a notebook splits on (hooklab.course.export)
        return f"—— 中文 ——\n{self.reading('zh')}\n\n—— English ——\n{self.reading('en')}"

    def reading(self, lang: str) -> str:
        label, words = LABELS[lang], self["words"][lang]
        lines = [f"{self['title']} — {self['entry']}", words["summary"], *self._rows(lang)]
        measured = (self.get("measured") or {}).get("probe")
        if self["status"] == "source" or not measured:
            lines.append(label["source"] + (self.get("why_source") or {}).get(lang, ""))
            lines += [f"  {r['where']}: {r['kind']} {r['what']}" for r in self.get("installs", [])]
        else:
            lines.append(f"{label['installs']}: " + (", ".join(f"{r['where']} {r['kind']} ({r['owner']})"
                                                             for r in measured["installs"]) or label["nothing"]))
            if measured.get("modules_replaced"):
                lines.append(f"{label['swapped']}: " + ", ".join(measured["modules_replaced"]))
            if any(state != "kept" for state in measured.get("your_hooks", {}).values()):
                lines.append(f"{label['yours']}: " + ", ".join(f"{k} {v}" for k, v in measured["your_hooks"].items()))
            if measured.get("during"):
                lines.append(f"{label['during']}: " + ", ".join(f"{r['where']} {r['kind']}" for r in measured["during"]))
            order = measured["order"]
            lines.append(f"{label['order']}: " + " → ".join(order["forward"] + ["|"] + order["backward"]))
            lines.append(f"{label['survives']}: " + ", ".join(f"{k} {v}" for k, v in measured["survives"].items()))
            if "removed" in measured:
                lines.append(f"{label['removed']}: {measured['removed']}")
        lines.append(f"{label['remove']}: {words['remove']}")
        lines.append(f"{label['api']}: {words['api']}")
        lines += [f"{label['surprises']}: {s[lang]}" for s in self.get("surprises", [])]
        return "\n".join(lines)

    def _rows(self, lang: str) -> list[str]:
        """The summary of the library's rows in the library matrix: what a reader reads first."""
        rows = self.get("library_matrix")
        if not rows:
            return []
        label, changing = LABELS[lang], rows["operations"]
        lines = [label["rows"].format(changing=len(changing), observed=rows["observed"], families=rows["families"])]
        for operation in changing[:SHOWN]:
            most = ("、" if lang == "zh" else ", ").join(
                f"{how[lang]}（{how['cells']}）" if lang == "zh" else f"{how[lang]} ({how['cells']})"
                for how in operation["most"])
            lines.append(label["row"].format(name=operation["name"], before=len(operation["before"]),
                                             after=len(operation["after"]), fixed=len(operation["fixed"]), most=most))
        if len(changing) > SHOWN:
            lines.append(label["more"].format(n=len(changing) - SHOWN, slug=self["slug"]))
        if rows["same"]:
            lines.append(label["same"].format(names=", ".join(rows["same"])))
        return lines
