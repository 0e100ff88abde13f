"""The classroom: ``lab`` (``./course lab``) and ``workcopies`` (``./course reset``: the learner's working copies),
``slides`` and ``handout`` (``./course slides`` / ``./course handout``: reveal.js decks and print-ready pages) and
``vendor`` (reveal.js, fetched once from the npm registry) and ``panel`` (honest answers to the exercises, written from
the notebooks alone, and ``panel.measure``, which puts them through the checkers). It imports ``hooklab.course`` and
``tools.notebooks``;
the site runs its slides and handouts as commands, and nothing else imports it.
"""
