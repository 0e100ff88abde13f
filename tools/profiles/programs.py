"""Every "unexpected" fact of a library profile (its ``surprises``) as a program that runs on its own, generated from
the code that measures it, and, where the profile's advice has been made runnable, the program of what to do instead.

    python -m tools.profiles programs            # write docs/programs/profiles.json (runs what changed, if here)
    python -m tools.profiles programs --fresh    # run every program that can run here
    python -m tools.profiles programs --beside   # and those of a library absent here, installed beside (uv)
    python -m tools.profiles programs --check    # regenerate a seeded sample and compare with the file
    python -m tools.profiles programs --only peft:facts.hook_on_replaced_linear --print   # show one program

A ``facts.<name>`` fact is measured by the profile module's ``facts()`` (tools/profiles/libraries/<slug>.py): its
program is the statements of ``facts()`` that this fact's value needs (:mod:`tools.profiles.slicing`), with every
module-level definition they use (read from the module's syntax tree, ``from ._small import ...`` written out), then
the value printed as JSON, the same value the profile stores (warnings, logs and what the library prints while it
runs are kept out of the output); where the value cannot be cut out, the whole ``facts()`` runs and the fact is
printed from what it returns. The generation fails when a program does not print the profile's value. A
``probe.<...>`` fact is read from the standard probe (:mod:`tools.profiles.probe`): its program is a small template
per probe kind (:data:`PROBE_TEMPLATES`: a deep copy, a fresh state dict, checkpointing, the order of the hooks, the
library's own removal, a ``forward`` replaced on the instance) filled with the module's ``build``, ``inputs``,
``apply`` and ``TARGET``. What to do instead is the only hand-written part (:data:`tools.profiles.fixes.FIXES`): a few
lines run after the same definitions; a fact without one says so in ``no_fix`` with the profile's advice in words.

A profile read from the library's source (``status="source"``) gets no program (``no_program`` says why). A
program that imports a library absent here names it in ``needs`` (the runner of tests/tools/test_programs.py skips
it there); ``--beside`` runs it with the release the profile measured (``requires``) installed beside the
environment by uv, as the profile was measured (``ran``: ``beside``); without it, its ``prints`` is the value the
profile measured and a fix that could not run has ``prints`` null. A fact with nothing to do instead says why
(:data:`tools.profiles.fixes.NO_FIX`).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..messages.programs import _defined as _bound  # the names a top-level statement binds
from .slicing import Slice, fact_slice

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "programs" / "profiles.json"
LIBRARIES = ROOT / "tools" / "profiles" / "libraries"
PROFILES = ROOT / "hooklab" / "course" / "assets" / "profiles" / "library_profiles.json"
# The environment the programs run in here holds nothing that hides what a reader's run shows: no WANDB_SILENT,
# wandb's programs make wandb silent themselves (_run in tools/profiles/libraries/wandb.py).
ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": "",
       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline",
       "TOKENIZERS_PARALLELISM": "false"}
RUNNER = "import sys\nfrom hooklab.course.programs import run\nsys.stdout.write(run(sys.stdin.read()))\n"
SECONDS = 600  # one program (a facts() measures every fact of its profile)
SAMPLE = 8  # programs --check regenerates
ABOUT = ("Each 'unexpected' fact of a library profile (hooklab/course/assets/profiles/library_profiles.json) as a "
         "program that runs on its own, generated from the code that measures it (python -m tools.profiles programs; "
         "do not edit), and the program of what to do instead where there is one. `prints`: what the program prints "
         "(its error and warnings first, masked), the same on every machine with OMP_NUM_THREADS=1, offline. `needs`: "
         "the modules it imports beside torch and hooklab (a library absent from the course's environment runs with "
         "`requires` installed beside it); a profile read from its source has no program (`no_program`). `ran`: `here` (in the "
         "course's environment), `beside` (with `requires` installed beside it by uv, as the profile was measured) or "
         "null (not run: `prints` is the profile's value).")
WORDS = {
    "en": {"show": "Shows", "fix": "Instead", "measured": "measured with {what}; the code is the profile's own "
           "(tools/profiles/libraries/{slug}.py){how}", "facts": ", its facts()",
           "cut": ", the statements of its facts() this fact needs", "probe": ", the probe's {kind} "
           "check", "run": "measure, then print this fact as the profile stores it",
           "prints": "it prints", "no_fix": "No program of what to do instead yet; the profile's advice: {remove}",
           "nothing": "Nothing to do instead: {why}",
           "no_program": "read from the library's source ({why}): no program runs it here"},
    "zh": {"show": "演示", "fix": "改用", "measured": "实测环境：{what}；代码取自画像本身"
           "（tools/profiles/libraries/{slug}.py）{how}", "facts": "的 facts()",
           "cut": "的 facts() 里这一事实用到的语句", "probe": "，探针的 {kind} 检查",
           "run": "测量，然后按画像保存的样子打印这一事实", "prints": "它打印",
           "no_fix": "还没有“改用什么”的程序；画像的建议：{remove}",
           "nothing": "没有可以改用的做法：{why}",
           "no_program": "这份画像读自库的源码（{why}）：这里没有程序运行它"},
}

# The probe's checks as programs: each is run after the module's definitions (build, inputs, apply, TARGET, remove).
_LOSS = "def _loss(output):\n    while not isinstance(output, torch.Tensor):\n        output = next(iter(output.values())) if hasattr(output, 'values') else output[0]\n    return output.float().pow(2).mean()\n"
PROBE_TEMPLATES: dict[str, tuple[tuple[str, ...], str]] = {
    "survives.deepcopy": (("build", "inputs", "apply"), """\
import copy

import hooklab

torch.manual_seed(0)
model = apply(build())
print("hooks on the model:", len(hooklab.all_hooks(model)))
try:
    twin = copy.deepcopy(model)
except Exception as exc:
    print("copy.deepcopy raises", type(exc).__name__)
else:
    print("hooks on the copy:", len(hooklab.all_hooks(twin)))
"""),
    "survives.loads_fresh_state_dict": (("build", "inputs", "apply"), """\
torch.manual_seed(0)
model = apply(build())
fresh = build().state_dict()
try:
    result = model.load_state_dict(fresh, strict=False)
except Exception as exc:
    print("load_state_dict raises", type(exc).__name__)
else:
    print(len(result.missing_keys), "missing,", len(result.unexpected_keys), "unexpected")
    print("e.g.", sorted(result.missing_keys)[:1], sorted(result.unexpected_keys)[:1])
"""),
    "survives.checkpoint": (("build", "inputs", "apply"), _LOSS + """
from torch.utils.checkpoint import checkpoint

calls = {"eager": 0, "checkpoint": 0}
where = ["eager"]
torch.manual_seed(0)
model = apply(build())
for module in model.modules():  # count the calls of the library's forward hooks
    for key, hook in list(module._forward_hooks.items()):
        def counted(*args, _hook=hook, **kwargs):
            calls[where[0]] += 1
            return _hook(*args, **kwargs)
        module._forward_hooks[key] = counted
_loss(model(*inputs())).backward()
where[0] = "checkpoint"
_loss(checkpoint(model, *inputs(), use_reentrant=False)).backward()
print("the library's forward hooks ran", calls["eager"], "times in a plain step,", calls["checkpoint"],
      "times in a checkpointed step")
"""),
    "order.forward": (("build", "inputs", "apply", "TARGET"), _LOSS + """
log = []


def yours(label):
    target = model.get_submodule(TARGET) if label == "before" else find(model)
    target.register_forward_pre_hook(lambda m, a: log.append(f"yours, {label}: forward_pre"))
    target.register_forward_hook(lambda m, a, o: log.append(f"yours, {label}: forward"))


def find(root):  # the target, looked up again in what apply returned
    return next(m for n, m in root.named_modules() if n == TARGET or n.endswith("." + TARGET))


torch.manual_seed(0)
model = build()
yours("before")
model = apply(model)
yours("after")
for module in model.modules():  # name the library's forward hooks as they run
    for hooks, kind in ((module._forward_pre_hooks, "forward_pre"), (module._forward_hooks, "forward")):
        for key, hook in list(hooks.items()):
            if getattr(hook, "__name__", "") == "<lambda>":
                continue
            name = getattr(getattr(hook, "func", hook), "__name__", type(hook).__name__)
            def logged(*args, _hook=hook, _label=f"library: {kind} {name}", **kwargs):
                log.append(_label)
                return _hook(*args, **kwargs)
            hooks[key] = logged
_loss(model(*inputs())).backward()
print("\\n".join(log))
"""),
    "order.backward": (("build", "inputs", "apply", "TARGET"), _LOSS + """
log = []


def yours(target, label):
    target.register_full_backward_pre_hook(lambda m, g: log.append(f"yours, {label}: backward_pre"))
    target.register_full_backward_hook(lambda m, gi, go: log.append(f"yours, {label}: backward"))


torch.manual_seed(0)
model = build()
yours(model.get_submodule(TARGET), "before")
model = apply(model)
yours(next(m for n, m in model.named_modules() if n == TARGET or n.endswith("." + TARGET)), "after")
_loss(model(*inputs())).backward()
print("backward hooks that fired:", log)
"""),
    "removed": (("build", "inputs", "apply", "remove"), """\
import hooklab

torch.manual_seed(0)
model = build()
before = len(hooklab.all_hooks(model))
model = remove(apply(model))
left = [f"{r.where or '(model)'}: {r.kind}" for r in hooklab.all_hooks(model)][before:]
print(len(left), "left after the library's own removal:", left)
"""),
    "forward_replaced": (("build", "inputs", "apply"), """\
torch.manual_seed(0)
model = apply(build())
replaced = [name or type(model).__name__ for name, m in model.named_modules() if "forward" in vars(m)]
print("forward replaced on the instance:", replaced)
print("forward hooks on them:", sum(len(m._forward_hooks) for m in model.modules()))
"""),
}


def profiles() -> dict[str, Any]:
    return json.loads(PROFILES.read_text(encoding="utf-8"))["libraries"]


# ---------------------------------------------------------------- a module's definitions, as a standalone program

def _loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}


def _segment(text: str, node: ast.stmt) -> str:
    lines = text.splitlines()
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "\n".join(lines[first - 1:node.end_lineno])


def _definitions(path: Path) -> tuple[list[tuple[str, str, set[str]]], list[tuple[set[str], str]]]:
    """A module's top-level definitions in order, ``(name, source, names it uses)``, and its absolute imports
    ``(names they bind, source)``; ``from .x import a`` is replaced by ``a``'s definition in ``x``."""
    text = path.read_text(encoding="utf-8")
    defs: list[tuple[str, str, set[str]]] = []
    imports: list[tuple[set[str], str]] = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.module == "spec":
                continue
            inner, inner_imports = _definitions(path.parent / f"{node.module}.py")
            wanted = {a.name for a in node.names}
            defs += [d for d in inner if d[0] in wanted]
            imports += inner_imports
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            names = {(a.asname or a.name).split(".")[0] for a in node.names}
            imports.append((names, _segment(text, node).split("  #")[0]))
        else:
            for name in _bound(node):
                if name != "LIBRARY":
                    defs.append((name, _segment(text, node), _loaded(node)))
    return defs, imports


def program_body(slug: str, roots: tuple[str, ...], tail: str) -> str:
    """The definitions of ``slug``'s module that ``roots`` and ``tail`` use (transitively), with the imports they
    need, then ``tail``."""
    defs, imports = _definitions(LIBRARIES / f"{slug}.py")
    known = {name for name, _, _ in defs}
    needed: set[str] = set()
    todo = [r for r in roots if r in known] + sorted(_loaded(ast.parse(tail)) & known)
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        for other, _, uses in defs:
            if other == name:
                todo += sorted((uses & known) - needed)
    chosen = [(name, src) for name, src, _ in defs if name in needed]
    seen: set[str] = set()
    kept = [(name, src) for name, src in chosen if not (name in seen or seen.add(name))]  # type: ignore[func-returns-value]
    used = set().union(*(u for n, _, u in defs if n in needed), _loaded(ast.parse(tail)), {"torch"})
    lines: list[str] = []
    for names, src in imports:
        if names & used and src not in lines:
            lines.append(src)
    body = "\n".join(["from __future__ import annotations", ""] + lines) + "\n\n"
    for _, src in kept:
        # a helper that reads the probe's own record imports it from the repository (python -m from its root)
        src = src.replace("from ..probe import", "from tools.profiles.probe import")
        body += "\n" + src + "\n\n"
    return body + "\n" + tail


def _facts_tail(name: str) -> str:
    return textwrap.dedent(f"""\
        import contextlib
        import io
        import json
        import logging
        import warnings

        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \\
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)
            torch.set_num_threads(1)
            torch.manual_seed(0)
            fact = facts()[{name!r}]
        logging.disable(logging.NOTSET)
        print(json.dumps(fact, indent=1, sort_keys=True, ensure_ascii=False))
        """)


def _slice_tail(cut: Slice) -> str:
    """The statements of ``facts()`` one fact needs, at the top level of the program (inside a function when they
    ``return`` early or declare ``nonlocal``), then the fact printed as the profile stores it."""
    quiet = ("with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):"
             "  # what the library prints while it runs\n")
    first, *rest = cut.value.splitlines()
    value = first if not rest else "(" + first + "\n" + textwrap.indent(textwrap.dedent("\n".join(rest)), "    ") + ")"
    if cut.in_function:
        run = ("def measure():\n" + textwrap.indent(cut.code, "    ") + f"\n    return {value}\n\n\n" + quiet +
               "    fact = measure()\n")
    else:
        run = quiet + textwrap.indent(cut.code or "pass", "    ") + f"\nfact = {value}\n"
    return ("import contextlib\nimport io\nimport json\nimport logging\nimport warnings\n\n"
            "warnings.simplefilter(\"ignore\")  # they differ between releases\nlogging.disable(logging.WARNING)\n"
            "torch.set_num_threads(1)\ntorch.manual_seed(0)\n" + run + "logging.disable(logging.NOTSET)\n"
            "print(json.dumps(fact, indent=1, sort_keys=True, ensure_ascii=False))\n")


def fact_tail(slug: str, name: str) -> tuple[str, bool]:
    """The end of the program of ``facts.<name>`` and whether it is cut: the statements the fact needs, cut out of
    ``facts()`` (:mod:`tools.profiles.slicing`), or, where its value cannot be located there, the whole ``facts()``."""
    cut = fact_slice((LIBRARIES / f"{slug}.py").read_text(encoding="utf-8"), name)
    return (_facts_tail(name), False) if cut is None else (_slice_tail(cut), True)


def _quiet(tail: str) -> str:
    """``tail`` with warnings and logs kept out of what it shows (they differ between library releases)."""
    return ("import logging\nimport warnings\n\nwarnings.simplefilter(\"ignore\")  # they differ between releases\n"
            "logging.disable(logging.WARNING)\ntorch.set_num_threads(1)\n\n" + tail)


def _comment(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return "\n".join("# " + line for line in textwrap.wrap(text, 110, break_on_hyphens=False))


def _header(lang: str, slug: str, fact: str, first: str, what: str, record: dict[str, Any],
            cut: bool = False) -> str:
    w = WORDS[lang]
    measured = record["measured"]
    kind = fact.split(".", 1)
    how = w["cut" if cut else "facts"] if kind[0] == "facts" else w["probe"].format(kind=kind[1])
    version = f"torch {measured['torch']}" if record["name"] == "torch" else \
        f"{record['name']} {measured['version']}, torch {measured['torch']}"
    colon = "：" if lang == "zh" else ": "
    return "\n".join([_comment(f"{slug} · {fact} — {first}{colon}{what}"),
                      _comment(w["measured"].format(what=version, slug=slug, how=how))]) + "\n"


def _needs(code: str) -> list[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in ("torch", "hooklab", "tools", "__future__"):
                out.add(top)
    return sorted(out)


def _fixes() -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """The hand-written fixes, and the facts with nothing to do instead (why, in each language)."""
    from .fixes import FIXES, NO_FIX
    return FIXES, NO_FIX


def build_records(only: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every surprise's program record, without ``prints`` (``None``), in the order of the profiles."""
    fixes, nothing = _fixes()
    out: dict[str, dict[str, Any]] = {}
    for slug, record in profiles().items():
        for i, surprise in enumerate(record["surprises"], 1):
            fact = surprise["fact"]
            if record["status"] == "source":
                pid = f"{slug}:source-{i}"
                if only is None or pid in only:
                    why = record.get("why_source") or {"en": "", "zh": ""}
                    out[pid] = {"show": None, "fix": None, "no_fix": None, "needs": [], "requires": [],
                                "no_program": {lang: WORDS[lang]["no_program"].format(why=why[lang].rstrip("."))
                                               for lang in ("en", "zh")}, "source": fact.split(": ", 1)[-1]}
                continue
            pid = f"{slug}:{fact}"
            if only is not None and pid not in only:
                continue
            kind, _, name = fact.partition(".")
            if kind == "facts":
                tail, cut = fact_tail(slug, name)
                body = program_body(slug, () if cut else ("facts",), tail)
            else:
                cut = False
                roots, template = PROBE_TEMPLATES[name]
                module_names = {n for n, _, _ in _definitions(LIBRARIES / f"{slug}.py")[0]}
                roots = roots + tuple(r for r in ("loss",) if r in module_names)
                if "loss" in module_names:
                    template = template.replace(_LOSS, "_loss = loss\n")
                body = program_body(slug, roots, _quiet(template))
            distribution = (record.get("requirement") or "").split("==")[0] or record["name"]
            requires = [f"{distribution}=={record['measured']['version']}"]
            show = {"code": {lang: _header(lang, slug, fact, WORDS[lang]["show"], surprise[lang], record, cut) + body
                             for lang in ("en", "zh")}, "prints": None}
            entry: dict[str, Any] = {"show": show, "fix": None, "no_fix": None, "needs": _needs(body),
                                     "requires": requires}
            fix = fixes.get(pid)
            if fix:
                fix_body = program_body(slug, (), _quiet(fix["code"]))
                entry["fix"] = {"code": {lang: _header(lang, slug, fact, WORDS[lang]["fix"], fix[lang], record)
                                         + fix_body for lang in ("en", "zh")}, "prints": None,
                                "needs": _needs(fix_body), "what": {lang: fix[lang] for lang in ("en", "zh")}}
            elif pid in nothing:
                entry["no_fix"] = {lang: WORDS[lang]["nothing"].format(why=nothing[pid][lang]) for lang in ("en", "zh")}
            else:
                entry["no_fix"] = {lang: WORDS[lang]["no_fix"].format(remove=record["words"][lang]["remove"])
                                   for lang in ("en", "zh")}
            out[pid] = entry
    return out


def stored_value(slug: str, fact: str) -> Any:
    value = profiles()[slug]["measured"]
    for part in fact.split("."):
        value = value[part]
    return value


# ---------------------------------------------------------------- running them

def _uncommented(code: str) -> str:
    lines = code.splitlines()
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "\n".join(lines)


def runnable(needs: list[str]) -> bool:
    import importlib.util
    return all(importlib.util.find_spec(n.split(".")[0]) is not None for n in needs)


def run_fresh(code: str, *, timeout: float = SECONDS, beside: list[str] | None = None) -> str:
    """What ``code`` shows, run in a fresh process of this environment, or with the ``beside`` requirements installed
    beside it (uv, cached; the pinned torch stays), as the profiles measure a library that is not in the lock."""
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", RUNNER]
    if beside:
        from .generate import uv
        env.setdefault("UV_PYTHON", sys.executable)
        command = [uv(), "run", "--no-sync", "--frozen", "--quiet", *(f"--with={r}" for r in beside), "python", "-c",
                   RUNNER]
    done = subprocess.run(command, input=code, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"the runner failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def fill(records: dict[str, dict[str, Any]], *, jobs: int = 2, old: dict[str, Any] | None = None,
         beside: bool = False) -> list[str]:
    """Run every program whose needs are here and store what it prints; a show program of a library absent here
    stores the value the profile measured, or, with ``beside``, is run with the library's measured release installed
    beside the environment (so are its fix programs); with ``old`` (the file's programs), a program whose code and
    needs are unchanged keeps what it printed there. Returns the problems (a show program that does not print the
    profile's value)."""
    tasks = []
    for pid, entry in records.items():
        for part in ("show", "fix"):
            program = entry.get(part)
            if program is None:
                continue
            needs = entry["needs"] + program.get("needs", [])
            before = ((old or {}).get(pid) or {}).get(part) or {}
            # what a program prints comes from its code without its header of comments
            if _uncommented((before.get("code") or {}).get("en", "")) == _uncommented(program["code"]["en"]) and \
                    (old or {})[pid].get("needs") == entry["needs"] and \
                    before.get("prints") is not None:
                program["prints"], program["ran"] = before["prints"], before.get("ran")
            elif runnable(needs) or (beside and entry["requires"]):
                tasks.append((pid, part))
            elif part == "show" and pid.split(":", 1)[1].startswith("facts."):
                slug, fact = pid.split(":", 1)
                program["prints"] = json.dumps(stored_value(slug, fact), indent=1, sort_keys=True, ensure_ascii=False)
                program["ran"] = None

    def one(task: tuple[str, str]) -> tuple[str, str, str]:
        pid, part = task
        start = time.monotonic()
        entry = records[pid]
        here = runnable(entry["needs"] + entry[part].get("needs", []))
        out = run_fresh(entry[part]["code"]["en"], beside=None if here else entry["requires"])
        entry[part]["ran"] = "here" if here else "beside"
        print(f"ran {pid} ({part}) in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
        return pid, part, out

    problems = []
    with ThreadPoolExecutor(jobs) as pool:
        for pid, part, out in pool.map(one, tasks):
            records[pid][part]["prints"] = out
            slug, fact = pid.split(":", 1)
            if part == "show" and fact.startswith("facts."):
                expected = json.dumps(stored_value(slug, fact), indent=1, sort_keys=True, ensure_ascii=False)
                if out != expected:
                    problems.append(f"{pid}: prints\n{out}\nthe profile stores\n{expected}")
    return problems


def render(records: dict[str, dict[str, Any]]) -> str:
    return json.dumps({"about": ABOUT, "programs": records}, ensure_ascii=False, indent=1) + "\n"


def sample(ids: list[str], seed_text: str, k: int = SAMPLE) -> list[str]:
    return sorted(random.Random(seed_text).sample(sorted(ids), min(k, len(ids))))


def check(seed_text: str = "profiles") -> list[str]:
    """What differs between the committed file and a regeneration of a seeded sample of its programs' code (the
    programs are not run: the runner of tests/tools/test_programs.py compares what they print)."""
    if not OUT.exists():
        return [f"{OUT.relative_to(ROOT)} is missing: python -m tools.profiles programs"]
    stored = json.loads(OUT.read_text(encoding="utf-8"))["programs"]
    fresh_ids = list(build_records_ids())
    problems = []
    if sorted(fresh_ids) != sorted(stored):
        problems.append(f"the surprises changed: new {sorted(set(fresh_ids) - set(stored))[:5]}, "
                        f"gone {sorted(set(stored) - set(fresh_ids))[:5]}")
    chosen = set(sample([i for i in fresh_ids if i in stored], seed_text))
    for pid, entry in build_records(chosen).items():
        old = stored[pid]
        for part in ("show", "fix"):
            new_code = (entry.get(part) or {}).get("code")
            old_code = (old.get(part) or {}).get("code")
            if new_code != old_code:
                problems.append(f"{pid} ({part}): its code changed")
        if entry.get("no_fix") != old.get("no_fix") or entry["needs"] != old.get("needs"):
            problems.append(f"{pid}: no_fix or needs changed")
    return problems


def build_records_ids() -> list[str]:
    out = []
    for slug, record in profiles().items():
        for i, surprise in enumerate(record["surprises"], 1):
            out.append(f"{slug}:source-{i}" if record["status"] == "source" else f"{slug}:{surprise['fact']}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profiles programs", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="regenerate a seeded sample and compare with the file")
    parser.add_argument("--only", nargs="*", help="program ids (<slug>:<fact>)")
    parser.add_argument("--print", action="store_true", help="print the programs (English) instead of writing")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--fresh", action="store_true", help="run every program, also those the file has unchanged")
    parser.add_argument("--beside", action="store_true", help="run the programs of a library absent here with its "
                        "measured release installed beside the environment (uv), as the profiles measure it")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        print("\n".join(problems) or f"{OUT.relative_to(ROOT)} is current (a sample of {SAMPLE})")
        return 1 if problems else 0
    only = set(args.only) if args.only else None
    records = build_records(only)
    if only is not None and set(only) - set(records):
        raise SystemExit(f"no such program: {sorted(set(only) - set(records))}; e.g. {build_records_ids()[:3]}")
    if args.print:
        for pid, entry in records.items():
            for part in ("show", "fix"):
                if entry.get(part):
                    print(f"# ===== {pid} ({part})\n{entry[part]['code']['en']}")
        return 0
    old = load_programs() if not args.fresh else {}
    problems = fill(records, jobs=args.jobs, old=old, beside=args.beside)
    if only is not None and OUT.exists():
        merged = json.loads(OUT.read_text(encoding="utf-8"))["programs"]
        merged.update(records)
        records = {pid: merged[pid] for pid in build_records_ids() if pid in merged}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render(records), encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(records)} facts", file=sys.stderr)
    if problems:
        print("\n\n".join(problems), file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------- on the profile pages

PAGE = {
    "en": {"program": "The program that shows it", "prints": "It prints:", "fix": "What to do instead: {what}",
           "no_fix": "No program of what to do instead yet (the profile's advice is under \"How to take it off\").",
           "needs": "Needs: {needs} (measured with {requires}).", "source": "Read from the source: no program runs it "
           "here.", "absent": "(the library is not installed where this page was built: what it prints is the "
           "value the profile measured)", "beside": "Run with {requires} installed beside the course's environment, "
           "as the profile was measured."},
    "zh": {"program": "演示它的程序", "prints": "它打印：", "fix": "改用：{what}",
           "no_fix": "还没有“改用什么”的程序（画像的建议见“如何移除”一节）。",
           "needs": "需要：{needs}（实测版本 {requires}）。", "source": "读自源码：这里没有程序运行它。",
           "absent": "（生成本页的环境里没有装这个库：打印内容是画像实测到的值）",
           "beside": "在课程环境之外另装 {requires} 运行，与画像实测时相同。"},
}


def load_programs(path: Path = OUT) -> dict[str, Any]:
    """docs/programs/profiles.json's programs (empty when the file is missing)."""
    return json.loads(path.read_text(encoding="utf-8"))["programs"] if path.is_file() else {}


def _fence(code: str, kind: str) -> list[str]:
    ticks = "````" if "```" in code else "```"
    return [ticks + kind, code.rstrip(), ticks]


def surprise_lines(pid: str, record: dict[str, Any] | None, lang: str) -> list[str]:
    """A surprise's program (and what to do instead), collapsed, as Markdown lines in ``lang``; [] without one."""
    t = PAGE[lang]
    if not record:
        return []
    if not record.get("show"):
        return [f"  *{t['source']}*", ""] if record.get("no_program") else []
    show = record["show"]
    lines = ["<details>", f"<summary>{t['program']} (<code>{pid}</code>)</summary>", "", *_fence(show["code"][lang],
             "python"), ""]
    if record.get("needs"):
        lines += [t["needs"].format(needs=", ".join(f"`{n}`" for n in record["needs"]),
                                    requires=", ".join(f"`{r}`" for r in record.get("requires", []))), ""]
    if show.get("prints") is not None:
        if show.get("ran") == "beside":
            lines += [t["beside"].format(requires=", ".join(f"`{r}`" for r in record.get("requires", []))), ""]
        elif show.get("ran") is None and record.get("needs"):
            lines += [t["absent"], ""]
        lines += [t["prints"], "", *_fence(show["prints"], "text"), ""]
    fix = record.get("fix")
    if fix:
        lines += [t["fix"].format(what=fix["what"][lang]), "", *_fence(fix["code"][lang], "python"), ""]
        if fix.get("prints") is not None:
            lines += [t["prints"], "", *_fence(fix["prints"], "text"), ""]
    else:
        lines += [(record.get("no_fix") or {}).get(lang) or t["no_fix"], ""]
    return [*lines, "</details>", ""]
