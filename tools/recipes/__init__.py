"""The recipes: real questions practitioners ask, each answered by running code.

Owns the bank of questions (``recipes/bank/*.jsonl``, :mod:`tools.recipes.bank`: load, check against the written
method in ``recipes/METHOD.md``, draw the held-out part once). Imports only the standard library.
"""
