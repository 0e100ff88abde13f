"""Reading the messages of Python sources: the text of each ``raise``, ``assert``, warning, log call, ``torch._check``
and Dynamo graph break (and the message given to ``@deprecated(...)``), parsed with :mod:`ast` (nothing is imported),
its variable parts kept as ``{expression}``; see :mod:`tools.hook_messages` for which messages count."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SKIP_FILES = ("torch/testing/_internal/",)
HOOK = re.compile(r"hook", re.IGNORECASE)
# the texts a user of saved-tensor hooks meets that do not say "hook": about saved tensors (variables) themselves
SAVED = re.compile(r"saved[ _]?tensors?\b|saved[ _]?variables?\b", re.IGNORECASE)
PRINTF = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfixg]")

WARN_CALLS = {"warn", "warn_once", "warn_explicit", "rank_zero_warn", "_warn_once"}
LOG_CALLS = {"warning", "warning_once"}
CHECK_CALLS = {"_check", "_check_value", "_check_type", "_check_index", "_check_not_implemented", "_check_is_size",
               "_p_assert"}  # torch._check*(cond, message), and FSDP's _p_assert(cond, message)
DISABLE_CALLS = {"disable_saved_tensors_hooks", "_saved_tensors_hooks_disable"}


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
        elif name == "deprecated" and node.args and not any(  # @deprecated("...") warns on use, unless category=None
                k.arg == "category" and isinstance(k.value, ast.Constant) and k.value.value is None
                for k in node.keywords):
            self._add(node, "@deprecated", "warning", node.args[0])
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
            if whole or HOOK.search(f.text) or HOOK.search(f.detail) or HOOK.search(f.function) or SAVED.search(f.text)]


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
            if whole or "hook" in text.lower() or SAVED.search(text):
                found += _cached_file_messages(source, rel, text, whole, cache)
    return found

