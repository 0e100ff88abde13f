"""The leak harness's first look after a check (``Namespaces.any_grown``) against its full answer: a new note of every
module and class compared with the one taken before (``Namespaces(...).grown(before)``, what the harness asks when
the first look says yes). Where the full answer finds growth the first look must say yes; where it finds none, no."""
import sys
import types

import pytest

from hooklab.course.exercises._namespaces import Namespaces

LEARNER_FILE = "/learner/notebook_cell.py"


def is_learner_file(filename: str) -> bool:
    return filename == LEARNER_FILE


@pytest.fixture
def modules():
    """A learner's module (its file is the learner's) and a library's, in sys.modules for the test only."""
    learner, library = types.ModuleType("hooklab_test_learner"), types.ModuleType("hooklab_test_library")
    learner.__file__, library.__file__ = LEARNER_FILE, "/site-packages/hooklab_test_library.py"
    learner.history, library.cache = [], {}
    sys.modules.update({learner.__name__: learner, library.__name__: library})
    try:
        yield learner, library
    finally:
        del sys.modules[learner.__name__], sys.modules[library.__name__]


def agree(before: Namespaces) -> bool:
    """The first look and the full answer, which must agree; the first look's answer."""
    full = bool(Namespaces(is_learner_file).grown(before))
    assert before.any_grown() == full
    return full


@pytest.mark.timeout(120)
def test_the_first_look_says_what_a_full_note_says(modules):
    learner, library = modules
    before = Namespaces(is_learner_file)
    assert not agree(before)                  # nothing changed
    library.cache["seen"] = 1                 # a library's own container grows as it works: not looked at
    assert not agree(before)
    learner.history.append(1)                 # a container of the learner's grows
    assert agree(before)
    learner.history.clear()
    before = Namespaces(is_learner_file)
    library.kept_by_the_answer = []           # a module's attribute dict gains a name
    assert agree(before)
    del library.kept_by_the_answer
    before = Namespaces(is_learner_file)
    learner.history = None                    # a container of the learner's replaced by something that is not one
    assert not agree(before)


def test_a_global_that_torch_compile_installed_and_removes_is_no_patch_of_the_answer():
    """torch.compile puts ``__compiled_fn_*`` (and ``__resume_at_*``, ``__import_*``) into the module of each frame it
    compiles, and deletes them when that compiled code is freed: in one order of the gate an earlier test's compiled
    planner code was collected during a check, and the answer was told it had replaced a function of the course."""
    import hooklab.planner.alternatives as alternatives

    name = "__compiled_fn_1_0123"
    alternatives.__dict__[name] = lambda *args: None  # as Dynamo's install_global puts it there
    try:
        before = Namespaces(is_learner_file)
        del alternatives.__dict__[name]  # as its cleanup removes it
        assert before.put_back() == [] and name not in alternatives.__dict__
    finally:
        alternatives.__dict__.pop(name, None)


@pytest.mark.timeout(120)
def test_a_library_first_imported_during_the_check_is_no_growth_of_the_answer(modules):
    """Run alone in a fresh interpreter, exercise 11.3's reference solution was called wrong: its check first imported
    ``torch._dynamo``, whose ``_compilation_metrics`` (a deque of at most 64) then grew from one check to the next and
    was taken for a name the answer had added. A library module that was not there before the first check is the
    library's; a name added to a module that was there, or a learner's container, still counts."""
    learner, library = modules
    first = Namespaces(is_learner_file)               # before the first check
    imported = types.ModuleType("hooklab_test_imported_by_the_check")
    imported.__file__, imported.metrics = "/site-packages/hooklab_test_imported_by_the_check.py", [1]
    sys.modules[imported.__name__] = imported          # the first check imports a library
    library.history_added_by_the_answer = [1]          # and the answer adds a name to a module that was there
    try:
        after_one = Namespaces(is_learner_file)
        imported.metrics.append(2)                     # the second check: both grow, and a learner's container
        library.history_added_by_the_answer.append(2)
        learner.history.append(1)
        grown = {where for where, _, _ in Namespaces(is_learner_file).grown(after_one, first)}
        assert grown == {"hooklab_test_library.history_added_by_the_answer", "hooklab_test_learner.history"}, grown
    finally:
        del sys.modules[imported.__name__], library.history_added_by_the_answer
