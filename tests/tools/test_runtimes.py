"""tools/notebooks/runtimes.py: the notebooks' run times have one source (docs/runtimes.toml, measured by `./course test`), and
the README's table and every notebook's "Run time" line say what it says."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.notebooks import runtimes

ROOT = Path(__file__).resolve().parents[2]

LOG = """\
=============== notebook run times (budget: 60 s each, 300 s in all per CPU-kernel configuration, 2 CPU cores) ===
    7.1 s  notebooks/00_introduction.ipynb
   61.6 s  notebooks/07_activation_checkpointing.ipynb  OVER BUDGET
   68.7 s  all notebooks, machine's own CPU kernels
    9.9 s  notebooks/00_introduction.ipynb[scalar-cpu]
"""
TABLE = {"measured": {"by": "./course test", "cores": 2, "date": "2026-11-23", "load_average": 6.0},
         "seconds": {"00_introduction": 7.1, "07_activation_checkpointing": 61.6}}


def test_the_readme_and_every_notebook_agree_with_the_measured_table():
    problems = runtimes.check()
    assert problems == [], "\n".join(problems) + "\n(python -m tools.notebooks.runtimes apply writes them from the table)"
    table = runtimes.read_table()
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(table["seconds"]) == notebooks  # every notebook measured, none that is gone


def test_the_timing_lines_of_course_test_are_read_for_the_own_cpu_kernels_only(tmp_path):
    assert runtimes.parse_log(LOG) == {"00_introduction": 7.1, "07_activation_checkpointing": 61.6}
    with pytest.raises(runtimes.RuntimeTableError, match="give the output of ./course test"):
        runtimes.parse_log("1 passed in 3.0s")
    text = runtimes.table_text(runtimes.parse_log(LOG), date="2026-11-23", load=6.0)
    import tomllib
    assert tomllib.loads(text) == TABLE


def test_the_readme_column_and_note_are_written_from_the_table():
    readme = ("## The notebooks\n\n| # | 标题 | Title | 内容 / What | 运行时间 / Run time |\n|---|---|---|---|---|\n"
              "| 00 | 导论 | Introduction | what hooks are | ~4 s |\n"
              "| 07 | 激活检查点 | Activation checkpointing | a | b | ~25 s |\n"
              "| 15 | 新 | New | not measured yet | ~9 s |\n"
              "运行时间是在空闲的 2 核 CPU 上测得的 / old note\n\n## Exercises\n| 00 | x | y | z | w |\n")
    text, missing = runtimes.apply_readme(readme, TABLE)
    lines = text.split("\n")
    assert "| 00 | 导论 | Introduction | what hooks are | ~7 s |" in lines
    assert "| 07 | 激活检查点 | Activation checkpointing | a | b | ~60 s |" in lines  # the last column only
    assert "| 15 | 新 | New | not measured yet | ~9 s |" in lines and missing == ["15"]
    note = next(line for line in lines if line.startswith("运行时间由"))
    assert "平均负载约 6" in note and "load average of about 6" in note and "docs/runtimes.toml" in note
    assert "old note" not in text and lines[-2] == "| 00 | x | y | z | w |"  # another table is left alone
    assert runtimes.apply_readme(text, TABLE)[0] == text  # applying twice changes nothing


def test_a_notebooks_run_time_line_gets_the_tables_number_and_nothing_else(tmp_path):
    cells = [
        {"cell_type": "markdown", "metadata": {"tags": ["lang-both"]}, "source": ["# 07 · 标题 / Title"]},
        {"cell_type": "markdown", "metadata": {"tags": ["lang-zh"]},
         "source": ["**本课你将学到** 约 3 秒\n", "\n", "**运行时间**：在两个空闲的 CPU 核上约 20 秒，负载在 10 以上。"]},
        {"cell_type": "markdown", "metadata": {"tags": ["lang-en"]},
         "source": ["**Run time**: about 20 s on two idle CPU cores (load average above 10); most of it to start."]},
        {"cell_type": "code", "metadata": {}, "source": ["print('about 20 s')"], "outputs": [], "execution_count": 1},
    ]
    path = tmp_path / "07_activation_checkpointing.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5},
                               ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    assert runtimes.apply_notebook(path, TABLE)
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert "".join(nb["cells"][1]["source"]) == ("**本课你将学到** 约 3 秒\n\n**运行时间**：在两个 CPU 核上约 60 秒，"
                                                 "负载约 6。")  # measured at load 6: not "idle"
    assert "".join(nb["cells"][2]["source"]) == ("**Run time**: about 60 s on two CPU cores (load average about 6); "
                                                 "most of it to start.")
    assert nb["cells"][3]["source"] == ["print('about 20 s')"]
    assert runtimes.stated_seconds(nb) == {"zh": 60, "en": 60}
    assert not runtimes.apply_notebook(path, TABLE)  # nothing left to change
    with pytest.raises(runtimes.RuntimeTableError, match="no time for 07_activation_checkpointing"):
        runtimes.apply_notebook(path, {**TABLE, "seconds": {}})


def test_a_run_time_line_with_a_second_time_is_refused_and_reported(tmp_path):
    """`apply` rewrites the first time of a run-time line only: a second one ("about 8 s, about 10 s of it
    importing") would go stale, as it once did in notebook 15, so `apply` refuses the line and `check` names it."""
    line = {"zh": "**运行时间**：约 8 秒（两核），其中约 10 秒用于导入这些库；每课 60 秒的预算。",
            "en": "**Run time**: about 8 s (two cores), about 10 s of it importing; within the budget of 60 s per notebook."}
    for lang, text in line.items():
        assert runtimes.extra_figures(text, lang) == (["10 秒"] if lang == "zh" else ["10 s"])
        with pytest.raises(runtimes.RuntimeTableError, match="more than one time"):
            runtimes.run_time_line(text, lang, 7.6, None)
        said_in_words = text.replace("约 10 秒", "大部分").replace("about 10 s of it", "most of it")
        assert runtimes.extra_figures(said_in_words, lang) == []  # the budget is no second time
        assert runtimes.run_time_line(said_in_words, lang, 7.6, None) == said_in_words  # 8 already: nothing to do
    nb = {"cells": [{"cell_type": "markdown", "metadata": {"tags": ["lang-" + lang]}, "source": [text]}
                    for lang, text in line.items()]}
    assert runtimes.run_time_extras(nb) == {"zh": ["10 秒"], "en": ["10 s"]}
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "runtimes.toml").write_text(runtimes.table_text({"15_x": 7.6}, date="2026-11-24", load=None),
                                                    encoding="utf-8")
    (tmp_path / "README.md").write_text("# no table\n", encoding="utf-8")
    (tmp_path / "notebooks" / "15_x.ipynb").write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    problems = runtimes.check(tmp_path)
    assert [p.split(":")[0] for p in problems] == ["15_x.ipynb (zh)", "15_x.ipynb (en)"], problems
    assert all("more than one time" in p for p in problems)
