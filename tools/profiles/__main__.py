"""``python -m tools.profiles [--only SLUG ...] [--write | --check] [--with LIB==X]``: :mod:`tools.profiles.generate`."""
from .generate import main

raise SystemExit(main())
