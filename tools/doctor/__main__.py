"""``python -m tools.doctor [check|draw|measure]``: :mod:`tools.doctor.generate`."""
from .generate import main

raise SystemExit(main())
