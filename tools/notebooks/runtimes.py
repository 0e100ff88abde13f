"""One source for the notebooks' run times: a table measured by `./course test`, written into the README and into
each notebook's "Run time" line.

    ./course test notebooks --cpu-kernels=native 2>&1 | tee test.log
    python -m tools.notebooks.runtimes record test.log --load 1.2   # docs/runtimes.toml from the run's timing lines
    python -m tools.notebooks.runtimes apply                        # the README's run-time column, each notebook's line
    python -m tools.notebooks.runtimes check                        # exit 1 where the README or a notebook disagrees

`record` reads the closing "notebook run times" lines of ``./course test`` (the machine's own CPU kernels; the
scalar kernels' lines are left out) and writes them to docs/runtimes.toml with how they were measured (``--load``:
the machine's load average during the run, which the texts then mention). `apply` rewrites, from that table only,
the last column of the README's table of notebooks and the sentence under it, and in each notebook the number in the
first "about N s" / "约 N 秒" of its ``**Run time**`` / ``**运行时间**`` line (on a busy machine, the word "idle"
there goes too); nothing else changes. So a run-time line states one time only (besides the per-notebook budget): a
second figure ("about 8 s, about 10 s of it importing") would not follow the table and goes stale, so `apply` refuses
such a line and `check` reports it; say the part in words ("most of it importing"). tests/tools/test_runtimes.py
checks that they agree.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "runtimes.toml"
README = ROOT / "README.md"
BUSY_LOAD = 2.0  # a load average at or above this (on 2 cores) is a busy machine: the texts do not say "idle"
_LINE = re.compile(r"^\s*(\d+(?:\.\d+)?) s  notebooks/(\d\d_\w+)\.ipynb(?:\s+OVER BUDGET)?\s*$")
_README_ROW = re.compile(r"^\| (\d\d) \|(.*)\| ([^|]*) \|$")
_README_NOTE = ("运行时间由 `./course test` ", "运行时间是在")  # the sentence under the table starts so


class RuntimeTableError(Exception):
    """A problem with the table or its input; the message says what to do."""


def parse_log(text: str) -> dict[str, float]:
    """Notebook name -> seconds, from ``./course test``'s closing timing lines (own CPU kernels only).

    >>> parse_log("   7.1 s  notebooks/00_introduction.ipynb\\n   9.9 s  notebooks/00_introduction.ipynb[scalar-cpu]\\n"
    ...           "  61.6 s  notebooks/07_x.ipynb  OVER BUDGET\\n  68.7 s  all notebooks, machine's own CPU kernels")
    {'00_introduction': 7.1, '07_x': 61.6}
    """
    times = {}
    for line in text.splitlines():
        if match := _LINE.match(line):
            times[match[2]] = float(match[1])
    if not times:
        raise RuntimeTableError("no 'N s  notebooks/NN_x.ipynb' lines: give the output of ./course test (its "
                                "closing 'notebook run times' section)")
    return times


def shown(seconds: float) -> int:
    """The number the texts show: whole seconds, to 5 s from 20 s on (the times vary more than that).

    >>> [shown(s) for s in (0.3, 7.4, 7.6, 19.4, 22.4, 23.0, 61.6)]
    [1, 7, 8, 19, 20, 25, 60]
    """
    return max(1, round(seconds)) if seconds < 19.5 else 5 * round(seconds / 5)


def read_table(path: Path = TABLE) -> dict[str, Any]:
    if not path.is_file():
        raise RuntimeTableError(f"{path} is missing: run ./course test and python -m tools.notebooks.runtimes record LOG")
    return tomllib.loads(path.read_text(encoding="utf-8"))


def table_text(times: dict[str, float], *, date: str, load: float | None) -> str:
    """docs/runtimes.toml's text."""
    lines = ["# Each notebook's run time (seconds) as `./course test` measured it on 2 CPU cores, the machine's own CPU",
             "# kernels: written by `python -m tools.notebooks.runtimes record LOG`; `python -m tools.notebooks.runtimes apply` writes it",
             "# into the README's table of notebooks and each notebook's run-time line (tests/tools/test_runtimes.py).",
             "[measured]", 'by = "./course test"', "cores = 2", f'date = "{date}"']
    if load is not None:
        lines.append(f"load_average = {load}")
    lines += ["", "[seconds]", *(f"{name} = {seconds}" for name, seconds in sorted(times.items())), ""]
    return "\n".join(lines)


def readme_note(table: dict[str, Any]) -> str:
    """The sentence under the README's table, both languages, from how the table was measured."""
    measured = table["measured"]
    load = measured.get("load_average")
    zh_load = f"，当时机器的平均负载约 {load:g}，空闲的机器上会更快" if load is not None else ""
    en_load = f", at a load average of about {load:g}: an idle machine is faster" if load is not None else ""
    return (f"运行时间由 `./course test` 在 2 核 CPU 上测得（{measured['date']}{zh_load}；表在 `docs/runtimes.toml`，由 "
            f"`python -m tools.notebooks.runtimes apply` 写进本表和每个笔记本开头的“运行时间”）；`./course test` 结束时打印的是"
            f"当次的实际用时 / run times as measured by `./course test` on 2 CPU cores ({measured['date']}{en_load}; "
            f"the table is `docs/runtimes.toml`, written into this table and each notebook's \"Run time\" line by "
            f"`python -m tools.notebooks.runtimes apply`); `./course test` ends by printing each notebook's actual time for "
            f"that run.")


def apply_readme(text: str, table: dict[str, Any]) -> tuple[str, list[str]]:
    """The README with the run-time column of its table of notebooks and the note under it from ``table``; also
    the notebooks (numbers) of the table that have no measured time."""
    by_number = {name[:2]: seconds for name, seconds in table["seconds"].items()}
    lines, missing, in_table, in_section = text.split("\n"), [], False, False
    for i, line in enumerate(lines):
        if line.startswith("## "):
            in_section = line.rstrip().endswith("The notebooks")  # "## 课程目录 / The notebooks"
            continue
        row = _README_ROW.match(line) if in_section else None
        if row and line.count("|") >= 6:
            in_table = True
            if row[1] in by_number:
                lines[i] = f"| {row[1]} |{row[2]}| ~{shown(by_number[row[1]])} s |"
            else:
                missing.append(row[1])
        elif in_table and line.startswith(_README_NOTE):
            lines[i] = readme_note(table)
            in_table = False
        elif in_table and not line.startswith("|"):
            in_table = False
    return "\n".join(lines), missing


_NUMBER = {"zh": (re.compile(r"约 \d+ 秒"), "约 {} 秒"), "en": (re.compile(r"about \d+ s\b"), "about {} s")}
_IDLE = {"zh": (("在空闲的两核 CPU 上", "在两核 CPU 上"), ("在两个空闲的 CPU 核上", "在两个 CPU 核上")),
         "en": ((" idle CPU cores", " CPU cores"),)}
_LOAD = {"zh": (re.compile(r"负载在 \d+ 以上"), "负载约 {}"), "en": (re.compile(r"load average above \d+"),
                                                               "load average about {}")}
_START = {"zh": "**运行时间**", "en": "**Run time**"}
_SECONDS = {"zh": re.compile(r"\d+(?:\.\d+)? ?秒"), "en": re.compile(r"\d+(?:\.\d+)? ?(?:s|seconds?)\b")}
_BUDGET = {"zh": re.compile(r"预算是 ?\d+ ?秒|\d+ ?秒的预算"), "en": re.compile(r"budget of \d+ ?s\b")}


def extra_figures(line: str, lang: str) -> list[str]:
    """The times a run-time line states after its first one, the per-notebook budget left out: `apply` rewrites the
    first only, so any other goes stale.

    >>> extra_figures("**Run time**: about 8 s (two cores), about 10 s of it importing; budget of 60 s", "en")
    ['10 s']
    >>> extra_figures("**运行时间**：约 8 秒，其中大部分用于导入；每课 60 秒的预算", "zh")
    []
    """
    return _SECONDS[lang].findall(_BUDGET[lang].sub("", line))[1:]


def run_time_line(text: str, lang: str, seconds: float, load: float | None) -> str:
    """``text`` (a markdown cell) with its run-time line saying ``seconds``; other lines unchanged.

    >>> run_time_line("x\\n**Run time**: about 4 s on two idle CPU cores (most of it to start)", "en", 9.6, 6.1)
    'x\\n**Run time**: about 10 s on two CPU cores (most of it to start)'
    >>> run_time_line("**运行时间**：在空闲的两核 CPU 上约 4 秒。", "zh", 4.2, None)
    '**运行时间**：在空闲的两核 CPU 上约 4 秒。'
    """
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith(_START[lang]):
            continue
        if extra := extra_figures(line, lang):
            raise RuntimeTableError(f"a run-time line states more than one time ({', '.join(extra)} after the first): "
                                    f"only the first follows docs/runtimes.toml, so say the others in words: {line}")
        pattern, template = _NUMBER[lang]
        line = pattern.sub(template.format(shown(seconds)), line, count=1)
        if load is not None and load >= BUSY_LOAD:
            for idle, plain in _IDLE[lang]:
                line = line.replace(idle, plain)
            pattern, template = _LOAD[lang]
            line = pattern.sub(template.format(f"{load:g}"), line)
        lines[i] = line
        break
    return "\n".join(lines)


def stated_seconds(nb: dict[str, Any]) -> dict[str, int | None]:
    """lang -> the number the notebook's run-time line states (None: no such line)."""
    found: dict[str, int | None] = {"zh": None, "en": None}
    for cell in nb["cells"]:
        if cell.get("cell_type") != "markdown":
            continue
        for lang in found:
            for line in _source(cell).split("\n"):
                if line.startswith(_START[lang]) and found[lang] is None:
                    match = re.search(r"约 (\d+) 秒" if lang == "zh" else r"about (\d+) s\b", line)
                    found[lang] = int(match[1]) if match else -1
    return found


def run_time_extras(nb: dict[str, Any]) -> dict[str, list[str]]:
    """lang -> the figures after the first in the notebook's run-time line, where there are any."""
    found: dict[str, list[str]] = {}
    for cell in nb["cells"]:
        if cell.get("cell_type") != "markdown":
            continue
        for lang in _START:
            for line in _source(cell).split("\n"):
                if line.startswith(_START[lang]) and (extra := extra_figures(line, lang)):
                    found.setdefault(lang, []).extend(extra)
    return found


def _source(cell: dict[str, Any]) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def apply_notebook(path: Path, table: dict[str, Any]) -> bool:
    """Rewrite notebook ``path``'s run-time lines from ``table``; True when the file changed. The file keeps its
    JSON layout (nbformat's: indent 1, non-ASCII as is), so only those lines show in a diff."""
    raw = path.read_text(encoding="utf-8")
    nb = json.loads(raw)
    seconds = table["seconds"].get(path.stem)
    if seconds is None:
        raise RuntimeTableError(f"docs/runtimes.toml has no time for {path.stem}: run ./course test on it and "
                                "python -m tools.notebooks.runtimes record LOG")
    load = table["measured"].get("load_average")
    changed = False
    for cell in nb["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        lang = "zh" if "lang-zh" in tags else "en" if "lang-en" in tags else None
        if cell.get("cell_type") != "markdown" or lang is None:
            continue
        text = _source(cell)
        new = run_time_line(text, lang, seconds, load)
        if new != text:
            cell["source"] = new.splitlines(keepends=True)
            changed = True
    if changed:
        path.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return changed


def check(root: Path = ROOT) -> list[str]:
    """Where the README or a notebook disagrees with the table (empty: they agree)."""
    table = read_table(root / "docs" / "runtimes.toml")
    problems = []
    readme = (root / "README.md").read_text(encoding="utf-8")
    applied, missing = apply_readme(readme, table)
    if applied != readme:
        problems.append("README.md: the run-time column or the note under it differs from docs/runtimes.toml")
    problems += [f"README.md: notebook {n} has no time in docs/runtimes.toml" for n in missing]
    for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        seconds = table["seconds"].get(path.stem)
        if seconds is None:
            problems.append(f"{path.name}: no time in docs/runtimes.toml")
            continue
        nb = json.loads(path.read_text(encoding="utf-8"))
        for lang, stated in stated_seconds(nb).items():
            if stated != shown(seconds):
                problems.append(f"{path.name} ({lang}): its run-time line says {stated}, the table {shown(seconds)}")
        for lang, extra in run_time_extras(nb).items():
            problems.append(f"{path.name} ({lang}): its run-time line states more than one time ({', '.join(extra)} "
                            "after the first); only the first follows docs/runtimes.toml: say the others in words")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.notebooks.runtimes", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    record = sub.add_parser("record", help="docs/runtimes.toml from a ./course test log")
    record.add_argument("log", help="the output of ./course test (- for standard input)")
    record.add_argument("--load", type=float, help="the load average during the run (then stated with the times)")
    apply = sub.add_parser("apply", help="the README's run-time column and each notebook's run-time line")
    apply.add_argument("--only", choices=("readme", "notebooks"), help="one of the two")
    sub.add_parser("check", help="exit 1 where the README or a notebook disagrees with the table")
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            text = sys.stdin.read() if args.log == "-" else Path(args.log).read_text(encoding="utf-8")
            times = parse_log(text)
            known = read_table()["seconds"] if TABLE.is_file() else {}
            TABLE.parent.mkdir(parents=True, exist_ok=True)
            TABLE.write_text(table_text({**known, **times}, date=datetime.date.today().isoformat(),
                                        load=args.load), encoding="utf-8")
            print(f"[course] {len(times)} notebook times written to {TABLE}", file=sys.stderr)
        elif args.command == "apply":
            table = read_table()
            if args.only in (None, "readme"):
                text, missing = apply_readme(README.read_text(encoding="utf-8"), table)
                README.write_text(text, encoding="utf-8")
                for number in missing:
                    print(f"[course] warning: README row {number} has no time in {TABLE}", file=sys.stderr)
            if args.only in (None, "notebooks"):
                changed = [p.name for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
                           if apply_notebook(p, table)]
                print(f"[course] run-time lines rewritten in {len(changed)} notebook(s)", file=sys.stderr)
        else:
            problems = check()
            for problem in problems:
                print(f"[course] {problem}", file=sys.stderr)
            return 1 if problems else 0
    except RuntimeTableError as exc:
        print(f"[course] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
