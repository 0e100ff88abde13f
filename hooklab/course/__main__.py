"""Command line: ``python -m hooklab.course export --lang zh|en [--out DIR] [--force] [NOTEBOOK ...]`` and
``python -m hooklab.course ask "pasted error or your own words" [--lang zh|en|both] [-k N] [--program]``
(``--program``: also print the best answer's program that shows the message, and its fix)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .notebook import LANGS


def _programs(answers: list, lang: str) -> str:
    """The best answer's program and its fix, as ``--program`` prints them."""
    hit = next((h for h in answers if h.program and h.program.get("show")), None)
    langs = ("zh", "en") if lang == "both" else (lang,)
    if hit is None:
        return "\n".join({"zh": "这些答案都没有可运行的程序。", "en": "None of these answers has a program."}[x]
                         for x in langs)
    out = []
    for x in langs:
        out += ["", hit.program_text(x)]
        if hit.program.get("fix"):
            out += [hit.program_text(x, fix=True)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hooklab.course")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="write one-language copies of the notebooks")
    export.add_argument("--lang", required=True, choices=LANGS)
    export.add_argument("--out", help="output folder (default: build/<lang>)")
    export.add_argument("--force", action="store_true",
                        help="also overwrite copies you edited in a folder of ./course lab's working copies")
    export.add_argument("notebooks", nargs="*", help="default: notebooks/*.ipynb")
    ask = commands.add_parser("ask", help="the places in the course that answer a pasted error or a question")
    ask.add_argument("query", nargs="+", help="an error message or your own words, in Chinese or English")
    ask.add_argument("--lang", choices=("zh", "en", "both"), help="the language of the titles")
    ask.add_argument("-k", type=int, default=5, help="how many answers (default 5)")
    ask.add_argument("--program", action="store_true",
                     help="also print the program of the best answer that has one (it shows the message), and its fix")
    args = parser.parse_args(argv)
    if args.command == "ask":
        from .asking import ask as lookup

        if args.k < 1:
            parser.error("-k takes a whole number of at least 1")
        query = " ".join(args.query)
        if not query.strip():
            parser.error("ask needs a question or a pasted message, e.g. ask \"hook not called\"")
        try:
            answers = lookup(query, k=args.k, lang=args.lang)
        except ValueError as refused:  # too long: it says to paste the traceback's last lines
            parser.error("ask " + str(refused).removeprefix("course.ask "))
        print(repr(answers))
        if args.program:
            print(_programs(answers, args.lang or answers.lang))
        return 0 if answers else 1
    try:
        from .export import export_folder  # needs the course extra (nbformat): imported only for export
    except ImportError as missing:  # its message says how to add the extra to this installation
        print(f"error: {missing}", file=sys.stderr)
        return 2

    paths = args.notebooks or sorted(Path("notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        parser.error("no notebooks given and none found in notebooks/")
    try:
        result = export_folder(args.lang, args.out or Path("build") / args.lang, paths, force=args.force)
    except OSError as exc:  # FileNotFoundError (a source), a file as --out, a folder that cannot be written
        hint = "" if isinstance(exc, FileNotFoundError) else "; --out chooses another folder"
        print(f"error: {exc}{hint}", file=sys.stderr)
        return 2
    except ValueError as exc:  # NotebookError (names the file), --out on the sources
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in result.replaced:
        print(f"note: replaced {path}, which was not valid JSON (a write cut short)", file=sys.stderr)
    for path in result.kept:
        print(f"note: kept {path}: you edited it in the lab (--force overwrites it)", file=sys.stderr)
    for path in result.written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
