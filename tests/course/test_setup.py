"""hooklab.course.setup(): what it changes process-wide, checked before changing anything, and put back."""
import random
import warnings

import pytest
import torch

import hooklab.course
from process_state import restored, snapshot


def test_setup_seeds_and_fixes_threads(capsys, setup_undone):
    hooklab.course.setup(seed=123)
    a, r = torch.rand(3), random.random()
    hooklab.course.setup(seed=123)
    assert torch.equal(a, torch.rand(3)) and r == random.random()
    assert torch.get_num_threads() == 1
    assert "seed=123" in capsys.readouterr().out


def test_setup_makes_figures_png(setup_undone):
    import graphviz
    import matplotlib
    hooklab.course.setup(verbose=False)
    assert set(graphviz.Digraph()._repr_mimebundle_()) == {"image/png"}
    assert matplotlib.rcParams["figure.dpi"] == 80


def test_setup_leaves_matplotlib_unimported_and_sets_it_up_at_its_first_import():
    """Most notebooks never plot: setup() does not import matplotlib (about 1 s of CPU), and the settings still apply
    when a later cell imports it (in a fresh interpreter, where matplotlib is not yet imported)."""
    import subprocess
    import sys
    code = ("import sys; import hooklab.course as c; c.setup(verbose=False); print('matplotlib' in sys.modules); "
            "import matplotlib.pyplot; print(matplotlib.rcParams['figure.dpi']); c.setup(verbose=False); "
            "print(sum(type(f).__name__ == '_SettingsOnImport' for f in sys.meta_path))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "80.0", "0"]


@pytest.mark.parametrize("kwargs, error, message", [
    ({"seed": "0"}, TypeError, "seed must be an int"),
    ({"seed": True}, TypeError, "seed must be an int"),
    ({"seed": -1}, ValueError, "seed must be between 0 and 4294967295"),
    ({"threads": 0}, ValueError, "threads must be >= 1"),
    ({"threads": True}, TypeError, "threads must be an int"),
    ({"threads": 2.0}, TypeError, "threads must be an int"),
    ({"precision": -3}, ValueError, "precision must be >= 0"),
    ({"precision": "x"}, TypeError, "precision must be an int"),
    ({"verbose": "no"}, TypeError, "verbose must be True or False"),
    ({"seed": 5, "threads": 2, "verbose": 1}, TypeError, "verbose"),   # the last argument is bad: nothing changes
])
def test_setup_checks_every_argument_before_changing_anything(kwargs, error, message, setup_undone):
    torch.manual_seed(7)
    before = snapshot()
    with pytest.raises(error, match=message):
        hooklab.course.setup(**kwargs)
    assert snapshot() == before


def test_process_state_restored_puts_back_everything_setup_changes():
    before = snapshot()
    with restored():
        hooklab.course.setup(seed=99, threads=torch.get_num_threads() + 1, precision=1, verbose=False)
        warnings.filterwarnings("ignore", message="only in this test")
        changed = snapshot()
    assert {k for k in before if changed[k] != before[k]} >= {"threads", "print options", "warning filters",
                                                             "initial seed", "torch rng", "random", "numpy"}
    assert snapshot() == before


