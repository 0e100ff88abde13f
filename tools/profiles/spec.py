"""What one library profile declares: :class:`Library`, the metadata and the words of a profile, kept in one module per
library under ``tools/profiles/libraries/`` next to the code that measures it.

A measured library's module also defines the setup the probe runs (:mod:`tools.profiles.probe`):

- ``build()``: a small seeded model of the kind the library works on;
- ``inputs()``: the positional arguments of one forward call;
- ``apply(model)``: the library's entry point, returning the model to run from then on (the same object or a wrapper);
- ``TARGET``: the path of the submodule the probe puts the user's hooks on (looked up again in what ``apply``
  returns, by the same path or a path ending with it);
- optionally ``loss(output)``, ``remove(model)`` (the library's own way to take its hooks off) and ``facts()``: more
  facts measured by running (a dict of JSON values that do not depend on the machine), such as the order of the
  library's own callbacks against a user's hooks;
- optionally ``PROBES``: the parts of the standard probe that do not apply (for example ``{"compile"}`` where the
  library refuses to run under ``torch.compile``), each with the reason in ``SKIPPED``.

A library that cannot run on a CPU (or install beside the pinned torch) is ``status="source"``: its profile is read
from its source at a pinned version (``sources``), and ``installs`` / ``order`` say what the source shows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CATEGORIES = ("trackers and trainers", "distributed and memory", "quantization and compression", "model libraries",
              "interpretability and attribution", "measurement", "privacy", "serving")


@dataclass(frozen=True)
class Library:
    """One library's profile: who it is, how it was measured, and what the course says about it in both languages.

    ``requirement``: ``None`` when the library is in the project's lock (its version comes from the environment),
    else the exact pin (``"wandb==0.22.3"``) the generator installs beside the project's environment to run it.
    ``words``: ``{"en": {...}, "zh": {...}}`` with ``summary`` (what it does to a model's hooks), ``remove`` (how to
    take its hooks off or bypass them) and ``api`` (its own hook or callback API and in what order it runs).
    ``surprises``: facts a user would not expect, each ``{"fact": <a key of the measured facts or of the probe's
    result>, "en": ..., "zh": ...}``, so that each one is re-checked whenever the profile is measured again.
    ``names``: the library's own API names (classes, functions) that the page lists, so that search finds them.
    """

    slug: str
    name: str
    category: str
    entry: str
    words: dict[str, dict[str, str]]
    status: str = "measured"
    requirement: str | None = None
    import_name: str | None = None
    sources: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    surprises: tuple[dict[str, str], ...] = ()
    why_source: dict[str, str] | None = None
    installs: tuple[dict[str, str], ...] = ()  # source-only: what the source shows it puts on a model
    order: dict[str, str] | None = None  # source-only: when its hooks run against a user's, from the source
    extra: dict[str, Any] = field(default_factory=dict)
    title: str | None = None  # what pages call it, when ``name`` (which reads its version) does not tell it apart

    def __post_init__(self) -> None:
        if self.status not in ("measured", "source"):
            raise ValueError(f"{self.slug}: status is 'measured' or 'source', not {self.status!r}")
        if self.category not in CATEGORIES:
            raise ValueError(f"{self.slug}: category {self.category!r} is not one of {CATEGORIES}")
        for lang in ("en", "zh"):
            missing = {"summary", "remove", "api"} - set(self.words.get(lang, {}))
            if missing:
                raise ValueError(f"{self.slug}: words[{lang!r}] lacks {sorted(missing)}")
        if self.status == "source" and (not self.sources or not self.why_source):
            raise ValueError(f"{self.slug}: a source-only profile names its pinned sources and why it was not run")
        for surprise in self.surprises:
            if not {"fact", "en", "zh"} <= set(surprise):
                raise ValueError(f"{self.slug}: a surprise has 'fact', 'en' and 'zh'")

    @property
    def module_name(self) -> str:
        return self.import_name or self.name.replace("-", "_")

    def to_json(self) -> dict[str, Any]:
        return {"slug": self.slug, "name": self.name, "title": self.title or self.name, "category": self.category, "status": self.status,
                "requirement": self.requirement, "entry": self.entry, "words": self.words,
                "sources": list(self.sources), "names": list(self.names), "surprises": list(self.surprises),
                "why_source": self.why_source, "installs": list(self.installs), "order": self.order}
