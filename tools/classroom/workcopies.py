"""The learner's working copies of the notebooks: what `./course lab` serves and `./course reset [NN ...]` renews.

The tracked notebooks in ``notebooks/`` are never served: a learner's answers and outputs saved into them would fail
``./course test`` and conflict with ``git pull``. Instead the lab serves copies in ``work/`` (git-ignored):

- ``work/zh-en/``: the bilingual notebooks (``./course lab``);
- ``work/zh/``, ``work/en/``: the one-language copies (``./course lab --lang zh|en``), exported as
  ``./course export`` does (:func:`hooklab.course.export.export_notebook`).

Each copy carries the ``language_info`` that the course's kernel reports (:func:`kernel_language_info`): with the
committed ``{"name": "python"}``, JupyterLab filled in the kernel's on opening and marked the notebook changed (●)
before the learner typed anything.

A copy, once made, is the learner's: it is never overwritten. :data:`STAMPS` in each folder records, for each copy as
it was written, a digest of what the learner writes (its cells' types and sources: :func:`content_digest`; saving
rewrites the notebook's metadata, JupyterLab's autosave included, and running a cell its outputs, and neither is the
learner's work) and the sha256 of its bytes (to tell when the course's version changed). That tells two things apart
at every lab start:

- a copy the learner has not changed (no cell edited, added or removed) follows the course: when the tracked notebook
  changes (a ``git pull``), the copy is renewed and the lab says so;
- a copy the learner changed is kept; when the course's version has changed since the copy was made, the lab says so
  and names the command that gives a fresh copy (:func:`reset`), which first keeps the learner's copy as
  ``NN_name.bak-<date>.ipynb`` next to it.

The notebooks import hooklab from the environment (an editable install), and link to each other by file name, so
they work from any folder that holds all of them; a kernel starts in the folder of its notebook, so files a notebook
writes land in ``work/`` too. ``COURSE_WORK_DIR`` moves the whole ``work/`` folder (the tests use it).

Why not nbgitpuller, the maintained tool for "the learner's copy, merged with the course's updates": it pulls a git
repository into the learner's folder on a JupyterHub (a server extension reached through a link), merging by git's
rules and keeping the learner's version of a changed file. Here the copies are made from a local checkout that the
learner updates with ``git pull``, they are one-language exports as well as the bilingual notebooks (not files of the
repository), and a copy the learner never edited should follow the course's new version, which git's merge cannot
tell from a copy the learner edited and JupyterLab re-saved. So this module keeps its own small rule (above).
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANGS = ("zh", "en", "both")
FOLDERS = {"both": "zh-en", "zh": "zh", "en": "en"}   # work/<folder>/ per lab language
# The functions that read or write copies import hooklab.course.export when called: importing hooklab imports
# torch (seconds), which `./course lab --version` or `--print-command` and a refused command line need not wait for.


class UsageError(Exception):
    pass


def work_dir(root: Path = ROOT) -> Path:
    """``work/`` in the checkout, or the folder ``COURSE_WORK_DIR`` names."""
    given = os.environ.get("COURSE_WORK_DIR")
    return Path(given).resolve() if given else root / "work"


def copies_dir(root: Path, lang: str) -> Path:
    """The folder of the working copies for one lab language (``work/zh-en``, ``work/zh``, ``work/en``)."""
    return work_dir(root) / FOLDERS[lang]


def course_notebooks(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def shown(path: Path, root: Path = ROOT) -> str:
    """``path`` relative to the checkout when it is inside it (messages name ``work/zh-en/...``)."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def kernel_language_info() -> dict[str, object]:
    """The ``language_info`` the course's kernel (ipykernel, in this Python: ``./course`` runs this in .venv, whose
    Python the kernel is) reports, keys sorted as Jupyter writes them."""
    from ipykernel.ipkernel import IPythonKernel

    return json.loads(json.dumps(IPythonKernel.language_info, sort_keys=True))


def fresh_copy(lang: str, source: Path) -> bytes:
    """The bytes of a fresh working copy of ``source`` for ``lang``: the notebook (one language for ``zh`` / ``en``)
    with the kernel's ``language_info``. Raises NotebookError (naming the file) when the tracked notebook is not
    valid JSON (e.g. a merge left conflict markers in it)."""
    from hooklab.course.export import export_notebook
    from hooklab.course.notebook import read_notebook

    nb = read_notebook(source)
    if lang != "both":
        nb = export_notebook(nb, lang)
    nb.setdefault("metadata", {})["language_info"] = kernel_language_info()
    return (json.dumps(nb, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def content_digest(data: bytes) -> str:
    """sha256 of what the learner writes in a notebook: each cell's type, source and attachments, in order.
    Metadata (JupyterLab rewrites it on saving), outputs and execution counts (running a cell) are left out;
    bytes that are not a notebook digest as they are.

    >>> a = b'{"cells": [{"cell_type": "code", "source": ["x = 1"], "outputs": []}], "metadata": {}}'
    >>> b = b'{"cells": [{"cell_type": "code", "source": "x = 1", "outputs": [{"text": "1"}], "execution_count": 3}],'\\
    ...     b' "metadata": {"language_info": {"name": "python", "version": "3.11.7"}}}'
    >>> content_digest(a) == content_digest(b), content_digest(a) == content_digest(a.replace(b"x = 1", b"x = 2"))
    (True, False)
    """
    import hashlib

    try:
        cells = json.loads(data.decode("utf-8"))["cells"]
        written = [[c.get("cell_type"), "".join(c["source"]) if isinstance(c.get("source"), list) else c.get("source"),
                    c.get("attachments")] for c in cells]
    except (ValueError, KeyError, TypeError, AttributeError):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha256(json.dumps(written, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()


def make_stamp(data: bytes) -> str:
    """The stamp of a copy written with ``data``: ``"<content digest> <sha256 of the bytes>"``."""
    from hooklab.course.notebook import sha256_hex

    return f"{content_digest(data)} {sha256_hex(data)}"


def _stamp_parts(stamp: str) -> tuple[str | None, str]:
    """(content digest, bytes' sha256) of a stamp; a stamp of one hash (written before the content digest, or by
    ``./course export``) has the bytes' sha256 only."""
    content, _, raw = stamp.rpartition(" ")
    return content or None, raw


def untouched(stamp: str | None, current: bytes) -> bool:
    """Whether the copy whose bytes are ``current`` is as written: its bytes, or what the learner writes in it."""
    from hooklab.course.notebook import sha256_hex

    if stamp is None:
        return False
    content, raw = _stamp_parts(stamp)
    return sha256_hex(current) == raw or (content is not None and content_digest(current) == content)


def course_changed(stamp: str | None, data: bytes, legacy: bytes) -> bool:
    """Whether the course's version of a copy, ``data`` now, differs from the one the copy was made from.
    ``legacy``: the fresh copy as it was written before copies carried the kernel's language_info (what a
    one-hash stamp was taken of), so that that change alone does not count as a new version."""
    from hooklab.course.notebook import sha256_hex

    if stamp is None:
        return True
    content, raw = _stamp_parts(stamp)
    return raw != sha256_hex(data if content is not None else legacy)


def legacy_copy(lang: str, source: Path) -> bytes:
    """A fresh copy as it was made before it carried the kernel's language_info: the bilingual notebook's bytes,
    or the one-language export."""
    from hooklab.course.export import export_notebook
    from hooklab.course.notebook import read_notebook

    if lang == "both":
        return source.read_bytes()
    return (json.dumps(export_notebook(read_notebook(source), lang), ensure_ascii=False, indent=1) + "\n").encode()


def _read_stamps(folder: Path) -> dict[str, str]:
    from hooklab.course.export import STAMPS

    try:
        stamps = json.loads((folder / STAMPS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in stamps.items() if isinstance(v, str)} if isinstance(stamps, dict) else {}


def _write_stamps(folder: Path, stamps: dict[str, str]) -> None:
    from hooklab.course.export import STAMPS
    from hooklab.course.notebook import write_atomic

    write_atomic(folder / STAMPS, json.dumps(stamps, indent=1, sort_keys=True) + "\n")


def backup_name(copy: Path, today: datetime.date | None = None) -> Path:
    """``NN_name.bak-<date>.ipynb`` next to ``copy``; ``-2``, ``-3``, ... when that name is taken."""
    date = (today or datetime.date.today()).isoformat()
    stem = copy.name.removesuffix(".ipynb")
    candidate, n = copy.with_name(f"{stem}.bak-{date}.ipynb"), 1
    while candidate.exists():
        n += 1
        candidate = copy.with_name(f"{stem}.bak-{date}-{n}.ipynb")
    return candidate


def keep_as_backup(copy: Path, data: bytes, today: datetime.date | None = None) -> Path:
    """Write ``data`` (the copy's bytes) to a new backup file next to ``copy``; never replaces a file."""
    while True:
        backup = backup_name(copy, today)
        try:
            with open(backup, "xb") as f:   # "x": fails rather than overwrite a backup made meanwhile
                f.write(data)
            return backup
        except FileExistsError:
            continue
        except BaseException:
            backup.unlink(missing_ok=True)   # no half-written backup left behind
            raise


def reset_command(name: str, lang: str) -> str:
    nn = name[:2]
    return f"./course reset {nn}" + ("" if lang == "both" else f" --lang {lang}")


def move_old_copies(lang: str, *, root: Path = ROOT) -> list[str]:
    """Once: ``./course lab --lang zh|en`` kept its copies in ``build/lab/<lang>/notebooks/`` (and before that in
    ``build/<lang>/``); move that folder, when it is the lab's (it holds the stamps), to :func:`copies_dir` unless
    that exists already. (Plain ``./course lab`` served the tracked notebooks themselves: nothing to move.)"""
    new = copies_dir(root, lang)
    if lang == "both" or new.exists():
        return []
    from hooklab.course.export import STAMPS

    for old in (root / "build" / "lab" / lang / "notebooks", root / "build" / lang):
        if (old / STAMPS).is_file():
            try:
                new.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(old, new)
            except OSError as exc:
                return [f"could not move your earlier copies from {shown(old, root)}/ to {shown(new, root)}/ "
                        f"({exc.strerror or exc}); copy any you edited there yourself"]
            return [f"moved your copies from {shown(old, root)}/ to {shown(new, root)}/, where your working copies "
                    "live now"]
    return []


def prepare_copies(lang: str, *, root: Path = ROOT, sources: list[Path] | None = None) -> list[str]:
    """Make the working copies that are missing and renew the untouched ones whose notebook changed; keep every copy
    the learner changed. Return the notes to print at lab start."""
    from hooklab.course.notebook import is_json, sha256_hex, write_atomic

    sources = course_notebooks(root) if sources is None else sources
    folder = copies_dir(root, lang)
    fresh = [(src, fresh_copy(lang, src)) for src in sources]   # read everything before writing anything
    folder.mkdir(parents=True, exist_ok=True)
    stamps = _read_stamps(folder)
    made, notes = [], []
    try:
        for src, data in fresh:
            legacy = legacy_copy(lang, src) if stamps.get(src.name, " ").count(" ") == 0 else data
            copy = folder / src.name
            current = copy.read_bytes() if copy.is_file() else None
            stamp = stamps.get(src.name)
            if current is None:
                write_atomic(copy, data.decode("utf-8"))
                made.append(copy)
            elif current == data:
                pass
            elif not is_json(current):   # a save cut short: not the learner's work, but keep it anyway
                backup = keep_as_backup(copy, current)
                write_atomic(copy, data.decode("utf-8"))
                notes.append(f"{shown(copy, root)} was not valid JSON (a save cut short?): a fresh copy replaces it, "
                             f"the broken one is kept as {backup.name}")
            elif untouched(stamp, current):   # not changed by the learner: it follows the course
                if course_changed(stamp, data, legacy):
                    write_atomic(copy, data.decode("utf-8"))
                    notes.append(f"{src.name[:2]} has a newer version, and you had not changed your copy: "
                                 f"{shown(copy, root)} is the new version now")
                elif sha256_hex(current) == _stamp_parts(stamp or "")[1]:   # as written before copies carried
                    write_atomic(copy, data.decode("utf-8"))                   # the kernel's language_info
                # else: opened, saved or run, nothing written: it stays as it is (the learner's outputs too)
            else:                             # the learner's work: never overwritten
                if course_changed(stamp, data, legacy):
                    what = "has a newer version" if stamp else "differs from the course's version"
                    notes.append(f"{src.name[:2]} {what}: {reset_command(src.name, lang)} gives a fresh copy "
                                 f"(your copy is kept as {backup_name(copy).name})")
                continue
            stamps[src.name] = make_stamp(data)
    finally:
        _write_stamps(folder, stamps)
    if made:
        what = f"{len(made)} notebooks" if len(made) > 1 else made[0].name
        notes.insert(0, f"copied {what} into {shown(folder, root)}/: your working copies, yours to change "
                        f"(notebooks/ stays as the course ships it; ./course reset NN gives a fresh copy)")
    return notes


def pick(names: list[str], sources: list[Path]) -> list[Path]:
    """The notebooks that ``names`` mean: ``03``, ``3``, ``03_module_forward_hooks``, ``notebooks/03_....ipynb``."""
    picked = []
    for name in names:
        stem = Path(name).name.removesuffix(".ipynb").split(".bak-")[0]
        key = stem.zfill(2) if stem.isdigit() else stem
        matches = [s for s in sources if s.stem == key or (key.isdigit() and s.name.startswith(key + "_"))]
        if not matches:
            raise UsageError(f"no notebook {name!r}: give its number, {sources[0].name[:2]} to "
                             f"{sources[-1].name[:2]} (e.g. ./course reset 03)" if sources else
                             f"no notebook {name!r}: notebooks/ holds none")
        picked += [m for m in matches if m not in picked]
    return picked


def reset(lang: str, names: list[str], *, root: Path = ROOT, today: datetime.date | None = None) -> list[str]:
    """Fresh working copies of the notebooks ``names`` (all when empty) for ``lang``; a copy that differs from the
    fresh one is first kept as ``NN_name.bak-<date>.ipynb``. Return what was done, one line per notebook."""
    sources = course_notebooks(root)
    chosen = pick(names, sources) if names else sources   # an unknown name is refused before hooklab is imported
    from hooklab.course.notebook import write_atomic

    folder = copies_dir(root, lang)
    fresh = [(src, fresh_copy(lang, src)) for src in chosen]
    folder.mkdir(parents=True, exist_ok=True)
    stamps = _read_stamps(folder)
    lines = []
    try:
        for src, data in fresh:
            copy = folder / src.name
            current = copy.read_bytes() if copy.is_file() else None
            if current == data:
                lines.append(f"{shown(copy, root)}: already a fresh copy")
            else:
                backup = keep_as_backup(copy, current, today) if current is not None else None
                write_atomic(copy, data.decode("utf-8"))
                lines.append(f"{shown(copy, root)}: fresh copy" + (
                    f"; yours is kept as {shown(backup, root)}" if backup else ""))
            stamps[src.name] = make_stamp(data)
    finally:
        _write_stamps(folder, stamps)
    return lines


def reset_main(args: list[str], *, root: Path = ROOT) -> int:
    """``./course reset [NN ...] [--lang zh|en|both]``: without ``--lang``, every folder of working copies there
    is (``work/zh-en`` when there is none yet)."""
    langs, names, i = [], [], 0
    while i < len(args):
        arg = args[i]
        if arg in ("-h", "--help"):
            print(__doc__.split("\n\n")[0] + "\n\nusage: ./course reset [NN ...] [--lang zh|en|both]")
            return 0
        if arg == "--lang" or arg.startswith("--lang="):
            value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else None)
            i += 0 if "=" in arg else 1
            if value is None:
                print("[course] error: --lang needs a value: zh, en or both (usage: ./course reset [NN ...] "
                      "[--lang zh|en|both])", file=sys.stderr)
                return 2
            if value not in LANGS:
                print(f"[course] error: --lang must be zh, en or both, got {value!r}", file=sys.stderr)
                return 2
            langs.append(value)
        elif arg.startswith("-"):
            print(f"[course] error: unknown option {arg!r} (usage: ./course reset [NN ...] [--lang zh|en|both])",
                  file=sys.stderr)
            return 2
        else:
            names.append(arg)
        i += 1
    if not langs:
        langs = [lang for lang in LANGS if copies_dir(root, lang).is_dir()] or ["both"]
    try:
        for lang in langs:
            for line in reset(lang, names, root=root):
                print(f"[course] {line}", file=sys.stderr)
    except UsageError as exc:
        print(f"[course] error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:   # a notebook that cannot be read, a folder that cannot be written
        print(f"[course] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(reset_main(sys.argv[1:]))
