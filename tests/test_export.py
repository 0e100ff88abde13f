import json
import subprocess
import sys
from pathlib import Path

import pytest

from hooklab.course import export_notebook, export_notebooks
from test_notebook_structure import GOOD, md

ROOT = Path(__file__).resolve().parent.parent


def sources(nb):
    return [c["source"] for c in nb["cells"]]


def test_keeps_one_language_and_all_code():
    zh = export_notebook(GOOD, "zh")
    en = export_notebook(GOOD, "en")
    assert sources(zh) == ["# 99 · 标题", "钩子（hook）让我们观察梯度。",
                           "import hooklab\nhooklab.setup()", "print(1 + 1)"]
    assert sources(en) == ["# 99 · Title", "A hook lets us watch a gradient.",
                           "import hooklab\nhooklab.setup()", "print(1 + 1)"]
    assert zh["cells"][3]["outputs"] == GOOD["cells"][4]["outputs"]
    assert zh["metadata"]["hooklab_language"] == "zh"
    assert len(GOOD["cells"]) == 5  # the source is not modified


def test_rejects_unknown_language_and_untagged_markdown():
    with pytest.raises(ValueError, match="one of zh, en"):
        export_notebook(GOOD, "fr")
    untagged = dict(GOOD, cells=[md("no tag")])
    with pytest.raises(ValueError, match="no lang-\\* tag"):
        export_notebook(untagged, "en")


def test_export_notebooks_writes_files_and_checks_paths(tmp_path):
    src = tmp_path / "99_demo.ipynb"
    src.write_text(json.dumps(GOOD, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "out"
    written = export_notebooks("en", out, [src])
    assert written == [out / "99_demo.ipynb"]
    assert "钩子" not in written[0].read_text(encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="missing.ipynb"):
        export_notebooks("en", tmp_path / "out2", [src, tmp_path / "missing.ipynb"])
    assert not (tmp_path / "out2").exists()  # nothing written when an input is bad


def test_export_refuses_to_overwrite_its_sources(tmp_path):
    src = tmp_path / "99_demo.ipynb"
    text = json.dumps(GOOD, ensure_ascii=False)
    src.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="would overwrite the bilingual source"):
        export_notebooks("en", tmp_path, [src])
    assert src.read_text(encoding="utf-8") == text
    result = subprocess.run([sys.executable, "-m", "hooklab.course", "export", "--lang", "en", "--out", str(tmp_path), str(src)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "would overwrite" in result.stderr
    assert src.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_command_line_exports_every_course_notebook(tmp_path, lang):
    result = subprocess.run([sys.executable, "-m", "hooklab.course", "export", "--lang", lang, "--out", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, check=True)
    course = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(p.name for p in tmp_path.iterdir()) == course
    other = "lang-en" if lang == "zh" else "lang-zh"
    for path in tmp_path.iterdir():
        nb = json.loads(path.read_text(encoding="utf-8"))
        tags = {t for c in nb["cells"] for t in c.get("metadata", {}).get("tags", [])}
        assert other not in tags and f"lang-{lang}" in tags
        assert any(c["cell_type"] == "code" for c in nb["cells"])
    assert len(result.stdout.splitlines()) == len(course)


def test_command_line_rejects_bad_language():
    result = subprocess.run([sys.executable, "-m", "hooklab.course", "export", "--lang", "fr"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and "invalid choice: 'fr'" in result.stderr
