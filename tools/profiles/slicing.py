"""One fact of a profile's ``facts()`` cut out of it: the statements its value depends on, and nothing after it.

A profile module's ``facts()`` measures every fact of its library in one run; a learner who asks about one fact wants
the few lines that show it. :func:`fact_slice` walks ``facts()``'s statements backwards from where the fact's value
is made (its entry of the returned dict, or ``out["name"] = ...``) and keeps a statement when

- it binds a name the value still needs (a full assignment to a plain name also ends that need), or
- it may change an object the value reaches (a call that is not a known pure builtin, a store into an attribute or
  an item, a loop, a ``with``, a ``try``) and it touches a local name that may share objects with what is needed.

Which locals may share objects is read from the whole function, over-approximated: every statement that is not a
plain assignment of a fresh value (a literal, a comparison, arithmetic, ``len(...)``, ``sorted(...)``, ...) joins
the locals it names; a hook registered on a model ties the list the hook appends to with the model, the model with
what is built from it, and so on. Statements after the fact's value are dropped. A statement that names no local but may change something (a seed,
a process group) is kept, and so is an import whose names nothing reads (it is there for what importing does); a value that reads a module attribute deep in a package (``torch.nn.functional.linear``)
gets no cut, as a library may have replaced it anywhere.

The cut is a claim, and :mod:`tools.profiles.programs` checks it: a program cut this way must print the value the
profile stored, or the generation fails. A value that cannot be located (an entry spread in with ``**``, an
``out.update(...)``) gets no cut (``None``): the program runs the whole ``facts()``.

>>> src = '''
... def facts():
...     model, log = build(), []
...     model.register_forward_hook(lambda m, a, o: log.append(1))
...     model(x)
...     other = build()
...     other(x)
...     return {"calls": len(log), "other": other.calls}
... '''
>>> print(fact_slice(src, "calls").code)
model, log = build(), []
model.register_forward_hook(lambda m, a, o: log.append(1))
model(x)
>>> fact_slice(src, "calls").value
'len(log)'
"""
from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

# calls whose result is a new object that shares nothing mutable with their arguments, and that change nothing
PURE = frozenset({"len", "sorted", "list", "tuple", "set", "frozenset", "dict", "sum", "min", "max", "any", "all",
                  "str", "repr", "int", "float", "bool", "round", "abs", "isinstance", "issubclass", "hasattr",
                  "type", "print", "range", "enumerate", "zip", "format", "id", "callable", "reversed"})


@dataclass(frozen=True)
class Slice:
    """The statements of ``facts()`` one fact needs (``code``, dedented, comments inside them kept), the expression
    that gives its value (``value``) and whether the statements must stay inside a function (``in_function``: they
    ``return`` early or declare ``nonlocal`` / ``global`` names)."""
    code: str
    value: str
    in_function: bool
    kept: int
    total: int


def _stores(node: ast.AST) -> set[str]:
    """Names a statement binds in its own scope (not inside a nested function, class or comprehension)."""
    out: set[str] = set()

    def walk(n: ast.AST) -> None:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
            return
        if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        elif isinstance(n, ast.NamedExpr):
            out.add(n.target.id)  # type: ignore[union-attr]
        for child in ast.iter_child_nodes(n):
            walk(child)
    walk(node)
    return out


def _loads(node: ast.AST) -> set[str]:
    """Every name a statement reads, also inside its lambdas and nested functions (they close over the locals, and
    rebind those they declare ``nonlocal``); annotations are not read."""
    out: set[str] = set()

    def walk(n: ast.AST) -> None:
        if isinstance(n, ast.AnnAssign):
            for part in (n.target, n.value):
                if part is not None:
                    walk(part)
            return
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in n.body:
                walk(stmt)
            for default in [*n.args.defaults, *n.args.kw_defaults]:
                if default is not None:
                    walk(default)
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, (ast.Nonlocal, ast.Global)):  # a nested function that rebinds them reads them too
            out.update(n.names)
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
        for child in ast.iter_child_nodes(n):
            walk(child)
    walk(node)
    return out


def _fresh(expr: ast.expr | None) -> bool:
    """Whether ``expr`` makes a new value that shares no mutable object with a local and changes nothing."""
    if expr is None or isinstance(expr, (ast.Constant, ast.JoinedStr, ast.Compare)):
        return True
    if isinstance(expr, ast.UnaryOp):
        return _fresh(expr.operand)
    if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
        return all(_fresh(e) for e in expr.elts)
    if isinstance(expr, ast.Dict):
        return all(_fresh(e) for e in [*expr.keys, *expr.values] if e is not None) and None not in expr.keys
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in PURE:
        return all(_pure(a) for a in [*expr.args, *(k.value for k in expr.keywords)])
    return False


def _pure(expr: ast.AST) -> bool:
    """Whether evaluating ``expr`` cannot change an object (no call but the pure builtins, no walrus)."""
    for n in ast.walk(expr):
        if isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id in PURE):
            return False
        if isinstance(n, (ast.NamedExpr, ast.Lambda, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
    return True


def _names_assignment(stmt: ast.stmt) -> bool:
    """``a = ...`` / ``a, b = ...``: names only as targets (after it, the names' old values are not needed)."""
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets = [stmt.target]
    else:
        return False
    return all(isinstance(m, (ast.Name, ast.Tuple, ast.List, ast.Starred, ast.Store, ast.Load))
               for n in targets for m in ast.walk(n))


def _plain_assignment(stmt: ast.stmt) -> bool:
    """A :func:`_names_assignment` whose right side changes nothing."""
    value = getattr(stmt, "value", None)
    return _names_assignment(stmt) and value is not None and _pure(value)


def _definition(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))


class _Sharing:
    """Which locals may hold the same objects: a union-find over the function's local names."""

    def __init__(self, body: list[ast.stmt], local: set[str], imported: set[str]) -> None:
        self.parent: dict[str, str] = {}
        self.local = local - imported
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                continue
            if _plain_assignment(stmt) and _fresh(stmt.value):  # type: ignore[attr-defined]
                continue
            names = sorted((_loads(stmt) | _stores(stmt)) & self.local)
            for other in names[1:]:
                self._join(names[0], other)

    def _root(self, name: str) -> str:
        while self.parent.get(name, name) != name:
            name = self.parent[name]
        return name

    def _join(self, a: str, b: str) -> None:
        self.parent[self._root(a)] = self._root(b)

    def groups(self, names: set[str]) -> set[str]:
        return {self._root(n) for n in names & self.local}


def _value_site(body: list[ast.stmt], name: str) -> tuple[int, ast.expr] | None:
    """Where the fact ``name``'s value is made in ``facts()``'s body: (index of the statement, the expression)."""
    last = body[-1]
    if not isinstance(last, ast.Return) or last.value is None:
        return None
    returned = last.value

    def entry(d: ast.Dict) -> ast.expr | None:
        for key, value in zip(d.keys, d.values):
            if isinstance(key, ast.Constant) and key.value == name:
                return value
        return None

    if isinstance(returned, ast.Dict):
        found = entry(returned)
        return (len(body) - 1, found) if found is not None else None
    if not isinstance(returned, ast.Name):
        return None
    out = returned.id

    def other_entry(stmt: ast.stmt) -> bool:  # out["another name"] = ...: it leaves this entry as it is
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            return False
        target = stmt.targets[0]
        return isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and \
            target.value.id == out and isinstance(target.slice, ast.Constant) and target.slice.value != name and \
            out not in _loads(stmt.value)

    site = _out_site(body, out, name, entry)
    if site is None:
        return None
    # an entry filled in later (out["name"][key] = ..., out.update(...)) is not where the value is made
    if any(out in _loads(stmt) and not other_entry(stmt) for stmt in body[site[0] + 1:-1]):
        return None
    return site


def _out_site(body: list[ast.stmt], out: str, name: str,
              entry: Callable[[ast.Dict], ast.expr | None]) -> tuple[int, ast.expr] | None:
    for i in range(len(body) - 1, -1, -1):
        stmt = body[i]
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == out \
                    and isinstance(target.slice, ast.Constant) and target.slice.value == name:
                return i, stmt.value
            if isinstance(target, ast.Name) and target.id == out and isinstance(stmt.value, ast.Dict):
                found = entry(stmt.value)
                return (i, found) if found is not None else None
        elif isinstance(stmt, (ast.AnnAssign,)) and isinstance(stmt.target, ast.Name) and stmt.target.id == out \
                and isinstance(stmt.value, ast.Dict):
            found = entry(stmt.value)
            return (i, found) if found is not None else None
    return None


def _source(lines: list[str], stmt: ast.stmt) -> str:
    first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
    return "\n".join(lines[first - 1:stmt.end_lineno])


def fact_slice(module_source: str, name: str, function: str = "facts") -> Slice | None:
    """The statements of ``function`` (a top-level function of ``module_source``) that fact ``name`` needs; ``None``
    when the fact's value is not an entry that can be located."""
    tree = ast.parse(textwrap.dedent(module_source))
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    if not found:
        raise ValueError(f"no function {function}() in the module")
    body = list(found[0].body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
            isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    site = _value_site(body, name)
    if site is None:
        return None
    index, value = site
    local = set().union(*(_stores(s) for s in body)) if body else set()
    imported = set().union(*(_stores(s) for s in body if isinstance(s, (ast.Import, ast.ImportFrom)))) \
        if body else set()
    sharing = _Sharing(body[:index], local, imported)
    live = _loads(value)
    read_anywhere = set().union(*(_loads(s) for s in body)) if body else set()
    kept: list[ast.stmt] = []
    for stmt in reversed(body[:index]):
        binds, reads = _stores(stmt), _loads(stmt)
        if binds & live:
            keep = True
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)) and not binds & read_anywhere:
            keep = True  # imported for what importing does (a submodule that patches a class)
        elif _definition(stmt) or _plain_assignment(stmt):
            keep = False
        elif not (reads | binds) & sharing.local:  # it may change global state (a seed, a process group)
            keep = True
        else:  # it may change an object: kept when it touches what the value may reach
            keep = bool(sharing.groups(reads | binds) & sharing.groups(live))
        if not keep:
            continue
        kept.append(stmt)
        if _names_assignment(stmt) or _definition(stmt):
            live -= binds
        live |= reads
    kept.reverse()
    anywhere = local | {n.id for n in ast.walk(found[0]) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} \
        | {a.arg for a in ast.walk(found[0]) if isinstance(a, ast.arg)}
    if any(_reads_module_state(n, anywhere) for n in [value, *kept]):
        return None
    lines = textwrap.dedent(module_source).splitlines()
    code = textwrap.dedent("\n".join(_source(lines, s) for s in kept))
    in_function = any(isinstance(n, (ast.Nonlocal, ast.Global)) for s in kept for n in ast.walk(s)) or \
        any(_returns(s) for s in kept)
    return Slice(code=code, value=ast.get_source_segment(textwrap.dedent(module_source), value) or ast.unparse(value),
                 in_function=in_function, kept=len(kept), total=len(body))


def _reads_module_state(node: ast.AST, local: set[str]) -> bool:
    """Whether ``node`` reads a module's attribute deep in a package as a value (``torch.nn.functional.linear``, not
    called): a library may have replaced it anywhere, so no statement can be left out."""
    called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and id(n) not in called:
            depth, base = 0, n
            while isinstance(base, ast.Attribute):
                depth, base = depth + 1, base.value
            if isinstance(base, ast.Name) and base.id not in local and depth >= 3:
                return True
    return False


def _returns(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` returns from the function it is in (a ``return`` outside a nested function)."""
    def walk(n: ast.AST) -> bool:
        if isinstance(n, ast.Return):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        return any(walk(c) for c in ast.iter_child_nodes(n))
    return walk(stmt)
