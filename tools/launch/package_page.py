"""hooklab's page on PyPI (``docs/pypi.md``, pyproject.toml's ``readme``), its project URLs, and the package sizes
the maintainers' manual states (docs/maintainers/package.md: :data:`README`).

    python -m tools.launch.package_page stamp --repository-url URL   # CI, before `uv build`: the links of the release
    python -m tools.launch.package_page sizes DIST [--write]         # the README's wheel and sdist sizes, from a build

The repository's address is known only where the package is built for release: the Actions context
(``github.server_url/github.repository``). So the committed page writes its links with the placeholders
``https://github.com/OWNER/REPO`` and ``https://OWNER.github.io/REPO/``, and ``stamp`` (run by
.github/scripts/check_package.sh in CI and in the release) fills them in and writes pyproject.toml's
``[project.urls]`` (the links in PyPI's sidebar; ``./course site`` reads its repository from there too). A local
build keeps the placeholders. Standard library only: CI runs it before any environment is built.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "pypi.md"
PYPROJECT = ROOT / "pyproject.toml"
README = ROOT / "docs" / "maintainers" / "package.md"  # the manual's page on the package states its sizes
REPOSITORY_PLACEHOLDER = "https://github.com/OWNER/REPO"
SITE_PLACEHOLDER = "https://OWNER.github.io/REPO/"
URL = re.compile(r"https://([^\s/]+)/([^\s/]+)/([^\s/]+)")
# the README's sentences that state the build's sizes: "wheel（901 KiB" (zh) and "a wheel (901 KiB" (en); the sdist's
SIZES = {"wheel": re.compile(r"(wheel ?[（(])(\d[\d,]*) KiB"), "sdist": re.compile(r"(sdist ?[（(])(\d[\d,]*) KiB")}
SIZE_TOLERANCE = 0.03  # a stated size within 3 % of the build's is current (a small code change moves it a little)


class PageError(Exception):
    """Bad input (a URL that is not a repository's, a README without the sentences): the message says what."""


def urls(repository: str) -> dict[str, str]:
    """The project URLs of a repository: PyPI shows them in the sidebar.

    >>> urls("https://github.com/Some-Org/hooklab")["Homepage"]
    'https://some-org.github.io/hooklab/'
    >>> sorted(urls("https://git.example.org/team/hooklab"))
    ['Issues', 'Repository']
    """
    found = URL.fullmatch(repository.rstrip("/"))
    if not found:
        raise PageError(f"--repository-url should be https://HOST/OWNER/REPO, got {repository!r}")
    repository = repository.rstrip("/")
    links = {"Repository": repository, "Issues": f"{repository}/issues"}
    if found.group(1) == "github.com":  # GitHub Pages, where pages.yml publishes the course website
        site = f"https://{found.group(2).lower()}.github.io/{found.group(3)}/"
        links = {"Homepage": site, "Documentation": site, **links}
    return links


def stamp_page(text: str, repository: str) -> str:
    """The page with its placeholder links replaced (the website's by the repository where there is no GitHub
    Pages address)."""
    links = urls(repository)
    text = text.replace(SITE_PLACEHOLDER, links.get("Homepage", repository + "/"))
    return text.replace(REPOSITORY_PLACEHOLDER, repository.rstrip("/"))


def stamp_pyproject(text: str, repository: str) -> str:
    """pyproject.toml with a ``[project.urls]`` table for ``repository`` (replacing one that is there), placed
    right after the ``[project]`` table."""
    table = "[project.urls]\n" + "".join(f'{k} = "{v}"\n' for k, v in urls(repository).items())
    existing = re.search(r"^\[project\.urls\]\n(?:[^\[\n].*\n|\n)*", text, re.MULTILINE)
    if existing:
        return text[:existing.start()] + table + "\n" + text[existing.end():]
    project = re.search(r"^\[project\]\n", text, re.MULTILINE)
    if not project:
        raise PageError("pyproject.toml has no [project] table")
    following = re.search(r"^\[", text[project.end():], re.MULTILINE)
    at = project.end() + following.start() if following else len(text)
    return text[:at] + table + "\n" + text[at:]


def stamp(root: Path, repository: str) -> None:
    """Fill in the links of ``root``'s page and pyproject.toml (in place: CI's checkout)."""
    page, pyproject = root / "docs" / "pypi.md", root / "pyproject.toml"
    stamped_page = stamp_page(page.read_text(encoding="utf-8"), repository)
    stamped_pyproject = stamp_pyproject(pyproject.read_text(encoding="utf-8"), repository)
    page.write_text(stamped_page, encoding="utf-8")
    pyproject.write_text(stamped_pyproject, encoding="utf-8")


def stated_sizes(readme: str) -> dict[str, list[int]]:
    """The sizes (KiB) the README states for the wheel and the sdist, each sentence's (zh and en)."""
    found = {kind: [int(m.group(2).replace(",", "")) for m in pattern.finditer(readme)] for kind, pattern in
             SIZES.items()}
    missing = [kind for kind, sizes in found.items() if not sizes]
    if missing:
        raise PageError(f"the README states no size for the {' and the '.join(missing)} (a sentence like "
                        f"\"the {missing[0]} (123 KiB\")")
    return found


def with_sizes(readme: str, built: dict[str, int]) -> str:
    """The README with every stated size replaced by the build's (``built``: kind -> bytes)."""
    for kind, pattern in SIZES.items():
        readme = pattern.sub(lambda m, k=kind: f"{m.group(1)}{round(built[k] / 1024):,} KiB", readme)
    return readme


def stale_sizes(readme: str, built: dict[str, int]) -> list[str]:
    """What the README states that is more than :data:`SIZE_TOLERANCE` off the build's sizes."""
    problems = []
    for kind, sizes in stated_sizes(readme).items():
        actual = built[kind] / 1024
        problems += [f"the README says the {kind} is {size:,} KiB, the build's is {actual:,.0f} KiB"
                     for size in sizes if abs(size - actual) > SIZE_TOLERANCE * actual]
    return problems


def built_sizes(dist: Path) -> dict[str, int]:
    wheels, sdists = sorted(dist.glob("hooklab-*.whl")), sorted(dist.glob("hooklab-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise PageError(f"{dist} should hold one hooklab wheel and one sdist (uv build --out-dir {dist})")
    return {"wheel": wheels[0].stat().st_size, "sdist": sdists[0].stat().st_size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.launch.package_page", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    stamp_command = commands.add_parser("stamp", help="fill in the links (CI, before building)")
    stamp_command.add_argument("--repository-url", required=True, metavar="URL")
    sizes_command = commands.add_parser("sizes", help="check (or --write) the README's wheel and sdist sizes")
    sizes_command.add_argument("dist", type=Path, help="the folder `uv build --out-dir` wrote")
    sizes_command.add_argument("--write", action="store_true", help="write the build's sizes into docs/maintainers/package.md")
    args = parser.parse_args(argv)
    try:
        if args.command == "stamp":
            stamp(ROOT, args.repository_url)
            print(f"[package] links of {args.repository_url.rstrip('/')} in docs/pypi.md and pyproject.toml",
                  file=sys.stderr)
            return 0
        built = built_sizes(args.dist)
        readme = README.read_text(encoding="utf-8")
        if args.write:
            README.write_text(with_sizes(readme, built), encoding="utf-8")
            print(f"[package] {README.name}: wheel {built['wheel'] / 1024:,.0f} KiB, sdist {built['sdist'] / 1024:,.0f} "
                  "KiB", file=sys.stderr)
            return 0
        problems = stale_sizes(readme, built)
        for problem in problems:
            print(f"[package] {problem}: python -m tools.launch.package_page sizes {args.dist} --write", file=sys.stderr)
        return 1 if problems else 0
    except (PageError, OSError) as exc:
        print(f"[package] error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
