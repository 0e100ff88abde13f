"""The README is the project's front door: this checks that it stays one, and fills in its links to the published
course once the repository has an address.

    python -m tools.site.readme check                              # exit 1 with what is wrong (tests/tools/test_readme.py)
    python -m tools.site.readme stamp --repository-url URL         # print README.md with its site and Colab links filled in
    python -m tools.site.readme stamp --repository-url URL --write # ... and write it (then commit it)

A front door (:func:`problems`): at most :data:`MAX_LINES` lines; both languages (every ``##`` heading names its
part in Chinese and in English, and both have prose); every relative link resolves to a file of the repository, and an
anchor to a heading of that file (GitHub's ids: :func:`github_id`); every ``./course X`` it shows is a subcommand of the
``course`` script and every ``python -m M`` a module that exists. Everything else (the maintainers' manual) lives in
CONTRIBUTING.md and docs/maintainers/.

The website's address, the Colab links and the ``pip install`` from the repository are only known where the
repository lives. Until it has its address, the README says so where a reader sees it, in both languages, and keeps
the lines with the links commented out right below, written with the placeholders the package page uses
(``https://OWNER.github.io/REPO/``, ``https://github.com/OWNER/REPO``, tools/launch/package_page.py) and
``colab.research.google.com/github/OWNER/REPO/``::

    <!-- until the repository has its address: ... -->
    what a reader sees now (both languages)
    <!-- once it has one:
    the lines with the links, placeholders and all
    -->

``stamp`` puts each such block's second part in its place and fills in the placeholders, once, when the repository
has its address (CONTRIBUTING.md says when); ``check`` fails on a placeholder a reader would see (a link to an
address that is not the project's). Links that need no address (the notebooks, the manual) are relative, so they
open on GitHub and in a clone alike.
"""
from __future__ import annotations

import argparse
import re
import sys
import unicodedata
from importlib.util import find_spec
from pathlib import Path

from ..launch import package_page

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 150
COLAB_PLACEHOLDER = "colab.research.google.com/github/OWNER/REPO/"
PLACEHOLDERS = (package_page.SITE_PLACEHOLDER, package_page.REPOSITORY_PLACEHOLDER, COLAB_PLACEHOLDER)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_LATIN_WORD = re.compile(r"\b[A-Za-z]{3,}\b")
_COURSE_COMMAND = re.compile(r"\./course ([a-z][\w-]*)")
_MODULE_COMMAND = re.compile(r"python -m ([A-Za-z_][\w.]*)")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_UNTIL = "<!-- until the repository has its address"
# what a reader sees until the repository has its address, then the lines that replace it once it has one
_UNPUBLISHED = re.compile(rf"^{re.escape(_UNTIL)}\b[^\n]*-->\n(?P<now>.*?)^<!-- once it has one:\n(?P<then>.*?)^-->\n",
                          re.DOTALL | re.MULTILINE)
_PLACEHOLDER = re.compile(r"\bOWNER\b|\bREPO\b")


class ReadmeError(Exception):
    """Bad input to ``stamp`` (a repository where Colab cannot open notebooks): the message says what to do."""


def github_id(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, each space a hyphen.

    >>> github_id("课程目录 / The notebooks")
    '课程目录--the-notebooks'
    >>> github_id("食谱：实践者真正问过的问题 / Recipes: the questions")
    '食谱实践者真正问过的问题--recipes-the-questions'
    """
    text = re.sub(r"`", "", heading.strip().lower())
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return kept.replace(" ", "-")


def headings(markdown: str) -> set[str]:
    """The GitHub ids of a Markdown file's headings (outside code blocks), with the ``-1``, ``-2`` of repeats."""
    ids: set[str] = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (found := re.match(r"#{1,6} (.+)", line)):
            base = github_id(found.group(1))
            anchor, n = base, 0
            while anchor in ids:
                n += 1
                anchor = f"{base}-{n}"
            ids.add(anchor)
    return ids


def course_commands(script: Path) -> set[str]:
    """The subcommands of the ``course`` script (the labels of its ``case "$cmd"`` block)."""
    text = script.read_text(encoding="utf-8")
    block = text[text.index('case "$cmd" in'):]
    return {name.strip() for label in re.findall(r"^    ([a-z| -]+)\)$", block, re.MULTILINE)
            for name in label.split("|") if not name.strip().startswith("-")}


def link_problems(text: str, root: Path = ROOT, source: Path | None = None) -> list[str]:
    """Relative links of ``text`` (the file ``source``, default ``root``'s README.md) that do not resolve to a file of
    ``root`` (or to a heading of that file)."""
    source = source or root / "README.md"
    found = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # an address outside the repository (not fetched: the checks run offline)
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists() or not file.is_relative_to(root.resolve()):
            found.append(f"link to {target}: no file {path} in the repository")
        elif anchor and file.suffix == ".md" and anchor not in headings(file.read_text(encoding="utf-8")):
            found.append(f"link to {target}: {file.name} has no heading with the id {anchor!r}")
    return found


def command_problems(text: str, root: Path = ROOT) -> list[str]:
    """``./course`` subcommands that the script lacks and ``python -m`` modules that do not exist."""
    known = course_commands(root / "course")
    found = [f"./course {name}: not a command of the course script (it has: {', '.join(sorted(known))})"
             for name in sorted(set(_COURSE_COMMAND.findall(text)) - known)]
    found += [f"python -m {module}: no such module" for module in sorted(set(_MODULE_COMMAND.findall(text)))
              if module not in {"pip", "venv"} and not _module_exists(module, root)]
    return found


def _module_exists(module: str, root: Path) -> bool:
    """Whether ``python -m module`` finds something to run: in ``root`` for the repository's packages, else installed."""
    path = root / Path(*module.split("."))
    if path.with_suffix(".py").exists() or (path / "__main__.py").exists():
        return True
    if (root / module.split(".")[0]).exists():
        return False  # one of the repository's packages, without that module
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def language_problems(text: str) -> list[str]:
    """Both languages: every ``##`` heading names its part in Chinese and in English, and both have prose."""
    found = [f"heading {line!r} is not in both languages" for line in text.splitlines()
             if line.startswith("## ") and not (_CJK.search(line) and _LATIN_WORD.search(line))]
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    if len(_CJK.findall(prose)) < 300:
        found.append("the README has almost no Chinese")
    if len(_LATIN_WORD.findall(prose)) < 300:
        found.append("the README has almost no English")
    return found


def visible(text: str) -> str:
    r"""``text`` as a reader of the rendered page sees it: without its HTML comments (each line kept, emptied where a
    comment took it all, so that line numbers stay).

    >>> visible("a <!-- not shown --> b\n<!-- x\ny -->\nc")
    'a  b\n\n\nc'
    """
    return _COMMENT.sub(lambda found: "\n" * found.group(0).count("\n"), text)


def placeholder_problems(text: str) -> list[str]:
    """Placeholders (``OWNER/REPO``) a reader of the rendered page would see, as a link to an address that is not the
    project's or a command that fails; and blocks for the time before the repository has its address that do not say
    so in both languages, or that lack the lines ``stamp`` puts in their place."""
    found = [f"line {number} shows the placeholder OWNER/REPO where a reader sees it: until the repository has its "
             "address, say so there and keep the line commented out below it (tools/site/readme.py)"
             for number, line in enumerate(visible(text).splitlines(), start=1) if _PLACEHOLDER.search(line)]
    blocks = list(_UNPUBLISHED.finditer(text))
    if text.count(_UNTIL) != len(blocks):
        found.append(f"{text.count(_UNTIL)} blocks start with {_UNTIL!r} but {len(blocks)} go on with "
                     "'<!-- once it has one:' and end with a line '-->'")
    for block in blocks:
        line = text.count("\n", 0, block.start()) + 1
        now = visible(block["now"])
        if not (_CJK.search(now) and _LATIN_WORD.search(now)):
            found.append(f"line {line}: what a reader sees until the repository has its address is not in both "
                         "languages")
        if not _PLACEHOLDER.search(block["then"]):
            found.append(f"line {line}: the lines for once the repository has its address hold no OWNER/REPO to "
                         "fill in")
    return found


def problems(text: str, root: Path = ROOT) -> list[str]:
    """What keeps ``text`` (the README) from being a front door; empty: nothing."""
    lines = text.count("\n") + (not text.endswith("\n"))
    found = [f"{lines} lines: a front door has at most {MAX_LINES} (the manual is CONTRIBUTING.md and "
             "docs/maintainers/)"] if lines > MAX_LINES else []
    return (found + language_problems(text) + placeholder_problems(text) + link_problems(text, root)
            + command_problems(text, root))


def stamp(text: str, repository: str) -> str:
    r"""``text`` with each block for the time before the repository has its address replaced by its lines for once it
    has one, and the website's, the repository's and Colab's placeholders filled in for ``repository``.

    >>> print(stamp("<!-- until the repository has its address: stamp -->\n网站稍后 / the site: later\n"
    ...             "<!-- once it has one:\n[site](https://OWNER.github.io/REPO/) "
    ...             "[00](https://colab.research.google.com/github/OWNER/REPO/blob/launch/en/00.ipynb)\n-->\n",
    ...             "https://github.com/Some-Org/hooklab"), end="")
    [site](https://some-org.github.io/hooklab/) [00](https://colab.research.google.com/github/Some-Org/hooklab/blob/launch/en/00.ipynb)
    """
    found = package_page.URL.fullmatch(repository.rstrip("/"))
    if not found:
        raise ReadmeError(f"--repository-url should be https://HOST/OWNER/REPO, got {repository!r}")
    text = _UNPUBLISHED.sub(lambda block: block["then"], text)
    if COLAB_PLACEHOLDER in text:
        if found.group(1) != "github.com":
            raise ReadmeError(f"Colab opens notebooks from GitHub only, and {repository} is on {found.group(1)}: take "
                              "the Colab links out of README.md (the website's launch buttons stay)")
        text = text.replace(COLAB_PLACEHOLDER, f"colab.research.google.com/github/{found.group(2)}/{found.group(3)}/")
    return package_page.stamp_page(text, repository)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.site.readme", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="exit 1 with what keeps README.md from being a front door")
    stamp_command = commands.add_parser("stamp", help="fill in the README's site, repository and Colab links")
    stamp_command.add_argument("--repository-url", required=True, help="https://github.com/OWNER/REPO")
    stamp_command.add_argument("--write", action="store_true", help="write README.md (then commit it)")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    if args.command == "check":
        found = problems(text)
        for problem in found:
            print(f"[readme] {problem}", file=sys.stderr)
        return 1 if found else 0
    try:
        stamped = stamp(text, args.repository_url)
    except (ReadmeError, package_page.PageError) as error:
        print(f"[readme] {error}", file=sys.stderr)
        return 2
    if args.write:
        README.write_text(stamped, encoding="utf-8")
        print(f"[readme] README.md: links filled in for {args.repository_url}")
    else:
        sys.stdout.write(stamped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
