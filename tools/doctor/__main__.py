"""``python -m tools.doctor [check|draw|measure]``: :mod:`tools.doctor.generate`. It exits without waiting for
threads left behind (torch.compile's workers), which would keep the process alive."""
import os
import sys

from .generate import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
