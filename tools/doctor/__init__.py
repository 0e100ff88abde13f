"""The doctor's population: ``hooklab.explain_hook`` measured on generated setups with observed truth, as the
behaviour matrix is built. ``setups`` composes a setup from five factors (what the hook is on, what happens between
registering and the step, how the model runs, what the hook does, what the module returns) and records what fired
with counters inside the hooks themselves; ``generate`` writes docs/doctor_population.json (``python -m
tools.doctor``), draws the held-out part once (docs/doctor_heldout.json) and measures the doctor against the
population's cause classes (``grade``); tests/tools/test_doctor_population.py regenerates a sample and compares.
It imports ``hooklab`` only.
"""
