"""Reference solutions and hints of the exercises, one module per notebook (``nb00.py``, ...).

Each module has a ``HINTS`` table ``{key: (zh, en)}`` and, per exercise, a section of real code that starts
with a line ``# [NN.K]``: what ``course.solution(key)`` shows, and what the tests run as a learner's answer.
A section runs on its own in a notebook that has ``torch``, ``nn``, ``hooklab`` and ``course`` imported.
"""
