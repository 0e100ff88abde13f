"""Write one-language copies of the bilingual notebooks (code cells and outputs kept).

    python -m hooklab.course export --lang zh            # notebooks/*.ipynb -> build/zh/
    python -m hooklab.course export --lang en --out /tmp/en notebooks/00_introduction.ipynb

Every file is written whole or not at all (a temporary file in the same folder, then ``os.replace``). A folder in
which ``./course lab --lang`` keeps the learner's copies (it holds :data:`STAMPS`) keeps the copies the learner
edited, unless ``force``.
"""
from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from . import needs_course_extra
from .lang import has_cjk
from .notebook import (
    LANGS,
    TOC_SKIP,
    NotebookError,
    is_json,
    lang_tags,
    read_notebook,
    sha256_hex,
    strip_toc_skip,
    write_atomic,
)

try:
    import nbformat
    from nbconvert.preprocessors import TagRemovePreprocessor
except ImportError as missing:  # pip install hooklab without the course's extra
    raise needs_course_extra(missing, "hooklab.course's notebook export") from missing

__all__ = ["STAMPS", "Exported", "export_folder", "export_notebook", "export_notebooks"]

# In a folder of copies that ./course lab serves: the sha256 of each copy as written, to tell the copies the
# learner edited (kept) from untouched ones (refreshed).
STAMPS = ".hooklab-export.json"


def _lang_tag(cell: dict[str, Any]) -> str | None:
    tags = lang_tags(cell)
    return tags[0] if tags else None


_TITLE = re.compile(r"^(#+\s+\d+\s*·\s*)(.+?)\s+/\s+(.+?)\s*$")        # "# 01 · 张量钩子 / Tensor hooks"
_SUBTITLE = re.compile(r"^(\*\*|_|\*)(.+?)\s+·\s+(.+?)(\1)\s*$")       # "**中文副标题 · English subtitle**"
_MESSAGE = re.compile(r"^\[(\d+\.\d+)\] ")                               # "[01.2] ..." (course.check / hint)
_SOLUTION = re.compile(r"^# \[(\d+\.\d+)\] reference solution / 参考答案$")


def _pick(zh: str, en: str, lang: str) -> str | None:
    """``zh`` or ``en`` when they really are Chinese and English, else None (leave the line alone)."""
    if not has_cjk(zh) or has_cjk(en):
        return None
    return zh if lang == "zh" else en


def one_language_title(text: str, lang: str) -> str:
    r"""A bilingual title cell in one language: "# 01 · 张量钩子 / Tensor hooks", a bold
    "**中文 · English**" subtitle and lines wholly in one language; other lines are kept.

    >>> one_language_title("# 01 · 张量钩子 / Tensor hooks\n\n**看见梯度 · Seeing gradients**", "en")
    '# 01 · Tensor hooks\n\n**Seeing gradients**'
    """
    lines = []
    for line in text.split("\n"):
        title, subtitle = _TITLE.match(line), _SUBTITLE.match(line)
        if title and (picked := _pick(title[2], title[3], lang)) is not None:
            line = title[1] + picked
        elif subtitle and (picked := _pick(subtitle[2], subtitle[3], lang)) is not None:
            line = subtitle[1] + picked + subtitle[1]
        elif line.strip() and not line.lstrip().startswith(("#", "|", "-", "*", ">")):
            if has_cjk(line) != (lang == "zh"):
                continue  # a plain line wholly in the other language
        lines.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


BLOCK_HEADERS = {"—— 中文 ——": "zh", "—— English ——": "en"}


def _one_language_blocks(text: str, lang: str) -> str:
    if not any(header in text for header in BLOCK_HEADERS):
        return text
    kept, current = [], None
    for line in text.split("\n"):
        if line in BLOCK_HEADERS:
            current = BLOCK_HEADERS[line]
            continue
        if current in (None, lang):
            kept.append(line)
    while len(kept) > 1 and kept[-1] == "" and kept[-2] == "":
        kept.pop()
    return "\n".join(kept)


def one_language_output(text: str, lang: str) -> str:
    r"""Printed output of ``course.check`` / ``hint`` / ``solution`` in one language.

    The course prints a message as two lines with the same ``[NN.x]`` prefix, Chinese first; keep one.

    >>> one_language_output("[01.2] 尚未完成：请先实现。\n[01.2] not solved yet: implement it first.\n", "en")
    '[01.2] not solved yet: implement it first.\n'

    A longer reading printed in both languages (``print(course.profile(...))``) comes as two blocks, each under its
    header line (:data:`BLOCK_HEADERS`); one language keeps its own block, without the header.

    >>> one_language_output("—— 中文 ——\n钩子\n\n—— English ——\nhooks\n", "en")
    'hooks\n'
    """
    text = _one_language_blocks(text, lang)
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        first = _MESSAGE.match(line)
        if first and i + 1 < len(lines):
            second = _MESSAGE.match(lines[i + 1])
            if second and second[1] == first[1] and has_cjk(line) and not has_cjk(lines[i + 1]):
                out.append(line if lang == "zh" else lines[i + 1])
                i += 2
                continue
        solution = _SOLUTION.match(line)
        if solution:
            line = f"# [{solution[1]}] " + ("参考答案" if lang == "zh" else "reference solution")
        out.append(line)
        i += 1
    return "\n".join(out)


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _check_shape(nb: Any) -> None:
    """A notebook as ``json.load`` gives it: a dict whose ``cells`` is a list of dicts, tags lists of strings."""
    if not isinstance(nb, dict):
        hint = (" (to export files, use export_notebooks(lang, out_dir, paths))"
                if isinstance(nb, (str, Path)) else "")
        raise TypeError(f"export_notebook takes a notebook as a dict (json.load of an .ipynb file), "
                        f"got {type(nb).__name__}{hint}")
    cells = nb.get("cells")
    if not isinstance(cells, list):
        raise ValueError(f"not a notebook: 'cells' should be a list of cells, got {type(cells).__name__}")
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict):
            raise ValueError(f"not a notebook: cell {index} should be a dict, got {type(cell).__name__}")
        metadata = cell.get("metadata", {})
        tags = metadata.get("tags", []) if isinstance(metadata, dict) else None
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ValueError(f"cell {index}: metadata.tags should be a list of strings such as ['lang-en'], "
                             f"got {tags!r}")


def export_notebook(nb: dict[str, Any], lang: str) -> dict[str, Any]:
    """Return a copy of notebook ``nb`` keeping code cells and the markdown of ``lang`` (and ``lang-both``).

    The title cell and the printed output of the course's exercise tools are put into ``lang`` too, and
    ``metadata.hooklab_language`` records it (the checkers then answer in that language, see
    :mod:`hooklab.course.lang`)."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    _check_shape(nb)
    other = {"zh": "lang-en", "en": "lang-zh"}[lang]
    for index, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") == "markdown" and _lang_tag(cell) is None:
            raise ValueError(f"markdown cell {index} has no lang-* tag; run the structure tests first "
                             "(./course test tests/course/test_notebook_structure.py)")
    # nbconvert drops the other language's cells (it works on a copy: the source stays untouched)
    node, _ = TagRemovePreprocessor(remove_cell_tags={other}).preprocess(nbformat.from_dict(copy.deepcopy(nb)), {})
    out = json.loads(json.dumps(node))  # plain dicts and lists again, strings kept as they were
    for index, cell in enumerate(out.get("cells", [])):
        if cell.get("cell_type") == "markdown" and TOC_SKIP in _source(cell):  # a copy lists every heading
            cell["source"] = strip_toc_skip(_source(cell))
        if index == 0 and cell.get("cell_type") == "markdown" and _lang_tag(cell) == "lang-both" \
                and _source(cell).startswith("#"):
            cell["source"] = one_language_title(_source(cell), lang)
        elif cell.get("cell_type") == "code":
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream":
                    text = _source({"source": output.get("text", "")})
                    if (single := one_language_output(text, lang)) != text:
                        output["text"] = single
    out.setdefault("metadata", {})["hooklab_language"] = lang
    return out


class Exported(NamedTuple):
    written: list[Path]     # the copies now up to date (written, or already equal to a fresh export)
    kept: list[Path]        # copies the learner edited in a folder of the lab's, left as they are
    replaced: list[Path]    # copies that were not valid JSON (a write cut short), replaced by fresh ones


def _fail(exc: OSError, what: str) -> OSError:
    """``exc`` again (same type), with a message that says what could not be done and what to do."""
    return type(exc)(f"could not {what}: {exc.strerror or exc} (nothing was left half-written)")


def export_folder(lang: str, out_dir: str | Path, paths: Iterable[str | Path], *, force: bool = False,
                  stamp: bool = False) -> Exported:
    """Export each notebook in ``paths`` into ``out_dir`` (same file names).

    Every notebook is read and exported before anything is written, and each file is written whole
    (:func:`write_atomic`). When ``out_dir`` holds :data:`STAMPS` (``stamp=True`` creates it: ``./course lab``
    does), a copy whose bytes differ from its stamp was edited by the learner and is kept unless ``force``;
    a copy that is not valid JSON is not the learner's work and is replaced.
    Raises ``FileNotFoundError`` / ``NotebookError`` (naming the file) / ``OSError`` with a message to act on.
    """
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    out_dir = Path(out_dir)
    sources = [Path(p) for p in paths]
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no such notebook: {', '.join(missing)}")
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"{out_dir} is a file, not a folder: give a folder for the copies "
                                 "(it is created when missing)")
    overwritten = [str(p) for p in sources if (out_dir / p.name).resolve() == p.resolve()]
    if overwritten:
        raise ValueError(f"--out {out_dir} would overwrite the bilingual source {', '.join(overwritten)}; "
                         "choose another folder (the default is build/<lang>)")
    exported = []
    for src in sources:
        try:
            exported.append((src, export_notebook(read_notebook(src), lang)))
        except NotebookError:
            raise
        except (TypeError, ValueError) as exc:
            raise NotebookError(f"{src}: {exc}") from None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(exc, f"create the folder {out_dir}") from None
    stamps_file = out_dir / STAMPS
    stamps: dict[str, str] | None = None
    if stamp or stamps_file.exists():
        try:
            stamps = json.loads(stamps_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stamps = {}
        if not isinstance(stamps, dict):
            stamps = {}
    result = Exported([], [], [])
    for src, nb in exported:
        target = out_dir / src.name
        data = (json.dumps(nb, ensure_ascii=False, indent=1) + "\n").encode("utf-8")
        try:
            current = target.read_bytes() if target.is_file() else None
        except OSError:
            current = None
        if current is not None and current != data:
            if not is_json(current):
                result.replaced.append(target)
            elif stamps is not None and not force and stamps.get(src.name) != sha256_hex(current):
                result.kept.append(target)
                continue
        if current != data:
            try:
                write_atomic(target, data.decode("utf-8"))
            except OSError as exc:
                raise _fail(exc, f"write {target}") from None
        if stamps is not None:
            stamps[src.name] = sha256_hex(data)
        result.written.append(target)
    if stamps is not None:
        try:
            write_atomic(stamps_file, json.dumps(stamps, indent=1, sort_keys=True) + "\n")
        except OSError as exc:
            raise _fail(exc, f"write {stamps_file}") from None
    return result


def export_notebooks(lang: str, out_dir: str | Path, paths: Iterable[str | Path], *,
                     force: bool = False) -> list[Path]:
    """Export each notebook in ``paths`` into ``out_dir`` (same file names); return the files now up to date.

    See :func:`export_folder`, which also says which copies were kept because the learner edited them."""
    return export_folder(lang, out_dir, paths, force=force).written
