"""The hook messages and the symptom index: ``hook_messages`` reads every hook message of the pinned packages into
``docs/hook_messages.json`` (with ``docs/hook_messages.toml``, the triage), ``symptoms`` collects the notebooks'
symptom cells into the symptom index, and ``page`` writes the site's symptom page (with ``docs/silent_symptoms.toml``); ``hook_messages`` is
split into its parts ``hook_messages_data`` (the data file, sources and families, which ``symptoms`` reads too, so
the two never import each other in a circle), ``_python`` and ``_cpp`` (reading the sources), ``_families``,
``_status`` (cells, triggers, excuses and their attempts) and ``_text``. tests/messages/ and tests/tools/test_symptoms.py
regenerate and compare. It imports only ``hooklab.course``; the hook matrix, the site and the re-run import it.
"""
