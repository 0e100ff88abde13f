"""``python -m tools.hook_matrix [generate|check|annotate|page]``: :mod:`tools.hook_matrix.generate`;
``python -m tools.hook_matrix programs``: each unusual cell as a program (:mod:`tools.hook_matrix.programs`)."""
import os
import sys

if sys.argv[1:2] == ["programs"]:
    os.environ.setdefault("PYTHONHASHSEED", "0")
    from .programs import main as programs_main

    raise SystemExit(programs_main(sys.argv[2:]))
from .generate import main

raise SystemExit(main())
