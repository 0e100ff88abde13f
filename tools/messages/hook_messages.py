"""The denominator of the symptom index: every error and warning text about hooks that the pinned PyTorch and the pinned
libraries can show, read from their installed files, each with its status (shown in a notebook cell, triggered by a
test, excused with a reason, or open).

    .venv/bin/python -m tools.hook_messages              # check: exit 1, saying what changed, when the data is stale
    .venv/bin/python -m tools.hook_messages --write      # re-extract and rewrite docs/hook_messages.json
    .venv/bin/python -m tools.hook_messages --examples   # run the trigger tests and store each one's printed message
    .venv/bin/python -m tools.hook_messages --report     # coverage per source, and what is still open

Where the texts come from (all read from the files of the running Python's site-packages; nothing is imported):

- **torch (Python)**: ``torch/**.py`` parsed with :mod:`ast` (``torch/testing/_internal`` left out: the test suite's
  helpers). A message is the text of ``raise X("...")``, ``assert ..., "..."``, ``warnings.warn("...")`` (and
  ``warn`` / ``warn_once`` / ``logger.warning``), ``torch._check*(cond, lambda: "...")``, dynamo's
  ``unimplemented(gb_type="...", explanation="...")`` and ``disable_saved_tensors_hooks("...")``. F-strings,
  ``%``-formatting, ``.format`` and ``+`` keep their variable parts as placeholders (``{type(hook)}``); a message built
  in a variable first (of the function, a function around it, or the module) is followed to its one assignment (a
  name assigned twice stays a placeholder: its text depends on the run). It concerns hooks when its text or the name of a function
  or class around it says "hook", or when it is in one of :data:`HOOK_FILES` (modules that are about hooks as a whole:
  checkpoint, parametrize, saved-tensor hooks, DDP communication hooks, FSDP2's hook state).
- **torch (C++)**: the printable strings of ``torch/lib/libtorch_cpu.so`` and ``libtorch_python.so`` (their ``.rodata``)
  that say "hook" (TORCH_CHECK's pieces, TORCH_WARN's, internal assertions); strings that are no message (docstrings of
  the Python bindings, type and symbol names) are listed in ``docs/hook_messages.toml`` (``[cpp] not_messages``), and a
  message that TORCH_CHECK builds from several strings is written there whole (``[[cpp.joined]]``, its pieces checked).
- **the libraries** (:data:`LIBRARIES`): their Python sources, read like torch's (text or function says "hook").
- **curated** (``docs/hook_messages.toml``, ``[[curated]]``): errors users meet *because of* a hook although the text
  does not say so (a view modified in place, a size changed by a hook, a recomputation mismatch, ...); each is checked to
  be where it says (in the C++ strings, or in the Python file it names).

Parsed files are cached by the digest of their text (:data:`CACHE`), so a re-run reads only what changed.
Texts whose "hook" is another idea (:data:`OTHER_MEANINGS`: Inductor's code-generation callbacks, device-backend
interfaces, ...) are left out, and counted. Identical texts of one source are one message with every place listed.

The status of each message comes from ``docs/hook_messages.toml`` (``[symptom]``: the symptom cell that shows it;
``[explained]``: the row of a message a test triggers; ``[excused]``: why it is not triggered here) and from the trigger
tests (``tests/messages/test_*.py``, ``@trigger("<id>")``, found by reading their source). ``tests/messages/`` re-runs
the extraction and fails, listing the added and removed texts, when the installed packages' messages are not the
committed ones: what ``./course matrix`` shows on another PyTorch.
"""
from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import importlib.metadata
import json
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from .records import CURATED, LIBRARIES, SOURCES, TORCH_CPP, TORCH_PY, coverage, excuses

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "hook_messages.json"
TRIAGE = ROOT / "docs" / "hook_messages.toml"
TRIGGER_TESTS = ROOT / "tests" / "messages"
NOTEBOOKS = ROOT / "notebooks"

DISTRIBUTIONS = {TORCH_PY: "torch", TORCH_CPP: "torch", "accelerate": "accelerate", "diffusers": "diffusers",
                 "peft": "peft", "captum": "captum", "lightning": "pytorch-lightning", "timm": "timm",
                 "torchao": "torchao"}
CPP_LIBRARIES = ("libtorch_cpu.so", "libtorch_python.so")

# torch modules that are about hooks as a whole: every message in them counts, whatever its words
HOOK_FILES = (
    "torch/utils/hooks.py",                                     # RemovableHandle, BackwardHook (full backward hooks)
    "torch/utils/checkpoint.py",                                # activation checkpointing: saved-tensor hooks
    "torch/autograd/graph.py",                                  # saved-tensor, multi-grad, node hooks
    "torch/nn/utils/parametrize.py",                            # parametrizations
    "torch/distributed/algorithms/ddp_comm_hooks/",             # DDP communication hooks
    "torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py",
    "torch/distributed/_composable/checkpoint_activation.py",
    "torch/distributed/fsdp/_fully_shard/_fsdp_state.py",       # FSDP2's forward / backward hooks
)
SKIP_FILES = ("torch/testing/_internal/",)

# (source, file prefix, function pattern, text pattern, reason): texts whose "hook" is another idea
OTHER_MEANINGS: tuple[tuple[str, str, str, str, str], ...] = (
    (TORCH_PY, "torch/_inductor/", "", "",
     "Inductor's code-generation callbacks (render, epilogue and launch hooks) and choice overrides"),
    (TORCH_PY, "torch/utils/data/", "", "", "DataPipe serialization callbacks (getstate / reduce_ex hooks)"),
    (TORCH_PY, "torch/_vendor/", "", "", "a vendored kernel library's warm-up hooks"),
    (TORCH_PY, "torch/distributed/_symmetric_memory/", "", "", "Triton kernel initialisation hooks"),
    (TORCH_PY, "torch/fx/", r"node_hook|replace_hook|create_node_hook|erase_node_hook|deepcopy_hook|"
     r"_node_metadata_hook", "", "FX graph-editing callbacks (node created / replaced / erased)"),
    (TORCH_PY, "torch/_export/passes/_node_metadata_hook.py", "", "", "FX graph-editing callbacks (node metadata)"),
    (TORCH_PY, "torch/_dynamo/", "", r"bytecode hook|hooks must not be None for AOT|Unprocessed hooks remaining|"
     r"old_hook_target_remap", "Dynamo's own compile callbacks (bytecode and guard hooks)"),
    (TORCH_PY, "torch/_dynamo/utils.py", "CleanupHook", "", "Dynamo's clean-up callbacks for generated names"),
    (TORCH_PY, "torch/_dynamo/variables/builtin.py", "call_isinstance", "",
     "Python's __instancecheck__ / __subclasscheck__ methods, which a graph break calls hooks"),
    (TORCH_CPP, "", "", r"HooksInterface|HPUHooks|XLAHooks|getAcceleratorHooks|PRIVATEUSE1",
     "device-backend interfaces (PrivateUse1 / HPU / XLA 'hooks')"),
    (TORCH_CPP, "", "", r"extra files hook|Hooks for compiling autograd|hooks to override eval_frame",
     "TorchScript serialization callbacks and module docstrings"),
)

HOOK = re.compile(r"hook", re.IGNORECASE)
PLACEHOLDER = re.compile(r"\{[^{}\n]*\}|%[-#0 +]*\d*(?:\.\d+)?[sdrfixg]")
PRINTF = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfixg]")
MIN_SHOWN = 20  # a cell "shows" a message when it shows a clause of the message's fixed text at least this long

WARN_CALLS = {"warn", "warn_once", "warn_explicit", "rank_zero_warn", "_warn_once"}
LOG_CALLS = {"warning", "warning_once"}
CHECK_CALLS = {"_check", "_check_value", "_check_type", "_check_index", "_check_not_implemented", "_check_is_size"}
DISABLE_CALLS = {"disable_saved_tensors_hooks", "_saved_tensors_hooks_disable"}


class HookMessageError(Exception):
    """The triage file or the data is inconsistent; the message says what to fix."""


# --- reading Python sources ---------------------------------------------------------------------------------

@dataclass
class Found:
    """One place where a message is raised or warned."""
    source: str
    file: str          # relative to site-packages (or a library name for C++)
    line: int
    function: str      # dotted qualified name of the enclosing classes and functions ("" at module level)
    call: str          # "raise RuntimeError", "warnings.warn", "logger.warning", "assert", "C++ string", ...
    kind: str          # "error" or "warning"
    text: str
    detail: str = ""   # dynamo's explanation of a graph break


def _placeholder(node: ast.AST) -> str:
    return "{" + ast.unparse(node) + "}"


def render(node: ast.AST | None, local: dict[str, str]) -> str | None:
    """The text of a message expression, its variable parts as ``{expression}``; None when it is no text."""
    if node is None:
        return None
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                known = local.get(value.value.id) if isinstance(value.value, ast.Name) else None
                parts.append(known if known is not None and value.format_spec is None else _placeholder(value.value))
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = render(node.left, local), render(node.right, local)
        if left is None and right is None:
            return None
        return (left if left is not None else _placeholder(node.left)) + \
            (right if right is not None else _placeholder(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        template = render(node.left, local)
        if template is None:
            return None
        values = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        return fill_printf(template, [_placeholder(v) for v in values])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "format":
            template = render(node.func.value, local)
            if template is None:
                return None
            names = [ast.unparse(a) for a in node.args]
            keywords = {k.arg: ast.unparse(k.value) for k in node.keywords if k.arg}
            counter = iter(range(len(names)))

            def field(match: re.Match[str]) -> str:
                key = match[1]
                if key == "":
                    i = next(counter, None)
                    return "{" + (names[i] if i is not None and i < len(names) else "") + "}"
                if key.isdigit():
                    return "{" + (names[int(key)] if int(key) < len(names) else key) + "}"
                return "{" + keywords.get(key, key) + "}"
            return re.sub(r"\{([^{}:!]*)(?:[:!][^{}]*)?\}", field, template)
        if node.func.attr in ("strip", "rstrip", "lstrip") and not node.args:
            inner = render(node.func.value, local)
            return None if inner is None else getattr(inner, node.func.attr)()
    if isinstance(node, ast.Call) and node.args:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name == "dedent":
            inner = render(node.args[0], local)
            return None if inner is None else textwrap.dedent(inner)
    if isinstance(node, ast.Lambda):
        return render(node.body, local)
    if isinstance(node, ast.Name):
        return local.get(node.id)
    return None


def fill_printf(template: str, values: list[str]) -> str:
    """``%s``-style fields replaced by the given placeholders, in order (the rest as ``{}``).

    >>> fill_printf("hook %s on %d modules (%%)", ["{name}"])
    'hook {name} on {} modules (%)'
    """
    it = iter(values)
    out = PRINTF.sub(lambda m: next(it, "{}"), template.replace("%%", "\0"))
    return out.replace("\0", "%")


class _Collector(ast.NodeVisitor):
    def __init__(self, source: str, file: str) -> None:
        self.source, self.file = source, file
        self.scope: list[str] = []
        self.local: list[dict[str, str]] = [{}]
        self.varying: list[set[str]] = [set()]
        self.found: list[Found] = []

    def _enter(self, node: ast.AST, name: str, function: bool) -> None:
        self.scope.append(name)
        if function:
            self.local.append({})
            self.varying.append(set())
        self.generic_visit(node)
        if function:
            self.local.pop()
            self.varying.pop()
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._enter(node, node.name, True)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._enter(node, node.name, True)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._enter(node, node.name, False)

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, scope = node.targets[0].id, self.local[-1]
            text = render(node.value, scope)
            if text is not None and name not in scope and name not in self.varying[-1]:
                scope[name] = text
            else:  # assigned twice (in branches, or later on): which text it holds depends on the run
                scope.pop(name, None)
                self.varying[-1].add(name)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name) and isinstance(node.op, ast.Add) and node.target.id in self.local[-1]:
            more = render(node.value, self.local[-1])
            self.local[-1][node.target.id] += more if more is not None else _placeholder(node.value)
        self.generic_visit(node)

    def _names(self) -> dict[str, str]:
        """The texts the names in scope hold: this function's, and those of the functions around it."""
        names: dict[str, str] = {}
        for scope in self.local:
            names.update(scope)
        return names

    def _add(self, node: ast.AST, call: str, kind: str, text_node: ast.AST | None, detail: str = "") -> None:
        text = render(text_node, self._names())
        if text is not None and text.strip():
            self.found.append(Found(self.source, self.file, getattr(node, "lineno", 0), ".".join(self.scope), call,
                                    kind, text.strip(), detail))

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call):
            arg = exc.args[0] if exc.args else next((k.value for k in exc.keywords if k.arg in ("msg", "message")),
                                                    None)
            self._add(node, "raise " + ast.unparse(exc.func), "error", arg)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._add(node, "assert", "error", node.msg)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        called = ast.unparse(func)
        if name in WARN_CALLS and node.args:
            self._add(node, called, "warning", node.args[0])
        elif name in LOG_CALLS and isinstance(func, ast.Attribute) and node.args:
            template = render(node.args[0], self._names())
            if template is not None:
                values = [_placeholder(a) for a in node.args[1:]]
                self._add(node, called, "warning", ast.Constant(fill_printf(template, values)))
        elif name in CHECK_CALLS and len(node.args) >= 2:
            self._add(node, called, "error", node.args[1])
        elif name == "_check_with" and len(node.args) >= 3:
            self._add(node, called, "error", node.args[2])
        elif name in DISABLE_CALLS and node.args:
            self._add(node, called, "error", node.args[0])
        elif name.startswith("unimplemented"):
            keywords = {k.arg: k.value for k in node.keywords}
            if "gb_type" in keywords:
                detail = render(keywords.get("explanation"), self._names()) or ""
                self._add(node, "torch._dynamo graph break", "error", keywords["gb_type"], detail.strip())
        self.generic_visit(node)


CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hooklab" / "hook-messages"
_EXTRACTOR = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()  # a new extractor reads every file again


def _file_messages(source: str, rel: str, text: str, whole: bool) -> list[Found]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    collector = _Collector(source, rel)
    collector.visit(tree)
    return [f for f in collector.found
            if whole or HOOK.search(f.text) or HOOK.search(f.detail) or HOOK.search(f.function)]


def _cached_file_messages(source: str, rel: str, text: str, whole: bool, cache: Path | None) -> list[Found]:
    """:func:`_file_messages`, kept in ``cache`` under a digest of the file's text and name, in a folder of this
    module's code (the folders of older versions of it are removed): an unchanged file of an unchanged package is not
    parsed again. The cache is only a speed-up: a file that cannot be read or written there is parsed."""
    if cache is None:
        return _file_messages(source, rel, text, whole)
    key = hashlib.sha1(f"{source}\0{rel}\0{whole}\0{text}".encode()).hexdigest()
    entry = cache / _EXTRACTOR[:16] / key[:2] / f"{key}.json"
    try:
        return [Found(**f) for f in json.loads(entry.read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError):
        pass
    found = _file_messages(source, rel, text, whole)
    try:
        if not entry.parent.parent.is_dir() and cache.is_dir():  # a new extractor: what older ones kept goes
            for old in cache.iterdir():
                shutil.rmtree(old, ignore_errors=True)
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps([f.__dict__ for f in found]), encoding="utf-8")
        os.replace(tmp, entry)
    except OSError:
        pass
    return found


def python_messages(site: Path, packages: Iterable[str], source: str, *,
                    whole_files: tuple[str, ...] = (), cache: Path | None = CACHE) -> list[Found]:
    """Every message of the packages' ``.py`` files that concerns hooks (see the module's docstring)."""
    found: list[Found] = []
    for package in packages:
        for path in sorted((site / package).rglob("*.py")):
            rel = path.relative_to(site).as_posix()
            if rel.startswith(SKIP_FILES):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            whole = rel.startswith(whole_files)
            if whole or "hook" in text.lower():
                found += _cached_file_messages(source, rel, text, whole, cache)
    return found


# --- reading the C++ libraries ------------------------------------------------------------------------------

PRINTABLE = re.compile(rb"[\x20-\x7e\t\n]")
INTERNAL_ASSERT = re.compile(r"^(.*) INTERNAL ASSERT FAILED at \"(.*?)\":(\d+), please report a bug to PyTorch\.")


def _runs_with_hook(data: Any) -> Iterator[bytes]:
    """The printable runs of a binary that contain "hook" in any case."""
    def printable(byte: int) -> bool:
        return 0x20 <= byte <= 0x7e or byte in (9, 10)

    seen = set()
    for pattern in (b"hook", b"Hook", b"HOOK"):
        i = data.find(pattern)
        while i != -1:
            start = i
            while start > 0 and printable(data[start - 1]):
                start -= 1
            end = i + 4
            while end < len(data) and printable(data[end]):
                end += 1
            if start not in seen:
                seen.add(start)
                yield bytes(data[start:end])
            i = data.find(pattern, end)


def looks_like_message(text: str) -> bool:
    """A C++ string that could be a message (a sentence), not a symbol, type or identifier.

    >>> [looks_like_message(s) for s in ("cannot register a hook on a variable", "N5torch8autograd6PyNodeE",
    ...                                  "post_acc_grad_hook", "void torch::autograd::f(const at::Tensor&)")]
    [True, False, False, False]
    """
    s = text.strip()
    if len(s.split()) < 3 or not re.search(r"[a-z]", s):
        return False
    if s.startswith(("_Z", "N5", "N3", ">>>", "#", "/")):
        return False
    return not ("::" in s and "(" in s and ("const" in s or "&" in s))


@functools.lru_cache(maxsize=4)
def constant_data(library: Path) -> bytes:
    """The bytes of a shared library where its string constants are: its ``.rodata`` sections when it is an ELF
    file (18 MB of libtorch_cpu's 450), else the whole file."""
    with open(library, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:5] != b"\x7fELF\x02" or data[5] != 1:  # not a 64-bit little-endian ELF file: read it all
            return bytes(data)
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
        names_at = sections[shstrndx][4]

        def name(offset: int) -> bytes:
            start = names_at + offset
            return bytes(data[start:data.find(b"\x00", start)])
        parts = [bytes(data[off:off + size]) for name_off, _, _, _, off, size in sections
                 if name(name_off) == b".rodata" or name(name_off).startswith(b".rodata.")]
        return b"\x00".join(parts) if parts else bytes(data)


def cpp_strings(library: Path) -> list[str]:
    """The strings of a shared library that say "hook" and look like a message (one entry per printable run,
    surrounding white space stripped)."""
    runs = {run.decode("ascii").strip() for run in _runs_with_hook(constant_data(library))}
    return sorted(r for r in runs if HOOK.search(r) and looks_like_message(r))


def cpp_contains(libraries: Iterable[Path], text: str) -> list[str]:
    """The names of the libraries whose string constants contain ``text``."""
    needle = text.encode()
    return [library.name for library in libraries if constant_data(library).find(needle) != -1]


def cpp_messages(site: Path, cpp: dict[str, Any]) -> tuple[list[Found], list[str]]:
    """The C++ messages: the strings that say "hook", less those ``cpp`` (the triage's ``[cpp]`` table) calls no
    message (``not_messages``: prefixes), with its ``corrected`` starts (a string read with a neighbour's bytes in
    front of it) and its ``joined`` messages (one message that TORCH_CHECK builds from several strings: the pieces
    give way to the message as printed, ``{}`` where the variable parts go). Also the problems: a piece, correction
    or prefix that no longer matches anything."""
    found, problems = [], []
    not_messages = cpp.get("not_messages", [])
    corrected = cpp.get("corrected", {})
    joined = cpp.get("joined", [])
    pieces = {piece for entry in joined for piece in entry.get("pieces", [])}
    strings: dict[str, list[str]] = defaultdict(list)
    for name in CPP_LIBRARIES:
        for text in cpp_strings(site / "torch" / "lib" / name):
            strings[text].append(name)
    used_prefixes, used_corrections = set(), set()
    for text in sorted(strings):
        prefix = next((p for p in not_messages if text.startswith(p)), None)
        if prefix is not None:
            used_prefixes.add(prefix)
            continue
        if text in corrected:
            used_corrections.add(text)
            if corrected[text] not in text:
                problems.append(f"[cpp.corrected]: {corrected[text]!r} is not part of {text!r}")
            text_shown = corrected[text]
        else:
            text_shown = text
        if text_shown in pieces:
            continue
        call = "TORCH_INTERNAL_ASSERT" if INTERNAL_ASSERT.match(text_shown.split("\n")[0]) else "C++ string"
        for name in strings[text]:
            found.append(Found(TORCH_CPP, name, 0, "", call, "error", text_shown))
    libraries = [site / "torch" / "lib" / name for name in CPP_LIBRARIES]
    for entry in joined:
        if not entry.get("pieces") or not entry.get("text"):
            problems.append(f"[[cpp.joined]] entry without pieces or text: {entry}")
            continue
        for piece in entry["pieces"]:
            if not cpp_contains(libraries, piece):
                problems.append(f"[[cpp.joined]] {entry['text'][:60]!r}: the piece {piece!r} is in no library")
        for name in cpp_contains(libraries, entry["pieces"][0]):
            found.append(Found(TORCH_CPP, name, 0, "", entry.get("call", "TORCH_CHECK"), entry.get("kind", "error"),
                               entry["text"]))
    problems += [f"[cpp] not_messages: {p!r} matches no string (remove it)" for p in not_messages
                 if p not in used_prefixes]
    problems += [f"[cpp.corrected]: {t!r} matches no string (remove it)" for t in corrected
                 if t not in used_corrections]
    return found, problems


# --- classification -----------------------------------------------------------------------------------------

# (file pattern, function pattern, text pattern, family): the first rule that matches decides; "" matches anything
FAMILY_RULES: tuple[tuple[str, str, str, str], ...] = (
    (r"", "", r"region_activation_memory_budget", "compile"),
    (r"", "", r"gradient edge", "node-hooks"),
    (r"nn/modules/module\.py", r"state_dict", r"state.dict|load_state_dict", "state-dict-hooks"),
    (r"", "", r"Forward hooks only exist|Forward pre hooks only exist|__forward|define hook|method or hook with that|"
     r"previous hook if it exists|as forward hook or forward pre_hook|Note that hooks can return anything", "script-fx-export"),
    (r"", "", r"comm.hook|communication hook|allreduce hook|Reducer|DDP|hooks have fired for this", "ddp"),
    (r"", "", r"abort hook|completion hook|AbortHook|CompletionHook|trace hook|hooks are registered\.", "distributed"),
    (r"torch/utils/hooks\.py|nn/modules/module\.py|torch/utils/__init__\.py", "", "", "module-hooks"),
    (r"checkpoint", "", "", "checkpoint"),
    (r"ddp_comm_hooks|nn/parallel/distributed|zero_redundancy|reducer", "", "", "ddp"),
    (r"distributed/fsdp", "", "", "fsdp"),
    (r"torch/distributed", "", "", "distributed"),
    (r"_dynamo|_functorch|_higher_order_ops|_inductor|cuda/graphs|xpu/graphs", "", "", "compile"),
    (r"torch/jit|torch/fx|_export|torch/export", "", "", "script-fx-export"),
    (r"nn/utils/(parametriz|prune|spectral_norm|weight_norm)", "", "", "parametrize"),
    (r"optim/", "", "", "optimizer-hooks"),
    (r"nn/modules/module\.py", "", r"state_dict|load_state_dict", "state-dict-hooks"),
    (r"", "", r"saved tensor|pack hook|unpack hook|pack_hook|unpack_hook|saved_tensors_hooks|SavedVariable|"
     r"saved intermediate|register_hooks on a saved|saved_variable|SavedTensorHooks|save_on_cpu|"
     r"allow_mutation_on_saved", "saved-tensor-hooks"),
    (r"autograd/graph", r"multi_grad", "", "node-hooks"),
    (r"autograd/graph", "", "", "saved-tensor-hooks"),
    (r"", "", r"node creation hook|NodeCreationHook|node_creation|Node hook|pre_hook id|grad_fn", "node-hooks"),
    (r"", "", r"comm hook|communication hook|allreduce hook|Reducer|DDP", "ddp"),
    (r"", "", r"FSDP|FlatParameter", "fsdp"),
    (r"", "", r"ProcessGroup|FlightRecorder|NanCheck|HealthCheck|AbortHook|CompletionHook|onCompletion|collective",
     "distributed"),
    (r"", "", r"compiled autograd|compiled_autograd|torch\.compile|dynamo|Dynamo", "compile"),
    (r"", "", r"script|TorchScript|ir_emitter|forward hook '|pre-hook '", "script-fx-export"),
    (r"", "", r"post accumulate|post_accumulate|PostAccumulateGrad|tensor that doesn't require|variable that doesn't|"
     r"backwards_hooks|_register_hook_dict|hook returned|has returned an incorrect|Tensor post|TensorPreHook|"
     r"cpp_hook|CppFunction|Variable, but hook|no hook at position|hooks_\.empty|retain_grad", "tensor-hooks"),
    (r"", "", r"", "module-hooks"),
)


def family_of(source: str, file: str, function: str, text: str) -> str:
    if source in LIBRARIES:
        return source
    for file_rule, function_rule, text_rule, family in FAMILY_RULES:
        if (not file_rule or re.search(file_rule, file)) and (not function_rule or re.search(function_rule, function)) \
                and (not text_rule or re.search(text_rule, text)):
            return family
    return "module-hooks"


def other_meaning(found: Found) -> str | None:
    for source, prefix, function, text, reason in OTHER_MEANINGS:
        if found.source == source and found.file.startswith(prefix) and \
                (not function or re.search(function, found.function)) and (not text or re.search(text, found.text)):
            return reason
    return None


# --- the messages -------------------------------------------------------------------------------------------

def slug(text: str, words: int = 9) -> str:
    """A readable start of an id: the first words of a text, lowercase, without its variable parts.

    >>> slug("forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {result}.")
    'forward-pre-hook-must-return-none-or-a-tuple'
    """
    plain = PLACEHOLDER.sub(" ", text.split("\n")[0])
    tokens = re.findall(r"[a-z0-9]+", plain.lower())
    return "-".join(tokens[:words])[:56].strip("-") or "message"


def message_id(source: str, text: str) -> str:
    """The stable id of a message: its first words and a digest of its source and text.

    >>> message_id("torch", "state_dict post-hook must return None")
    'state-dict-post-hook-must-return-none-...'
    """
    digest = hashlib.sha1(f"{source}\0{text}".encode()).hexdigest()[:6]
    return f"{slug(text)}-{digest}"


def literal_pieces(text: str) -> list[str]:
    """The fixed parts of a message, between its placeholders.

    >>> literal_pieces("hook {name} has changed the size of value (was {a} got {b})")
    ['hook ', ' has changed the size of value (was ', ' got ', ')']
    """
    return [p for p in PLACEHOLDER.split(text) if p]


def pattern(text: str) -> re.Pattern[str]:
    """A regular expression for the message as printed: placeholders match anything, white space any white space.

    >>> bool(pattern("got {len(out)}, but expected {n}").search("Error: got 3, but expected 2 values"))
    True
    """
    parts = PLACEHOLDER.split(text.strip())
    pieces = []
    for i, piece in enumerate(parts):
        if i:  # a variable part: anything, and up to the end of its line when nothing fixed follows
            pieces.append(r".*?" if i < len(parts) - 1 or piece else r"[^\n]*")
        pieces.append(r"\s+".join(re.escape(w) for w in re.split(r"\s+", piece)))
    return re.compile("".join(pieces), re.DOTALL)


def load_triage(path: Path = TRIAGE) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise HookMessageError(f"cannot read {path}: {exc}") from None
    for key in ("curated", "cpp", "symptom", "explained", "excused", "reasons"):
        data.setdefault(key, [] if key == "curated" else {})
    return data


def versions() -> dict[str, str]:
    out = {}
    for source, dist in DISTRIBUTIONS.items():  # torch C++ is torch's version
        try:
            out[source] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[source] = "not installed"
    return out


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def curated_messages(site: Path, curated: list[dict[str, Any]]) -> tuple[list[Found], list[str]]:
    """The curated messages, each checked to be where it says; and the problems (a text no longer there)."""
    found, problems = [], []
    libraries = [site / "torch" / "lib" / name for name in CPP_LIBRARIES]
    for i, entry in enumerate(curated):
        missing = {"text", "where", "family", "kind", "why"} - set(entry)
        if missing:
            problems.append(f"[[curated]] entry {i + 1} lacks {sorted(missing)}")
            continue
        text, where = entry["text"], entry["where"]
        check = entry.get("check")  # what to look for, where the printed words are built from pieces
        checks = [check] if isinstance(check, str) else check
        if where == "C++":  # its longest fixed sentence (or what `check` says) is in the libraries
            needles = checks or [max(_clauses(text), key=len, default=text)]
            found_in = [cpp_contains(libraries, needle) for needle in needles]
            if not all(found_in):
                problems.append(f"curated message {text!r}: no longer in {', '.join(CPP_LIBRARIES)}")
            location = ", ".join(sorted(set().union(*map(set, found_in))))
        elif where == "Python":
            location = "the Python interpreter"
        else:
            path = site / where
            source_text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
            needles = checks or [p for p in literal_pieces(text) if len(p) >= 8]
            if not all(needle in source_text for needle in needles):
                problems.append(f"curated message {text!r}: no longer in {where}")
            location = where
        found.append(Found(CURATED, location, 0, "", entry.get("call", where), entry["kind"], text))
    return found, problems


@dataclass
class Message:
    id: str
    source: str
    kind: str
    family: str
    text: str
    call: str
    places: list[str] = field(default_factory=list)
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        out = {"id": self.id, "source": self.source, "kind": self.kind, "family": self.family, "call": self.call,
               "text": self.text, "places": self.places}
        if self.detail:
            out["detail"] = self.detail
        return out


def extract(site: Path | None = None, triage: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
    """Every message, and a summary (per source: found, left out as another meaning, problems)."""
    site = site or site_packages()
    triage = triage if triage is not None else load_triage()
    found = python_messages(site, ("torch",), TORCH_PY, whole_files=HOOK_FILES)
    cpp, cpp_problems = cpp_messages(site, triage["cpp"])
    found += cpp
    for source, packages in LIBRARIES.items():
        found += python_messages(site, [p for p in packages if (site / p).is_dir()], source)
    curated, problems = curated_messages(site, triage["curated"])
    problems = cpp_problems + problems
    family_override = {e["text"]: e["family"] for e in triage["curated"] if "text" in e and "family" in e}
    left_out: Counter[str] = Counter()
    grouped: dict[tuple[str, str], Message] = {}
    for f in found + curated:
        reason = other_meaning(f)
        if reason:
            left_out[f"{f.source}: {reason}"] += 1
            continue
        key = (f.source, f.text)
        place = f.file if f.source in (TORCH_CPP, CURATED) else f"{f.file}:{f.line} {f.function}".rstrip()
        if key not in grouped:
            family = family_override.get(f.text) if f.source == CURATED else None
            grouped[key] = Message(message_id(f.source, f.text), f.source, f.kind,
                                   family or family_of(f.source, f.file, f.function, f.text), f.text, f.call,
                                   detail=f.detail)
        message = grouped[key]
        if place not in message.places:
            message.places.append(place)
        if f.kind == "warning" and message.kind == "error":  # the same words raised in one place, warned in another
            message.kind = "error or warning"
    for entry in triage["curated"]:
        key = (CURATED, entry.get("text", ""))
        if key in grouped and entry.get("call"):
            grouped[key].call = entry["call"]
    for override, kind in triage["cpp"].get("kinds", {}).items():
        for message in grouped.values():
            if message.id == override:
                message.kind = kind
    messages = sorted(grouped.values(), key=lambda m: (SOURCES.index(m.source), m.family, m.id))
    ids = Counter(m.id for m in messages)
    if any(n > 1 for n in ids.values()):  # the same first words and digest: cannot happen unless sha1 collides
        problems.append(f"ids used twice: {[i for i, n in ids.items() if n > 1]}")
    return messages, {"left_out": dict(sorted(left_out.items())), "problems": problems}


# --- statuses -----------------------------------------------------------------------------------------------

TRIGGER_DECORATOR = "trigger"


def trigger_tests(folder: Path = TRIGGER_TESTS) -> dict[str, str]:
    """message id -> the trigger test that shows it (``tests/messages/test_x.py::name``), read from the
    ``@trigger("<id>", ...)`` decorators (and ``@trigger_all(["<id>", ...])``) of the test files."""
    out: dict[str, str] = {}
    for path in sorted(folder.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                     for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for deco in node.decorator_list:
                if not (isinstance(deco, ast.Call) and getattr(deco.func, "id", "") in ("trigger", "trigger_all")):
                    continue
                arg = deco.args[0] if deco.args else None
                if isinstance(arg, ast.Call) and getattr(arg.func, "id", "") == "list" and arg.args:
                    arg = arg.args[0]  # list(IDS)
                if isinstance(arg, ast.Name):
                    arg = constants.get(arg.id)  # a module-level list, or dict whose keys are the ids
                values = arg.elts if isinstance(arg, ast.List) else arg.keys if isinstance(arg, ast.Dict) else [arg]
                for value in values:
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        out.setdefault(value.value, f"{path.relative_to(ROOT).as_posix()}::{node.name}")
    return out


def _cell_outputs(nb: dict[str, Any], index: int) -> str:
    from . import symptoms
    return symptoms.output_text(nb["cells"][index])


def _clauses(text: str) -> list[str]:
    """The clauses (between punctuation and line ends) of a message's fixed parts, without the punctuation."""
    out = []
    for piece in literal_pieces(text):
        out += [c.strip(" .,;:'\"") for c in re.split(r"[.!?;,:]\s+|\n", piece)]
    return [c for c in out if c]


def _prefixes(text: str) -> Iterator[str]:
    """The message cut after each of its words, longest first, while at least :data:`MIN_SHOWN` fixed characters
    are left (a cell may print a message cut short: ``str(e)[:80]``, its first sentence)."""
    tokens = re.findall(r"\{[^{}\n]*\}|%[-#0 +]*\d*(?:\.\d+)?[sdrfixg]|\S+|\s+", text.strip())
    for n in range(len(tokens) - 1, 0, -1):
        prefix = "".join(tokens[:n]).rstrip()
        if len("".join(literal_pieces(prefix)).strip()) < MIN_SHOWN:
            return
        if not PLACEHOLDER.fullmatch(tokens[n - 1]):
            yield prefix


def shown_piece(text: str, output: str) -> str | None:
    """The line of ``output`` that shows ``text``: the whole message, the message cut short (at least
    :data:`MIN_SHOWN` fixed characters), or one of its clauses that long (all of it when the message is shorter);
    None when the output does not show it."""
    match = pattern(text).search(output)
    for prefix in ([] if match else _prefixes(text)):
        match = pattern(prefix).search(output)
        if match:
            break
    if match:
        start, end = match.start(), match.end()
    else:
        shortest = min(MIN_SHOWN, len(text.strip()))
        piece = next((c for c in sorted(_clauses(text), key=len, reverse=True)
                      if len(c) >= shortest and c in output), None)
        if piece is None:
            return None
        start = output.index(piece)
        end = start + len(piece)
    first = output.rfind("\n", 0, start) + 1
    last = output.find("\n", end)
    return output[first:last if last != -1 else len(output)].strip()


def resolve_cell(ref: str, root: Path, cache: dict[str, dict]) -> dict[str, str] | str:
    """``"NN:cell-id"`` -> the notebook and the code cell it means (a heading: the first code cell after it); a
    string saying what is wrong when there is no such cell."""
    from . import symptoms

    number, _, cell_id = ref.partition(":")
    paths = sorted((root / "notebooks").glob(f"{number}_*.ipynb"))
    if len(paths) != 1 or not cell_id:
        return "write NN:cell-id, NN a notebook's number"
    nb = cache.setdefault(paths[0].name, symptoms.read_notebook(paths[0]))
    cells = nb.get("cells", [])
    index = next((i for i, c in enumerate(cells) if c.get("id") == cell_id), None)
    if index is None:
        return f"{paths[0].name} has no cell with that id (moved or deleted?)"
    code = next((i for i in range(index, len(cells)) if cells[i].get("cell_type") == "code"), None)
    if code is None:
        return f"no code cell follows it in {paths[0].name}"
    return {"notebook": paths[0].name, "cell_id": cells[code]["id"]}


def statuses(messages: list[Message], triage: dict[str, Any], *, root: Path = ROOT) -> tuple[dict[str, dict], list[str]]:
    """message id -> its status record, and the problems found (links that point nowhere, a message with two
    statuses, an id the triage names that no message has)."""
    from . import symptoms

    found, _ = symptoms.collect(root)
    cells = {s.id: s for s in found}
    tests = trigger_tests(root / "tests" / "messages")
    known = {m.id: m for m in messages}
    problems: list[str] = []
    reasons = triage["reasons"]
    out: dict[str, dict] = {}
    notebooks: dict[str, dict] = {}
    for table in ("symptom", "explained", "excused"):
        for mid in triage[table]:
            if mid not in known:
                problems.append(f"[{table}] names {mid!r}, which is no message (its text changed or went away?)")
    for mid in tests:
        if mid not in known:
            problems.append(f"{tests[mid]} triggers {mid!r}, which is no message")
    for m in messages:
        out[m.id] = {"status": "open"}
        where = [t for t in ("symptom", "explained", "excused") if m.id in triage[t]]
        if len(where) > 1:
            problems.append(f"{m.id}: in both {where}; keep one")
        if m.id in triage["symptom"]:
            sid = triage["symptom"][m.id]
            s = cells.get(sid)
            if s is None:
                problems.append(f"{m.id}: [symptom] names {sid!r}, which no symptom cell has")
                continue
            nb = notebooks.setdefault(s.notebook, symptoms.read_notebook(root / "notebooks" / s.notebook))
            piece = shown_piece(m.text, _cell_outputs(nb, s.cell))
            if piece is None:
                problems.append(f"{m.id}: the symptom cell {sid!r} ({s.notebook} cell {s.cell}) does not show its "
                                f"text {m.text[:80]!r}")
                continue
            out[m.id] = {"status": "cell", "symptom": sid, "notebook": s.notebook, "cell_id": s.cell_id,
                         "example": piece}
            if m.id in tests:
                out[m.id]["test"] = tests[m.id]
        elif m.id in tests:
            row = triage["explained"].get(m.id)
            if not isinstance(row, dict):
                problems.append(f"{m.id}: triggered by {tests[m.id]} but has no [explained] row (zh, en, cell)")
                continue
            bad = {"zh", "en", "cell"} - set(row)
            if bad:
                problems.append(f"{m.id}: its [explained] row lacks {sorted(bad)}")
                continue
            where = resolve_cell(row["cell"], root, notebooks)
            if isinstance(where, str):
                problems.append(f"{m.id}: [explained] cell {row['cell']!r}: {where}")
                continue
            out[m.id] = {"status": "test", "test": tests[m.id], "zh": row["zh"], "en": row["en"], **where}
        elif m.id in triage["explained"]:
            problems.append(f"{m.id}: has an [explained] row but no trigger test (@trigger({m.id!r}))")
        elif m.id in triage["excused"]:
            value = triage["excused"][m.id]
            reason, _, why = value.partition(":")
            if reason not in reasons:
                problems.append(f"{m.id}: excuse {reason!r} is none of [reasons] ({', '.join(reasons)})")
            out[m.id] = {"status": "excused", "reason": reason, "why": why.strip()}
    return out, problems


# --- the data file ------------------------------------------------------------------------------------------

def build(site: Path | None = None, *, root: Path = ROOT) -> tuple[dict[str, Any], list[str]]:
    triage = load_triage(root / "docs" / "hook_messages.toml")
    messages, summary = extract(site, triage)
    status, problems = statuses(messages, triage, root=root)
    examples = load_examples(root)
    records = []
    for m in messages:
        record = m.as_json()
        record.update(status[m.id])
        if "test" in record and m.id in examples:  # what the trigger test printed (the test checks it)
            record["trigger_example"] = examples[m.id]
            record.setdefault("example", examples[m.id])
        records.append(record)
    data = {"about": "Every error and warning text about hooks in the pinned PyTorch and libraries, with its status. "
                     "Written by `python -m tools.hook_messages --write`; do not edit (docs/hook_messages.toml holds "
                     "what is written by hand).",
            "versions": versions(), "left_out": summary["left_out"], "messages": records}
    return data, summary["problems"] + problems


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1) + "\n"


def load(path: Path = DATA) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


EXAMPLES = ROOT / "docs" / "hook_message_examples.json"


def load_examples(root: Path = ROOT) -> dict[str, str]:
    path = root / "docs" / "hook_message_examples.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def difference(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What changed between two versions of the data, in words: texts added and removed per source, then statuses."""
    lines = []
    before = {(m["source"], m["text"]): m for m in old.get("messages", [])}
    after = {(m["source"], m["text"]): m for m in new.get("messages", [])}
    for source in SOURCES:
        added = sorted(t for s, t in after.keys() - before.keys() if s == source)
        removed = sorted(t for s, t in before.keys() - after.keys() if s == source)
        if added or removed:
            lines.append(f"{source} ({old.get('versions', {}).get(source, '?')} -> "
                         f"{new.get('versions', {}).get(source, '?')}): {len(added)} message(s) added, "
                         f"{len(removed)} removed")
            lines += [f"  + {t[:160]!r}" for t in added] + [f"  - {t[:160]!r}" for t in removed]
    for key in sorted(before.keys() & after.keys()):
        a, b = before[key], after[key]
        if a != b:
            changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            lines.append(f"{b['id']}: {', '.join(changed)} changed")
    if old.get("left_out") != new.get("left_out"):
        lines.append(f"left out as another meaning: {old.get('left_out')} -> {new.get('left_out')}")
    return lines


# --- coverage -----------------------------------------------------------------------------------------------

def report(data: dict[str, Any]) -> str:
    lines = ["source       messages  cell  test  excused  open  triggered"]
    for row in coverage(data["messages"]):
        triggered = row["cell"] + row["test"]
        share = f"{triggered}/{row['messages'] - row['excused']}"
        lines.append(f"{row['source']:<12} {row['messages']:>8} {row['cell']:>5} {row['test']:>5} "
                     f"{row['excused']:>8} {row['open']:>5}  {share}")
    lines.append("excused by reason: " + ", ".join(f"{k} {v}" for k, v in sorted(excuses(data['messages']).items())))
    lines.append("left out (another meaning of 'hook'): " + ", ".join(f"{k}: {v}" for k, v in data["left_out"].items()))
    return "\n".join(lines)


def run_examples(root: Path = ROOT) -> dict[str, str]:
    """Run the trigger tests with the harness told to write what each one printed, and return id -> example."""
    with tempfile.TemporaryDirectory(prefix="hook-messages-") as folder:
        out = Path(folder) / "examples.jsonl"
        env = {**os.environ, "HOOKLAB_MESSAGE_EXAMPLES": str(out)}
        proc = subprocess.run([sys.executable, "-m", "pytest", "tests/messages", "-q", "-p", "no:cacheprovider",
                               "-n0", "-k", "trigger", "--no-header"], cwd=root, env=env, timeout=900)
        if proc.returncode != 0:
            raise HookMessageError("some trigger tests failed: fix them first (their output is above)")
        examples = {}
        for line in out.read_text(encoding="utf-8").splitlines() if out.exists() else []:
            item = json.loads(line)
            examples[item["id"]] = item["example"]
    return dict(sorted(examples.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="re-extract and rewrite docs/hook_messages.json")
    group.add_argument("--examples", action="store_true",
                       help="run the trigger tests, store what each printed (docs/hook_message_examples.json), "
                            "then rewrite docs/hook_messages.json")
    group.add_argument("--report", action="store_true", help="coverage per source and the open messages")
    args = parser.parse_args(argv)
    if args.examples:
        EXAMPLES.write_text(json.dumps(run_examples(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        args.write = True
    try:
        data, problems = build()
    except HookMessageError as exc:
        print(exc, file=sys.stderr)
        return 1
    for problem in problems:
        print(problem, file=sys.stderr)
    if args.write:
        DATA.write_text(dumps(data), encoding="utf-8")
        print(f"{DATA.relative_to(ROOT)}: {len(data['messages'])} messages")
        print(report(data))
        return 1 if problems else 0
    if args.report:
        print(report(data))
        for r in data["messages"]:
            if r["status"] == "open":
                print(f"open  {r['id']}  [{r['source']} / {r['family']}]  {r['text'][:110]!r}")
        return 0
    old = load(DATA) if DATA.is_file() else {}
    changes = difference(old, data)
    for line in changes:
        print(line)
    if not changes and not problems:
        print(f"{DATA.relative_to(ROOT)} is current: {len(data['messages'])} messages")
    return 1 if changes or problems else 0


if __name__ == "__main__":
    sys.exit(main())
