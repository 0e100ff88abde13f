"""The library profiles as the course ships them: what a library does to a model's hooks, measured by running it
(``hooklab/course/assets/profiles/library_profiles.json``, written by ``python -m tools.profiles``).

:func:`profile` returns one library's record; printing it gives a short reading in the course's language (which
hooks the library puts on the model, when they run against yours, what survives a copy, a state dict, compiling and
checkpointing, how to take them off). Notebook 15, section 10, reads one.

>>> from hooklab import course
>>> record = course.profile("accelerate")
>>> record["status"], record["measured"]["probe"]["survives"]["deepcopy"].endswith("kept")
('measured', True)
"""
from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from typing import Any

from .lang import course_language

__all__ = ["profile", "profiles"]

LABELS = {
    "en": {"installs": "puts on the model", "during": "while it runs", "order": "one step, in firing order",
           "survives": "survives", "removed": "its own removal", "source": "read from its source, not run: ",
           "nothing": "nothing", "remove": "to take it off", "api": "its own API", "surprises": "unexpected",
           "swapped": "modules it replaced", "yours": "your hooks registered before it"},
    "zh": {"installs": "装到模型上的", "during": "运行期间", "order": "一步之内，按触发顺序", "survives": "能否保留",
           "removed": "用它自己的方法移除后", "source": "读源码得来，未运行：", "nothing": "没有",
           "remove": "如何移除", "api": "它自己的接口", "surprises": "出人意料之处",
           "swapped": "它换掉的模块", "yours": "你在它之前注册的钩子"},
}


@cache
def _all() -> dict[str, Any]:
    path = resources.files("hooklab.course") / "assets" / "profiles" / "library_profiles.json"
    return json.loads(path.read_text(encoding="utf-8"))["libraries"]


def profiles() -> list[str]:
    """The slugs of every library profile the course ships, in order."""
    return list(_all())


def profile(name: str) -> Profile:
    """The profile of library ``name`` (its slug, its PyPI name or its display name, any case); an unknown name
    raises a ``LookupError`` naming the close ones."""
    if not isinstance(name, str):
        raise TypeError(f"course.profile takes a library's name, a str, got {type(name).__name__}")
    found = _all()
    for slug, record in found.items():
        if name.casefold() in {slug.casefold(), record["name"].casefold(), slug.replace("_", "-").casefold()}:
            return Profile(record)
    close = difflib.get_close_matches(name.casefold(), [s.casefold() for s in found], n=4, cutoff=0.5)
    hint = f": did you mean {', '.join(map(repr, close))}?" if close else "."
    raise LookupError(f"course.profile: no profile of {name!r}{hint} course.profiles() lists all {len(found)}")


class Profile(dict):
    """One library's profile (a dict, as in the JSON file); ``str()`` reads it in the course's language."""

    def __str__(self) -> str:
        lang = course_language()
        if lang != "both":
            return self.reading(lang)
        # two blocks under the headers a one-language copy of a notebook splits on (hooklab.course.export)
        return f"—— 中文 ——\n{self.reading('zh')}\n\n—— English ——\n{self.reading('en')}"

    def reading(self, lang: str) -> str:
        label, words = LABELS[lang], self["words"][lang]
        lines = [f"{self['title']} — {self['entry']}", words["summary"]]
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
