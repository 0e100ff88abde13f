"""The language of the course's own messages (exercise verdicts, hints, solutions): ``zh``, ``en`` or ``both``.

One setting, read in one place, :func:`course_language`:

1. ``HOOKLAB_LANG=zh|en|both`` in the environment (``./course lab --lang en`` sets it for its kernels);
2. otherwise, when Jupyter started the kernel for a notebook (it names the file in ``JPY_SESSION_NAME``),
   the ``hooklab_language`` that ``python -m hooklab.course export`` writes into a one-language copy's metadata;
3. otherwise ``both``: Chinese first, then English, as the committed notebooks show.

>>> say("正确！", "correct!", lang="en")
'correct!'
>>> say("正确！", "correct!", lang="both")
'正确！\\ncorrect!'
>>> has_cjk("钩子 hook"), has_cjk("hook")
(True, False)
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

__all__ = ["ENV_VAR", "LANGS", "course_language", "cjk_ratio", "has_cjk", "say"]

LANGS = ("zh", "en", "both")
ENV_VAR = "HOOKLAB_LANG"

# CJK ideographs (with extension A and compatibility ideographs) and CJK punctuation / full-width forms
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
_CODE_SPAN = re.compile(r"`[^`]*`")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
_notebook_cache: dict[tuple[str, float], str | None] = {}


def has_cjk(text: str) -> bool:
    """True if ``text`` contains a Chinese character or CJK punctuation."""
    return _CJK.search(text) is not None


def cjk_ratio(text: str) -> float:
    """Share of CJK characters among CJK characters and Latin words, code spans (`...`) left out.

    Chinese prose scores near 1 (it may name an API or an English term), English prose 0.

    >>> cjk_ratio("梯度没有变化：钩子要返回新张量 `grad`"), cjk_ratio("the gradient did not change")
    (1.0, 0.0)
    """
    prose = _CODE_SPAN.sub(" ", text)
    cjk = len(_CJK.findall(prose))
    latin = len(_LATIN_WORD.findall(prose))
    return cjk / (cjk + latin) if cjk + latin else 0.0


def _checked(value: str, where: str) -> str:
    value = value.strip().lower()
    if value not in LANGS:
        raise ValueError(f"{where} must be one of {', '.join(LANGS)}, got {value!r}")
    return value


def _notebook_language(path: str | None) -> str | None:
    """``metadata.hooklab_language`` of the notebook at ``path`` (a one-language copy), else None."""
    if not path or not path.endswith(".ipynb"):
        return None
    try:
        key = (path, Path(path).stat().st_mtime)
    except OSError:
        return None
    if key not in _notebook_cache:
        try:
            value = json.loads(Path(path).read_text(encoding="utf-8")).get("metadata", {}).get("hooklab_language")
        except (OSError, ValueError, AttributeError):
            value = None
        _notebook_cache[key] = value if value in LANGS else None
    return _notebook_cache[key]


def course_language() -> str:
    """The language the course's messages are printed in now: ``zh``, ``en`` or ``both`` (see the module doc)."""
    value = os.environ.get(ENV_VAR, "")
    if value.strip():
        return _checked(value, f"the environment variable {ENV_VAR}")
    return _notebook_language(os.environ.get("JPY_SESSION_NAME")) or "both"


def say(zh: str, en: str, *, both: str | None = None, lang: str | None = None) -> str:
    """The message for the course language (``lang`` overrides it): ``zh``, ``en``, or ``both``
    (``zh`` then ``en`` on the next line, unless ``both`` gives the bilingual form)."""
    lang = course_language() if lang is None else _checked(lang, "lang")
    if lang == "zh":
        return zh
    if lang == "en":
        return en
    return f"{zh}\n{en}" if both is None else both
