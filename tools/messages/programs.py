"""Each triggered message as two programs a learner can paste and run: one that shows the message, and the same
program corrected (its fix), with what each prints. Written to ``docs/programs/messages.json``::

    .venv/bin/python -m tools.messages.hook_messages --programs   # rebuild the programs, run the changed ones, write
    .venv/bin/python -m tools.messages.programs --fresh           # the same, running every program (a new PyTorch)

The programs are cut out of the trigger tests (``tests/messages/test_*.py``), read from their source: a trigger
(``@trigger("<id>")``; for ``@trigger_all`` the function its module's ``IDS`` names) and the fix of the same message
(``@fix("<id>", en=..., zh=...)``), or the reason it has none (``no_fix("<id>", why=...)``). A program is the test
module's imports that the function uses, the module-level helpers it uses (functions, classes, constants, followed
to what they use), the function without its decorators, docstrings and comments, and its call (a fix's call prints
what it returns); one header comment in the page's language: the message's summary for the program that shows it,
the fix's own line for the fix. What each prints is what :func:`hooklab.course.programs.run` shows when it runs the
program in a process of its own (forked from one that imported torch only), addresses and temporary paths masked.

A program that imports a library other than torch names it in its ``needs`` (the runner skips it where the library
is absent; ``cuda``: a fix that needs a CUDA device, said by its decorator); one that runs in several processes
(``@trigger_all``, a fix with ``run_by``) needs ``processes``: it makes its call in each of two gloo processes on this
machine (``hooklab.run_workers``, :data:`IN_WORKERS`) and prints what rank 0 showed, and rank 1's where it differs.
``tests/tools/test_programs.py`` runs the programs of every ``docs/programs/*.json`` in fresh interpreters and compares
what they print; ``tests/messages/test_message_programs.py`` checks that the file is what the trigger tests' source
makes.
"""
from __future__ import annotations

import ast
import functools
import io
import json
import multiprocessing
import re
import sys
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .hook_messages_text import PLACEHOLDER, pattern

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests" / "messages"
OUT = ROOT / "docs" / "programs" / "messages.json"
LANGS = ("en", "zh")
TIMEOUT = 300  # seconds a program may run while the file is written
HARNESS = "message_triggers"  # the trigger tests' harness: never part of a program
HARNESS_DECORATORS = frozenset({"trigger", "trigger_all", "fix", "fix_all", "attempt", "pytest"})
ABOUT = ("Each message the course triggers (docs/hook_messages.json, tests/messages/): a standalone program that shows "
         "it (show) and the same program corrected (fix; null with no_fix saying why when there is none), in English "
         "and Chinese (only the header comment differs), with what each prints when run by "
         "hooklab.course.programs.run (the exception as `Type: message`, warnings as `Category: message`, addresses "
         "masked; `prints_start`: the output starts with it, the rest is a stack trace). `needs`: what a program needs "
         "besides torch (a library, `cuda`, or `processes`: run in two gloo processes on this machine, rank 0's output "
         "printed). Written by `python -m tools.messages.hook_messages "
         "--programs`; do not edit.")
SHOW_HEADER = {"en": "# Shows: {}", "zh": "# 触发：{}"}
FIX_HEADER = {"en": "# Fix: {}", "zh": "# 修正：{}"}
FIX_UNSAID = {"en": "the same program, corrected", "zh": "同一个程序，改正之后"}  # a fix without its en= / zh= line
RAISED = re.compile(r"[\w.]*(?:Error|Exception|Interrupt|Exit)\b[^\n]*: ")  # the first line of a program that raised
MACHINE_NEEDS = ("processes", "cuda")  # needs that are no library: several processes, a CUDA device
STDLIB = frozenset(sys.stdlib_module_names) | {"torch", "__future__"}


class ProgramError(RuntimeError):
    """A program that cannot be cut out of its test, or does not print what it must."""


@dataclass(frozen=True)
class Site:
    """A function of a trigger test that is a program."""
    path: Path
    name: str
    group: bool = False  # runs in worker processes
    head: bool = False  # the message is followed by stack traces
    en: str = ""
    zh: str = ""
    needs: tuple[str, ...] = ()  # said by the decorator: "cuda"


@dataclass
class Entry:
    show: Site
    fix: Site | None = None
    no_fix: dict[str, str] | None = None  # why it has none, in both languages


def _literal(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


def _keywords(call: ast.Call) -> dict[str, Any]:
    return {k.arg: _literal(k.value) for k in call.keywords if k.arg}


def registry(folder: Path = TESTS) -> dict[str, Entry]:
    """message id -> its trigger, its fix or why it has none, read from the decorators of the test files."""
    shows: dict[str, Site] = {}
    fixes: dict[str, Site] = {}
    why: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for path in sorted(folder.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                     for t in node.targets if isinstance(t, ast.Name)}
        ids_map = _literal(constants.get("IDS")) or {}
        for node in tree.body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                    and getattr(node.value.func, "id", "") == "no_fix":
                mid, words = _literal(node.value.args[0]), _keywords(node.value)
                reason = words.get("why")
                if not (isinstance(mid, str) and isinstance(reason, str) and reason.strip()):
                    problems.append(f"{path.name}:{node.lineno}: write no_fix(\"<id>\", why=\"...\", zh=\"...\") "
                                    "with literals")
                    continue
                why[mid] = {"en": reason, "zh": words.get("zh") or ""}
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if not isinstance(deco, ast.Call):
                    continue
                kind, words = getattr(deco.func, "id", ""), _keywords(deco)
                if kind == "trigger":
                    mid = _literal(deco.args[0])
                    if isinstance(mid, str):
                        shows.setdefault(mid, Site(path, node.name, head=bool(words.get("head"))))
                elif kind == "trigger_all":
                    for mid in sorted(ids_map):  # the function IDS names runs in the workers
                        if isinstance(ids_map[mid], str):
                            shows.setdefault(mid, Site(path, ids_map[mid], group=True))
                elif kind == "fix":
                    mid = _literal(deco.args[0])
                    if isinstance(mid, str):
                        fixes.setdefault(mid, Site(path, node.name, group=bool(words.get("run_by")),
                                                   en=words.get("en") or "", zh=words.get("zh") or "",
                                                   needs=tuple(words.get("needs") or ())))
    for mid in sorted(set(fixes) | set(why)):
        if mid not in shows:
            problems.append(f"{mid}: a fix or no_fix for a message no trigger shows")
        if mid in fixes and mid in why:
            problems.append(f"{mid}: both a fix and no_fix; keep one")
    if problems:
        raise ProgramError("\n".join(problems))
    return {mid: Entry(site, fixes.get(mid), why.get(mid)) for mid, site in sorted(shows.items())}


# --- cutting a program out of its module ------------------------------------------------------------------------

def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _kept_decorators(node: ast.AST) -> list[ast.expr]:
    """A definition's decorators that belong to the program (the harness's and pytest's are left out)."""
    def root(d: ast.expr) -> str:
        d = d.func if isinstance(d, ast.Call) else d
        while isinstance(d, ast.Attribute):
            d = d.value
        return d.id if isinstance(d, ast.Name) else ""
    return [d for d in getattr(node, "decorator_list", []) if root(d) not in HARNESS_DECORATORS]


def _used(node: ast.AST) -> set[str]:
    """The names a definition reads (its decorators the harness's left out)."""
    nodes = [node]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        nodes = [*node.body, *getattr(node, "bases", []), *_kept_decorators(node),
                 *([node.args] if not isinstance(node, ast.ClassDef) else [])]
    return {n.id for root in nodes for n in ast.walk(root) if isinstance(n, ast.Name)}


def _without_comments(source: str) -> str:
    """``source`` without its comments and blank lines left by them (strings are kept as they are)."""
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col].rstrip()
    return "\n".join(line for line, before in zip(lines, source.splitlines())
                     if line.strip() or not before.strip())


def _segment(lines: list[str], node: ast.stmt) -> str:
    """A definition's source without its decorators and docstrings."""
    start = node.lineno - 1
    skip: set[int] = set()
    for inner in ast.walk(node):
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and inner.body:
            first = inner.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str) and len(inner.body) > 1:
                skip.update(range(first.lineno - 1, (first.end_lineno or first.lineno)))
    decorators: list[str] = []
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        start = node.lineno - 1  # the def line: the decorators are above it, the program's own are kept
        decorators = [line for d in _kept_decorators(node) for line in lines[d.lineno - 1:(d.end_lineno or d.lineno)]]
    end = node.end_lineno or node.lineno
    return _without_comments("\n".join(decorators + [line for i, line in enumerate(lines[start:end], start)
                                                      if i not in skip]))


def _import_lines(node: ast.Import | ast.ImportFrom, wanted: set[str]) -> list[str]:
    if isinstance(node, ast.ImportFrom) and (node.module == "__future__" or node.module == HARNESS):
        return []
    if isinstance(node, ast.Import):
        return [f"import {a.name}" + (f" as {a.asname}" if a.asname else "") for a in node.names
                if (a.asname or a.name.split(".")[0]) in wanted]
    names = [a for a in node.names if (a.asname or a.name) in wanted]
    if not names:
        return []
    parts = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names)
    return [f"from {'.' * node.level}{node.module or ''} import {parts}"]


@functools.cache
def _module(path: Path) -> tuple[ast.Module, list[str]]:
    text = path.read_text(encoding="utf-8")
    return ast.parse(text), text.splitlines()


def program(site: Site, header: str, *, prints: bool, lang: str = "en") -> tuple[str, list[str]]:
    """The standalone source of ``site`` (its call prints what it returns when ``prints``; a process group's call
    made in two gloo processes, :data:`IN_WORKERS`, commented in ``lang``), and the libraries other than torch and the
    standard library its imports need."""
    tree, lines = _module(site.path)
    defs = {name: node for node in tree.body for name in _defined(node)}
    harness = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom)
               and node.module == HARNESS for a in node.names}
    if site.name not in defs:
        raise ProgramError(f"{site.path.name}: no function {site.name}")
    # module-level statements that fill a chosen name (``exec(..., NAMESPACE)``) run with it
    statements = [node for node in tree.body if isinstance(node, ast.Expr) and not (
        isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") in harness | {"no_fix"})]
    chosen, todo = {site.name}, [site.name]
    extra: list[ast.stmt] = []
    while todo:
        for name in sorted(_used(defs[todo.pop()])):
            if name in defs and name not in chosen:
                chosen.add(name)
                todo.append(name)
        for node in statements:
            if node not in extra and _used(node) & chosen:
                extra.append(node)
                for name in sorted(_used(node)):
                    if name in defs and name not in chosen:
                        chosen.add(name)
                        todo.append(name)
    names = set().union(*(_used(defs[name]) for name in chosen), *(_used(node) for node in extra))
    if names & harness:
        raise ProgramError(f"{site.path.name}::{site.name} uses the harness ({sorted(names & harness)}): a program "
                           "must run without it")
    imports: list[str] = []
    needs: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found = _import_lines(node, names)
            imports += found
            if found:
                top = (node.names[0].name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
                if top not in STDLIB and top != HARNESS:
                    needs.add(top)
    for name in chosen:  # imports inside the functions
        for inner in ast.walk(defs[name]):
            if isinstance(inner, (ast.Import, ast.ImportFrom)) and getattr(inner, "level", 0) == 0:
                top = (inner.names[0].name if isinstance(inner, ast.Import) else inner.module or "").split(".")[0]
                if top not in STDLIB:
                    needs.add(top)
    body = [_segment(lines, node) for node in tree.body
            if (set(_defined(node)) & chosen or node in extra) and node is not defs[site.name]]
    body.append(_segment(lines, defs[site.name]))
    call = f"print({site.name}())" if prints else f"{site.name}()"
    if site.group:
        body.append(IN_WORKERS.format(comment=IN_WORKERS_SAY[lang], call=call))
        call = SHOW_RANKS
    code = "\n".join([header, *imports]) + "\n\n\n" + "\n\n\n".join(body) + "\n\n\n" + call + "\n"
    return code, sorted(needs | set(site.needs) | ({"processes"} if site.group else set()))


# a program of a process group runs its call in each of two gloo processes on this machine (hooklab.run_workers, as
# the trigger tests do), each returning what it showed (hooklab.course.programs.call); rank 0's is printed, and rank
# 1's where it differs
IN_WORKERS = """def on_each_rank(rank, world_size):
    # {comment}
    from hooklab.course.programs import call
    return call(lambda: {call})"""
IN_WORKERS_SAY = {"en": "run in each of two processes joined in a gloo process group: what it shows (error, warnings, "
                        "prints)",
                  "zh": "在加入同一个 gloo 进程组的两个进程里各运行一次：返回它显示的内容（错误、警告、打印）"}
SHOW_RANKS = """from hooklab import run_workers

shown = run_workers(on_each_rank, world_size=2, timeout=180)
print(shown[0])
if shown[1] != shown[0]:
    print("rank 1:", shown[1])"""


def _header(template: dict[str, str], text: dict[str, str]) -> dict[str, str]:
    return {lang: template[lang].format(" ".join(text[lang].split())) for lang in LANGS}


def _code(site: Site, headers: dict[str, str], *, prints: bool) -> tuple[dict[str, str], list[str]]:
    codes, needs = {}, []
    for lang in LANGS:
        codes[lang], needs = program(site, headers[lang], prints=prints, lang=lang)
    return codes, needs


def _messages(root: Path) -> dict[str, dict[str, Any]]:
    data = json.loads((root / "docs" / "hook_messages.json").read_text(encoding="utf-8"))
    return {m["id"]: m for m in data["messages"]}


def sources(root: Path = ROOT) -> dict[str, dict[str, Any]]:
    """message id -> its programs without what they print (``prints`` null): what the test files make."""
    known = _messages(root)
    out: dict[str, dict[str, Any]] = {}
    for mid, entry in registry(root / "tests" / "messages").items():
        message = known.get(mid)
        if message is None:
            raise ProgramError(f"{entry.show.path.name}::{entry.show.name} triggers {mid!r}, which is no message")
        summary = {"en": message.get("en") or message["text"], "zh": message.get("zh") or message["text"]}
        code, needs = _code(entry.show, _header(SHOW_HEADER, summary), prints=False)
        record: dict[str, Any] = {"show": {"code": code, "needs": needs, "prints": None}, "fix": None,
                                  "no_fix": entry.no_fix}
        if entry.fix is not None:
            lines = {lang: getattr(entry.fix, lang).strip() or FIX_UNSAID[lang] for lang in LANGS}
            fix_code, fix_needs = _code(entry.fix, _header(FIX_HEADER, lines), prints=True)
            record["fix"] = {"code": fix_code, "needs": fix_needs, "prints": None}
        out[mid] = record
    return out


# --- running them ------------------------------------------------------------------------------------------------

def _child(code: str, conn: Any) -> None:
    from hooklab.course.programs import run
    try:
        conn.send(run(code))
    finally:
        conn.close()


def _pattern(message: dict[str, Any]) -> Any:
    return pattern(message["text"])


def _head_end(message: dict[str, Any], text: str) -> int | None:
    first = PLACEHOLDER.split(message["text"].strip())[0]
    match = pattern(first).search(text)
    return match.end() if match else None


def run_all(codes: dict[Any, str], *, jobs: int = 2, timeout: float = TIMEOUT,
            done: Any = None) -> dict[Any, str]:
    """What :func:`hooklab.course.programs.run` shows for each program, each run in a child forked from this process,
    ``jobs`` at a time; ``done(key, text)`` is told each result as it comes."""
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("fork")
    pending = list(codes.items())
    running: dict[Any, tuple[Any, Any, float]] = {}
    results: dict[Any, str] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                key, code = pending.pop(0)
                receive, send = context.Pipe(duplex=False)
                # not a daemon: a process group's program starts worker processes of its own (a daemon may not);
                # the finally below kills any still running
                child = context.Process(target=_child, args=(code, send), daemon=False)
                child.start()
                send.close()
                running[receive] = (key, child, time.monotonic())
            for receive in wait(list(running), timeout=5):
                key, child, _ = running.pop(receive)  # type: ignore[index]
                try:
                    results[key] = str(receive.recv())
                except EOFError as died:
                    raise ProgramError(f"{key}: its program ended its process without a result") from died
                finally:
                    receive.close()
                    child.join(5)
                if done is not None:
                    done(key, results[key])
            late = [key for key, _, began in running.values() if time.monotonic() - began > timeout]
            if late:
                raise ProgramError(f"{late}: ran past {timeout} s")
    finally:
        for receive, (_, child, _) in running.items():
            child.kill()
            child.join()
            receive.close()
    return results


def build(root: Path = ROOT, *, old: dict[str, Any] | None = None, fresh: bool = True, progress: Any = None,
          checkpoint: Any = None, jobs: int = 2) -> dict[str, Any]:
    """The data file: every program with what it prints (run here, ``jobs`` at a time; a program that needs
    processes is not run, one that needs a library absent here keeps what ``old`` stored; ``fresh=False``: a program
    whose code and needs are what ``old`` stored keeps what it printed, only the others run). ``progress(done,
    total, what)`` is told each program run; ``checkpoint(data)`` gets the data so far every few programs (the
    programs not run yet print null), so that a run cut short keeps what it ran."""
    import importlib.util

    import torch  # imported once here, so that each forked program starts with it

    known = _messages(root)
    heads = {mid: e.show.head for mid, e in registry(root / "tests" / "messages").items()}
    stored = (old or {}).get("programs", {})
    programs = sources(root)
    codes: dict[tuple[str, str], str] = {}
    for mid, record in programs.items():
        for part in ("show", "fix"):
            if record[part] is None:
                continue
            before = (stored.get(mid) or {}).get(part) or {}
            same = before.get("code") == record[part]["code"] and before.get("needs") == record[part]["needs"]
            if same and not fresh and (before.get("prints") is not None or before.get("prints_start") is not None):
                record[part] = before
                continue
            absent = [n for n in record[part]["needs"] if n not in MACHINE_NEEDS and importlib.util.find_spec(n) is None]
            if "cuda" in record[part]["needs"] and not torch.cuda.is_available():
                absent.append("cuda")
            if absent:
                if same:
                    record[part] = before
                continue
            codes[(mid, part)] = record[part]["code"]["en"]
    problems: list[str] = []
    count = [0]

    def done(key: tuple[str, str], text: str) -> None:
        mid, part = key
        record = programs[mid]
        found = _pattern(known[mid]).search(text)
        if part == "show" and not found:
            problems.append(f"{mid}: its program does not show it; it shows:\n{text[:2000]}")
        if part == "fix" and found:
            problems.append(f"{mid}: its fix still shows it:\n{text[:2000]}")
        if part == "fix" and RAISED.match(text):
            problems.append(f"{mid}: its fix raises:\n{text[:2000]}")
        if part == "show" and heads[mid] and found:
            end = _head_end(known[mid], text)
            record[part] = {"code": record[part]["code"], "needs": record[part]["needs"], "prints_start": text[:end]}
        else:
            record[part]["prints"] = text
        count[0] += 1
        if progress is not None:
            progress(count[0], len(codes), f"{mid} ({part})")
        if checkpoint is not None and count[0] % 10 == 0:
            checkpoint({"about": ABOUT, "programs": programs})

    run_all(codes, jobs=jobs, done=done)
    if problems:
        if checkpoint is not None:
            checkpoint({"about": ABOUT, "programs": programs})
        raise ProgramError("\n\n".join(problems))
    return {"about": ABOUT, "programs": programs}


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def load(path: Path = OUT) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def stale(root: Path = ROOT, path: Path = OUT) -> list[str]:
    """What differs between the test files' programs and the stored ones (their code, the ids, the reasons, what
    they need); what they print is checked by running them (tests/tools/test_programs.py)."""
    stored = load(path).get("programs", {})
    now = sources(root)
    out = [f"{mid}: not stored" for mid in sorted(set(now) - set(stored))]
    out += [f"{mid}: stored, but no trigger shows it" for mid in sorted(set(stored) - set(now))]
    for mid in sorted(set(now) & set(stored)):
        a, b = now[mid], stored[mid]
        for part in ("show", "fix"):
            if (a[part] or {}).get("code") != (b[part] or {}).get("code"):
                out.append(f"{mid}: its {part} program changed")
            if (a[part] or {}).get("needs") != (b[part] or {}).get("needs"):
                out.append(f"{mid}: what its {part} program needs changed")
        for key in ("no_fix",):
            if a[key] != b.get(key):
                out.append(f"{mid}: {key} changed")
    return out


def write(root: Path = ROOT, path: Path = OUT, *, fresh: bool = False, jobs: int = 2) -> dict[str, Any]:
    """Write the data file (``fresh``: run every program, not only those whose code changed), telling stderr which
    program runs."""
    def progress(done: int, total: int, what: str) -> None:
        print(f"[{done}/{total}] {what}", file=sys.stderr, flush=True)

    def checkpoint(data: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(data), encoding="utf-8")
    data = build(root, old=load(path), fresh=fresh, progress=progress, checkpoint=checkpoint, jobs=jobs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(data), encoding="utf-8")
    return data


def unsaid(root: Path = ROOT) -> list[str]:
    """The fixes that do not say what they do (``@fix("<id>", en=..., zh=...)``), as ``file::function``."""
    return [f"{e.fix.path.name}::{e.fix.name}" for e in registry(root / "tests" / "messages").values()
            if e.fix is not None and not (e.fix.en.strip() and e.fix.zh.strip())]


def counts(data: dict[str, Any]) -> dict[str, int]:
    programs = data.get("programs", {})
    return {"messages": len(programs), "fix": sum(1 for p in programs.values() if p["fix"]),
            "no_fix": sum(1 for p in programs.values() if p["no_fix"]),
            "neither": sum(1 for p in programs.values() if not p["fix"] and not p["no_fix"])}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tools.messages.programs", description=__doc__.split("\n")[0])
    parser.add_argument("--fresh", action="store_true",
                        help="run every program (default: only those whose code changed; a new PyTorch wants --fresh)")
    parser.add_argument("--jobs", type=int, default=2, help="programs run at a time (default 2)")
    args = parser.parse_args(argv)
    try:
        data = write(fresh=args.fresh, jobs=max(1, args.jobs))
    except ProgramError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"{OUT.relative_to(ROOT)}: {counts(data)}")
    for name in unsaid():
        print(f"{name}: say what the fix does, @fix(\"<id>\", en=\"...\", zh=\"...\")", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
