"""``import hooklab`` imports none of the library's modules (nor torch): each public name is imported from its module
when first used (hooklab/__init__.py's ``__getattr__``, PEP 562), so the import costs a small fraction of ``import
torch``'s (measured by benchmarks/bench_startup.py, never timed here). Every public name still resolves, to the object
its module defines, by attribute, by ``from hooklab import X`` and by ``import *``; the imports type checkers read and
the table the lookup uses name the same things."""
from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import hooklab
from patience import hang_guard

pytestmark = pytest.mark.timeout(180)

INIT = Path(hooklab.__file__)


def _fresh(code: str) -> str:
    """What ``code`` prints in a new interpreter (this checkout's hooklab first on the path)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=hang_guard(150),
                          cwd=INIT.parents[1], check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_hooklab_imports_no_module_of_the_library_and_not_torch():
    printed = _fresh("import sys; import hooklab; "
                     "print(sorted(m for m in sys.modules if m.startswith(('hooklab.', 'torch'))))")
    assert printed == "[]"


def test_a_name_imports_its_own_module_only_when_first_used():
    printed = _fresh("import sys, hooklab; assert 'capture' not in vars(hooklab); hooklab.capture; "
                     "from hooklab import HookScope; "
                     "print('capture' in vars(hooklab), 'hooklab.capturing' in sys.modules, "
                     "'hooklab.planner' in sys.modules, 'hooklab.course' in sys.modules)")
    assert printed == "True True False False"


def _type_checking_imports() -> dict[str, str]:
    """Name -> module, as the ``if TYPE_CHECKING:`` block of hooklab/__init__.py imports it."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    found = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            found[alias.asname or alias.name] = node.module or alias.name
    return found


def test_the_imports_type_checkers_read_are_the_table_the_lookup_uses():
    imported = _type_checking_imports()
    assert imported.pop("plot") == "plot"  # the module hooklab.plot itself
    table = dict(hooklab._HOME)
    assert table.pop("ask") == "course.asking"  # the course's lookup, not a name of the library
    assert imported == table
    assert sorted(hooklab.__all__) == sorted(table)


@pytest.mark.parametrize("name", hooklab.__all__)
def test_every_public_name_resolves_to_what_its_module_defines(name):
    module = importlib.import_module(f"hooklab.{hooklab._HOME[name]}")
    assert getattr(hooklab, name) is getattr(module, name)
    assert name in dir(hooklab)
    value = getattr(hooklab, name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert value.__module__.startswith("hooklab."), value.__module__


def test_star_import_gives_every_public_name_and_an_unknown_name_says_so():
    namespace: dict[str, object] = {}
    exec("from hooklab import *", namespace)  # noqa: S102
    assert set(hooklab.__all__) <= set(namespace)
    assert "ask" in dir(hooklab) and "plot" in dir(hooklab)
    with pytest.raises(AttributeError, match="module 'hooklab' has no attribute 'captures'"):
        hooklab.captures  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name 'captures'"):
        exec("from hooklab import captures", {})  # noqa: S102
    assert hooklab.plot is importlib.import_module("hooklab.plot") and hooklab.offload.SaveOnCpu is hooklab.SaveOnCpu
