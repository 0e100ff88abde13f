"""``python -m tools.atlas run|write|diff``: :mod:`tools.atlas.generate`."""
from .generate import main

raise SystemExit(main())
