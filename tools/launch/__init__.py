"""The launch copies and the package: ``copies`` (the notebooks' launch copies for Colab and Binder, with the cell
that installs what they import; ``python -m tools.launch``), ``check`` + ``check_runner`` (the copies run in a fresh
environment as Colab runs them), ``package_page`` (the PyPI page's links, the README's package sizes) and
``pinned_links`` (links to the pinned release). It imports ``tools.notebooks``; the site imports ``copies``.
"""
