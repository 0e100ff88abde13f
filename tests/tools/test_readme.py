"""The README is a front door (tools/site/readme.py): at most 150 lines, in both languages, every relative link and
anchor resolves, every command it shows exists, its package example runs and prints what its comment says; the
maintainers' manual it points to (CONTRIBUTING.md, docs/maintainers/) links only to what exists, and every page of it is
reachable from the README."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.site import readme

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "README.md").read_text(encoding="utf-8")
MANUAL = [ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs" / "maintainers").glob("*.md"))]


def test_the_readme_is_a_front_door():
    assert readme.problems(TEXT) == []
    assert len(TEXT.splitlines()) <= readme.MAX_LINES
    first = "\n".join(TEXT.splitlines()[:20])  # what a newcomer sees first: both languages, the site, the commands
    assert "**中文**" in first and "**English**" in first
    stamped = "\n".join(readme.stamp(TEXT, "https://github.com/Some-Org/hooklab").splitlines()[:20])
    assert "https://some-org.github.io/hooklab/" in stamped  # the site and Colab, once the repository has its address
    assert "colab.research.google.com/github/Some-Org/hooklab/" in stamped


def _rendered(markdown: str) -> str:
    """What a reader of the rendered page sees of ``markdown``'s text: everything but its HTML comments."""
    return re.sub(r"<!--.*?-->", "", markdown, flags=re.DOTALL)


def test_a_reader_sees_no_placeholder_and_is_told_where_the_links_will_be():
    """The repository has no public address yet: a link to https://OWNER.github.io/REPO/ on the rendered page would
    open a page that is not the project's, and `pip install "hooklab @ git+https://github.com/OWNER/REPO"` would fail.
    The page says so where the links will be, in both languages, and shows what works from a clone."""
    shown = _rendered(TEXT)
    assert not re.search(r"OWNER|\bREPO\b", shown), [line for line in shown.splitlines() if "OWNER" in line]
    top = "\n".join(shown.splitlines()[:24])
    assert "课程网站和 Colab 的链接要等仓库有了公开地址" in top and "to Colab go here once the repository has a public" in top
    assert "`./course site`" in top and "](notebooks/)" in top  # what a reader can open now
    assert "仓库也还没有公开地址" in shown and "the repository has no public address yet" in shown
    assert re.search(r"^pip install -e \.", "\n".join(re.findall(r"```bash\n(.*?)```", shown, re.DOTALL)), re.M)
    # the check finds a placeholder a reader would see, and where
    found = readme.placeholder_problems("# t\n\n[site](https://OWNER.github.io/REPO/)\n")
    assert len(found) == 1 and found[0].startswith("line 3 shows the placeholder OWNER/REPO"), found
    assert readme.placeholder_problems("<!-- [site](https://OWNER.github.io/REPO/) -->\n") == []
    one_language = ("<!-- until the repository has its address: x -->\nthe site: later\n<!-- once it has one:\n"
                    "[site](https://OWNER.github.io/REPO/)\n-->\n")
    assert readme.placeholder_problems(one_language) == [
        "line 1: what a reader sees until the repository has its address is not in both languages"]
    unfinished = "<!-- until the repository has its address: x -->\n网站稍后 / the site: later\n"
    assert "go on with '<!-- once it has one:'" in readme.placeholder_problems(unfinished)[0]


def test_the_readme_shows_the_two_commands_and_where_each_reader_starts():
    code = "\n".join(re.findall(r"```bash\n(.*?)```", TEXT, re.DOTALL))
    assert re.search(r"^\./course lab\b", code, re.MULTILINE) and re.search(r"^\./course test\b", code, re.MULTILINE)
    for reader in ("学习者 / A learner", "老师 / A teacher", "实践者 / A practitioner", "维护者 / A maintainer"):
        assert reader in TEXT
    assert "(CONTRIBUTING.md)" in TEXT


def test_the_check_finds_what_breaks_a_front_door(tmp_path):
    shutil.copy(ROOT / "course", tmp_path / "course")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# 一页 / A page\n", encoding="utf-8")
    good = ("# 标题 / Title\n\n" + "课程" * 200 + "\n\n" + "the course words " * 120 + "\n\n"
            "## 两条命令 / Two commands\n\n[页 / page](docs/page.md#一页--a-page)\n\n```bash\n./course lab\n```\n")
    assert readme.problems(good, tmp_path) == []
    bad = (good + "[x](docs/missing.md) [y](docs/page.md#no-such-heading)\n\n## English only\n\n"
           "```bash\n./course nosuch\npython -m tools.nosuch\n```\n" + "\n" * 150)
    found = readme.problems(bad, tmp_path)
    assert [p.split(":")[0].split(" ")[-1] for p in found] == ["lines", "languages", "docs/missing.md", "docs/page.md#no-such-heading",
                                                               "nosuch", "tools.nosuch"], found
    assert "no file docs/missing.md" in found[2] and "'no-such-heading'" in found[3]
    english_only = re.sub(r"[\u4e00-\u9fff]", "", good)
    assert "the README has almost no Chinese" in readme.problems(english_only, tmp_path)


def test_github_ids_as_github_makes_them():
    assert readme.github_id("食谱：实践者真正问过的问题 / Recipes: the questions practitioners actually ask") == (
        "食谱实践者真正问过的问题--recipes-the-questions-practitioners-actually-ask")
    assert readme.headings("# A\n\n```\n# not a heading\n```\n# A\n") == {"a", "a-1"}


def test_the_course_script_commands_are_read_from_its_case_block():
    commands = readme.course_commands(ROOT / "course")
    assert {"lab", "test", "regen", "site", "slides", "handout", "reset", "rerun", "profiles", "help"} <= commands


def test_every_link_of_the_manual_resolves_and_every_page_is_reachable():
    problems = {str(page.relative_to(ROOT)): found for page in MANUAL
                if (found := readme.link_problems(page.read_text(encoding="utf-8"), ROOT, page))}
    assert not problems, problems
    index = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert [p.name for p in MANUAL[1:] if f"(docs/maintainers/{p.name})" not in index] == []
    assert len(MANUAL) > 10  # the README's former sections, one page per topic


def test_the_manual_says_that_a_markdown_edit_makes_the_shipped_index_stale():
    """A one-notebook test run passes after a Markdown edit (nbval compares outputs), while the edit makes course.ask's
    shipped index stale and the full run fails: "Before and after a change" says so in both languages, with the
    command that the index's own check names as the fix."""
    from tools.ask import index

    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = contributing.split("## 改动之前与之后 / Before and after a change\n", 1)[1].split("\n## ", 1)[0]
    fix = re.search(r"run `(python -m [\w.]+ --write)`", Path(index.__file__).read_text(encoding="utf-8")).group(1)
    assert fix == "python -m tools.ask --write" and re.search(rf"^{re.escape(fix)} +# ", section, re.M), section
    assert "`python -m tools.ask` 检查" in section and "`python -m tools.ask` checks" in section
    assert "Markdown 的改动" in section and "索引就过时了" in section  # 中文
    assert "cannot see a Markdown edit" in section and "makes the index stale" in section  # English
    assert "hooklab/course/assets/ask/index.json" in section and "tests/tools/test_ask_index.py" in section


def test_stamping_fills_every_placeholder_of_the_readme():
    stamped = readme.stamp(TEXT, "https://github.com/Some-Org/hooklab")
    assert "OWNER" not in stamped and "REPO/" not in stamped
    assert "<!--" not in stamped and "公开地址" not in stamped and "public address" not in stamped  # the note is gone
    assert readme.stamp(stamped, "https://github.com/Some-Org/hooklab") == stamped
    assert "https://some-org.github.io/hooklab/" in stamped
    assert "https://colab.research.google.com/github/Some-Org/hooklab/blob/launch/en/00_introduction.ipynb" in stamped
    assert 'git+https://github.com/Some-Org/hooklab"' in stamped
    assert readme.problems(stamped) == []
    with pytest.raises(readme.ReadmeError, match="Colab opens notebooks from GitHub only"):
        readme.stamp(TEXT, "https://git.example.org/team/hooklab")
    with pytest.raises(readme.ReadmeError, match="should be https://HOST/OWNER/REPO"):
        readme.stamp(TEXT, "hooklab")


@pytest.mark.timeout(240)
def test_the_readme_package_example_runs_and_prints_what_it_says(tmp_path):
    example = re.search(r"```python\n(.*?)```", TEXT, re.DOTALL).group(1)
    assert all(f"hooklab.{name}(" in example for name in ("capture", "all_hooks", "explain_hook"))
    assert "course.ask(" in example
    done = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=230,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "(3, 8) []"  # the comment's claim: layer 0's output recorded, no hook left behind
    assert "explain_hook('2')" in done.stdout and "its forward code ran" in done.stdout
    assert re.search(r"^1\. ", done.stdout, re.MULTILINE)  # course.ask's first place
