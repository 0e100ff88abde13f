"""The course's tools: what ``./course`` runs (``python -m tools.PACKAGE[.MODULE]`` from the repository root) and the
tests import (``from tools.classroom import workcopies``). One package per subsystem, in floors: a package imports
the packages on the floors below it and ``hooklab``, never one above (ARCHITECTURE.md draws it).

1. ``notebooks``: the notebooks' own tooling (regeneration, run times, the kernel, CPU shims, their imports);
2. the generated knowledge systems, each its data file + generator + page + regeneration test: ``messages`` (hook
   messages and the symptom index), ``hook_matrix`` (the hook behaviour matrix; it anchors cells as the symptom
   page does), ``atlas`` (where to hook every model of four zoos);
3. ``classroom`` (the lab, working copies, slides, handouts) and ``launch`` (the launch copies and the package);
4. ``site`` (the website: every page above) and ``rerun`` (the course re-run against another PyTorch release).

The modules' names before this layout still import and run for one release, with a note (:mod:`tools._moved`).
The notebook files' format (reading, headings, language tags) is :mod:`hooklab.course.notebook`'s.
"""
from ._moved import install as _install_moved_names

_install_moved_names()
