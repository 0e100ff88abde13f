"""The cookbook's chapters (``tools/recipes/chapters.toml``): the recipes grouped by the library or mechanism their question is
about, which the site's recipe index follows (tools/recipes/pages.py).

A chapter holds the recipes of some of the bank's categories (a recipe's category is its id without the number: the
bank's ``recipes/bank/<category>.jsonl``), every category in exactly one chapter. Its ``libraries`` name the libraries
it is about, so that a recipe filed in another chapter whose question names one of them is listed under it too (a
DeepSpeed question the bank filed under reinforcement learning is found under DeepSpeed).

>>> chapter = of("fsdp-deepspeed-megatron-06")
>>> chapter.id, chapter.title("en")
('fsdp-deepspeed-megatron', 'FSDP, DeepSpeed and Megatron')
>>> names("DeepSpeed") == names("deepspeed") and chapter in about("deepspeed")
True
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = Path(__file__).with_name("chapters.toml")
BANK = ROOT / "recipes" / "bank"
_NOT_IN_NAMES = re.compile(r"[\s._-]+")
UNIVERSAL = frozenset({"torch", "pytorch"})  # named by half the recipes: no library of a chapter


class ChapterError(ValueError):
    """tools/recipes/chapters.toml does not give every category one chapter, or a chapter is written wrong."""


@dataclass(frozen=True)
class Chapter:
    id: str
    en: str
    zh: str
    categories: tuple[str, ...]
    libraries: frozenset[str]  # as :func:`names` writes them

    def title(self, lang: str) -> str:
        return self.zh if lang == "zh" else self.en


def names(library: str) -> str:
    """A library's name as chapters compare them: lower case, without spaces, ".", "_" and "-" (``pytorch_grad_cam``
    and ``pytorch-grad-cam``, ``TransformerLens`` and ``transformer_lens`` are one library)."""
    return _NOT_IN_NAMES.sub("", library.lower())


def category(recipe_id: str) -> str:
    """The bank category of a recipe id (``grad-cam-21`` -> ``grad-cam``)."""
    head, sep, number = recipe_id.rpartition("-")
    if not sep or not number.isdigit():
        raise ChapterError(f"{recipe_id!r} is not a recipe id (a bank category, '-', a number: 'grad-cam-21')")
    return head


@functools.cache
def load(path: Path = CHAPTERS, bank: Path = BANK) -> tuple[Chapter, ...]:
    """The chapters in the file's order, checked: ids unique, every category of the bank in exactly one chapter and no
    category the bank does not have."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8")).get("chapter", [])
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ChapterError(f"{where}: cannot be read ({error})") from error
    chapters, owner = [], {}
    for n, entry in enumerate(raw, 1):
        missing = [k for k in ("id", "en", "zh", "categories") if not entry.get(k)]
        if missing:
            raise ChapterError(f"{where}: chapter {n} has no {', '.join(missing)}")
        chapter = Chapter(entry["id"], entry["en"], entry["zh"], tuple(entry["categories"]),
                          frozenset(names(lib) for lib in entry.get("libraries", [])))
        if any(c.id == chapter.id for c in chapters):
            raise ChapterError(f"{where}: two chapters have the id {chapter.id!r}")
        for cat in chapter.categories:
            if cat in owner:
                raise ChapterError(f"{where}: category {cat!r} is in chapters {owner[cat]!r} and {chapter.id!r}")
            owner[cat] = chapter.id
        chapters.append(chapter)
    known = {p.stem for p in bank.glob("*.jsonl")}
    if unknown := sorted(set(owner) - known):
        raise ChapterError(f"{where}: the bank has no category {', '.join(unknown)} (recipes/bank/<category>.jsonl)")
    if left := sorted(known - set(owner)):
        raise ChapterError(f"{where}: no chapter holds the bank's categories {', '.join(left)}; add them to one")
    return tuple(chapters)


def of(recipe_id: str) -> Chapter:
    """The chapter that holds recipe ``recipe_id``."""
    cat = category(recipe_id)
    for chapter in load():
        if cat in chapter.categories:
            return chapter
    raise ChapterError(f"no chapter holds category {cat!r} of recipe {recipe_id!r}")


def about(library: str) -> list[Chapter]:
    """The chapters whose ``libraries`` name ``library``."""
    return [c for c in load() if names(library) in c.libraries]
