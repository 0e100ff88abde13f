"""The hook behaviour matrix (notebook 17): every hook family of PyTorch under every way code runs. Its data file is
``docs/hook_matrix.json``; ``generate`` runs the probes of ``hooklab.course.hook_matrix`` and writes it
(``python -m tools.hook_matrix``), ``notes.toml`` is what the course says about each cell, ``page`` is the site's
page, ``programs`` writes each unusual cell as a program that runs on its own (``docs/programs/matrix.json``,
``python -m tools.hook_matrix programs``; the workaround strategies tried on them are ``fixes.toml``), and tests/tools/test_hook_matrix.py regenerates a
sample and compares. "Matrix" in the course means this and
nothing else. It imports ``hooklab`` and ``tools.messages`` (the symptom index's cell anchors); the site imports its
page and the re-run (``tools.rerun``) runs its check as a command.
"""
