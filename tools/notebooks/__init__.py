"""The notebooks' own tooling: ``regen`` (``./course regen``: execute and store outputs), ``runtimes``
(docs/runtimes.toml and each notebook's run-time line), ``kernelspec`` (the kernel's name), ``nbbuild`` (write a
notebook from Python), ``cpu_shims`` (the libraries a kernel preloads in the scalar and shifted CPU configurations),
``imports`` (what a notebook's code imports, and the distributions that provide it) and ``train_induction_lm``
(notebook 12's small model, hooklab/course/assets/induction_lm/). The ground floor of ``tools``: it imports only
``hooklab`` and third-party packages, and every other package of ``tools`` may import it.
"""
