import contextlib
import io
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hooklab.course import export_notebook, export_notebooks
from test_notebook_structure import GOOD, md

ROOT = Path(__file__).resolve().parents[2]


def sources(nb):
    return [c["source"] for c in nb["cells"]]


def test_keeps_one_language_and_all_code():
    zh = export_notebook(GOOD, "zh")
    en = export_notebook(GOOD, "en")
    assert sources(zh) == ["# 99 · 标题", "## 1. 钩子\n钩子（hook）让我们观察梯度。",
                           "import hooklab\nhooklab.setup()", "print(1 + 1)"]
    # the English copy lists its headings in the table of contents again: the marker is gone
    assert sources(en) == ["# 99 · Title", "## 1. Hooks\nA hook lets us watch a gradient.",
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
    result = cli("--lang", "en", "--out", tmp_path, src)
    assert result.returncode == 2 and "would overwrite" in result.stderr
    assert src.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("lang, run", [("zh", "python -m hooklab.course"), ("en", "in this process")])
def test_command_line_exports_every_course_notebook(tmp_path, monkeypatch, lang, run):
    """The real command once (it imports torch: seconds); the other language through the same main()."""
    args = ["export", "--lang", lang, "--out", str(tmp_path)]
    if run == "python -m hooklab.course":
        result = subprocess.run([sys.executable, "-m", "hooklab.course", *args], cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
    else:
        monkeypatch.chdir(ROOT)   # the default sources: notebooks/ in the working folder
        result = cli(*args[1:])
        assert result.returncode == 0, result.stderr
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
    result = cli("--lang", "fr")
    assert result.returncode == 2 and "invalid choice: 'fr'" in result.stderr


# ---- errors: one clear message naming the file and what to do, exit 2, nothing half-written ----------------

def cli(*args):
    """``python -m hooklab.course export ARGS``, run in this process (a subprocess imports torch: seconds;
    test_command_line_exports_every_course_notebook starts the real command); argparse's exit is a return code."""
    from hooklab.course import __main__ as command
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            returncode = command.main(["export", *map(str, args)])
        except SystemExit as exit_:
            returncode = exit_.code
    return subprocess.CompletedProcess(args, returncode, out.getvalue(), err.getvalue())


def good_source(tmp_path, name="99_demo.ipynb"):
    src = tmp_path / name
    src.write_text(json.dumps(GOOD, ensure_ascii=False), encoding="utf-8")
    return src


@pytest.mark.parametrize("content, message", [
    (b'{\n "cells": [', r"is not valid JSON \(Expecting value at line 2, column 12\); it may be cut short: restore it"),
    ("{\"cells\": []}  # 钩子".encode("gbk"), r"is not UTF-8 text \(byte \d+: invalid .*\), so it is no .ipynb notebook"),
    (b'{"cells": {"0": {}}}', r"not a notebook: 'cells' should be a list of cells, got dict"),
    (b'[1, 2]', r"export_notebook takes a notebook as a dict \(json.load of an .ipynb file\), got list"),
    (b'{"cells": [{"cell_type": "markdown", "metadata": {"tags": "lang-en"}, "source": "x"}]}',
     r"cell 0: metadata.tags should be a list of strings such as \['lang-en'\], got 'lang-en'"),
])
def test_a_broken_notebook_file_is_named_with_what_to_do(tmp_path, content, message):
    bad = tmp_path / "98_bad.ipynb"
    bad.write_bytes(content)
    out = tmp_path / "out"
    result = cli("--lang", "en", "--out", out, good_source(tmp_path), bad)
    assert result.returncode == 2 and result.stdout == ""
    assert re.match(rf"error: {re.escape(str(bad))}:? .*{message}", result.stderr.strip()), result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert not out.exists()  # every notebook is read before anything is written


@pytest.mark.parametrize("nb, error, message", [
    ("notebooks/01_tensor_hooks.ipynb", TypeError, r"got str \(to export files, use export_notebooks"),
    ({"cells": None}, ValueError, "'cells' should be a list of cells, got NoneType"),
    ({"cells": ["# title"]}, ValueError, "cell 0 should be a dict, got str"),
    ({"cells": [{"cell_type": "markdown", "metadata": {"tags": "lang-en"}, "source": "x"}]}, ValueError,
     r"metadata.tags should be a list of strings such as \['lang-en'\], got 'lang-en'"),
    ({"cells": [{"cell_type": "markdown", "metadata": {"tags": ["lang-en"]}, "source": "x"},
                {"cell_type": "markdown", "metadata": {}, "source": "y"}]}, ValueError,
     r"markdown cell 1 has no lang-\* tag"),
])
def test_export_notebook_checks_what_it_is_given(nb, error, message):
    with pytest.raises(error, match=message):
        export_notebook(nb, "en")


def test_out_that_is_a_file_is_refused(tmp_path):
    src, out = good_source(tmp_path), tmp_path / "a_file"
    out.write_text("mine")
    result = cli("--lang", "en", "--out", out, src)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {out} is a file, not a folder: give a folder for the copies (it is "
                                     "created when missing); --out chooses another folder")
    assert out.read_text() == "mine"


def test_a_folder_that_cannot_be_written_gives_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    import errno
    import tempfile

    from hooklab.course import __main__ as command

    src, out = good_source(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / src.name).write_text("an older copy")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert command.main(["export", "--lang", "en", "--out", str(out), str(src)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: could not write {out / src.name}: Read-only file system (nothing was left half-written); "
                   "--out chooses another folder\n")
    assert [p.name for p in out.iterdir()] == [src.name] and (out / src.name).read_text() == "an older copy"


def test_a_write_cut_short_leaves_the_old_copy_whole_and_no_temporary_file(tmp_path, monkeypatch):
    from hooklab.course import notebook  # writes every file whole (write_atomic)

    src, out = good_source(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / src.name).write_text("an older copy")
    real_replace = notebook.os.replace

    def disk_full(tmp, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(notebook.os, "replace", disk_full)
    with pytest.raises(OSError, match="No space left on device"):
        export_notebooks("en", out, [src])
    monkeypatch.setattr(notebook.os, "replace", real_replace)
    assert [p.name for p in out.iterdir()] == [src.name] and (out / src.name).read_text() == "an older copy"


def test_a_hard_link_in_out_is_replaced_not_written_through(tmp_path):
    """Before, a copy in --out that was a hard link to a source overwrote the source itself."""
    (tmp_path / "src").mkdir()
    src = good_source(tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    os.link(src, out / src.name)
    text = src.read_text(encoding="utf-8")
    export_notebooks("en", out, [src])
    assert src.read_text(encoding="utf-8") == text and "钩子" not in (out / src.name).read_text(encoding="utf-8")


def test_exported_files_get_the_usual_permissions(tmp_path):
    src = good_source(tmp_path)
    umask = os.umask(0o022)
    try:
        written, = export_notebooks("en", tmp_path / "out", [src])
    finally:
        os.umask(umask)
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
