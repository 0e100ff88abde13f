"""The hook messages and the symptom index: ``hook_messages`` reads every hook message of the pinned packages into
``docs/hook_messages.json`` (with ``docs/hook_messages.toml``, the triage), ``symptoms`` collects the notebooks'
symptom cells into the symptom index and its site page (with ``docs/silent_symptoms.toml``), and ``records`` is what
both read of a message record (its source, family and the coverage). tests/messages/ and tests/tools/test_symptoms.py
regenerate and compare. It imports only ``hooklab.course``; the hook matrix, the site and the re-run import it.
"""
