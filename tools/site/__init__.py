"""The course's website (``./course site``, ``python -m tools.site``): ``build`` assembles each language's sources
and runs Sphinx with ``conf.py`` (its templates, static files and the TOML files beside it) and indexes the pages
for search. A top floor: it imports the pages of the knowledge systems (``tools.messages``, ``tools.hook_matrix``,
``tools.atlas``) and the launch copies, and runs the classroom's slides and handouts as commands; nothing imports it
but Sphinx's ``conf.py``.
"""
