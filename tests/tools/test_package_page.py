"""hooklab's page on PyPI (docs/pypi.md) and tools/launch/package_page.py: the page is short, in both languages, its example
runs and prints what the page says, and the links are filled in for the repository the package is built for. The
built package's metadata and `twine check --strict` are in tests/tools/test_package.py."""
from __future__ import annotations

import contextlib
import doctest
import io
import re
from pathlib import Path

import pytest
import tomllib

from tools.launch import package_page

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "pypi.md"
EXAMPLE_URL = "https://github.com/Example-Owner/hooklab"

pytestmark = pytest.mark.timeout(120)


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


def test_the_example_runs_and_prints_what_the_page_shows():
    found = blocks(PAGE.read_text(encoding="utf-8"))
    (code_lang, code), (out_lang, shown) = found[0], found[1]
    assert (code_lang, out_lang) == ("python", "text")
    assert len(code.strip().splitlines()) == 5  # the five-line example
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(PAGE), "exec"), {"__name__": "__pypi_example__"})
    assert printed.getvalue() == shown


def test_the_page_is_short_and_in_both_languages_for_someone_deciding_to_install():
    text = PAGE.read_text(encoding="utf-8")
    assert len(text) < 10_000, len(text)  # the README, which it replaces there, is over 100,000 characters
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert headings == ["English", "中文"]
    english, chinese = text.split("\n## English\n")[1].split("\n## 中文\n")
    for part in (english, chinese):
        assert "pip install hooklab" in part and 'pip install "hooklab[course]"' in part
        assert "Python 3.11" in part and "https://github.com/OWNER/REPO/issues" in part
        assert "https://OWNER.github.io/REPO/" in part
    assert len(re.findall(r"[\u4e00-\u9fff]", english)) == 0 and len(re.findall(r"[\u4e00-\u9fff]", chinese)) > 300
    for maintainers_only in ("./course test", "not on PyPI", "passed", "uv.lock", "<owner>"):
        assert maintainers_only not in text


def test_stamping_fills_in_every_link_of_the_page_and_the_project_urls(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "pypi.md").write_text(PAGE.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    package_page.stamp(tmp_path, EXAMPLE_URL + "/")
    page = (tmp_path / "docs" / "pypi.md").read_text(encoding="utf-8")
    assert "OWNER" not in page and "REPO" not in page
    assert page.count(f"{EXAMPLE_URL}/issues") == 2 and page.count("https://example-owner.github.io/hooklab/") == 2
    project = tomllib.loads((tmp_path / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["urls"] == {"Homepage": "https://example-owner.github.io/hooklab/",
                               "Documentation": "https://example-owner.github.io/hooklab/",
                               "Repository": EXAMPLE_URL, "Issues": f"{EXAMPLE_URL}/issues"}
    assert project["optional-dependencies"] == tomllib.loads((ROOT / "pyproject.toml").read_text(
        encoding="utf-8"))["project"]["optional-dependencies"]  # nothing else moved
    from tools.site import build as site  # the site reads its repository from the same table
    assert site.repository_url(tmp_path / "pyproject.toml") == EXAMPLE_URL
    package_page.stamp(tmp_path, "https://git.example.org/team/hooklab")  # again, elsewhere: replaced, not added
    text = (tmp_path / "pyproject.toml").read_text(encoding="utf-8")
    assert text.count("[project.urls]") == 1
    assert tomllib.loads(text)["project"]["urls"] == {"Repository": "https://git.example.org/team/hooklab",
                                                      "Issues": "https://git.example.org/team/hooklab/issues"}


def test_a_url_that_is_not_a_repository_is_refused(tmp_path, capsys):
    with pytest.raises(package_page.PageError, match="should be https://HOST/OWNER/REPO"):
        package_page.urls("github.com/x/y")
    assert package_page.main(["stamp", "--repository-url", "https://github.com/x"]) == 2
    assert "should be https://HOST/OWNER/REPO" in capsys.readouterr().err


def test_readme_sizes_are_checked_and_written_from_a_build(tmp_path, monkeypatch, capsys):
    readme = "a wheel (1,000 KiB, mostly the model) and an sdist (2 KiB)\nwheel（1,000 KiB，大部分）和 sdist（2 KiB）\n"
    built = {"wheel": 1010 * 1024, "sdist": 90 * 1024}
    assert package_page.stated_sizes(readme) == {"wheel": [1000, 1000], "sdist": [2, 2]}
    assert package_page.stale_sizes(readme, built) == ["the README says the sdist is 2 KiB, the build's is 90 KiB"] * 2
    written = package_page.with_sizes(readme, built)
    assert written.startswith("a wheel (1,010 KiB, mostly the model) and an sdist (90 KiB)\nwheel（1,010 KiB，")
    assert package_page.stale_sizes(written, built) == []
    with pytest.raises(package_page.PageError, match="states no size for the sdist"):
        package_page.stated_sizes("a wheel (3 KiB)")
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "hooklab-0.1.0-py3-none-any.whl").write_bytes(b"x" * 2048)
    (dist / "hooklab-0.1.0.tar.gz").write_bytes(b"x" * 1024)
    (tmp_path / "README.md").write_text(readme, encoding="utf-8")
    monkeypatch.setattr(package_page, "README", tmp_path / "README.md")
    assert package_page.main(["sizes", str(dist)]) == 1
    assert "python -m tools.launch.package_page sizes" in capsys.readouterr().err
    assert package_page.main(["sizes", str(dist), "--write"]) == 0
    assert package_page.main(["sizes", str(dist)]) == 0
    assert "a wheel (2 KiB," in (tmp_path / "README.md").read_text(encoding="utf-8")


def test_the_tools_docstring_examples_run():
    assert doctest.testmod(package_page).failed == 0


def test_no_line_break_falls_between_two_chinese_characters():
    """PyPI's renderer shows a line break inside a paragraph as a space, which Chinese text does not have: the page
    breaks its Chinese lines only next to a Latin word or a code span (tools/site/pages.py's join_cjk_lines)."""
    from tools.site.pages import join_cjk_lines

    text = PAGE.read_text(encoding="utf-8")
    joined = join_cjk_lines(text)
    assert joined == text, "a line of docs/pypi.md breaks between two Chinese characters: " + next(
        line for line in text.splitlines() if line not in joined.splitlines())


def test_the_page_renders_as_pypi_renders_markdown():
    """PyPI renders the long description with readme_renderer (GFM); `twine check --strict` does not render Markdown
    at all. Rendered here: it renders, every heading and code block of the page is there, every link is a link, and no
    Markdown is left over as text."""
    import html

    import readme_renderer.markdown

    text = PAGE.read_text(encoding="utf-8")
    rendered = readme_renderer.markdown.render(text)
    assert rendered, "readme_renderer could not render docs/pypi.md"
    headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    shown = html.unescape(re.sub(r"<[^>]+>", "", rendered))
    for heading in headings:
        assert heading.replace("`", "") in shown, heading
    assert rendered.count("<pre") == len(blocks(text))
    for url in re.findall(r"\]\((https?://[^)\s]+)\)", text):
        assert f'href="{html.escape(url)}"' in rendered or f'href="{url}"' in rendered, url
    prose = re.sub(r"<pre.*?</pre>|<code>.*?</code>", "", rendered, flags=re.S)
    leftovers = [m for m in ("](", "**", "```") if m in html.unescape(re.sub(r"<[^>]+>", "", prose))]
    assert not leftovers, f"Markdown shown as text on PyPI: {leftovers}"
