"""The course's tools: what ``./course`` runs (``python -m tools.NAME`` from the repository root) and the tests import
(``from tools import workcopies``). A package, so its modules import each other without touching ``sys.path``.

- ``lab`` (``./course lab``) and ``workcopies`` (``./course reset``: the learner's working copies);
- ``regen`` (``./course regen``), ``nbbuild`` (write a notebook from Python), ``kernelspec`` (the kernel's name);
- ``site`` + ``site/`` (``./course site``), ``launch`` (the launch copies; what their cell installs:
  ``notebook_imports``), ``launch_check`` + ``launch_check_runner`` (the copies run as Colab would),
  ``package_page`` (the PyPI page's links, the README's package sizes), ``symptoms`` (the symptom index),
  ``hook_messages`` (every hook message of the pinned packages: the index's denominator; its parts
  ``hook_messages_python`` / ``_cpp`` (reading the sources), ``_families`` (sorting), ``_text`` (ids and patterns),
  ``_status`` (cells, triggers, excuses and their attempts), ``_data`` (the data file)), ``runtimes``
  (docs/runtimes.toml), ``pinned_links`` (links to the pinned release);
- ``slides``, ``handout`` and ``vendor`` (``./course slides`` / ``handout``; reveal.js, fetched once);
- ``matrix``, ``matrix_run``, ``matrix_report`` (``./course matrix``), ``matrix_ahead`` (the weekly runs ahead of the
  lock), ``matrix_hooks`` (its part for the hook behaviour matrix), ``hook_matrix`` + ``hook_matrix_page`` (the
  hook behaviour matrix: docs/hook_matrix.json and the site's page);
- ``train_induction_lm`` (notebook 12's small model);
- ``cpu_shims`` (libraries a notebook's kernel preloads in the scalar and shifted CPU configurations, conftest.py).

The notebook files' format (reading, headings, language tags) is :mod:`hooklab.course.notebook`'s.
"""
