"""Links to the documentation and source of the PyTorch release the course is pinned to, not of whatever is newest.

    python -m tools.launch.pinned_links check     # exit 1, listing each link to docs/stable, main, ... (tests run this)
    python -m tools.launch.pinned_links fix       # rewrite them to the pinned release's

The course states what torch 2.15.0 does; ``docs/stable`` moves on with every release, and ``main`` with every
commit, so such a link comes to describe another version than the cells beside it. The pins come from
pyproject.toml's course group (torch, torchvision). Rewritten:

- ``pytorch.org/docs/stable/...`` (also ``main``, ``master``; with or without ``docs.``) ->
  ``https://docs.pytorch.org/docs/2.15/...``, and ``pytorch.org/vision/stable/...`` -> ``.../vision/0.29/...``;
- ``github.com/pytorch/pytorch/blob/main/...`` (``tree``, ``master``) -> ``.../blob/v2.15.0/...``, and likewise for
  pytorch/vision.

Links to a stated version (``docs/2.9/``) are left alone: they say which version they mean. Files: the notebooks'
markdown cells (code and outputs are never touched: nbval compares outputs), README.md, the site's data and
landing pages (tools/site/), and hooklab's docstrings.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
MOVING = r"(?:stable|main|master|latest)"


def pins(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """{"torch": "2.15.0", "torchvision": "0.29.2"} from pyproject.toml's course group."""
    group = tomllib.loads(pyproject.read_text(encoding="utf-8"))["dependency-groups"]["course"]
    found = {}
    for spec in group:
        name, _, version = spec.partition("==")
        if name in ("torch", "torchvision") and version:
            found[name] = version.strip()
    return found


def rules(pinned: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    torch, vision = pinned["torch"], pinned["torchvision"]
    short = lambda v: ".".join(v.split(".")[:2])  # noqa: E731
    return [
        (re.compile(rf"https?://(?:docs\.)?pytorch\.org/docs/{MOVING}/"),
         f"https://docs.pytorch.org/docs/{short(torch)}/"),
        (re.compile(rf"https?://(?:docs\.)?pytorch\.org/vision/{MOVING}/"),
         f"https://docs.pytorch.org/vision/{short(vision)}/"),
        (re.compile(rf"https://github\.com/pytorch/pytorch/(blob|tree)/{MOVING}/"),
         rf"https://github.com/pytorch/pytorch/\1/v{torch}/"),
        (re.compile(rf"https://github\.com/pytorch/vision/(blob|tree)/{MOVING}/"),
         rf"https://github.com/pytorch/vision/\1/v{vision}/"),
    ]


def pin_text(text: str, pinned: dict[str, str]) -> str:
    """``text`` with every moving link pinned.

    >>> p = {"torch": "2.15.0", "torchvision": "0.29.2"}
    >>> pin_text("see https://pytorch.org/docs/stable/notes/autograd.html#hooks and "
    ...          "https://github.com/pytorch/pytorch/blob/main/torch/utils/hooks.py", p)
    'see https://docs.pytorch.org/docs/2.15/notes/autograd.html#hooks and https://github.com/pytorch/pytorch/blob/v2.15.0/torch/utils/hooks.py'
    >>> pin_text("https://docs.pytorch.org/docs/2.9/x.html https://pytorch.org/vision/main/models.html", p)
    'https://docs.pytorch.org/docs/2.9/x.html https://docs.pytorch.org/vision/0.29/models.html'
    """
    for pattern, replacement in rules(pinned):
        text = pattern.sub(replacement, text)
    return text


def moving_links(text: str) -> list[str]:
    """The links in ``text`` that :func:`pin_text` would change."""
    found = []
    for pattern, _ in rules({"torch": "0.0.0", "torchvision": "0.0.0"}):
        found += [m.group(0) for m in re.finditer(pattern.pattern + r"[^\s)\"'<>\]]*", text)]
    return found


def files(root: Path = ROOT) -> list[Path]:
    return [*sorted((root / "notebooks").glob("*.ipynb")), root / "README.md", root / "CONTRIBUTING.md",
            *sorted((root / "docs" / "maintainers").glob("*.md")),
            *sorted((root / "tools" / "site").rglob("*.toml")), *sorted((root / "tools" / "site").rglob("*.md")),
            *sorted((root / "hooklab").rglob("*.py"))]


def pin_file(path: Path, pinned: dict[str, str], *, write: bool) -> list[str]:
    """The moving links of ``path`` (a notebook: its markdown cells only); with ``write``, pin them in place (a
    notebook keeps its JSON layout: only those lines change)."""
    raw = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        found = moving_links(raw)
        if write and found:
            path.write_text(pin_text(raw, pinned), encoding="utf-8")
        return found
    nb = json.loads(raw)
    found = []
    for cell in nb["cells"]:
        if cell.get("cell_type") != "markdown":
            continue
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        links = moving_links(text)
        if links:
            found += links
            cell["source"] = pin_text(text, pinned).splitlines(keepends=True)
    if write and found:
        path.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.launch.pinned_links", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("check", "fix"))
    parser.add_argument("paths", nargs="*", help="files (default: the notebooks, README.md, tools/site/, hooklab/)")
    args = parser.parse_args(argv)
    pinned = pins()
    paths = [Path(p) for p in args.paths] or files()
    total = 0
    for path in paths:
        found = pin_file(path, pinned, write=args.command == "fix")
        total += len(found)
        for link in found:
            print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {link}", file=sys.stderr)
    if args.command == "check" and total:
        print(f"[course] {total} link(s) to a moving version: python -m tools.launch.pinned_links fix pins them to "
              f"torch {pinned['torch']} / torchvision {pinned['torchvision']}", file=sys.stderr)
        return 1
    if args.command == "fix":
        print(f"[course] {total} link(s) pinned to torch {pinned['torch']} / torchvision {pinned['torchvision']}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
