"""`./course site`: the course as a static website, one site per language (open build/site/index.html).

    ./course site                          # build/site/zh/ and build/site/en/, and build/site/index.html
    ./course site --lang en --out /tmp/s   # one language only
    ./course site --repository-url URL     # as if [project.urls] Repository were URL (launch/edit buttons)

Built offline by Sphinx + myst-nb from the committed notebooks, outputs and figures as committed (nothing is
executed). Each language's site is built from the one-language notebooks that ``hooklab.course export`` writes, so
its pages, table of contents, Sphinx's own strings and its full-text search (Chinese words segmented by jieba) are
in that language; every page links to the same page in the other language. Each notebook page ends with a
"further reading" list (tools/site/further_reading.toml) and has the theme's download (.ipynb of that language)
and copy buttons; math is rendered by a MathJax 3 copy inside the site; an API page is generated from hooklab's
docstrings (grouped as in tools/site/api_groups.toml). The repository's URL comes from one setting,
``[project.urls]`` Repository (or Source) in pyproject.toml: with it the theme shows the repository, edit, issue,
Binder and Colab buttons, without it none of them. The sources are assembled in build/site-src/<lang>/.
"""
from __future__ import annotations

import argparse
import ast
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "tools" / "site"
LANGS = ("zh", "en")
LABELS = {"zh": "中文", "en": "English"}
FURTHER_READING = CONF / "further_reading.toml"
API_GROUPS = CONF / "api_groups.toml"
TEXT = {
    "zh": {"notebooks": "笔记本", "api": "API 参考", "further": "延伸阅读",
           "further_intro": "文档与源代码（英文页面）：",
           "api_intro": "``hooklab`` 的全部公开名称（``hooklab.__all__``），按下面包说明里的分组排列。"
                        "说明取自代码里的文档字符串（英文），其中的例子都作为测试运行过。",
           "other": "其他", "choose": "选择语言"},
    "en": {"notebooks": "The notebooks", "api": "API reference", "further": "Further reading",
           "further_intro": "Documentation and sources:",
           "api_intro": "Every public name of ``hooklab`` (``hooklab.__all__``), grouped as the package's "
                        "description below groups the tools. The text is the docstrings; their examples run as "
                        "tests.",
           "other": "Other", "choose": "Choose a language"},
}
# Words of the course that jieba's dictionary does not know as one word (the glossary adds its own terms):
# without them a search for 反向传播 or 触发顺序 finds the two halves only.
COURSE_TERMS = ("反向传播", "前向传播", "触发顺序", "中间梯度", "梯度裁剪", "计算图", "检查器")
LICENCE_URLS = {"code": "https://opensource.org/license/mit",  # when the LICENSE files are missing
                "prose": "https://creativecommons.org/licenses/by/4.0/"}


class SiteError(Exception):
    """A problem with the site's inputs (pyproject.toml, the data tables); the message says what to fix."""


def notebooks(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


# --- settings -----------------------------------------------------------------------------------------------

def repository_url(pyproject: Path) -> str | None:
    """The repository's public URL: ``[project.urls]`` Repository, else Source, in ``pyproject``; None when
    neither is set (then no page shows a repository, edit or launch button)."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SiteError(f"cannot read [project.urls] from {pyproject}: {exc}") from None
    urls = {str(k).lower(): v for k, v in data.get("project", {}).get("urls", {}).items()}
    for key in ("repository", "source"):
        if key in urls:
            return check_url(urls[key], f"[project.urls] {key.capitalize()} in {pyproject}")
    return None


def check_url(url: Any, where: str) -> str:
    if not isinstance(url, str) or not re.fullmatch(r"https://[^\s/]+/[^\s/]+/[^\s/]+/?", url):
        raise SiteError(f"{where} should be a repository's https URL such as https://github.com/OWNER/REPO, "
                        f"got {url!r}")
    return url.rstrip("/")


def further_reading(path: Path = FURTHER_READING) -> dict[str, list[tuple[str, str]]]:
    """The further-reading table: notebook name -> [(title, url), ...]."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    table = {}
    for name, entry in data.items():
        links = entry.get("links") if isinstance(entry, dict) else None
        if not isinstance(links, list) or not all(isinstance(link, list) and len(link) == 2 and
                                                  all(isinstance(s, str) for s in link) for link in links):
            raise SiteError(f"{path}: [{name}] needs links = [[title, url], ...]")
        for title, url in links:
            if not url.startswith("https://"):
                raise SiteError(f"{path}: [{name}] {title!r}: the URL should start with https://, got {url!r}")
        table[name] = [(title, url) for title, url in links]
    return table


def api_groups(path: Path = API_GROUPS) -> list[dict[str, Any]]:
    return tomllib.loads(path.read_text(encoding="utf-8"))["group"]


def public_names(root: Path = ROOT) -> list[str]:
    """``hooklab.__all__``, read from the source (without importing torch)."""
    tree = ast.parse((root / "hooklab" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise SiteError(f"{root / 'hooklab' / '__init__.py'} has no __all__")


def glossary_terms(nb: dict[str, Any]) -> list[str]:
    """The Chinese terms of notebook 00's glossary table (the column 中文), each a word of two or more Han
    characters, for jieba's dictionary."""
    terms: list[str] = []
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] != "markdown" or "| English | 中文 |" not in source:
            continue
        for line in source.split("\n"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 2 or cells[1] in ("中文", "---"):
                continue
            for term in re.split(r"\s*·\s*", re.sub(r"（.*?）|\(.*?\)", "", cells[1])):
                if re.fullmatch(r"[\u4e00-\u9fff]{2,}", term) and term not in terms:
                    terms.append(term)
    return terms


# --- the pages ----------------------------------------------------------------------------------------------

def further_reading_cell(links: list[tuple[str, str]], lang: str) -> dict[str, Any]:
    """The markdown cell appended to a notebook's page: a heading and a list of links."""
    items = "\n".join(f"- [{title}]({url})" for title, url in links)
    source = f"## {TEXT[lang]['further']}\n\n{TEXT[lang]['further_intro']}\n\n{items}\n"
    return {"cell_type": "markdown", "id": "hooklab-further-reading",
            "metadata": {"tags": [f"lang-{lang}", "hooklab-further-reading"]}, "source": source}


def site_readme(readme: str, repository: str | None, branch: str = "main") -> str:
    """The README as the landing page: a link to a file of the repository that is not on the site points to
    the repository when its URL is known, else it becomes plain text (never a dead link)."""
    def relink(match: re.Match[str]) -> str:
        text, target = match[1], match[2]
        if re.match(r"[a-z]+:|#", target):
            return match[0]
        return f"[{text}]({repository}/blob/{branch}/{target})" if repository else text
    return re.sub(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)", relink, readme)


def index_page(readme: str, names: list[str], lang: str, *, api: bool = True, extra: tuple[str, ...] = ()) -> str:
    """The landing page: the README, then the notebooks (which also fill the sidebar), the ``extra`` pages (the
    symptom index) and the API page."""
    toctree = ["", f"## {TEXT[lang]['notebooks']}", "", "```{toctree}", ":maxdepth: 1", "", *names, "```", "",
               *(["```{toctree}", ":maxdepth: 1", "", *extra, *(["api"] if api else []), "```", ""]
                 if api or extra else [])]
    return readme.rstrip("\n") + "\n" + "\n".join(toctree)


def api_page(lang: str, names: list[str], groups: list[dict[str, Any]]) -> str:
    """api.rst: the package's description, then per group an autosummary table and the autodoc entries."""
    title = TEXT[lang]["api"]
    out = [title, "=" * (len(title.encode("utf-8"))), "", TEXT[lang]["api_intro"], "",
           ".. automodule:: hooklab", "   :no-members:", "", ".. currentmodule:: hooklab", ""]
    listed: set[str] = set()
    sections = []
    for group in groups:
        members = [n for n in group["names"] if n in names]
        listed.update(members)
        if members:
            sections.append((group[lang], members))
    rest = [n for n in names if n not in listed]
    if rest:
        sections.append((TEXT[lang]["other"], rest))
    for heading, members in sections:
        out += [heading, "-" * len(heading.encode("utf-8")), "", ".. autosummary::", "   :nosignatures:", "",
                *[f"   {n}" for n in members], ""]
        for name in members:
            kind = "autoclass" if name[:1].isupper() else "autofunction"
            out += [f".. {kind}:: {name}"] + (["   :members:"] if kind == "autoclass" else []) + [""]
    return "\n".join(out)


def chooser_page(langs: list[str]) -> str:
    """build/site/index.html: a choice between the languages' sites (no script)."""
    links = "\n".join(f'  <li><a class="hooklab-choose" hreflang="{lang}" lang="{lang}" href="{lang}/index.html">'
                      f"{html.escape(LABELS[lang])}</a></li>" for lang in langs)
    return f"""<!DOCTYPE html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hooklab · PyTorch 钩子动手课 / a hands-on course on PyTorch hooks</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 36rem; margin: 3rem auto; padding: 0 1rem; line-height: 1.5; }}
ul {{ list-style: none; padding: 0; display: flex; gap: 1rem; flex-wrap: wrap; }}
a.hooklab-choose {{ display: block; padding: 0.8rem 1.6rem; border: 1px solid #0a7d91; border-radius: 6px;
  color: #0a7d91; text-decoration: none; font-size: 1.2rem; }}
a.hooklab-choose:hover {{ background: #0a7d91; color: #fff; }}
</style>
</head>
<body>
<h1>hooklab</h1>
<p>PyTorch 钩子动手课 · a hands-on course on PyTorch hooks</p>
<p>{TEXT["zh"]["choose"]} / {TEXT["en"]["choose"]}:</p>
<ul>
{links}
</ul>
</body>
</html>
"""


def assemble(src: Path, lang: str, *, root: Path = ROOT, repository: str | None = None,
             branch: str = "main", only: list[str] | None = None) -> list[str]:
    """Fill ``src`` with the sources of ``lang``'s site: the one-language notebooks (each with its further
    reading appended), index.md, api.rst and the licence files; return the notebook page names in order.
    ``only`` (notebook names): those notebooks and no API page (whose autodoc imports hooklab and torch)."""
    from hooklab.course.export import export_notebook, read_notebook

    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    import symptoms  # tools/symptoms.py: the symptom index page, and the targets its links point to

    reading = further_reading()
    names = []
    for path in notebooks(root):
        if only is not None and path.stem not in only:
            continue
        nb = symptoms.add_site_anchors(export_notebook(read_notebook(path), lang))
        if path.stem not in reading:
            raise SiteError(f"{FURTHER_READING} has no [{path.stem}] table: add the notebook's further reading")
        nb["cells"].append(further_reading_cell(reading[path.stem], lang))
        (src / path.name).write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        names.append(path.stem)
    listed = [s for s in symptoms.collect(root)[0] if Path(s.notebook).stem in names]
    (src / "symptoms.md").write_text(symptoms.site_page(listed, lang), encoding="utf-8")
    readme = site_readme((root / "README.md").read_text(encoding="utf-8"), repository, branch)
    (src / "index.md").write_text(index_page(readme, names, lang, api=only is None, extra=("symptoms",)),
                                  encoding="utf-8")
    if only is None:
        (src / "api.rst").write_text(api_page(lang, public_names(root), api_groups()), encoding="utf-8")
    extra = src.parent / f"_extra-{lang}"
    if extra.exists():
        shutil.rmtree(extra)
    extra.mkdir()
    for name in ("LICENSE", "LICENSE-prose.md"):
        if (root / name).is_file():
            shutil.copy2(root / name, extra / (Path(name).stem + ".txt"))
    return names


def settings(src: Path, lang: str, names: list[str], *, other: str | None, repository: str | None,
             branch: str, jieba_dict: Path | None) -> dict[str, Any]:
    """What tools/site/conf.py reads (through the file named by HOOKLAB_SITE)."""
    extra = src.parent / f"_extra-{lang}"
    licence = {"code": "LICENSE.txt" if (extra / "LICENSE.txt").is_file() else LICENCE_URLS["code"],
               "prose": "LICENSE-prose.txt" if (extra / "LICENSE-prose.txt").is_file() else LICENCE_URLS["prose"]}
    return {"lang": lang, "src": str(src), "notebooks": names, "repository_url": repository,
            "repository_branch": branch, "extra": str(extra) if any(extra.iterdir()) else None,
            "licence_links": licence, "jieba_dict": str(jieba_dict) if jieba_dict else None,
            "other": {"lang": other, "label": LABELS[other], "pages": ["index", "api", "symptoms", *names]}
            if other else None}


def build(out: Path, *, langs: tuple[str, ...] = LANGS, root: Path = ROOT, repository: str | None = None,
          branch: str = "main", only: list[str] | None = None, quiet: bool = True,
          timeout: float = 900) -> dict[str, Any]:
    """Build the sites of ``langs`` into ``out/<lang>/`` (at the same time) and ``out/index.html``; ``only``
    (notebook names) leaves out the other notebooks and the API page (a quicker build, for tests).

    Returns the notebook page names, each language's Sphinx output (warnings) and the seconds it took.
    Raises :class:`SiteError` when a build fails (with Sphinx's output)."""
    started = time.monotonic()
    src_root = out.parent / (out.name + "-src")
    src_root.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    terms = glossary_terms(json.loads((root / "notebooks" / "00_introduction.ipynb").read_text(encoding="utf-8")))
    jieba_dict = src_root / "jieba-terms.txt"
    jieba_dict.write_text("".join(f"{t}\n" for t in dict.fromkeys([*terms, *COURSE_TERMS])), encoding="utf-8")
    procs = {}
    names: list[str] = []
    try:
        for lang in langs:
            src = src_root / lang
            names = assemble(src, lang, root=root, repository=repository, branch=branch, only=only)
            others = [o for o in LANGS if o != lang and (o in langs or (out / o / "index.html").is_file())]
            config = settings(src, lang, names, other=others[0] if others else None, repository=repository,
                              branch=branch, jieba_dict=jieba_dict if lang == "zh" else None)
            config_file = src_root / f"settings-{lang}.json"
            config_file.write_text(json.dumps(config, ensure_ascii=False, indent=1), encoding="utf-8")
            # Sphinx writes into a staging folder, moved to out/<lang> when it succeeded: myst-nb puts its
            # jupyter_execute/ folder next to the output folder, which must not be out/ (shared by the languages)
            staging = src_root / f"html-{lang}"
            if staging.exists():
                shutil.rmtree(staging)
            command = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(CONF), "-E", "-j", "1",
                       str(src), str(staging / "html")]
            if quiet:
                command.insert(3, "-q")
            env = {**os.environ, "HOOKLAB_SITE": str(config_file), "PYTHONPATH": str(root)}
            procs[lang] = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           text=True, cwd=root)
        output = {}
        for lang, proc in procs.items():
            try:
                text, _ = proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                raise SiteError(f"sphinx-build of the {lang} site did not finish within {timeout:.0f} s") from None
            output[lang] = text
            if proc.returncode != 0:
                raise SiteError(f"sphinx-build of the {lang} site failed (exit {proc.returncode}):\n{text[-4000:]}")
        for lang in procs:
            if (out / lang).exists():
                shutil.rmtree(out / lang)
            shutil.move(src_root / f"html-{lang}" / "html", out / lang)
            shutil.rmtree(src_root / f"html-{lang}")  # what is left: myst-nb's jupyter_execute/
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    built = [lang for lang in LANGS if (out / lang / "index.html").is_file()]
    (out / "index.html").write_text(chooser_page(built), encoding="utf-8")
    return {"names": names, "output": output, "seconds": time.monotonic() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./course site", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "build" / "site"), help="output folder (default: build/site)")
    parser.add_argument("--lang", choices=LANGS, action="append",
                        help="build only this language's site (repeatable; default: both)")
    parser.add_argument("--repository-url", metavar="URL",
                        help="the repository's URL instead of [project.urls] Repository in pyproject.toml "
                             "(shows the repository, edit and launch buttons)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Sphinx's progress")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    try:
        repository = (check_url(args.repository_url, "--repository-url") if args.repository_url
                      else repository_url(ROOT / "pyproject.toml"))
        result = build(out, langs=tuple(args.lang or LANGS), repository=repository, quiet=not args.verbose)
    except SiteError as exc:
        print(f"[course] error: {exc}", file=sys.stderr)
        return 1
    for lang, text in result["output"].items():
        if text.strip():
            print(f"[course] sphinx ({lang}):\n{text.rstrip()}", file=sys.stderr)
    print(f"[course] site built in {result['seconds']:.0f} s: {out / 'index.html'} "
          f"({', '.join(f'{out / lang}/' for lang in args.lang or LANGS)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
