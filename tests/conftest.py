import sys
from pathlib import Path

# broken notebooks are written by tests into tmp dirs; nothing under tests/ is a course notebook
collect_ignore_glob = ["*.ipynb"]
sys.path.insert(0, str(Path(__file__).parent))
