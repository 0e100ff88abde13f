"""`./course site`: the course as a static bilingual website in build/site/ (open build/site/index.html).

Built offline by Sphinx + myst-nb from the committed notebooks, outputs and figures as committed (nothing is
executed): a landing page from the README, the notebooks in order in the sidebar, one page per notebook,
Sphinx's search, a language switch (中文 / English / both, from the cells' lang-* tags; tools/site/_static)
and on each notebook page a link that opens it in a local `./course lab`.
The sources are assembled in build/site-src/ (copies of README.md and notebooks/*.ipynb, never committed).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "tools" / "site"


def notebooks(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def index_page(readme: str, names: list[str]) -> str:
    """The landing page: the README, then the list of notebooks (which also fills the sidebar)."""
    toctree = "\n".join(["", "## 笔记本 / The notebooks", "", "```{toctree}", ":maxdepth: 1", "", *names, "```", ""])
    return readme.rstrip("\n") + "\n" + toctree


def assemble(src: Path, root: Path = ROOT) -> list[str]:
    """Fill ``src`` with index.md and copies of the notebooks; return the page names in order."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    names = []
    for path in notebooks(root):
        shutil.copy2(path, src / path.name)
        names.append(path.stem)
    (src / "index.md").write_text(index_page((root / "README.md").read_text(encoding="utf-8"), names),
                                  encoding="utf-8")
    return names


def build(out: Path, *, root: Path = ROOT, quiet: bool = True) -> list[str]:
    """Build the site into ``out``; return the notebook page names."""
    src = out.parent / (out.name + "-src")
    names = assemble(src, root)
    if out.exists():
        shutil.rmtree(out)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(CONF), "-E",
               str(src), str(out)]
    if quiet:
        command.insert(3, "-q")
    subprocess.run(command, check=True)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./course site", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "build" / "site"), help="output folder (default: build/site)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Sphinx's progress")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    try:
        build(out, quiet=not args.verbose)
    except subprocess.CalledProcessError as exc:
        print(f"[course] error: sphinx-build failed (exit {exc.returncode})", file=sys.stderr)
        return 1
    print(f"[course] site built: {out / 'index.html'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
