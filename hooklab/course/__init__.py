"""Course-only code: what the notebooks need and a training script does not.

``import hooklab`` gives the library (hooks, recorders, offloading, clipping); it imports nothing
from here and changes no process-wide setting. The notebooks start with::

    import hooklab
    from hooklab import course
    course.setup()                  # seeds, one thread, print options, PNG figures (process-wide!)
    ...
    course.check("01.1", answer)    # exercise checkers, hints and reference solutions
    course.attempt(lambda: ...)     # show an error or a warning in one stable line
    course.ask("pasted error or your own words")   # the cells, symptoms and matrix cells that explain it

and ``python -m hooklab.course export --lang zh|en`` writes one-language copies of them; ``python -m hooklab.course
ask "…"`` is :func:`ask` from a shell.
:mod:`hooklab.course.hook_matrix` holds the probes of the hook behaviour matrix (notebook 17, ``tools/hook_matrix/generate.py``).

hooklab alone is enough for ``setup``, ``check``, ``hint``, ``solution`` and ``attempt`` (they need torch only).
The one-language export (``export_notebook(s)``, nbformat and nbconvert), notebook 12's model
(:mod:`hooklab.course.induction`, transformers and safetensors) and the checks of exercises 04.3 (torchvision) and
12.x (transformers) need the ``course`` extra: they are imported when first used, and when missing say how to add it
to the installation at hand (:func:`install_command`).
"""
from __future__ import annotations

from typing import Any

from .asking import ask
from .atlas_lookup import atlas
from .attempt import attempt
from .env import setup
from .exercises import check, hint, solution
from .lang import course_language
from .profiles import profile, profiles

__all__ = ["ask", "atlas", "attempt", "check", "course_language", "export_notebook", "export_notebooks", "hint",
           "profile", "profiles", "setup", "solution"]

_LAZY = {"export_notebook": "export", "export_notebooks": "export"}


def install_command(extra: str = "course") -> str:
    """The ``pip install`` that adds ``extra`` to this installation of hooklab: from where it was installed (a git
    repository at its commit, a folder of a clone, a wheel), as pip recorded it (``direct_url.json``, PEP 610); from
    the package index when it came from there. hooklab is not on the index yet: until it is, only the first kinds
    exist, and the command for them works.

    >>> install_command().startswith("pip install ")
    True
    """
    import json
    from importlib import metadata

    origin = None
    for found in metadata.distributions(name="hooklab"):  # a checkout's hooklab.egg-info records no origin
        recorded = found.read_text("direct_url.json")
        if recorded:
            try:
                origin = json.loads(recorded)
            except ValueError:
                continue
            break
    if not isinstance(origin, dict) or not isinstance(origin.get("url"), str):
        return f'pip install "hooklab[{extra}]"'
    url, vcs = origin["url"], origin.get("vcs_info")
    if isinstance(vcs, dict):
        commit = vcs.get("commit_id")
        return f'pip install "hooklab[{extra}] @ git+{url}' + (f"@{commit}" if commit else "") + '"'
    if url.startswith("file://") and origin.get("dir_info", {}).get("editable"):
        return f'pip install -e "{url[len("file://"):]}[{extra}]"'
    return f'pip install "hooklab[{extra}] @ {url}"'


def needs_course_extra(exc: ImportError, what: str) -> ImportError:
    """The error for a course feature whose optional dependency is missing: it names the install that adds it."""
    missing = exc.name or str(exc)
    error = ImportError(f"{what} needs {missing}, which is not installed: it comes with the course's extra, "
                        f"{install_command()}", name=exc.name)
    return error


def __getattr__(name: str) -> Any:  # PEP 562: the export (nbformat, nbconvert) is imported when first asked for
    if name in _LAZY:
        import importlib
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
