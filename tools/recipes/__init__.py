"""The recipes: real questions practitioners ask, each answered by running code.

Owns the bank of questions (``recipes/bank/*.jsonl``; :mod:`tools.recipes.bank` loads it, checks it against the
written method in ``recipes/METHOD.md`` and draws the held-out part once) and :mod:`tools.recipes.measure` (how often
``course.ask`` puts the right recipe in its first three answers). The recipes themselves are notebooks in ``recipes/``,
validated by nbval like the course's. It may import ``hooklab.course`` and ``tools.ask`` (the index it measures).
"""
