"""``python -m tools.profiles [--only SLUG ...] [--write | --check] [--with LIB==X]``: :mod:`tools.profiles.generate`;
``python -m tools.profiles programs [--check]``: :mod:`tools.profiles.programs`."""
import sys

if sys.argv[1:2] == ["programs"]:
    from .programs import main as programs_main
    raise SystemExit(programs_main(sys.argv[2:]))
from .generate import main

raise SystemExit(main())
