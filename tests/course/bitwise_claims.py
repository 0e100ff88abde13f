"""Exact comparisons of floating-point values in the course's code, found by parsing it.

Two computations of the same float result agree only to their last bits: another CPU's kernels, another layout of
the same values (a transposed view or its contiguous copy) or another order of the same sums can change them. So an
exact comparison (``torch.equal``, ``==``, a zero tolerance) says why it is exact, in a marker comment on its line or
on comment lines directly above its statement::

    # bitwise: same computation, the hook returned None: the same Linear kernels ran on the same x
    print("unchanged:", torch.equal(out, plain))

The marker starts with one of ``KINDS``; all but ``integer`` and ``bool`` go on with the reason. Anything else
becomes ``torch.allclose`` with a stated tolerance.

The code is parsed (``ast``): a comparison inside a comment or a string is none. What counts (``find_comparisons``):

- ``torch.equal(a, b)`` and ``a.equal(b)``;
- an element-wise ``==`` / ``!=`` (or ``torch.eq`` / ``.eq(...)`` / ``ne``) whose result is used as a tensor:
  reduced or cast (``.all()``, ``.any()``, ``.sum()``, ``.float()``, ``torch.all(...)``, ``bool(...)``, ...);
- ``allclose`` / ``isclose`` / ``assert_close`` / ``assert_allclose`` with ``rtol=0`` and ``atol=0``, and numpy's
  ``array_equal`` / ``assert_array_equal``;
- a scalar ``==`` / ``!=`` with a float on one side: a ``.item()`` or ``.tolist()`` call, a ``float(...)`` call, a float
  literal (alone or in a list or tuple).

The parser cannot know dtypes: a side that is evidently not a float (a string, ``None``, ``len(...)``, a call of
``.argmax()``, ``.long()``, ``.bool()``, ...) needs no marker; any other integer or boolean comparison says ``integer``
or ``bool``. A ``==`` between two names whose types only a run would show is out of reach: the forms above are the
ones the course's claims take. A marker must stand beside an equality (``==``, ``!=`` or an ``equal`` call): one left
behind when its comparison went away fails too.
"""
from __future__ import annotations

import ast
import io
import json
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

KINDS = {
    "integer": "the values are integers (counts, indices, token ids, bytes)",
    "bool": "the values are booleans (masks)",
    "copy": "one side is the other passed on, stored, loaded or left untouched: no arithmetic between them",
    "same computation": "both sides come from the same kernels on the same values in the same layout and order",
    "exact arithmetic": "every operation is exact in binary floating point (x 1, x 2^k, small whole numbers, 0)",
    "rounded": "the values are rounded to far fewer digits than float carries before they are compared",
    "changed": "the claim is a difference far larger than rounding (other inputs, a real update, another draw)",
}
NEEDS_NO_REASON = {"integer", "bool"}
MIN_REASON = 12  # characters of reason after a kind that needs one
MARKER = re.compile(r"#\s*bitwise:\s*(?P<rest>.*)$")

# an element-wise comparison used as a tensor: reduced, cast, or read
TENSOR_USES = {"all", "any", "sum", "float", "mean", "item", "tolist", "nonzero", "count_nonzero", "int", "long",
               "double", "numpy"}
REDUCING_FUNCTIONS = {"all", "any", "sum", "count_nonzero", "where", "nonzero"}
ELEMENTWISE_CALLS = {"eq", "ne"}
CLOSE_CALLS = {"allclose", "isclose", "assert_close", "assert_allclose"}
NUMPY_EXACT = {"array_equal", "assert_array_equal"}
# calls whose result is an integer or a bool whatever their input: a side made by one of them is not a float
INTEGER_CALLS = {"argmax", "argmin", "argsort", "long", "int", "short", "bool", "byte", "nonzero", "numel", "size",
                 "dim", "count_nonzero", "bincount", "data_ptr", "storage_offset", "len"}
# calls that keep the values (and so the dtype) of what they are called on
RESHAPING_CALLS = {"flatten", "view", "reshape", "tolist", "t", "contiguous", "clone", "detach", "cpu", "squeeze",
                   "unsqueeze", "permute", "transpose", "item", "list", "tuple"}


@dataclass(frozen=True)
class Comparison:
    """One exact comparison: its line (1-based), form, the line's text, and its marker's kind and reason (kind
    ``None``: no marker)."""
    line: int
    form: str
    text: str
    kind: str | None
    reason: str


@dataclass(frozen=True)
class Marker:
    line: int
    kind: str | None  # None: not one of KINDS
    reason: str
    raw: str


def _is_float_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, float)


def _calls_along(node: ast.AST) -> list[str]:
    """The names called along ``node``'s chain, outermost first: ``a.argsort(...)[:3].flatten()`` ->
    ``['flatten', 'argsort']``."""
    names = []
    while True:
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                names.append(node.func.attr)
                node = node.func.value
                continue
            if isinstance(node.func, ast.Name):
                names.append(node.func.id)
            return names
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
        else:
            return names


def _evidently_not_float(node: ast.AST) -> bool:
    """A string, a bool, ``None``, or what an integer-valued call returns (only reshaping calls after it)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (bool, str, bytes)) or node.value is None
    for name in _calls_along(node):
        if name not in RESHAPING_CALLS:
            return name in INTEGER_CALLS
    return False


def _float_evidence(node: ast.AST) -> bool:
    """A side of a scalar ``==`` that is a Python float: ``x.item()``, ``x.tolist()``, ``float(x)``, a float literal
    (alone or in a list / tuple)."""
    if _is_float_constant(node):
        return True
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_is_float_constant(e) for e in node.elts)
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr in {"item", "tolist"}:
            return True
        if isinstance(node.func, ast.Name) and node.func.id == "float":
            return True
    return False


def _called(node: ast.Call) -> tuple[str | None, str | None]:
    """(the name called, the name of what it is called on, when that is a name or an attribute)."""
    func = node.func
    if isinstance(func, ast.Attribute):
        owner = func.value
        return func.attr, (owner.id if isinstance(owner, ast.Name) else
                           owner.attr if isinstance(owner, ast.Attribute) else None)
    if isinstance(func, ast.Name):
        return func.id, None
    return None, None


def _zero(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value == 0


def _used_as_tensor(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    parent = parents.get(node)
    if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in TENSOR_USES:
        return True
    if isinstance(parent, ast.Call) and node in parent.args:
        name, owner = _called(parent)
        return name == "bool" and owner is None or name in REDUCING_FUNCTIONS and owner in {"torch", "np", "numpy"}
    return False


def _two_sides(node: ast.Call) -> bool:
    return len(node.args) == 2 or any(isinstance(a, ast.Starred) for a in node.args)


def _form(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> tuple[str, list[ast.AST]] | None:
    """The form of an exact float comparison and its sides, or None when ``node`` is none."""
    if isinstance(node, ast.Compare):
        if not any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            return None
        sides = [node.left, *node.comparators]
        if _used_as_tensor(node, parents):
            return "elementwise ==", sides
        return ("scalar float ==", sides) if any(_float_evidence(s) for s in sides) else None
    if not isinstance(node, ast.Call):
        return None
    name, owner = _called(node)
    method = isinstance(node.func, ast.Attribute)
    if name == "equal" and (owner == "torch" or not method) and _two_sides(node):
        return "torch.equal", list(node.args)
    if name == "equal" and method and owner != "torch" and len(node.args) == 1 and not node.keywords:
        return "Tensor.equal", [node.func.value, node.args[0]]
    if name in NUMPY_EXACT:
        return f"numpy {name}", list(node.args)
    if name in CLOSE_CALLS:
        given = {k.arg: k.value for k in node.keywords}
        return (f"{name}(rtol=0, atol=0)", list(node.args)) if _zero(given.get("rtol")) and _zero(given.get("atol")) \
            else None
    if name in ELEMENTWISE_CALLS and _used_as_tensor(node, parents):
        if owner == "torch" and _two_sides(node):
            return f"elementwise {name}", list(node.args)
        if method and len(node.args) == 1:
            return f"elementwise {name}", [node.func.value, node.args[0]]
    return None


def _is_equality(node: ast.AST) -> bool:
    """Any ``==`` / ``!=`` or ``equal`` call: what a marker may stand beside."""
    if isinstance(node, ast.Compare):
        return any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
    return isinstance(node, ast.Call) and _called(node)[0] in {"equal", *NUMPY_EXACT, *CLOSE_CALLS, *ELEMENTWISE_CALLS}


def _markers(source: str) -> tuple[dict[int, Marker], set[int]]:
    """The ``# bitwise:`` markers by line, and the lines that hold nothing but a comment."""
    markers: dict[int, Marker] = {}
    code_lines: set[int] = set()
    comment_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comment_lines.add(token.start[0])
            match = MARKER.search(token.string)
            if match:
                rest = match["rest"].strip()
                kind = next((k for k in KINDS if re.match(rf"{re.escape(k)}\b", rest)), None)
                reason = rest[len(kind):].lstrip(" ,;:-—(").strip() if kind else rest
                markers[token.start[0]] = Marker(token.start[0], kind, reason, token.string)
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                tokenize.ENDMARKER):
            code_lines.update(range(token.start[0], token.end[0] + 1))
    return markers, comment_lines - code_lines


class _Lines:
    """Which marker covers a node: one on a line the node spans, or on the comment lines directly above the node or
    above the statement it is part of."""

    def __init__(self, tree: ast.AST, markers: dict[int, Marker], comment_only: set[int]):
        self.markers, self.comment_only = markers, comment_only
        self.parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}

    def _above(self, line: int) -> Marker | None:
        line -= 1
        while line in self.comment_only:
            if line in self.markers:
                return self.markers[line]
            line -= 1
        return None

    def statement(self, node: ast.AST) -> ast.AST:
        while not isinstance(node, ast.stmt) and node in self.parents:
            node = self.parents[node]
        return node

    def marker(self, node: ast.AST) -> Marker | None:
        first, last = node.lineno, getattr(node, "end_lineno", None) or node.lineno
        for line in range(first, last + 1):
            if line in self.markers:
                return self.markers[line]
        return self._above(first) or self._above(self.statement(node).lineno)


def find_comparisons(source: str) -> tuple[list[Comparison], list[str]]:
    """Every exact comparison of ``source`` (Python code) with its marker, and the problems of the markers
    themselves: an unknown kind, a missing reason, a marker beside no equality."""
    tree = ast.parse(source)
    markers, comment_only = _markers(source)
    lines = _Lines(tree, markers, comment_only)
    text = source.splitlines()
    comparisons, used = [], set()
    for node in sorted(ast.walk(tree), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if _is_equality(node):
            marker = lines.marker(node)
            if marker is not None:
                used.add(marker.line)
        found = _form(node, lines.parents)
        if found is None or any(_evidently_not_float(side) for side in found[1]):
            continue
        marker = lines.marker(node)
        comparisons.append(Comparison(node.lineno, found[0], text[node.lineno - 1].strip(),
                                      marker.kind if marker else None, marker.reason if marker else ""))
    problems = []
    for line, marker in sorted(markers.items()):
        if marker.kind is None:
            problems.append(f"line {line}: marker {marker.raw!r} names no kind; start it with one of "
                            f"{', '.join(repr(k) for k in KINDS)}")
        elif marker.kind not in NEEDS_NO_REASON and len(marker.reason) < MIN_REASON:
            problems.append(f"line {line}: marker {marker.raw!r} needs its reason after {marker.kind!r} "
                            "(why is it exact here?)")
        if line not in used:
            problems.append(f"line {line}: marker {marker.raw!r} stands beside no equality (remove it)")
    return comparisons, problems


def problems_of(source: str) -> list[str]:
    """What is wrong with ``source``'s exact comparisons: each one without a marker, and each bad marker."""
    comparisons, problems = find_comparisons(source)
    return [f"line {c.line}: {c.form} without a '# bitwise: <kind>, <reason>' marker: {c.text}"
            for c in comparisons if c.kind is None] + problems


def _python(cell_source: str) -> str:
    """A code cell as Python: IPython's magics (``%time``, ``!ls``) become the calls they stand for (the code a magic
    runs is a string to the parser: the course's notebooks use none); a cell without them is Python already."""
    try:
        ast.parse(cell_source)
        return cell_source
    except SyntaxError:
        from IPython.core.inputtransformer2 import TransformerManager
        return TransformerManager().transform_cell(cell_source)


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(0-based cell index, Python source) of each code cell of a notebook."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, _python("".join(c["source"]) if isinstance(c["source"], list) else c["source"]))
            for i, c in enumerate(cells) if c["cell_type"] == "code"]


def sources(path: Path) -> list[tuple[str, str]]:
    """(where, Python source) of a notebook's code cells, or of a Python file."""
    if path.suffix == ".ipynb":
        return [(f"{path.name} cell {i}", source) for i, source in code_cells(path)]
    return [(path.name, path.read_text(encoding="utf-8"))]


def main(argv: list[str]) -> int:
    """``python tests/course/bitwise_claims.py PATH...``: every exact comparison in the notebooks and Python files
    given, one line each (``-`` where the marker is missing), then the problems; exit status 1 when there is one."""
    bad = False
    for name in argv:
        for where, source in sources(Path(name)):
            comparisons, problems = find_comparisons(source)
            for c in comparisons:
                bad |= c.kind is None
                print(f"{where} line {c.line}: {c.form} | {c.kind or '-'} | {c.reason} | {c.text}")
            for problem in problems:
                bad = True
                print(f"{where} {problem}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
