"""``python -m tools.rerun --torch X ...``: :mod:`tools.rerun.command`."""
import sys

from .command import main

raise SystemExit(main(sys.argv[1:]))
