"""The release tag names pyproject.toml's version: ``python .github/scripts/check_tag.py v0.1.0`` exits 0 when the
version is 0.1.0, else 1 with what to do (release.yml runs it before building).

>>> problem("v0.1.0", "0.1.0") is None
True
>>> problem("0.1.0", "0.1.0")
"the tag should be 'v' followed by the version: v0.1.0, got '0.1.0'"
>>> problem("v0.2.0", "0.1.0")
"tag v0.2.0 does not match pyproject.toml's version 0.1.0: set version = '0.2.0' there first, or tag v0.1.0"
"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def problem(tag: str, version: str) -> str | None:
    if not tag.startswith("v"):
        return f"the tag should be 'v' followed by the version: v{version}, got {tag!r}"
    if tag[1:] != version:
        return (f"tag {tag} does not match pyproject.toml's version {version}: set version = {tag[1:]!r} there "
                f"first, or tag v{version}")
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: check_tag.py TAG", file=sys.stderr)
        return 2
    version = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
    message = problem(argv[0], version)
    if message:
        print(f"check_tag.py: {message}", file=sys.stderr)
        return 1
    print(f"check_tag.py: releasing hooklab {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
