"""The tools' module names before the subsystem packages, each with its new name, kept for one release.

``python -m tools.OLD`` prints a one-line note naming the new module on standard error, then runs the new module as
``__main__`` with the same arguments; ``import tools.OLD`` (``from tools import OLD``) gives the new module itself.
The next release removes this table (and this module). ``tools/__init__.py`` installs the finder.

>>> MOVED["matrix_ahead"]
'tools.rerun.ahead'
>>> note("matrix_ahead")
'[tools] python -m tools.matrix_ahead is now python -m tools.rerun.ahead (the old name goes in the next release)'
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import CodeType, ModuleType

MOVED = {
    # the notebooks' own tooling
    "kernelspec": "tools.notebooks.kernelspec",
    "nbbuild": "tools.notebooks.nbbuild",
    "regen": "tools.notebooks.regen",
    "runtimes": "tools.notebooks.runtimes",
    "cpu_shims": "tools.notebooks.cpu_shims",
    "notebook_imports": "tools.notebooks.imports",
    "train_induction_lm": "tools.notebooks.train_induction_lm",
    # the classroom
    "lab": "tools.classroom.lab",
    "workcopies": "tools.classroom.workcopies",
    "slides": "tools.classroom.slides",
    "handout": "tools.classroom.handout",
    "vendor": "tools.classroom.vendor",
    # the launch copies and the package
    "launch_check": "tools.launch.check",
    "launch_check_runner": "tools.launch.check_runner",
    "package_page": "tools.launch.package_page",
    "pinned_links": "tools.launch.pinned_links",
    # the hook behaviour matrix, the messages and symptoms, the atlas
    "hook_matrix_page": "tools.hook_matrix.page",
    "hook_messages": "tools.messages.hook_messages",
    "symptoms": "tools.messages.symptoms",
    "atlas_pages": "tools.atlas.pages",
    "atlas_probe": "tools.atlas.probe",
    "atlas_zoos": "tools.atlas.zoos",
    # the course re-run against another PyTorch release (was called "matrix", a word the behaviour matrix keeps)
    "matrix": "tools.rerun",
    "matrix_run": "tools.rerun.execute",
    "matrix_report": "tools.rerun.report",
    "matrix_ahead": "tools.rerun.ahead",
    "matrix_hooks": "tools.rerun.matrix_cells",
}


def note(old: str) -> str:
    """The line ``python -m tools.OLD`` prints before it runs the new module."""
    return f"[tools] python -m tools.{old} is now python -m {MOVED[old]} (the old name goes in the next release)"


class _Alias(importlib.abc.Loader):
    """Imported: the new module itself. Run with ``python -m``: the note, then the new module as ``__main__``."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the old name's spec on it

    def get_code(self, fullname: str) -> CodeType:
        old = fullname.rpartition(".")[2]
        source = (f"import runpy, sys\nprint({note(old)!r}, file=sys.stderr, flush=True)\n"
                  f"runpy.run_module({self.new!r}, run_name='__main__', alter_sys=True)\n")
        return compile(source, f"<tools.{old}: moved to {self.new}>", "exec")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != "tools" or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(MOVED[name]))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (after the path finder: a module that exists is found first)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
