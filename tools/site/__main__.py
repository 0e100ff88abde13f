"""``python -m tools.site``: :mod:`tools.site.build`."""
from .build import main

raise SystemExit(main())
