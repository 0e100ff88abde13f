"""The index behind ``course.ask`` (hooklab/course/asking.py): every place in the course a question can land on,
written from the committed notebooks and the data files in ``docs/``.

    python -m tools.ask            # check: exit 1, saying why, when the shipped index is not what the sources give
    python -m tools.ask --write    # write hooklab/course/assets/ask/index.json

An entry is one of:

- ``section``: a numbered section of a notebook (its heading in both languages, its prose in both, the names its
  code uses), linked to the heading's cell;
- ``symptom``: a cell of the symptom index (the cells tagged ``symptom``: an error or a silent symptom the course
  reproduces), linked to that cell, with the message it prints; and each kind of silent symptom
  (``docs/silent_symptoms.toml``: "the hook never fires", "… fires twice" …), linked to its list on the site's
  symptom page, with the words of every symptom in it;
- ``message``: an explained row of the message index (``docs/hook_messages.json``), with PyTorch's or the library's
  text, linked to the cell that explains it; and a profiled library's own message explained in
  ``docs/library_messages.toml`` (:mod:`tools.profiles.messages`), linked to its heading on the library's page;
- ``matrix``: a cell of the hook behaviour matrix (``docs/hook_matrix.json``) where a hook does not fire, fires more
  than once, raises, or is marked surprising, linked to the cell that teaches it.

A message or a matrix cell that has a program (``docs/programs/<name>.json``: one that shows it and its fix, in both
languages, with what each prints) carries it as ``program`` (:func:`attach_programs`: the file ``messages.json``
attaches to the entries ``message:<id>``, any other ``<name>.json`` to ``<name>:<id>``); a library profile carries
the list of its facts' programs as ``programs`` (``profiles.json``'s ``<slug>:<fact>`` -> ``profile:<slug>``), and
another framework's entry its example (``frameworks.json``'s ``frameworks-<name>`` -> ``profile:frameworks-<name>``);
``Hit.run()`` runs it.

- ``recipe``: a recipe (``recipes/NN_chapter.ipynb``: a real question answered by running code; its heading cell carries
  ``hooklab.recipe`` metadata: the bank id, the libraries and the calls the asker would type), linked to its heading,
  with the question, its message from the bank (``recipes/bank/``) and the calls; its question paragraph counts
  :data:`QUESTION_WEIGHT` more times (:func:`asked`).

- ``profile``: a library profile (``hooklab/course/assets/profiles/library_profiles.json``: what a library does to a
  model's hooks), linked to its page on the site, with the library's name, its summary, removal and API in both
  languages and its own API names; and one per framework of the other frameworks' equivalents of a hook
  (``tools/profiles/frameworks_data.py``), linked to its section of that page; a profile's text holds the names
  ``course.profile`` takes for it (import names, title parts, aliases);
- ``tool``: the doctor, ``hooklab.explain_hook``, for a hook that does not fire, fires twice or sees the wrong module
  (in both languages), with how to call it, linked to its page of the site's API reference;
- ``atlas``: the hook atlas of each zoo (``hooklab/course/assets/atlas/``: its models' names) and each kind of place
  inside a block it answers, with the call that reads it (``course.atlas(zoo)[model].where(block, kind)``), linked to
  the zoo's atlas page.

Each entry holds its terms (``terms``: :func:`hooklab.course.asking.entry_terms` of its text and titles) and the terms
of its title in each language (``title_terms``, English then Chinese: :func:`hooklab.course.asking.title_terms`), so
that the lookup's first answer reads them instead of tokenizing thousands of titles. A matrix cell links to its row
of the site's matrix page, whose id is the cell's key (``hook_matrix.html#forward-hook@compile``).
A section also holds its heading's anchor on each language's site. tests/tools/test_ask_index.py checks that the
shipped index is current. ``python -m tools.ask.pasted`` measures pasted error messages (:mod:`tools.ask.pasted`).
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

import tomllib

from hooklab.course.asking import entry_terms, title_terms
from hooklab.course.notebook import heading_lines, lang_tags, read_notebook, strip_toc_skip
from hooklab.course.profiles import aliases

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
RECIPES = ROOT / "recipes"
MESSAGES = ROOT / "docs" / "hook_messages.json"
PROGRAMS = ROOT / "docs" / "programs"
# a programs file's stem -> the id prefix of its entries (else the stem); frameworks.json's "frameworks-<name>" is
# the entry profile:frameworks-<name>, library_matrix.json's "<slug>:<operation>" the operation's profile:<slug>:<operation>
PROGRAM_PREFIX = {"messages": "message", "frameworks": "profile", "library_matrix": "profile"}
# a programs file whose ids are "<name>:<fact>", several facts of one entry -> the id prefix of those entries: the
# entry "<prefix>:<name>" carries the list of its programs as "programs"
PROGRAM_GROUPS = {"profiles": "profile"}
MATRIX = ROOT / "docs" / "hook_matrix.json"
SILENT_KINDS = ROOT / "docs" / "silent_symptoms.toml"
INDEX = ROOT / "hooklab" / "course" / "assets" / "ask" / "index.json"
PROGRAMS_ASSET = INDEX.parent / "programs.json.gz"  # the entries' programs (split_programs)
PROFILES = ROOT / "hooklab" / "course" / "assets" / "profiles" / "library_profiles.json"
LIBRARY_MATRIX = ROOT / "docs" / "library_matrix.json"
SECTION = re.compile(r"^##\s+(\d+)\.\s+(.*?)\s*$")
_CODE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[a-z]+_[a-z0-9_]+")
_MARKUP = re.compile(r"<[^>]+>|\]\([^)]*\)|[*#>|`\[]")
MAX_TEXT = 6000  # characters of prose kept per section and language: enough to rank, not the whole notebook


class IndexError_(Exception):
    """A source the index cannot be built from; the message names the file."""


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", _MARKUP.sub(" ", strip_toc_skip(text))).strip()


def _sections(path: Path) -> list[dict[str, Any]]:
    """The numbered sections of one notebook: heading, prose in both languages, names used in its code."""
    nb = read_notebook(path)
    sections: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for cell in nb["cells"]:
        text = _source(cell)
        tags = lang_tags(cell) if cell["cell_type"] == "markdown" else []
        lang = "zh" if "lang-zh" in tags else "en" if "lang-en" in tags else None
        first = text.splitlines()[0] if text else ""
        heading = SECTION.match(strip_toc_skip(first)) if lang and 0 in heading_lines(text) else None
        if heading and lang:
            number = heading[1]
            if current is None or current["number"] != number:
                current = {"number": number, "cell": cell.get("id"), "zh": "", "en": "", "prose": {"zh": [], "en": []},
                           "names": []}
                sections.append(current)
            current[lang] = _plain(heading[2])
        if current is None:
            continue
        if lang:
            current["prose"][lang].append(_plain(text))
        elif cell["cell_type"] == "code":
            current["names"].extend(_CODE_NAME.findall(text))
    return sections


def section_anchor(heading: str, lang: str) -> str:
    """A section's anchor on a language's site, from its heading as the site makes it: docutils' on the English
    site, tools/site/pages.py's ``heading_id`` on the Chinese one (lower case, runs of anything but letters and
    digits as one '-', the number left out); tests/tools/test_ask_index.py checks that both agree with the site's.

    >>> section_anchor("3. 保存的张量：`pack_hook` 与 unpack", "zh"), section_anchor("4. Several hooks: order", "en")
    ('保存的张量-pack_hook-与-unpack', 'several-hooks-order')
    """
    if lang == "en":
        from docutils.nodes import make_id  # the site's own tool: imported only to write the index

        return make_id(heading)
    text = re.sub(r"^\s*\d+(?:\.\d+)*\.?\s+", "", heading)
    return re.sub(r"[^\w]+", "-", text.lower()).strip("-") or "section"


def section_entries() -> list[dict[str, Any]]:
    entries = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for section in _sections(path):
            prose = " ".join(" ".join(section["prose"][lang])[:MAX_TEXT] for lang in ("zh", "en"))
            names = " ".join(dict.fromkeys(section["names"]))
            entries.append({
                "id": f"section:{path.stem[:2]}.{section['number']}", "kind": "section",
                "zh": f"{path.stem[:2]} · {section['number']}. {section['zh']}",
                "en": f"{path.stem[:2]} · {section['number']}. {section['en']}",
                "text": f"{prose} {names}".strip(), "message": None,
                "notebook": path.name, "cell": section["cell"], "page": f"{path.stem}.html",
            })
            entries[-1]["anchor"] = {lang: section_anchor(section[lang], lang) for lang in ("zh", "en")}
    return entries


def symptom_entries() -> list[dict[str, Any]]:
    entries = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for cell in read_notebook(path)["cells"]:
            symptom = cell.get("metadata", {}).get("hooklab", {}).get("symptom")
            if not symptom:
                continue
            entries.append({
                "id": f"symptom:{symptom['id']}", "kind": "symptom", "zh": symptom["zh"], "en": symptom["en"],
                "text": " ".join(filter(None, (symptom["id"].replace("-", " "), symptom.get("message")))),
                "message": symptom.get("message"), "notebook": path.name, "cell": cell.get("id"),
                "page": f"{path.stem}.html#symptom-{symptom['id']}",
            })
    return entries


def _bank() -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for path in sorted((RECIPES / "bank").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                rows[row["id"]] = row
    return rows


# A message that is only an exception's class (``torch.utils.checkpoint.CheckpointError``) says which error, not what
# went wrong: as a message key it would capture every paste of that class, whatever the user's own words after it.
_BARE_CLASS = re.compile(r"(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Warning|Interrupt)")


def _quoted_message(message: str | None) -> str | None:
    """The asker's quoted message as a message key, or None when it is only an exception's class.

    >>> _quoted_message("torch.utils.checkpoint.CheckpointError"), _quoted_message("KeyError: 'fc'")
    (None, "KeyError: 'fc'")
    """
    return None if message is None or _BARE_CLASS.fullmatch(message.strip()) else message


# A learner describes the case as its asker did, not as the answer explains it (the answer's prose names the mechanism
# and its neighbours, which every sibling recipe shares): the recipe's question counts this many more times.
QUESTION_WEIGHT = 2
_ASKED_LABEL = re.compile(r"^\*\*(?:问题|Question)\*\*\s*[：:]\s*")
_SOURCE = re.compile(r"\s*(?:来源\s*[：:]|Source\s*:).*", re.S)


def asked(markdown: str) -> str:
    """A recipe cell's question: the paragraph after its heading (``**Question**: …`` or the asker's case told), up
    to its source, as plain text.

    >>> asked("## Rx-01 · title\\n\\n**Question**: why is `grad` None? Source: [a](b).\\n\\n**Answer**: …")
    'why is grad None?'
    """
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", markdown.strip())]
    if len(paragraphs) < 2:
        return ""
    return _plain(_SOURCE.sub("", _ASKED_LABEL.sub("", paragraphs[1])))


def recipe_entries() -> list[dict[str, Any]]:
    bank = _bank()
    entries = []
    for path in sorted(RECIPES.glob("[0-9][0-9]_*.ipynb")):
        cells = read_notebook(path)["cells"]
        for number, cell in enumerate(cells):
            recipe = cell.get("metadata", {}).get("hooklab", {}).get("recipe")
            if not recipe:
                continue
            twin = cells[number + 1] if number + 1 < len(cells) else {}
            zh, en = _source(cell), _source(twin)
            question = bank.get(recipe["id"])
            if question is None:
                raise IndexError_(f"{_shown(path)}: recipe {recipe['id']!r} answers no question of recipes/bank/")
            title = {lang: _plain(text.splitlines()[0]).split(" · ", 1)[-1] for lang, text in (("zh", zh), ("en", en))}
            calls = " ".join(recipe.get("calls", []) + recipe.get("libraries", []))
            entries.append({
                "id": f"recipe:{recipe['id']}", "kind": "recipe", "zh": title["zh"], "en": title["en"],
                "text": f"{_plain(zh)} {_plain(en)} {question['question']} {question['message'] or ''} {calls}"
                        + f" {asked(zh)} {asked(en)}" * QUESTION_WEIGHT,
                "message": _quoted_message(question["message"]), "notebook": f"../recipes/{path.name}",
                "cell": cell.get("id"),
                "page": f"recipes-{path.stem}.html#recipe-{recipe['id']}", "asked_zh": recipe.get("asked_zh"),
            })
    return entries


def symptom_kind_entries() -> list[dict[str, Any]]:
    by_id = {e["id"].removeprefix("symptom:"): e for e in symptom_entries()}
    try:
        kinds = tomllib.loads(SILENT_KINDS.read_text(encoding="utf-8"))["kind"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as error:
        raise IndexError_(f"{_shown(SILENT_KINDS)} cannot be read ({error}); restore it from git") from None
    entries = []
    for kind in kinds:
        rows = [by_id[r] for r in kind["rows"] if r in by_id]
        entries.append({
            "id": f"symptom-kind:{kind['id']}", "kind": "symptom", "zh": kind["zh"], "en": kind["en"],
            "text": " ".join(f"{r['zh']} {r['en']}" for r in rows), "message": None,
            "notebook": "00_introduction.ipynb", "cell": None, "page": f"symptoms.html#kind-{kind['id']}",
        })
    return entries


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise IndexError_(f"{_shown(path)} cannot be read ({error}); restore it with `git checkout -- "
                          f"{_shown(path)}`") from None
    if not isinstance(data, dict):
        raise IndexError_(f"{_shown(path)} is not a JSON object; restore it from git")
    return data


def message_entries() -> list[dict[str, Any]]:
    entries = []
    for row in _load(MESSAGES)["messages"]:
        if not (row.get("en") and row.get("notebook")):
            continue  # an excused row explains nothing a learner can open
        notebook = row["notebook"]
        entries.append({
            "id": f"message:{row['id']}", "kind": "message", "zh": row["zh"], "en": row["en"],
            "text": f"{row['text']} {row.get('family', '')} {row.get('source', '')}", "message": row["text"],
            "notebook": notebook, "cell": row.get("cell_id"), "page": f"{Path(notebook).stem}.html",
        })
    return entries


def library_message_entries() -> list[dict[str, Any]]:
    """The profiled libraries' own messages (docs/library_messages.toml), each linked to its heading on its
    library's page (:mod:`tools.profiles.messages`)."""
    from tools.profiles.messages import EXPLAINED, index_entries
    return index_entries() if EXPLAINED.exists() else []


# how a cell that differs from its family's eager cell only in its warnings is titled, by which warnings they are
# (docs/programs/matrix.json's "warnings": tools/hook_matrix/programs.warnings_only)
WARNINGS_ONLY = {"deprecation": ("fires as in eager; only a deprecation warning differs", "和 eager 一样触发，只多了一条弃用警告"),
                 "other": ("fires as in eager; only a warning differs (not a deprecation notice)",
                           "和 eager 一样触发，只多了一条警告（不是弃用提示）"),
                 "both": ("fires as in eager; only warnings differ (a deprecation notice and another)",
                          "和 eager 一样触发，只多了警告（一条弃用提示和另一条警告）")}


def _matrix_programs() -> dict[str, Any]:
    path = PROGRAMS / "matrix.json"
    return json.loads(path.read_text(encoding="utf-8"))["programs"] if path.is_file() else {}


def matrix_entries() -> list[dict[str, Any]]:
    data = _load(MATRIX)
    families = {f["id"]: f for f in data["families"]}
    contexts = {c["id"]: c for c in data["contexts"]}
    shown = _matrix_programs()
    entries = []
    for key, cell in sorted(data["cells"].items()):
        if cell.get("status") != "observed":
            continue
        warned = (shown.get(key) or {}).get("warnings") if (shown.get(key) or {}).get("kind") == "warnings" else None
        unusual = cell.get("surprising") or not cell.get("fires") or (cell.get("calls") or 0) > 1 or cell.get("error")
        if not unusual and not warned:
            continue
        family, context = families[cell["family"]], contexts[cell["context"]]
        if warned:  # the hook behaves as in eager: only the warnings differ
            what_en, what_zh = WARNINGS_ONLY[warned["which"]]
        elif cell.get("title"):  # notes.toml's precise title, where the plain verdict would overreach
            what_en, what_zh = cell["title"]["en"], cell["title"]["zh"]
        elif cell.get("error"):
            what_en, what_zh = f"raises {cell['error'].split(':')[0]}", f"报错 {cell['error'].split(':')[0]}"
        elif not cell.get("fires"):
            what_en, what_zh = "does not fire", "不触发"
        elif (cell.get("calls") or 0) > 1:
            what_en, what_zh = f"fires {cell['calls']} times", f"触发 {cell['calls']} 次"
        else:
            what_en, what_zh = "fires, with a surprise", "会触发，但出人意料"
        why = cell.get("why") or {}
        taught = cell.get("taught_by") or {}
        entries.append({
            "id": f"matrix:{key}", "kind": "matrix",
            "zh": f"{family['zh']} · {context['zh']}：{what_zh}",
            "en": f"{family['api']} under {context['title']}: {what_en}",
            "text": " ".join(filter(None, (family["id"].replace("-", " "), context["id"].replace("-", " "),
                                           context.get("how"), why.get("en"), why.get("zh"), cell.get("error"),
                                           *(warned or {}).get("added", [])))),
            "message": cell.get("error"), "notebook": taught.get("notebook"), "cell": taught.get("cell"),
            # the matrix page's row for the cell has the key itself as its id (tools/site/conf.py's _matrix_rows)
            "page": f"hook_matrix.html#{key}",
        })
    return entries


def profile_entries() -> list[dict[str, Any]]:
    if not PROFILES.exists():
        return []
    entries = []
    for slug, record in json.loads(PROFILES.read_text(encoding="utf-8"))["libraries"].items():
        words = " ".join(record["words"][lang][part] for lang in ("en", "zh") for part in ("summary", "remove", "api"))
        entries.append({
            "id": f"profile:{slug}", "kind": "profile", "zh": f"{record['title']}：它对你的钩子做了什么",
            "en": f"{record['title']}: what it does to your hooks", "message": None, "notebook": None, "cell": None,
            # the names course.profile takes count as much as the title: a user types the library by any of them
            "text": f"{record['title']} {record['title']} {slug} {' '.join(aliases(slug) * 2)} {record['entry']} "
                    f"{' '.join(record['names'])} {words}",
            "page": f"profiles-{slug}.html",
        })
    return entries


def library_operation_entries() -> list[dict[str, Any]]:
    """One ``profile`` entry per operation of the library matrix (docs/library_matrix.json), found by the library's
    names and the operation's: its words are those names only (the hook families and what they do are words of every
    lesson, and repeated over the operations they drew a learner's question away from the lesson that answers it);
    linked to the library's page, whose table for the operation lists the hooks it changes."""
    if not (PROFILES.exists() and LIBRARY_MATRIX.exists()):
        return []
    titles = {slug: r["title"] for slug, r in json.loads(PROFILES.read_text(encoding="utf-8"))["libraries"].items()}
    matrix = json.loads(LIBRARY_MATRIX.read_text(encoding="utf-8"))
    entries = []
    for operation in sorted({key.split("|")[0] for key in matrix["cells"]}):  # every operation observed
        slug, name = operation.split(":", 1)
        if slug not in titles:
            continue
        shown = name.replace(".", " ")  # LoraModel merge_and_unload: the method is a word of its own
        entries.append({
            "id": f"profile:{operation}", "kind": "profile", "message": None, "notebook": None, "cell": None,
            "en": f"{titles[slug]}: {shown}, what it does to your hooks",
            "zh": f"{titles[slug]}：{shown} 对你的钩子做了什么",
            "text": f"{titles[slug]} {slug} {' '.join(aliases(slug))} {name} {shown} {name.replace('_', ' ')}",
            "page": f"profiles-{slug}.html",
        })
    return entries


def framework_entries() -> list[dict[str, Any]]:
    """The other frameworks' equivalents of a hook (tools/profiles/frameworks_data.py), one entry per framework,
    of the ``profile`` kind, linked to its section of the site's page."""
    from tools.profiles.frameworks import anchor
    from tools.profiles.frameworks_data import CONCEPTS, FRAMEWORKS

    entries = []
    for framework in FRAMEWORKS:
        concepts = [framework.concept(c) for c in CONCEPTS]
        text = " ".join([framework.title, framework.title, framework.summary_en, framework.summary_zh,
                         framework.missing_en, framework.missing_zh, "hook equivalent 钩子 等价",
                         *(f"{' '.join(c.api)} {c.en} {c.zh}" for c in concepts)])
        entries.append({
            "id": f"profile:frameworks-{framework.name}", "kind": "profile", "message": None, "notebook": None,
            "cell": None, "zh": f"{framework.title} 里与钩子相当的东西", "en": f"The equivalent of a hook in {framework.title}",
            "text": text, "page": f"other_frameworks.html#{anchor(framework.name)}",
        })
    return entries


# The doctor (hooklab.explain_hook) for the three ways a learner says a hook misbehaves, in both languages: one entry
# each, all at its page of the site's API reference (course.ask shows the one the question says best).
_CALL = 'hooklab.explain_hook(model, "layer", run=lambda: ...)'
DOCTOR = {
    "never-fires": ("My hook does not fire: {call} says why",
                    "钩子不触发：{call} 说明原因",
                    "my forward hook backward hook hook is never called does not fire 钩子没有被调用 不触发"),
    "fires-twice": ("My hook fires twice: {call} says why",
                    "钩子触发了两次：{call} 说明原因",
                    "my forward hook backward hook hook fires twice called twice 钩子触发两次 调用两次"),
    "sees-wrong": ("My hook sees the wrong module or tensor: {call} says which module ran",
                   "钩子看到的模块或张量不对：{call} 说明实际运行的是哪个模块",
                   "my hook sees the wrong module wrong input wrong output wrong gradient a copy ran "
                   "钩子看到的模块不对 输入不对 梯度不对 副本"),
}
ATLAS_ZOOS = ("transformers", "diffusers", "timm", "torchvision")
ATLAS = ROOT / "hooklab" / "course" / "assets" / "atlas"
# a kind of place inside a block (the atlas's lookups, tools/atlas/inside.py) in both languages
PLACES = {
    "input": ("the block's input (the residual stream before it)", "块的输入（进入块之前的残差流）"),
    "attention": ("the attention's output", "注意力的输出"),
    "mlp": ("the MLP's (feed-forward's) output", "MLP（前馈层）的输出"),
    "residual_after_attention": ("the residual stream after the attention", "注意力之后的残差流"),
    "residual_after_mlp": ("the residual stream after the MLP", "MLP 之后的残差流"),
    "cross_attention": ("the cross-attention's output", "交叉注意力的输出"),
    "branch": ("the residual branch's output", "残差分支的输出"),
    "residual_after_branch": ("the residual stream after the branch", "残差分支之后的残差流"),
    "shortcut": ("the shortcut (the skip connection's module)", "捷径（跳跃连接上的模块）"),
    "mixer": ("the token mixer's output", "token 混合层的输出"),
}


def doctor_entries() -> list[dict[str, Any]]:
    """"Why does my hook not fire / fire twice / see the wrong thing": the doctor, with how to call it."""
    return [{"id": f"tool:explain-hook-{case}", "kind": "tool", "en": en.format(call=_CALL), "zh": zh.format(call=_CALL),
             "text": f"explain_hook why {words}", "message": None, "notebook": None,
             "cell": None, "page": "api.html#hooklab.explain_hook"} for case, (en, zh, words) in DOCTOR.items()]


def atlas_entries() -> list[dict[str, Any]]:
    """The hook atlas: one entry per zoo (its models' names: where a block's hooks go) and one per kind of place
    inside a block that the zoo's atlas answers (``course.atlas(zoo)[model].where(block, kind)``)."""
    entries = []
    for zoo in ATLAS_ZOOS:
        path = ATLAS / f"{zoo}.json"
        if not path.exists():
            continue
        models = _load(path)["models"]
        places: dict[str, list[str]] = {}
        for name, model in models.items():
            for stack in (model.get("inside") or {}).values():
                for pattern in stack.get("patterns", []):
                    for stream in pattern.get("streams", []):
                        for role in stream.get("lookups", {}):
                            places.setdefault(re.sub(r"_\d+$", "", role), []).append(name)
        call = f"course.atlas('{zoo}')[model]"
        entries.append({
            "id": f"atlas:{zoo}", "kind": "atlas", "message": None, "notebook": None, "cell": None,
            "en": f"The hook atlas of {zoo}: where to hook each of {len(models)} models' blocks, what a block's hook "
                  f"receives, which hooks never fire: {call}",
            "zh": f"{zoo} 的钩子地图：{len(models)} 个模型的块挂在哪里、块的钩子收到什么、哪些钩子从不触发：{call}",
            "text": f"{zoo} hook atlas where to hook which layer block stack {' '.join(models)} 钩子地图 挂在哪里 哪一层",
            "page": f"atlas-{zoo}.html",
        })
        for kind, (en, zh) in PLACES.items():
            if kind not in places:
                continue
            where = f"{call}.where(block, '{kind}')"
            entries.append({
                "id": f"atlas:{zoo}:{kind}", "kind": "atlas", "message": None, "notebook": None, "cell": None,
                "en": f"Where to hook {en} inside a {zoo} model's block: {where}",
                "zh": f"在 {zoo} 模型的块里，{zh}挂在哪里：{where}",
                "text": f"{zoo} hook atlas where inside block layer {kind.replace('_', ' ')} {en} {zh} "
                        f"{' '.join(sorted(set(places[kind])))}",
                "page": f"atlas-{zoo}.html",
            })
    return entries


def attach_programs(entries: list[dict[str, Any]], folder: Path = PROGRAMS) -> int:
    """Give each entry whose id is ``<prefix>:<key>`` the program record ``key`` of ``<folder>/<stem>.json``
    (``prefix``: :data:`PROGRAM_PREFIX`'s name for the stem, else the stem), as the file has it: ``{"show", "fix",
    ...}``, each program ``{"code": {"en", "zh"}, "prints" | "prints_start", ...}``; a record without a program that
    shows it is not attached. Returns how many entries got one."""
    by_id = {e["id"]: e for e in entries}
    attached = 0
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = _load(path)
        programs = data.get("programs")
        if not isinstance(programs, dict):
            raise IndexError_(f"{_shown(path)} has no \"programs\" object; regenerate it")
        prefix = PROGRAM_PREFIX.get(path.stem, path.stem)
        group = PROGRAM_GROUPS.get(path.stem)
        for key, record in sorted(programs.items()):
            if group is not None:  # docs/programs/profiles.json: "<slug>:<fact>" -> the list of profile:<slug>
                entry = by_id.get(f"{group}:{key.split(':', 1)[0]}")
                if entry is not None and isinstance(record, dict) and record.get("show"):
                    entry.setdefault("programs", []).append({"id": key, **record})
                    attached += 1
                continue
            entry = by_id.get(f"{prefix}:{key}")
            if entry is None or not isinstance(record, dict) or not record.get("show"):
                continue
            entry["program"] = record
            attached += 1
    return attached


def build() -> dict[str, Any]:
    """The whole index, in a stable order (by kind, then id)."""
    entries = (section_entries() + symptom_kind_entries() + symptom_entries() + message_entries()
               + library_message_entries()
               + matrix_entries() + recipe_entries() + profile_entries() + library_operation_entries()
               + framework_entries() + doctor_entries()
               + atlas_entries())
    attach_programs(entries)
    for entry in entries:  # the lookup reads terms, not text: tokenizing every entry at each start took seconds
        entry["terms"] = entry_terms(entry.pop("text"), f"{entry['zh']} {entry['en']}")
        entry["title_terms"] = [" ".join(sorted(words)) for words in title_terms(entry)]  # en, zh: the same
        entry.pop("asked_zh", None)  # a recipe's Chinese test query measures the lookup; it is not indexed
    ids = [e["id"] for e in entries]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise IndexError_(f"two entries share an id: {repeated[:5]}")
    return {"about": "The places course.ask can answer with. Written by `python -m tools.ask --write` from the "
                     "notebooks and docs/; do not edit.",
            "entries": entries}


def split_programs(index: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The index with each entry's programs replaced by ``true`` (``"program"``) or their ids (``"programs"``), and
    the programs by entry id: they are most of its size (the matrix's cells, the messages, the profiles' facts), and
    only an answer that is run or printed needs one, so they ship apart, compressed (:data:`PROGRAMS_ASSET`), and the
    lookup and the website's search read the small index."""
    entries, programs = [], {}
    for entry in index["entries"]:
        light = dict(entry)
        if "program" in light:
            programs[light["id"]] = {"program": light["program"]}
            light["program"] = True
        if "programs" in light:
            programs.setdefault(light["id"], {})["programs"] = light["programs"]
            light["programs"] = [p["id"] for p in light["programs"]]
        entries.append(light)
    return {**index, "entries": entries}, programs


def render(index: dict[str, Any]) -> str:
    """The index as it ships (``index.json``), without its programs (:func:`split_programs`)."""
    return json.dumps(split_programs(index)[0], ensure_ascii=False, indent=0, sort_keys=True) + "\n"


def render_programs(index: dict[str, Any]) -> str:
    """The programs as they ship, before compression: one JSON object, entry id -> its programs."""
    return json.dumps(split_programs(index)[1], ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def read_programs(path: Path | None = None) -> str:
    """The shipped programs' JSON text (the compressed file decompressed; the bytes of gzip differ between zlib
    releases, the text does not)."""
    return gzip.decompress((path or PROGRAMS_ASSET).read_bytes()).decode("utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.ask", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {INDEX.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    try:
        built = build()
        text = render(built)
    except IndexError_ as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    programs = render_programs(built)
    if args.write:
        INDEX.parent.mkdir(parents=True, exist_ok=True)
        INDEX.write_text(text, encoding="utf-8")
        PROGRAMS_ASSET.write_bytes(gzip.compress(programs.encode("utf-8"), compresslevel=9, mtime=0))
        print(f"wrote {_shown(INDEX)} ({text.count(chr(10))} lines) and {_shown(PROGRAMS_ASSET)}")
        return 0
    if not INDEX.is_file() or INDEX.read_text(encoding="utf-8") != text or not PROGRAMS_ASSET.is_file() \
            or read_programs() != programs:
        print(f"{_shown(INDEX)} or {_shown(PROGRAMS_ASSET)} is not current: run `python -m tools.ask --write`",
              file=sys.stderr)
        return 1
    print(f"{_shown(INDEX)} and {_shown(PROGRAMS_ASSET)} are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
