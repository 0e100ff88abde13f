"""``python -m tools.hook_matrix [check|annotate|page]``: :mod:`tools.hook_matrix.generate`."""
from .generate import main

raise SystemExit(main())
