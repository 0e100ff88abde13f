"""``python -m tools.ask [--write]``: see :mod:`tools.ask.index`."""
import sys

from .index import main

sys.exit(main())
