"""``python -m tools.launch``: write the launch copies (:mod:`tools.launch.copies`)."""
from .copies import main

raise SystemExit(main())
