"""The course re-run against another PyTorch release (``./course rerun``): ``command`` builds a side environment
with that release and runs hooklab's tests, every cell of the hook behaviour matrix and every notebook there
(``python -m tools.rerun``); ``execute`` runs notebooks inside it; ``compare`` compares their outputs with the
committed ones as nbval does, ``claims`` finds the prose a change touches, ``report`` writes the report; ``matrix_cells`` is the part for the behaviour matrix; ``ahead``
plans the weekly runs ahead of the lock (.github/workflows/rerun.yml) and sums them up. A top floor: it imports
``tools.notebooks`` and the atlas's pages, and runs the matrix and the atlas as commands; nothing imports it.
"""
