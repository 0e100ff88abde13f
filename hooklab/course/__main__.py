"""Command line: ``python -m hooklab.course export --lang zh|en [--out DIR] [NOTEBOOK ...]``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .export import LANGS, export_notebooks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hooklab.course")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="write one-language copies of the notebooks")
    export.add_argument("--lang", required=True, choices=LANGS)
    export.add_argument("--out", help="output folder (default: build/<lang>)")
    export.add_argument("notebooks", nargs="*", help="default: notebooks/*.ipynb")
    args = parser.parse_args(argv)

    paths = args.notebooks or sorted(Path("notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        parser.error("no notebooks given and none found in notebooks/")
    try:
        written = export_notebooks(args.lang, args.out or Path("build") / args.lang, paths)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
