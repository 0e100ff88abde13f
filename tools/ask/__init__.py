"""The lookup behind ``course.ask``: the index of every place in the course a question can land on (sections,
symptom cells, explained messages, unusual behaviour-matrix cells; recipes and library profiles when they land).

Owns the generator (:mod:`tools.ask.index`) of the shipped index ``hooklab/course/assets/ask/index.json``; the
lookup itself is :mod:`hooklab.course.asking`, in the package, so that it works offline wherever hooklab is installed.
Reads the notebooks, the recipes and ``docs/``; it may import ``hooklab.course`` (the lookup's own tokens, the
notebook format) and the standard library, nothing else of ``tools``.
"""
