"""The programs of ``docs/programs/*.json`` print what the files say they print: each one run in a fresh Python
interpreter (``python -c``, the program on its standard input, run by :func:`hooklab.course.programs.run`, one
thread), its output compared with ``prints`` (exactly) or ``prints_start`` (the output starts with it).

Every push runs ``SAMPLE`` programs drawn with the commit as the seed (``tests/commit_seed.seed``: a red run can be
repeated), about a minute in all; ``HOOKLAB_PROGRAMS=all`` runs every one (the weekly CI does). A program that needs
a CUDA device or a library absent here (its ``needs``), or several processes off Linux, is skipped, saying which.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commit_seed import seed

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "docs" / "programs"
SAMPLE = 10  # programs per push: 3 to 10 s each (a fresh interpreter imports torch and maybe a library)
TIMEOUT = 240  # s one program may run (torch.compile's first call included)
RUNNER = ("import sys\nfrom hooklab.course.programs import run\n"
          "sys.stdout.write(run(sys.stdin.read()))\n")
PARTS = ("show", "fix")
MACHINE = {"processes": "forks its worker processes from a function it defines, which needs Linux", "cuda": "needs a CUDA device",
           "c++": "builds C++ with load_inline (tests/tools/test_other_frameworks.py runs it where a compiler is)"}


def files(folder: Path = FOLDER) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))}


def cases(data: dict[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(file stem, program id, part) of every program that has code."""
    return [(stem, pid, part) for stem, content in data.items() for pid, record in sorted(content["programs"].items())
            for part in PARTS if record.get(part)]


def drawn(all_cases: list[tuple[str, str, str]], seed_text: str, *, every: bool = False) -> list[tuple[str, str, str]]:
    """The cases this run runs: every one when ``every``, else ``SAMPLE`` drawn with ``seed_text`` (in order).

    >>> c = [("m", str(i), "show") for i in range(40)]
    >>> drawn(c, "abc") == drawn(c, "abc"), len(drawn(c, "abc")), drawn(c, "x", every=True) == c
    (True, 10, True)
    """
    if every:
        return list(all_cases)
    chosen = set(random.Random(seed_text).sample(sorted(all_cases), min(SAMPLE, len(all_cases))))
    return [c for c in all_cases if c in chosen]


def missing(needs: list[str]) -> str | None:
    """Why a program cannot run here (what it needs that is absent), or None. ``processes`` (or ``processes:N``):
    several processes, which the program forks (hooklab.run_workers) from a function defined in itself: on Linux;
    ``cuda``: a CUDA device; ``c++``: a C++ build (not run here); anything else: a library's module."""
    for need in needs:
        need = need.split(":")[0]
        if need == "processes":
            if not sys.platform.startswith("linux"):
                return MACHINE[need]
        elif need in MACHINE:
            if need != "cuda":
                return MACHINE[need]
            import torch
            if not torch.cuda.is_available():
                return MACHINE[need]
        elif importlib.util.find_spec(need) is None:
            return f"needs {need}, which is not installed here"
    return None


def run_fresh(code: str, *, timeout: float = TIMEOUT) -> str:
    """What ``code`` shows when a fresh interpreter runs it (hooklab.course.programs.run, one thread, offline)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=code, capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout)
    assert proc.returncode == 0, f"the runner itself failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc.stdout


DATA = files()
CASES = drawn(cases(DATA), seed(ROOT), every=os.environ.get("HOOKLAB_PROGRAMS") == "all")


def test_there_are_programs_to_run():
    assert DATA, f"no program files in {FOLDER.relative_to(ROOT)}"
    assert CASES, "no program was drawn"


@pytest.mark.parametrize("stem", sorted(DATA))
def test_each_file_has_the_programs_shape(stem):
    """What the runner, the pages and the lookup read: ``{"about", "programs": {id: {"show", "fix"}}}``, each program
    ``{"code": {"en", "zh"}, "prints" | "prints_start"}``, Python that compiles."""
    content = DATA[stem]
    assert isinstance(content.get("about"), str) and content["about"], f"{stem}.json: say what it holds in `about`"
    assert content.get("programs"), f"{stem}.json holds no programs"
    for pid, record in content["programs"].items():
        for part in PARTS:
            program = record.get(part)
            if not program:
                continue
            assert set(program["code"]) == {"en", "zh"}, f"{stem}.json {pid} {part}: code in en and zh"
            for lang, code in program["code"].items():
                compile(code, f"{stem}:{pid}:{part}:{lang}", "exec")  # each one is Python
            assert "prints" in program or "prints_start" in program, \
                f"{stem}.json {pid} {part}: say what it prints (prints, or prints_start)"


@pytest.mark.parametrize("stem, pid, part", CASES, ids=[f"{s}:{p}:{part}" for s, p, part in CASES])
def test_a_program_prints_what_its_file_says(stem, pid, part):
    record = DATA[stem]["programs"][pid]
    program = record[part]
    why = missing([*record.get("needs", []), *program.get("needs", [])])
    if why:
        pytest.skip(f"{stem}:{pid} ({part}) {why}")
    expected, start = program.get("prints"), program.get("prints_start")
    if expected is None and start is None:
        pytest.skip(f"{stem}:{pid} ({part}): its file stores no output to compare (written where it could not run)")
    out = run_fresh(program["code"]["en"])
    if start is not None:
        assert out.startswith(start), f"{stem}:{pid} ({part}) should start with:\n{start}\nit printed:\n{out[:3000]}"
    else:
        assert out == expected, f"{stem}:{pid} ({part}) should print:\n{expected}\nit printed:\n{out[:3000]}"


def test_every_stored_output_is_masked_as_a_run_masks_it():
    """A stored output holds what :func:`hooklab.course.programs.run` returns, which masks what changes from run to
    run (addresses, temporary paths, torch's log prefix with its date and process id): an output stored before a mask
    was added would fail only in the run that draws it, so every file is checked on every push."""
    from hooklab.course.programs import masked

    unmasked = [f"{stem}:{pid}:{part}:{key}" for stem, content in DATA.items()
                for pid, record in sorted(content["programs"].items()) for part in PARTS if record.get(part)
                for key in ("prints", "prints_start")
                if record[part].get(key) and masked(record[part][key]) != record[part][key]]
    assert not unmasked, (f"{len(unmasked)} stored outputs hold text a run masks (first: {unmasked[:3]}): run them "
                          "again and store what they print now")


def test_a_program_that_differs_from_its_file_fails():
    """The comparison can fail: a program whose stored output is not what it prints, and what a fresh interpreter
    prints for an error, a warning and a result."""
    out = run_fresh("import warnings\nwarnings.warn('careful')\nprint(1 + 1)\nraise KeyError('x')\n", timeout=120)
    assert out == "KeyError: 'x'\n\nUserWarning: careful\n2", out
    assert missing(["no_such_library_here"]) == "needs no_such_library_here, which is not installed here"
    assert missing(["processes"]) == (None if sys.platform.startswith("linux") else MACHINE["processes"])
    assert missing([]) is None


def test_a_message_row_on_the_symptom_page_folds_its_program_and_fix():
    from tools.messages import page, symptoms

    record = {"show": {"code": {"en": "# Shows: x\nraise ValueError('x')\n", "zh": "# 触发：x\nraise ValueError('x')\n"},
                       "needs": [], "prints": "ValueError: x"},
              "fix": {"code": {"en": "# Fix: y\nprint(1)\n", "zh": "# 修正：y\nprint(1)\n"}, "needs": ["cuda"],
                      "prints": "1"}, "no_fix": None}
    zh, en = "\n".join(page.program_lines(record, "zh")), "\n".join(page.program_lines(record, "en"))
    assert zh.startswith("<details>") and zh.rstrip().endswith("</details>")
    assert "# 触发：x" in zh and "修正后的程序" in zh and "运行后打印" in zh and "# Shows" not in zh
    assert "# Fix: y" in en and "The fix" in en and "Needs: `cuda`" in en and "ValueError: x" in en
    why = {"show": record["show"], "fix": None, "no_fix": {"en": "private API", "zh": "私有接口"}}
    assert "No fix program: private API" in "\n".join(page.program_lines(why, "en"))
    assert "没有修正程序：私有接口" in "\n".join(page.program_lines(why, "zh"))
    assert page.program_lines(None, "en") == []
    # on the page: the row of a triggered message, with its program in the page's language
    mid, stored = next((k, v) for k, v in sorted(DATA["messages"]["programs"].items()) if v["fix"])
    text = page.site_page(symptoms.collect(ROOT)[0], "zh", programs={mid: stored})
    assert stored["show"]["code"]["zh"].rstrip() in text and stored["fix"]["code"]["zh"].rstrip() in text


BOUNDS = r'''
import json, signal, threading, time
from hooklab.course.programs import run
out = {}
began = time.monotonic()
try:  # the program's own "except Exception" does not keep it running
    run("import time\ntry:\n    time.sleep(600)\nexcept Exception:\n    print('swallowed')\n", timeout=1)
    out["stopped"] = None
except TimeoutError as stopped:
    out["stopped"] = str(stopped)
out["stopped_after"] = time.monotonic() - began
out["left"] = [signal.getsignal(signal.SIGALRM) == signal.SIG_DFL, signal.getitimer(signal.ITIMER_REAL)[0]]
out["next"] = run("print(2)")
rang = []
def callers(signum, frame):
    rang.append(signum)
signal.signal(signal.SIGALRM, callers)
signal.setitimer(signal.ITIMER_REAL, 30)  # the caller's alarm, armed before run
out["under_callers"] = run("import time\ntime.sleep(1.5)\nprint('ran on')", timeout=0.5)
out["callers_kept"] = [signal.getsignal(signal.SIGALRM) is callers, 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 30]
signal.setitimer(signal.ITIMER_REAL, 0)
box = []
thread = threading.Thread(target=lambda: box.append(run("import time\ntime.sleep(1)\nprint('ran on')", timeout=0.2)))
thread.start()
thread.join()
out["thread"] = box
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def bounds():
    """What :func:`hooklab.course.programs.run`'s bound does in a fresh interpreter, where no alarm is armed (this
    test's own limit, pytest-timeout's, is one)."""
    proc = subprocess.run([sys.executable, "-c", BOUNDS], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_program_that_runs_past_its_bound_is_stopped_with_the_bound_named(bounds):
    assert bounds["stopped"] == ("the program ran past its bound of 1 s and was stopped (run(code, timeout=...) sets "
                                 "the bound; None: no bound)")
    assert bounds["stopped_after"] < 30  # the program would sleep 600 s
    assert bounds["left"] == [True, 0.0]  # no alarm left armed, the default handler back
    assert bounds["next"] == "2"


def test_an_alarm_the_caller_armed_is_left_alone_and_another_thread_has_no_bound(bounds):
    """As run() documents: the caller's alarm (a test runner's limit) is kept, handler and time, and its bound
    applies instead; a signal reaches only the main thread, so a program run from another thread runs to its end."""
    assert bounds["under_callers"] == "ran on" and bounds["callers_kept"] == [True, True]
    assert bounds["thread"] == ["ran on"]


@pytest.mark.parametrize("timeout, error", [(0, ValueError), (-5, ValueError), (float("nan"), ValueError),
                                            (float("inf"), ValueError), (True, TypeError), ("10", TypeError)])
def test_a_bound_is_a_positive_number_of_seconds_or_none(timeout, error):
    from hooklab.course.programs import TIMEOUT, run

    with pytest.raises(error, match=r"run\(\): timeout is a (positive )?number of seconds \(or None: no bound\)"):
        run("print(1)", timeout=timeout)
    assert run("print(1)", timeout=None) == "1" and 60 <= TIMEOUT <= 600  # the course's programs take up to ~30 s


def test_a_program_whose_library_is_missing_says_what_to_install():
    """After the error and what the program printed: the requirements it ran with where they are given (a pin of
    torch left out: the course's torch stays), else the missing module's package; also when the missing module is
    what a library's own error was raised from. Nothing more when nothing is missing."""
    from hooklab.course.programs import run

    assert run("print('before')\nimport no_such_library_here.sub\n") == (
        "ModuleNotFoundError: No module named 'no_such_library_here'\n\nbefore\nTo run it, install the package that "
        "provides the module 'no_such_library_here' (pip install no_such_library_here, where the package has the "
        "module's name)")
    shown = run("import no_such_library_here", requires=["torch==2.15.0", "no-such-library[cpu]==1.0"])
    assert shown.splitlines()[-1] == ("To run it, install what it needs (the releases it ran with): pip install "
                                      "'no-such-library[cpu]==1.0'")
    friendly = run("try:\n    import no_such_library_here\nexcept ImportError as e:\n"
                   "    raise RuntimeError('install the extra') from e\n")
    assert friendly.startswith("RuntimeError: install the extra") and "pip install no_such_library_here" in friendly
    assert run("import json\nprint(json.dumps(1))") == "1"
    with pytest.raises(TypeError, match="requires is a list of requirements"):
        run("print(1)", requires="flax==0.12.7")
