"""Every unusual cell of the hook behaviour matrix as a program that runs on its own, generated from the probe code.

    python -m tools.hook_matrix programs            # write docs/programs/matrix.json (runs every program)
    python -m tools.hook_matrix programs --check    # regenerate a seeded sample and compare with the file
    python -m tools.hook_matrix programs --keys forward-hook@compile-hook-after --print   # show one program
    python -m tools.hook_matrix programs --cached   # write the file from the programs already run, running none

Writing every program runs about 500 programs and 100 fixes, by a process that forks a child per program after
importing torch once: a few seconds of CPU each, about 40 minutes on two busy cores; what has run is kept by program
(:func:`cache_folder`), so an interrupted build resumes. ``--check`` runs a seeded sample in fresh interpreters.

A cell is *unusual* (:func:`unusual`) when it was observed and it is marked surprising in notes.toml, or when its
``fires``, ``calls``, ``error`` or ``warnings`` differ from its family's ``eager`` cell. Its program is composed from
the source of the probe (:mod:`hooklab.course.hook_matrix`): the model classes of ``families.py`` and ``Rig``, the
family's hook as a plain function that notes the phase of each call, its ``install`` written out from the family's
registration (:func:`install_source`), the context's function and the helpers it calls, with the harness calls
``h.rig`` / ``h.install`` / ``h.phase`` / ``h.note`` / ``h.exercise`` turned into plain code and ``h.fact`` (what
the probe compares between its two runs) dropped (:class:`_Plain`). It prints how often the hook fired, by phase,
the error and the warnings: counts and cleaned first lines, the same on every machine under ``OMP_NUM_THREADS=1``.

A *fix* is the same program with a change from ``tools/hook_matrix/fixes.toml`` (text replaced in the program). The
file lists workaround strategies (register later, register on what the step returns, register on the output outside,
another hook family, ``inputs=``, dequantize and quantize again, ...), each with changes for some columns and
families. For a cell whose hook misbehaves (:func:`kind`), every change that applies (:func:`candidates`) is made and
the program run: the first that then fires as the family's eager cell (the same number of calls in the same phases, no
error: :func:`fires_as_eager`) is the cell's fix, and every one is kept with what it printed (``attempts``), so that a
cell without a fix lists what was tried; where no strategy applies, fixes.toml says why (``[[none]]``). A cell whose
observation is its family's eager cell's but for the warnings (``kind`` ``warnings``), or that fires as in eager and
differs in what the hook receives or returns (``fires-as-eager``), says so instead, with nothing tried.

    python -m tools.hook_matrix programs --keys forward-hook@jit-trace --print --tried   # and each change tried

Two kinds of column read the probe's own record, and their programs keep the same record themselves: the thread
columns (``thread``, ``contextvar``, ``contextvar-pool``) ask each call of the hook what it sees (which thread, the
ContextVar, the thread-local; :data:`WATCHING`), and ``grad-scaler`` compares what the hook received in a scaled and an
unscaled backward (the hook keeps its arguments in ``LOG``, the probe's ``record.LOG``). The notes print what they find.

Cells that need a process group (the DDP, FSDP2, FSDP1 and tensor-parallel columns, the DDP and FSDP2 rows) have a
program that wraps the network as the probe's workers do (:func:`hooklab.course.hook_matrix.wrappers.wrap`, written in)
and makes its run in each of two gloo processes on this machine (``hooklab.run_workers``; :func:`_on_each_rank`):
rank 0's lines are printed, as the cell records rank 0's observation, and rank 1's where they differ. ``needs`` says
``processes:2``.
"""
from __future__ import annotations

import ast
import inspect
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

from .outcomes import FIXES, fixes, outcome, printed as _printed
from .page import HOW_ZH, PROGRAMS, WORDS, is_deprecation, observed, warnings_only as page_warnings_only

ROOT = Path(__file__).resolve().parents[2]
OUT = PROGRAMS
# what makes a cell unusual beside its surprising mark: these differ from the family's eager cell
UNUSUAL_FIELDS = ("fires", "calls", "error", "warnings")
# the columns whose probe reads the probe's own record (what each call saw, the gradients a hook received)
ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": "",
       "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
SECONDS = 180  # one program

def matrix() -> Any:
    from hooklab.course import hook_matrix
    return hook_matrix


def unusual(cells: dict[str, dict[str, Any]]) -> list[str]:
    """The unusual cells of ``cells`` (docs/hook_matrix.json's), in its order: observed, not eager, and surprising
    or differing from the family's eager cell in :data:`UNUSUAL_FIELDS`."""
    out = []
    for key, record in cells.items():
        family, context = key.split("@")
        plain = cells.get(f"{family}@eager")
        if context == "eager" or record["status"] != "observed" or plain is None:
            continue
        if record.get("surprising") or any(record.get(f) != plain.get(f) for f in UNUSUAL_FIELDS):
            out.append(key)
    return out


# ---- the source -------------------------------------------------------------------------------------------------

def _strip(tree: ast.AST) -> ast.AST:
    """Docstrings out (the program's comments are in the page's language)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
    return tree


def _class_source(cls: type) -> str:
    return ast.unparse(_strip(ast.parse(textwrap.dedent(inspect.getsource(cls)))))


class _Plain(ast.NodeTransformer):
    """The harness calls of a context's function as plain code (see the module's docstring)."""

    def __init__(self, family: Any, values: dict[str, Any], wrapper: str = "") -> None:
        self.family, self.values, self.wrapper = family, values, wrapper

    def visit_Name(self, node: ast.Name) -> Any:
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return ast.copy_location(ast.parse(repr(self.values[node.id]), mode="eval").body, node)
        if isinstance(node.ctx, ast.Load) and node.id in RENAMED:
            node.id = RENAMED[node.id]
        return node

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        self.generic_visit(node)
        text = ast.unparse(node)
        if text in ("h.family.where", "self.family.where"):
            return ast.Constant(self.family.where)
        if text in ("h.family.id", "self.family.id"):
            return ast.Constant(self.family.id)
        if text == "record.LOG":  # the probe's call log: the program's own (see RECEIVING)
            return ast.copy_location(ast.Name("LOG", node.ctx), node)
        return node

    def visit_Delete(self, node: ast.Delete) -> Any:
        self.generic_visit(node)
        # calls taken off the log are taken off the program's count of calls too
        node.targets += [ast.Subscript(ast.Name("CALLS", ast.Load()), t.slice, ast.Del()) for t in node.targets
                         if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "LOG"]
        return node

    def visit_If(self, node: ast.If) -> Any:
        self.generic_visit(node)
        literal = (ast.Compare, ast.Constant, ast.List, ast.Tuple, ast.In, ast.NotIn, ast.Eq, ast.NotEq, ast.Load)
        if not all(isinstance(n, literal) for n in ast.walk(node.test)):
            return node
        # a test the program's constants decide (exercise's "state" in acts): only the branch taken
        taken = eval(compile(ast.fix_missing_locations(ast.Expression(node.test)), "<test>", "eval"))  # noqa: S307
        return (node.body if taken else node.orelse) or None

    def visit_Assign(self, node: ast.Assign) -> Any:
        if all(isinstance(t, ast.Name) and t.id in self.values for t in node.targets):
            return None  # a value the program writes in as a constant where it is read
        return self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> Any:
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                and isinstance(call.func.value, ast.Name) and call.func.value.id in ("h", "self") \
                and call.func.attr == "fact":
            # what the probe compares between its two runs: kept only where it is itself the run (a forward)
            runs = [a for a in call.args if isinstance(a, ast.Call)
                    and not (isinstance(a.func, ast.Name) and a.func.id in ("sorted", "float", "len"))]
            if len(call.args) == 1 and runs:
                return ast.copy_location(ast.Expr(self.visit(runs[0])), node)
            return None
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Constant) and \
                isinstance(func.value.value, str) and func.attr in ("startswith", "endswith") and \
                all(isinstance(a, ast.Constant) for a in node.args) and not node.keywords:
            # a test of a value the program writes in (wrap's wrapper.startswith("fsdp1")): decided here
            return ast.copy_location(ast.Constant(getattr(func.value.value, func.attr)(
                *[a.value for a in node.args])), node)
        node.args = [a for a in node.args if not (isinstance(a, ast.Name) and a.id in ("h", "self"))]
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("h", "self"):
            if func.attr == "rig":
                node.func = ast.parse("wrapped_rig" if self.wrapper else "Rig.build", mode="eval").body
                if self.family.where == "forward-code":
                    node.keywords.insert(0, ast.keyword("tapped", ast.Constant(True)))
            elif func.attr in ("install", "phase", "exercise"):
                node.func = ast.Name(func.attr, ast.Load())
            elif func.attr == "note":
                node.func = ast.parse("NOTES.append", mode="eval").body
        if ast.unparse(node.func) == "record.set_phase":
            node.func = ast.Name("phase", ast.Load())
        return node


HELPER_MODULES = ("hooklab.course.hook_matrix.contexts", "hooklab.course.hook_matrix.practice",
                  "hooklab.course.hook_matrix.steps")
RENAMED = {"clean": "tidy", "scripted_install": "install", "_watching": "_watching"}  # the program has its own


def _function_source(fn: Any, name: str, family: Any, values: dict[str, Any], wrapper: str = "") -> str:
    tree = _strip(ast.parse(textwrap.dedent(inspect.getsource(fn))))
    node = tree.body[0]  # type: ignore[attr-defined]
    node.name = name
    node.decorator_list = [d for d in node.decorator_list if ast.unparse(d) != "staticmethod"]
    args = node.args
    # parameters fixed by how the context calls it (a closure's values, export's strict=True) become constants
    keep = [a for a in args.args if a.arg not in values]
    defaults = dict(zip([a.arg for a in args.args][::-1], args.defaults[::-1]))
    args.args, args.defaults = keep, [defaults[a.arg] for a in keep if a.arg in defaults]
    kept = [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if a.arg not in values]
    args.kwonlyargs, args.kw_defaults = [a for a, _ in kept], [d for _, d in kept]
    args.args = [a for a in args.args if a.arg not in ("h", "self")]
    for a in [*args.args, *args.kwonlyargs]:
        a.annotation = None
    node.returns = None
    node = _Plain(family, values, wrapper).visit(node)
    node.body = [n for n in node.body if not _guard(n)]
    return ast.unparse(ast.fix_missing_locations(node))


def _guard(node: ast.stmt) -> bool:
    """An ``if`` that only raises because the probe is called outside its worker processes (``wrap``'s check of the
    process group): a program that runs in them does not need it."""
    return isinstance(node, ast.If) and "is_initialized" in ast.unparse(node.test) and \
        all(isinstance(n, ast.Raise) for n in node.body)


def _called(fn: Any) -> list[tuple[str, Any]]:
    """The helper functions (of the probe's context modules) that ``fn`` calls, by the name it calls them."""
    code = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    names = {n.id for n in ast.walk(code) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    out = []
    for name in sorted(names):
        value = fn.__globals__.get(name)
        if name in RENAMED or not inspect.isfunction(value) or value.__module__ not in HELPER_MODULES:
            continue
        out.append((name, value))
    return out


def _context_function(context: Any) -> tuple[Any, dict[str, Any]]:
    """The function a context runs and the values of its parameters (a closure's cells, a lambda's arguments)."""
    run = context.run
    if run.__name__ == "<lambda>":  # lambda h: export(h, strict=True)
        text = inspect.getsource(run).split("lambda h:", 1)[1].split("),", 1)[0].strip() + ")"
        call = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call))
        target = run.__globals__[ast.unparse(call.func)]
        return target, {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    values = {}
    if run.__closure__:
        values = {name: cell.cell_contents for name, cell in zip(run.__code__.co_freevars, run.__closure__)}
    return run, values


def install_source(family: Any, plain: bool) -> str:
    """The family's registration (:attr:`Family.install`) written out: the method it calls and where."""
    fn = family.install
    free = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
    kind = fn.__qualname__.split(".")[0]
    options = "".join(f", {k}={v!r}" for k, v in free.get("options", {}).items())
    if kind == "_on_module":
        body = f"rig.handles.append(module.{free['method']}(hook{options}))"
    elif kind == "_on_weight":
        body = f"rig.handles.append(module.lin.weight.{free['method']}(hook))"
    elif kind == "_global":
        body = f"rig.handles.append(torch.nn.modules.module.{free['function']}(hook{options}))"
    elif kind == "_on_optimizer":
        body = f"rig.handles.append(rig.opt.{free['method']}(hook))"
    elif kind == "_saved":
        pair = "hook, identity" if free["which"] == "pack" else "identity, hook"
        body = f"rig.stack.enter_context(torch.autograd.graph.saved_tensors_hooks({pair}))"
    elif kind == "_tap":
        body = f"module.taps.append(Tap({free['how']!r}, hook))"
    elif kind == "_node_creation":
        body = "rig.stack.enter_context(torch.autograd.graph.node_creation_hook(hook))"
    elif kind == "_always_call":
        body = "module.fail_forward = True\nrig.handles.append(module.register_forward_hook(hook, always_call=True))"
    elif kind == "_comm_hook":
        body = "rig.net.register_comm_hook(None, hook)"
    elif kind == "_fsdp_hook":
        body = "module.set_all_reduce_hook(hook)"
    elif kind == "_parametrization":
        body = ("from torch.nn.utils import parametrize\n"
                "parametrize.register_parametrization(module.lin, 'weight', Recording())")
    else:
        raise ValueError(f"{family.id}: no program for its registration {kind}")
    head = "def install(rig, module=None):\n    module = rig.subject if module is None else module\n"
    return head + textwrap.indent(body, "    ")


def hook_source(family: Any, plain: bool, watch: bool = False, receive: bool = False) -> str:
    """The hook: a function with the family's parameters (the probe's modify hooks name them) that notes the phase
    of each call; a pack / unpack hook returns its argument. ``watch``: each call also keeps what it sees, where the
    run asks (:data:`WATCHING`); ``receive``: and what it received, in ``LOG`` (the run reads the probe's log)."""
    from hooklab.course.hook_matrix.record import ARITY, MODIFIERS

    if family.id == "ddp-comm-hook":  # a communication hook returns a future: the bucket averaged, as the default
        return ("def hook(state, bucket):\n    CALLS.append(PHASE[0])\n"
                "    world = torch.distributed.get_world_size()\n"
                "    future = torch.distributed.all_reduce(bucket.buffer().div_(world), async_op=True).get_future()\n"
                "    return future.then(lambda f: f.value()[0])")
    if family.id == "parametrization":
        return ("class Recording(nn.Module):\n\n    def forward(self, weight):\n        CALLS.append(PHASE[0])\n"
                "        return weight")
    modifier = MODIFIERS.get(family.id)
    if modifier is not None:
        params = str(inspect.signature(modifier))
    else:
        params = "(" + ", ".join(["module", "args", "output"][:ARITY.get(family.id, 3)]) + ")"
    first = params.strip("()").split(",")[0].strip().lstrip("*")
    back = f"\n    return {first}" if family.id.startswith("saved-tensors") else ""
    ask = "\n    if WATCH[0] is not None:\n        SEEN.append((PHASE[0], WATCH[0]()))" if watch else ""
    if receive:
        names = [n.strip().split("=")[0].split(":")[0].lstrip("*") for n in params.strip("()").split(",")]
        ask += f"\n    LOG.append(({family.id!r}, PHASE[0], ({', '.join(names)},)))"
    out = f"def hook{params}:\n    CALLS.append(PHASE[0]){ask}{back}"
    if family.id.startswith("saved-tensors"):
        out += "\n\n\ndef identity(t):\n    return t"
    return out


# the thread columns: what each hook call sees (the probe's record.WATCH / record.SEEN and practice._watching, written
# as the program's own); the probe's _seen is added from its source
WATCHING = '''VAR = contextvars.ContextVar("hooklab_probe", default="unset")
LOCAL = threading.local()
_LABELS = {}
WATCH = [None]
SEEN = []
THREAD_SECONDS = SECONDS_HERE


SEEN_HERE


@contextlib.contextmanager
def _watching(caller):
    _LABELS.clear()
    _LABELS[threading.get_ident()] = caller
    WATCH[0] = _seen
    try:
        yield
    finally:
        WATCH[0] = None
        for phase_name, text in dict.fromkeys(SEEN):
            NOTES.append(f"hook in {phase_name} {text}")
        SEEN.clear()
        _LABELS.clear()'''


SEES = {"en": "what each call of the hook sees: which thread it runs on, the ContextVar, the thread-local",
        "zh": "每次调用钩子时它看到的情况：在哪个线程上运行、ContextVar 的值、线程局部变量的值"}


RECEIVES = {"en": "what each call of the hook received: (hook, phase, arguments)",
            "zh": "每次调用钩子时它收到的参数：(钩子, 阶段, 参数)"}


def watching_source() -> str:
    from hooklab.course.hook_matrix import practice

    seen = ast.unparse(_strip(ast.parse(textwrap.dedent(inspect.getsource(practice._seen)))))
    return WATCHING.replace("SECONDS_HERE", str(practice.THREAD_SECONDS)).replace("SEEN_HERE", seen)


PRELUDE = '''from __future__ import annotations

{imports}

import torch
from torch import nn

torch.set_num_threads(1)
CALLS = []
PHASE = ["register"]
NOTES = []


def phase(name):
    PHASE[0] = name


def tidy(text):
    first = next((line.strip() for line in str(text).strip().splitlines() if line.strip()), "")
    first = re.sub("0x[0-9a-fA-F]{6,}", "0x…", first)
    return re.sub("(/[\\\\w.+-]+){2,}/?", "<path>", first)[:240]'''

EPILOGUE = '''with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # what PyTorch prints is not what fired
            run()
        error = None
    except Exception as exc:
        error = f"{type(exc).__name__}: {tidy(exc)}"
counts = collections.Counter(CALLS)
print("calls:", len(CALLS), "(" + ", ".join(f"{p} {n}" for p, n in counts.items()) + ")")
print("error:", error)
for note in dict.fromkeys(NOTES):
    print("note:", note)
for text in sorted({f"{w.category.__name__}: {tidy(w.message)}" for w in caught}):
    print("warning:", text)'''


def program(key: str, lang: str, cells: dict[str, dict[str, Any]]) -> str:
    """The program of cell ``key``, with its comments in ``lang``."""
    from hooklab.course.hook_matrix import families as fam
    from hooklab.course.hook_matrix.observe import Harness

    hm = matrix()
    family_id, context_id = key.split("@")
    family, context = hm.FAMILY_BY_ID[family_id], hm.CONTEXT_BY_ID[context_id]
    words, record = WORDS[lang], cells[key]
    plain = context_id in ("jit-script", "jit-freeze")
    fn, values = _context_function(context)
    parts = [PRELUDE]
    classes = [fam.Subject, fam.Net, fam.Rig]
    source = inspect.getsource(fn)
    if family.where == "forward-code":
        classes[1:1] = [fam.TappedSubject, fam.Tap]
        if "inline" in source:
            classes.insert(3, fam.InlineSubject)
    if "shared" in source:
        classes[2:2] = [fam.Wrapper, fam.SharedNet]
    model = "\n\n\n".join(_class_source(c) for c in classes)
    model = model.replace("recorder = self.hook", "recorder = self.hook").replace(
        "raise RuntimeError('probe: the forward raised on purpose')",
        "raise RuntimeError('probe: the forward raised on purpose')")
    parts.append(f"# {words['model']}\n{model}")
    watch = "_watching(" in source
    if watch:
        parts.append(f"# {SEES[lang]}\n{watching_source()}")
    receive = "record.LOG" in source
    if receive:
        parts.append(f"# {RECEIVES[lang]}\nLOG = []")
    parts.append(f"# {words['hook']}\n{hook_source(family, plain, watch, receive)}")
    parts.append(f"# {words['install']}\n{install_source(family, plain)}")
    from hooklab.course.hook_matrix import wrappers
    from hooklab.course.hook_matrix.observe import FAMILY_WRAPPER
    wrapper = context.wrap or FAMILY_WRAPPER.get(family_id, "")
    if wrapper:
        wrap = _function_source(wrappers.wrap, "wrap", family, {"wrapper": wrapper, "WRAPPERS": wrappers.WRAPPERS})
        parts.append(f"# {IN_GROUP[lang]['wrap']}\n{wrap}\n\n\n{WRAPPED_RIG}")
    helpers: dict[str, str] = {}
    todo = [("run", fn, values)]
    exercise = "h.exercise(" in source
    while todo:
        name, f, vals = todo.pop(0)
        if name in helpers:
            continue
        helpers[name] = _function_source(f, name, family, vals, wrapper)
        for called_name, called in _called(f):
            exercise = exercise or "h.exercise(" in inspect.getsource(called)
            todo.append((called_name, called, {}))
    if exercise:
        helpers["exercise"] = _function_source(Harness.exercise, "exercise", family,
                                               {"acts": sorted(family.acts)})
        if "phase(" not in helpers["exercise"]:  # nothing of the family's to run after the step
            del helpers["exercise"]
            helpers = {n: re.sub(r"\n *exercise\([^\n]*\)(?=\n|$)", "", code) for n, code in helpers.items()}
    from hooklab.course.hook_matrix import contexts
    constants = [f"{name} = {getattr(contexts, name)!r}" for name in ("BACKEND", "PRECOMPILE_BACKEND")
                 if re.search(rf"\b{name}\b", "".join(helpers.values()))]
    if constants:
        parts.append("\n".join(constants))
    ordered = [helpers[n] for n in helpers if n != "run"] + [helpers["run"]]
    how = context.how if lang == "en" else _how_zh(context_id, context.how)
    parts.append(f"# {words['run'].format(how=how)}\n" + "\n\n\n".join(ordered))
    if wrapper:
        parts.append(f"# {words['show']}\n{_on_each_rank(lang)}")
    else:
        parts.append(f"# {words['show']}\n{EPILOGUE}")
    title = _title(record, lang)
    head = f"# {words['head'].format(key=key, title=title)}"
    body = "\n\n\n".join(parts).replace(f"# {WORDS['en']['quiet']}", f"# {words['quiet']}")
    return head + "\n" + body.replace("{imports}", _imports(body)) + "\n"


# a cell of a process group: its rig wrapped as the probe's workers wrap it, its run made in each of two gloo
# processes on this machine (hooklab.run_workers, as hooklab.course.hook_matrix.observe_distributed does); rank 0's
# lines are printed (the cell records rank 0's observation), and rank 1's where they differ
IN_GROUP = {"en": {"wrap": "the wrapper the column puts around the network (in each process of the group)",
                   "ranks": "each of two processes joined in a gloo process group runs it; what each saw"},
            "zh": {"wrap": "这一列给网络套上的包装（在进程组的每个进程里）",
                   "ranks": "加入同一个 gloo 进程组的两个进程各运行一次；返回各自看到的情况"}}
WRAPPED_RIG = """def wrapped_rig(**options):
    rig = Rig.build(**options)
    wrap(rig)
    return rig"""


def _on_each_rank(lang: str) -> str:
    """The epilogue of a process group's program: :data:`EPILOGUE` made in each rank, its lines returned."""
    body = EPILOGUE.replace("print(", "lines.append(").replace(
        'lines.append("calls:", len(CALLS), "(" + ", ".join(f"{p} {n}" for p, n in counts.items()) + ")")',
        'lines.append(f"calls: {len(CALLS)} (" + ", ".join(f"{p} {n}" for p, n in counts.items()) + ")")').replace(
        'lines.append("error:", error)', 'lines.append(f"error: {error}")').replace(
        'lines.append("note:", note)', 'lines.append(f"note: {note}")').replace(
        'lines.append("warning:", text)', 'lines.append(f"warning: {text}")')
    if any(line.strip().startswith('lines.append("') for line in body.splitlines()):
        raise RuntimeError("EPILOGUE's prints changed: say in _on_each_rank how each becomes a line")
    head = f"def on_each_rank(rank, world_size):\n    # {IN_GROUP[lang]['ranks']}\n    lines = []\n"
    return (head + textwrap.indent(body, "    ") + "\n    return lines\n\n\nfrom hooklab import run_workers\n\n"
            f"shown = run_workers(on_each_rank, world_size=2, timeout={SECONDS})\n"
            'print("\\n".join(shown[0]))\n'
            "for line in shown[1]:\n"
            "    if line not in shown[0]:\n"
            '        print("rank 1:", line)')


_IMPORTS = {"collections.": "import collections", "contextlib.": "import contextlib", "copy.": "import copy",
            "io.": "import io", "re.": "import re", "tempfile.": "import tempfile", "warnings.": "import warnings",
            "ExitStack": "from contextlib import ExitStack", "dataclass": "from dataclasses import dataclass, field",
            "Any": "from typing import Any", "Path(": "from pathlib import Path", "threading.": "import threading",
            "contextvars.": "import contextvars",
            "ThreadPoolExecutor": "from concurrent.futures import ThreadPoolExecutor"}


def _imports(code: str) -> str:
    """The standard library imports that ``code`` needs, sorted as isort sorts them."""
    found = {line for needle, line in _IMPORTS.items() if re.search(rf"(?<![\w.]){re.escape(needle)}", code)}
    return "\n".join(sorted(found, key=lambda line: (line.startswith("from"), line)))


def _how_zh(context_id: str, how: str) -> str:
    return HOW_ZH.get(context_id, how)


def _title(record: dict[str, Any], lang: str) -> str:
    if record.get("title"):
        return str(record["title"][lang])
    text = observed(record, lang)
    return re.sub(r"\{ref\}`[^`]*`|`", "", text)[:200]


# ---- fixes ------------------------------------------------------------------------------------------------------

def _named(names: list[str], table: dict[str, Any]) -> set[str]:
    """Families named directly or by a group of ``[groups]`` (``*``: every family)."""
    out: set[str] = set()
    for name in names:
        if name == "*":
            out |= set(matrix().FAMILY_BY_ID)
        elif name in table.get("groups", {}):
            out |= _named(table["groups"][name], table)  # a group may name groups
        elif name in matrix().FAMILY_BY_ID:
            out.add(name)
        else:
            raise SystemExit(f"[hook-matrix programs] {FIXES.relative_to(ROOT)}: no family or group {name!r}")
    return out


def _applies(entry: dict[str, Any], family: str, context: str, table: dict[str, Any]) -> bool:
    return context in entry["contexts"] and family in _named(entry.get("families", ["*"]), table) \
        and family not in _named(entry.get("except", []), table)


_SNIPPET = re.compile(r"<<([\w-]+)>>")


def candidates(key: str, table: dict[str, Any]) -> list[dict[str, Any]]:
    """The changes of fixes.toml that apply to cell ``key``, in the file's order (the order they are tried in), each
    ``{"strategy", "name", "what": {"en", "zh"}, "replace"}`` with its snippets written for the cell's family; a
    change whose snippet has nothing for the family does not apply."""
    family, context = key.split("@")
    out = []
    for sid, strategy in table.get("strategy", {}).items():
        for change in strategy.get("change", []):
            if not _applies(change, family, context, table):
                continue
            snippets = [n for old, new in change["replace"] for n in _SNIPPET.findall(old + new)]
            if any(family not in table.get("snippet", {}).get(n, {}) for n in snippets):
                continue
            replace = [[_SNIPPET.sub(lambda m: table["snippet"][m[1]][family], part) for part in pair]
                       for pair in change["replace"]]
            out.append({"strategy": sid, "name": {"en": change.get("name", strategy["name"]),
                                                  "zh": change.get("name_zh", strategy["name_zh"])},
                        "what": {"en": change["en"], "zh": change["zh"]}, "replace": replace})
    return out


def none_applies(key: str, table: dict[str, Any]) -> dict[str, str] | None:
    """Why no strategy of fixes.toml applies to cell ``key`` (its ``[[none]]`` entry), in both languages."""
    family, context = key.split("@")
    for entry in table.get("none", []):
        if _applies(entry, family, context, table):
            return {"en": entry["en"], "zh": entry["zh"]}
    return None


def fixed(source: str, change: dict[str, Any], lang: str, key: str) -> str:
    """``source`` changed as ``change`` (one of :func:`candidates`) says, with a line naming the change."""
    out = source
    for old, new in change["replace"]:
        if old not in out:
            raise SystemExit(f"[hook-matrix programs] {FIXES.relative_to(ROOT)}: the change {change['strategy']!r} for "
                             f"{key} replaces {old!r}, which its program does not contain; change the fix")
        out = out.replace(old, new)
    marker = f"# {WORDS[lang]['fix'].format(fix=change['what'][lang])}\n"
    first, rest = out.split("\n", 1)
    return f"{first}\n{marker}{rest}"


# ---- what a run shows, against the family's eager cell ----------------------------------------------------------

# a column's phases that name what eager's name otherwise: compiled autograd runs forward and backward in one
# compiled 'step', torch.func.grad in its 'transform' (None: any of eager's phases); the load of load_state_dict
PHASES = {"compiled-autograd": {"step": None}, "func-grad": {"transform": None},
          "load-assign": {"load": "load_state_dict"}, "load-mmap": {"load": "load_state_dict"},
          "apply": {"apply": "register"}}
def fires_as(by_phase: dict[str, int], raised: bool, eager: dict[str, Any], context: str) -> bool:
    """Whether a run fired as the family's eager cell: no error, the same number of calls, in the same phases (a
    hook that fires only while tracing, capturing or calibrating does not, however often)."""
    if raised or sum(by_phase.values()) != eager["calls"]:
        return False
    aliases, named, loose = PHASES.get(context, {}), {}, False
    for phase_name, n in by_phase.items():
        same = aliases.get(phase_name, phase_name)
        if same is None:
            loose = True
            continue
        named[same] = named.get(same, 0) + n
    want = eager["by_phase"]
    if not loose:
        return named == want
    return all(p in want and n <= want[p] for p, n in named.items())


def fires_as_eager(prints: str, key: str, cells: dict[str, dict[str, Any]]) -> bool:
    """The acceptance rule of a fix: the changed program fires as the family's eager cell (:func:`fires_as`)."""
    family, context = key.split("@")
    by_phase, error = _printed(prints)
    return fires_as(by_phase, error is not None, cells[f"{family}@eager"], context)


def _is_deprecation(warning: str) -> bool:
    return is_deprecation(warning)


def kind(key: str, cells: dict[str, dict[str, Any]]) -> str:
    """What makes unusual cell ``key`` unusual: ``warnings`` (it differs from its family's eager cell only in its
    warnings: the matrix page's :func:`~tools.hook_matrix.page.warnings_only`), ``fires-as-eager`` (it fires as eager,
    :func:`fires_as`, and differs in what the hook receives, what its return value does, or in what the cell's notes
    say), or ``misbehaves``."""
    family, context = key.split("@")
    if key in _quiet(cells):
        return "warnings"
    if fires_as(cells[key]["by_phase"], cells[key]["error"] is not None, cells[f"{family}@eager"], context):
        return "fires-as-eager"
    return "misbehaves"


_QUIET: list[tuple[dict[str, Any], dict[str, Any]]] = []


def _quiet(cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """:func:`~tools.hook_matrix.page.warnings_only` of ``cells``, computed once per cells object."""
    if not _QUIET or _QUIET[0][0] is not cells:
        _QUIET[:] = [(cells, page_warnings_only(cells))]
    return _QUIET[0][1]


def warnings_only(key: str, cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Of a ``warnings`` cell: the warnings it adds to (and takes from) its family's eager cell's, and whether they are
    deprecation notices (``deprecation``), others (``other``) or both (``both``)."""
    return _quiet(cells)[key]


_FIELDS = {"receives": {"en": "what it receives", "zh": "它收到的参数"},
           "return_value": {"en": "what its return value does", "zh": "返回值的效果"},
           "notes": {"en": "what the run notes", "zh": "运行记下的情况（notes）"},
           "shapes": {"en": "the probe's other shapes", "zh": "探针的其他写法（shapes）"},
           "warnings": {"en": "its warnings", "zh": "警告"}}
WARNED = {"deprecation": {"en": "a deprecation notice", "zh": "弃用提示"},
          "other": {"en": "a warning other than a deprecation notice", "zh": "一条不是弃用提示的警告"},
          "both": {"en": "a deprecation notice and another warning", "zh": "弃用提示和另一条警告"}}


def _differs(key: str, cells: dict[str, dict[str, Any]]) -> list[str]:
    record, plain = cells[key], cells[f"{key.split('@')[0]}@eager"]
    return [f for f in _FIELDS if record.get(f) != plain.get(f)]


def verdict(key: str, cells: dict[str, dict[str, Any]]) -> dict[str, str]:
    """What a ``warnings`` or ``fires-as-eager`` cell says instead of a fix, in both languages."""
    if kind(key, cells) == "warnings":
        told = warnings_only(key, cells)
        text = "; ".join(told["added"] + [f"(no longer) {w}" for w in told["gone"]])
        return {"en": f"warnings only: the hook fires as in eager, receives the same and its return value does the "
                      f"same; only {WARNED[told['which']]['en']} differs ({text}): nothing to work around",
                "zh": f"只差警告：钩子的触发、收到的参数和返回值的效果都和 eager 一样，只是多了{WARNED[told['which']]['zh']}"
                      f"（{text}），没有需要绕开的问题"}
    fields = [f for f in _differs(key, cells) if f != "warnings"]
    en = ", ".join(_FIELDS[f]["en"] for f in fields) or "what the cell's note says"
    zh = "、".join(_FIELDS[f]["zh"] for f in fields) or "这一格的说明里讲的内容"
    return {"en": f"the hook fires as in eager (the same calls in the same phases, no error); the cell differs in {en}, "
                  "which the program's count of calls does not show, so no change was tried against it",
            "zh": f"钩子的触发和 eager 一样（同样的调用次数、同样的阶段、没有报错）；这一格不同的是{zh}，"
                  "程序数的调用次数看不出这些，所以没有拿变通办法去试"}


def tried(attempts: list[dict[str, Any]]) -> dict[str, str]:
    """A cell's ``no_fix`` after its attempts: each one's name and what it did."""
    en = "; ".join(f"{a['name']['en']} ({outcome(a['prints'], 'en')})" for a in attempts)
    zh = "；".join(f"{a['name']['zh']}（{outcome(a['prints'], 'zh')}）" for a in attempts)
    return {"en": f"tried: {en}: the hook still does not fire as in eager",
            "zh": f"试过：{zh}：钩子仍然不像 eager 那样触发"}


# ---- running ------------------------------------------------------------------------------------------------------

# how a program is run: by hooklab.course.programs.run (what tests/tools/test_programs.py and Hit.run() use), which
# shows an exception, warnings and log records as text and masks addresses; a fresh interpreter per program
RUNNER = "import sys\nfrom hooklab.course.programs import run\nsys.stdout.write(run(sys.stdin.read()))\n"


def _env() -> dict[str, str]:
    return {**os.environ, **ENV, "PYTHONPATH": str(ROOT)}


def run_program(source: str, *, seconds: float = SECONDS) -> str:
    """What ``source`` prints, run in a fresh interpreter in the course's fixed environment."""
    done = subprocess.run([sys.executable, "-c", RUNNER], input=source, capture_output=True, text=True, env=_env(),
                          timeout=seconds, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the runner exited {done.returncode}: {done.stderr.strip()[-800:]}")
    return done.stdout


# to write the file faster: a process that has imported torch and the runner once forks a child per program, which
# runs it as above; the --check sample and tests/tools/test_hook_matrix_programs.py run programs in a fresh
# interpreter (run_program) and compare
FORK_SERVER = r"""
import json, os, sys, tempfile
import torch
from hooklab.course.programs import run
sources = json.load(sys.stdin)
out = []
for source in sources:
    with tempfile.TemporaryFile(mode="w+") as capture:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                text = run(source)
            except BaseException:
                text, code = "", 1
            capture.write(text)
            capture.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        capture.seek(0)
        out.append([os.waitstatus_to_exitcode(status), capture.read()])
json.dump(out, sys.__stdout__)
"""


def run_forked(sources: list[str], *, seconds: float = SECONDS) -> list[str]:
    """What each of ``sources`` prints (see :data:`FORK_SERVER`); an error names the program that failed."""
    done = subprocess.run([sys.executable, "-c", FORK_SERVER], input=json.dumps(sources), capture_output=True,
                          text=True, env=_env(), timeout=seconds * max(1, len(sources)), cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the fork server exited {done.returncode}: {done.stderr.strip()[-800:]}")
    results = json.loads(done.stdout)
    for source, (code, _) in zip(sources, results):
        if code != 0:
            raise RuntimeError(f"a program exited {code}: {source.splitlines()[0]}")
    return [text for _, text in results]


def _calls(prints: str) -> tuple[int, bool]:
    """How often the hook fired and whether the run raised, as a program prints them."""
    lines = prints.splitlines()
    first = next(line for line in lines if line.startswith("calls: "))
    error = next(line for line in lines if line.startswith("error: "))
    return int(first.split()[1]), error != "error: None"


NO_FIX = {"en": "no workaround in tools/hook_matrix/fixes.toml for this cell, and no reason there why none applies",
          "zh": "tools/hook_matrix/fixes.toml 里没有这一格的变通办法，也没有说明为什么没有"}
NOT_RUN = {"en": "the changes in tools/hook_matrix/fixes.toml have not been run yet (python -m tools.hook_matrix programs)",
           "zh": "tools/hook_matrix/fixes.toml 里的变通办法还没有运行过（python -m tools.hook_matrix programs）"}
NONE_APPLIES = {"en": "no strategy in tools/hook_matrix/fixes.toml applies: {why}",
                "zh": "tools/hook_matrix/fixes.toml 里没有适用的变通办法：{why}"}


def _chunks(items: list[Any], jobs: int) -> list[list[Any]]:
    size = max(1, min(5, -(-len(items) // max(1, jobs))))
    return [items[i:i + size] for i in range(0, len(items), size)]


def cache_folder() -> Path:
    """Where the fork server's results are kept by program (``HOOKLAB_PROGRAMS_CACHE``, else a folder in the temp
    folder named by the torch version), so that an interrupted or partial build does not run a program twice."""
    import tempfile

    import torch

    named = os.environ.get("HOOKLAB_PROGRAMS_CACHE")
    return Path(named) if named else Path(tempfile.gettempdir()) / f"hooklab-programs-{torch.__version__}"


def _cached(source: str) -> Path:
    import hashlib

    digest = hashlib.sha256((RUNNER + source).encode("utf-8")).hexdigest()[:32]
    return cache_folder() / (digest + ".txt")


def _run_all(sources: list[str], jobs: int, progress: str = "", *, fresh: bool = False,
             cached_only: bool = False) -> list[str]:
    """What each program prints: by the fork server (:func:`run_forked`, results kept in :func:`cache_folder`), or
    ``fresh``, each in a new interpreter; ``cached_only``: what the cache has, None for the others (not run)."""
    def runner(chunk: list[str]) -> list[str]:
        if fresh:
            return [run_program(source) for source in chunk]
        printed = run_forked(chunk)
        for source, text in zip(chunk, printed):
            _cached(source).parent.mkdir(parents=True, exist_ok=True)
            _cached(source).write_text(text, encoding="utf-8")
        return printed

    known = {} if fresh else {s: _cached(s).read_text(encoding="utf-8") for s in sources if _cached(s).is_file()}
    todo = list(dict.fromkeys(s for s in sources if s not in known))
    if cached_only:
        return [known.get(s) for s in sources]  # type: ignore[misc]
    start, done = time.monotonic(), 0
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for chunk, printed in zip(_chunks(todo, jobs), pool.map(runner, _chunks(todo, jobs))):
            known.update(zip(chunk, printed))
            done += len(chunk)
            if progress:
                print(f"[hook-matrix programs] {progress}: {done} / {len(todo)} run, {len(sources) - len(todo)} "
                      f"known ({time.monotonic() - start:.0f} s)", file=sys.stderr)
    return [known[s] for s in sources]


def _same_code(en: str, zh: str) -> bool:
    """Whether two languages' programs differ in their comment lines only."""
    def code(text: str) -> list[str]:
        return [re.sub(r"\s+# .*$", "", line) for line in text.splitlines() if not line.startswith("#")]
    return code(en) == code(zh)


def build(keys: list[str], *, jobs: int = 1, progress: bool = False, fresh: bool = False,
          cached_only: bool = False) -> dict[str, Any]:
    """The entries of docs/programs/matrix.json for ``keys``: each program generated and run, then, for a cell whose
    hook misbehaves (:func:`kind`), each change of fixes.toml that applies to it (:func:`candidates`); the first that
    makes it fire as eager (:func:`fires_as_eager`) is its fix, and every one tried is kept under ``attempts``
    (``cached_only``: runs nothing; a program not in the cache gets ``prints`` None, a change not in it is left out)."""
    from .generate import load

    cells = load()["cells"]
    table = fixes()
    out: dict[str, Any] = {}
    shows: dict[str, dict[str, str]] = {}
    for key in keys:
        shows[key] = {lang: program(key, lang, cells) for lang in ("en", "zh")}
        if not _same_code(shows[key]["en"], shows[key]["zh"]):
            raise RuntimeError(f"{key}: the programs in English and Chinese differ in more than comments")
    prints = dict(zip(shows, _run_all([c["en"] for c in shows.values()], jobs, "programs" if progress else "",
                                         fresh=fresh, cached_only=cached_only)))
    tries: list[tuple[str, dict[str, Any], dict[str, str]]] = []
    for key, code in shows.items():
        which = kind(key, cells)
        out[key] = {"show": {"code": code, "prints": prints[key]}, "kind": which, "fix": None, "no_fix": NO_FIX,
                    "attempts": [], "needs": ["processes:2"] if matrix().needs_workers(key) else []}
        if which == "warnings":
            out[key]["warnings"] = warnings_only(key, cells)
        if which != "misbehaves":
            out[key]["no_fix"] = verdict(key, cells)
            continue
        changes = candidates(key, table)
        why = none_applies(key, table)
        if changes and why:
            raise SystemExit(f"[hook-matrix programs] {FIXES.relative_to(ROOT)}: {key} has changes to try and a reason "
                             "why none applies; keep one")
        if why:
            out[key]["no_fix"] = {lang: NONE_APPLIES[lang].format(why=why[lang]) for lang in ("en", "zh")}
        for change in changes:
            tries.append((key, change, {lang: fixed(code[lang], change, lang, key) for lang in ("en", "zh")}))
    done = _run_all([c["en"] for _, _, c in tries], jobs, "changes" if progress else "", fresh=fresh,
                    cached_only=cached_only)
    for (key, change, code), printed in zip(tries, done):
        if printed is None:
            out[key]["no_fix"] = NOT_RUN
            continue
        works = fires_as_eager(printed, key, cells)
        out[key]["attempts"].append({"strategy": change["strategy"], "name": change["name"], "what": change["what"],
                                     "prints": printed, "fires_as_eager": works})
        if works and out[key]["fix"] is None:
            out[key]["fix"] = {"code": code, "prints": printed, "what": change["what"], "strategy": change["strategy"]}
    for entry in out.values():
        if entry["fix"] is not None:
            entry["no_fix"] = None
        elif entry["attempts"] and entry["no_fix"] is not NOT_RUN:
            entry["no_fix"] = tried(entry["attempts"])
    if progress:
        differ = [k for k in shows if prints[k] is not None
                  and _calls(prints[k]) != (cells[k]["calls"], cells[k]["error"] is not None)]
        print(f"[hook-matrix programs] {sum(p is None for p in prints.values())} programs not run yet",
              file=sys.stderr)
        print(f"[hook-matrix programs] {len(differ)} of {len(shows)} programs fire otherwise than their cell "
              f"records: {', '.join(differ)}", file=sys.stderr)
        kinds = {k: sum(e["kind"] == k for e in out.values()) for k in ("misbehaves", "fires-as-eager", "warnings")}
        print(f"[hook-matrix programs] {kinds}; with a fix {sum(e['fix'] is not None for e in out.values())}, tried "
              f"without one {sum(bool(e['attempts']) and e['fix'] is None for e in out.values())}, none applies "
              f"{sum((e['no_fix'] or {}).get('en', '').startswith('no strategy') for e in out.values())}, neither "
              f"{sum(e['no_fix'] is NO_FIX for e in out.values())}", file=sys.stderr)
    return {k: out[k] for k in keys}


ABOUT = ("Each unusual cell of the hook behaviour matrix (docs/hook_matrix.json) as a program that runs on its own, "
         "generated from the probe code (python -m tools.hook_matrix programs): unusual = observed, not eager, and "
         "marked surprising or with fires / calls / error / warnings other than the family's eager cell. 'show' is "
         "the context's run with the family's hook, 'prints' what it prints under OMP_NUM_THREADS=1 on a CPU, run "
         "by hooklab.course.programs.run (null: not run yet); 'kind': 'misbehaves', 'warnings' (the observation is the "
         "family's eager cell's but for the warnings; 'warnings' says which) or 'fires-as-eager' (the same calls in the "
         "same phases, another difference); 'attempts': each change of tools/hook_matrix/fixes.toml that applies to a "
         "misbehaving cell, run, with what it printed and whether it then fires as the family's eager cell (the same "
         "calls in the same phases, no error); 'fix': the first that does (its 'strategy'); 'no_fix': what was tried, "
         "why no strategy applies, or what the cell's kind says; "
         "a cell of a process group ('needs': 'processes:2') runs in two gloo processes and prints rank 0's lines.")


def document(programs: dict[str, Any]) -> dict[str, Any]:
    return {"about": ABOUT, "programs": programs}


def sample(keys: list[str], n: int = 6, seed: int | None = None) -> list[str]:
    """A seeded sample of the cells that have a program (the seed: ``HOOKLAB_PROGRAMS_SEED``, else the ISO week)."""
    from .generate import week_number

    if seed is None:
        seed = int(os.environ.get("HOOKLAB_PROGRAMS_SEED", week_number()))
    return sorted(random.Random(seed).sample(keys, min(n, len(keys))))


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tools.hook_matrix programs")
    parser.add_argument("--check", action="store_true", help="regenerate a seeded sample and compare")
    parser.add_argument("--keys", nargs="+", help="only these cells")
    parser.add_argument("--print", action="store_true", help="print the programs of --keys, run nothing")
    parser.add_argument("--tried", action="store_true",
                        help="with --print: each change of fixes.toml that applies to the cell, as the changed program")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--sample", type=int, default=6)
    parser.add_argument("--cached", action="store_true",
                        help="write the file from the programs already run (the cache), running none")
    args = parser.parse_args(argv)
    from .generate import load

    cells = load()["cells"]
    keys = every = unusual(cells)
    if args.keys:
        bad = [k for k in args.keys if k not in keys]
        if bad:
            raise SystemExit(f"[hook-matrix programs] not an unusual cell: {', '.join(bad)} (there are {len(keys)}; "
                             f"e.g. {', '.join(keys[:3])})")
        keys = args.keys
    if args.print:
        for key in keys:
            code = program(key, "en", cells)
            print(code)
            for change in candidates(key, fixes()) if args.tried and kind(key, cells) == "misbehaves" else []:
                print(fixed(code, change, "en", key))
        return 0
    if args.check:
        recorded = json.loads(OUT.read_text(encoding="utf-8"))["programs"] if OUT.is_file() else {}
        runnable = [k for k in keys if ((recorded.get(k) or {}).get("show") or {}).get("prints") is not None]
        chosen = args.keys or sample(runnable, args.sample)
        now = build(chosen, jobs=args.jobs, fresh=True)
        stale = [k for k in chosen if recorded.get(k) != now[k]]
        missing = sorted(set(every) - set(recorded)) + sorted(set(recorded) - set(every))
        if stale or missing:
            print(f"[hook-matrix programs] {OUT.relative_to(ROOT)} is not current: {', '.join(stale + missing)}; "
                  "python -m tools.hook_matrix programs writes it", file=sys.stderr)
            return 1
        print(f"[hook-matrix programs] {len(chosen)} sampled programs as recorded", file=sys.stderr)
        return 0
    start = time.monotonic()
    if args.keys and OUT.is_file():
        programs = json.loads(OUT.read_text(encoding="utf-8"))["programs"]
        programs.update(build(keys, jobs=args.jobs, progress=True, cached_only=args.cached))
        programs = {k: programs[k] for k in unusual(cells) if k in programs}
    else:
        programs = build(keys, jobs=args.jobs, progress=True, cached_only=args.cached)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(document(programs), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"[hook-matrix programs] wrote {OUT.relative_to(ROOT)}: {len(programs)} cells "
          f"({time.monotonic() - start:.0f} s)", file=sys.stderr)
    return 0
