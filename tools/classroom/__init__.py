"""The classroom: ``lab`` (``./course lab``) and ``workcopies`` (``./course reset``: the learner's working copies),
``slides`` and ``handout`` (``./course slides`` / ``./course handout``: reveal.js decks and print-ready pages) and
``vendor`` (reveal.js, fetched once from the npm registry). It imports ``hooklab.course`` and ``tools.notebooks``;
the site runs its slides and handouts as commands, and nothing else imports it.
"""
