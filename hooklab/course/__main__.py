"""Command line: ``python -m hooklab.course export --lang zh|en [--out DIR] [--force] [NOTEBOOK ...]``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .export import STAMPS, export_folder
from .notebook import LANGS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hooklab.course")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="write one-language copies of the notebooks")
    export.add_argument("--lang", required=True, choices=LANGS)
    export.add_argument("--out", help="output folder (default: build/<lang>)")
    export.add_argument("--force", action="store_true",
                        help=f"also overwrite copies you edited in a folder of ./course lab's (one holding {STAMPS})")
    export.add_argument("notebooks", nargs="*", help="default: notebooks/*.ipynb")
    args = parser.parse_args(argv)

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
