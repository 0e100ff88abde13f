"""The test gate: what ``./course test`` runs on a push, and why, within a fixed budget of time.

A **check** is one thing pytest runs as a whole, with one cost and one record: a test file
(``tests/library/test_zoo.py``), a module's docstring examples (``hooklab/capturing.py``), a notebook under one CPU
configuration (``notebooks/07_activation_checkpointing.ipynb``, ``...ipynb[scalar-cpu]``), a recipe notebook
likewise, or one member of a population (one recipe run alone: ``tests/course/test_recipes_alone.py::tensor-hooks-03``).

On a push (``./course test``) every check falls in one tier (:mod:`tools.gate.plan`):

- ``fast``: the tests of the library, the course, the messages and the tools that cost little, and every docstring
  example: always;
- ``notebooks``: every course notebook under the machine's own CPU kernels: always;
- ``touched``: every check whose inputs changed since it last passed in full (:mod:`tools.gate.record`: the hash of
  its own file and of every repository file it was seen to run or read, :mod:`tools.gate.trace`), run in full;
- ``rotation``: the rest of the checks (the scalar-kernel pass, recipe notebooks, the slow probes, the site and the
  browser, launch copies, regeneration samples), in 4 parts (the measured ones balanced by cost, one not measured
  yet by its id's hash: :func:`tools.gate.plan.rotation_parts`), one part per commit (the commit's
  number in the history, modulo 4), so that any 4 consecutive commits run every one;
- ``sample``: of a population's members (the recipes run alone), a few drawn with the commit, besides those touched.

``./course test --all`` runs everything, every population whole and every sweep its ``=all`` switch turns on (what
the weekly workflow runs, in shards: ``--shard i/N``). ``./course test PATH ...`` runs what is named. A run writes,
for each check it ran in full and that passed, the hash it passed at (``tests/gate/passed.json``): commit it with the
change, and the next push knows what that change touched.

The verdict must not depend on what ran before a test on its worker (``./course test --order SEED`` shuffles the
files and the tests inside each). One thing a test leaves cannot be undone: once a compiled backward has started
autograd's worker threads, a fork of that process cannot run autograd; the tests that need one then run in a fresh
interpreter (:mod:`tools.gate.fresh`).

It owns ``./course test``'s planning and ``tests/gate/``; it may import the floors below (``tools.recipes`` reads the
recipes a population is made of, ``tools.notebooks`` what a notebook imports) and ``hooklab``, and nothing imports it
but the root ``conftest.py`` (a population's sample when pytest runs without a plan).

>>> from tools.gate.plan import PARTS
>>> PARTS
4
"""
