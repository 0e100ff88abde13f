"""Notebook 06's checkers accept right answers written differently and reject the typical wrong ones."""
import contextlib
import gc
import os
import sys
import tempfile
import uuid
import weakref

import pytest
import torch
from torch.autograd.graph import saved_tensors_hooks

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict
from hooklab.course.exercises import _support


@pytest.fixture(autouse=True)
def no_stray_files_or_warnings(tmp_path, monkeypatch):
    """No checker leaves a file or directory behind, and nothing is printed from a __del__."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the checkers' temp dirs land here
    ignored = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda info: ignored.append(repr(info.exc_value))
    try:
        with _support.collector_sees_only_new_objects():  # the collection looks at what this test made
            yield
            gc.collect()
    finally:
        sys.unraisablehook = previous
    # torch.compile's cache folder (torchinductor_<user>) is made lazily in the temp dir by whichever test on this
    # worker compiles first: it is torch's, not a checker's
    left = [name for name in os.listdir(tmp_path) if not name.startswith("torchinductor_")]
    assert left == [], "a checker left something in the temp dir"
    assert not ignored, f"exceptions ignored in __del__ outside the checker: {ignored}"


# ---- 06.1 bytes of activations ----------------------------------------------------------------

def bytes_with_dict_of_storages(model, x):
    skip = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers(), x)}
    sizes = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            sizes[storage.data_ptr()] = storage.nbytes()
        return t.detach()

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(sizes.values())


def bytes_with_numel_and_a_class(model, x):
    class Counter:
        def __init__(self):
            self.seen, self.total = set(), 0
            self.skip = {p.untyped_storage().data_ptr() for p in model.state_dict().values()}
            self.skip.add(x.untyped_storage().data_ptr())

        def pack(self, t):
            key = t.untyped_storage().data_ptr()
            if key not in self.skip and key not in self.seen:
                self.seen.add(key)
                self.total += t.numel() * t.element_size()
            return t.detach()

    counter = Counter()
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        model(x)
    return torch.tensor(counter.total)  # a 0-d integer tensor is accepted too


def bytes_without_dedup(model, x):
    skip = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers(), x)}
    total = [0]

    def pack(t):
        if t.untyped_storage().data_ptr() not in skip:
            total[0] += t.untyped_storage().nbytes()
        return t.detach()

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total[0]


def bytes_counting_the_input(model, x):
    skip = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    seen = {}

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in skip:
            seen[key] = t.untyped_storage().nbytes()
        return t.detach()

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(seen.values())


def bytes_counting_buffers(model, x):
    skip = {t.untyped_storage().data_ptr() for t in (*model.parameters(), x)}
    seen = {}

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in skip:
            seen[key] = t.untyped_storage().nbytes()
        return t.detach()

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(seen.values())


def elements_not_bytes(model, x):
    skip = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers(), x)}
    seen = {}

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in skip:
            seen[key] = t.numel()
        return t.detach()

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(seen.values())


def bytes_pack_returns_the_tensor(model, x):
    skip = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers(), x)}
    seen = {}

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in skip:
            seen[key] = t.untyped_storage().nbytes()
        return t  # the tutorial's pack hook: a cycle when an op saves its own output

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(seen.values())


def bytes_as_a_float_tensor(model, x):
    return torch.tensor(float(bytes_with_dict_of_storages(model, x)))


def bytes_params_by_identity(model, x):
    # `is` against the parameter objects: a Linear saves the view weight.t(), a new object, which slips through
    known = [x, *model.parameters(), *model.buffers()]
    sizes = {}

    def pack(t):
        if not any(t is k for k in known):
            sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t.detach()

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(sizes.values())


def bytes_forward_after_the_block(model, x):
    skip = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers(), x)}
    sizes = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in skip:
            sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t.detach()

    hooks = saved_tensors_hooks(pack, lambda t: t)
    with hooks:
        out = None
    out = model(x)  # the block has already ended
    del out
    return sum(sizes.values())


def bytes_unpack_returns_the_record(model, x):
    skip = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers(), x)}
    sizes = {}

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in skip:
            sizes[key] = t.untyped_storage().nbytes()
        return {"tensor": t.detach(), "key": key}

    with saved_tensors_hooks(pack, lambda record: record):  # the record, not record["tensor"]
        model(x)
    return sum(sizes.values())


def bytes_hooks_left_open(model, x):
    hooks = saved_tensors_hooks(lambda t: t.detach(), lambda t: t)
    hooks.__enter__()  # never exited
    return bytes_with_dict_of_storages(model, x)


@pytest.mark.parametrize("answer", [run_solution("06.1")["saved_activation_bytes"], bytes_with_dict_of_storages,
                                    bytes_with_numel_and_a_class])
def test_06_1_accepts_right_answers(answer):
    assert verdict("06.1", answer) == "correct"


@pytest.mark.parametrize("answer, reason", [
    (bytes_without_dedup, "byte-count"), (bytes_counting_the_input, "byte-count"),
    (bytes_counting_buffers, "byte-count"), (elements_not_bytes, "byte-count"),
    (bytes_pack_returns_the_tensor, "reference-cycle"), (bytes_as_a_float_tensor, "tensor-not-int"),
    (1234, "not-a-function"), (bytes_params_by_identity, "parameters-counted"),
    (bytes_forward_after_the_block, "forward-outside-hooks"), (bytes_unpack_returns_the_record, "unpack-not-tensor"),
])
def test_06_1_rejects_wrong_answers(answer, reason):
    assert judged("06.1", answer) == ("wrong", reason)


def test_06_1_rejects_hooks_left_active_and_the_check_ends_them():
    assert not _support.saved_tensor_hooks_active()
    status, _, en, reason = hooklab.course.exercises.verdict("06.1", bytes_hooks_left_open, strict=True)
    assert (status, reason) == ("wrong", "saved-hooks-left") and "still active after your function returned" in en
    assert not _support.saved_tensor_hooks_active()  # the check popped what the answer left on the stack


def test_06_1_blank_start_is_not_solved():
    def saved_activation_bytes(model, x):
        pass
    assert verdict("06.1", saved_activation_bytes) == "not solved"
    assert verdict("06.1", None) == "not solved"


# ---- 06.2 disk hooks ----------------------------------------------------------------------------

def disk_hooks_with_finalize(directory, min_bytes):
    counter = iter(range(10**9))

    class OnDisk:
        def __init__(self, t):
            self.path = os.path.join(directory, f"{next(counter)}.pt")
            torch.save(t, self.path)  # raises before the finalizer exists when the write fails
            weakref.finalize(self, os.remove, self.path)

    def pack(t):
        if t.nbytes >= min_bytes:
            return OnDisk(t.detach())
        return t.detach()

    def unpack(packed):
        return torch.load(packed.path, weights_only=True) if isinstance(packed, OnDisk) else packed

    return pack, unpack


def disk_hooks_tolerant_del(directory, min_bytes):
    class SelfDeletingTempFile:
        def __init__(self):
            self.name = os.path.join(directory, str(uuid.uuid4()))

        def __del__(self):
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.name)

    def pack(t):
        if t.numel() * t.element_size() < min_bytes:
            return t.detach()
        temp_file = SelfDeletingTempFile()
        torch.save(t.detach(), temp_file.name)
        return temp_file

    def unpack(packed):
        if isinstance(packed, SelfDeletingTempFile):
            return torch.load(packed.name, weights_only=True)
        return packed

    return [pack, unpack]  # a list is fine too


def _tutorial_like(directory, min_bytes, *, big, remove=os.remove, small=lambda t: t.detach(),
                   unpack_deletes=False):
    """The tutorial's threshold version with one thing changed by each caller."""
    class SelfDeletingTempFile:
        def __init__(self):
            self.name = os.path.join(directory, str(uuid.uuid4()))

        def __del__(self):
            remove(self.name)

    def pack(t):
        if not big(t):
            return small(t)
        temp_file = SelfDeletingTempFile()
        torch.save(t.detach(), temp_file.name)
        return temp_file

    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        t = torch.load(packed.name, weights_only=True)
        if unpack_deletes:
            os.remove(packed.name)
        return t

    return pack, unpack


def disk_hooks_unguarded_del(directory, min_bytes):
    # the tutorial's order: the object exists before torch.save, so a failed write leaves a __del__ that raises
    return _tutorial_like(directory, min_bytes, big=lambda t: t.numel() * t.element_size() >= min_bytes)


def disk_hooks_threshold_in_elements(directory, min_bytes):
    return _tutorial_like(directory, min_bytes, big=lambda t: t.numel() >= min_bytes,
                          remove=lambda name: os.path.exists(name) and os.remove(name))


def disk_hooks_strict_threshold(directory, min_bytes):
    return _tutorial_like(directory, min_bytes, big=lambda t: t.numel() * t.element_size() > min_bytes,
                          remove=lambda name: os.path.exists(name) and os.remove(name))


def disk_hooks_small_tensor_returned_itself(directory, min_bytes):
    return _tutorial_like(directory, min_bytes, big=lambda t: t.numel() * t.element_size() >= min_bytes,
                          remove=lambda name: os.path.exists(name) and os.remove(name), small=lambda t: t)


def disk_hooks_delete_on_unpack(directory, min_bytes):
    return _tutorial_like(directory, min_bytes, big=lambda t: t.numel() * t.element_size() >= min_bytes,
                          remove=lambda name: os.path.exists(name) and os.remove(name), unpack_deletes=True)


def disk_hooks_never_delete(directory, min_bytes):
    def pack(t):
        if t.numel() * t.element_size() < min_bytes:
            return t.detach()
        name = os.path.join(directory, str(uuid.uuid4()))
        torch.save(t.detach(), name)
        return name

    return pack, lambda packed: packed if isinstance(packed, torch.Tensor) else torch.load(packed, weights_only=True)


def disk_hooks_a_context_not_a_pair(directory, min_bytes):
    return hooklab.SaveOnDisk(min_bytes=min_bytes, directory=directory)


def disk_hooks_without_threshold(directory, min_bytes):
    return _tutorial_like(directory, min_bytes, big=lambda t: True,
                          remove=lambda name: os.path.exists(name) and os.remove(name))


def disk_hooks_pack_raises_on_big_tensors(directory, min_bytes):
    def pack(t):
        if t.numel() * t.element_size() >= min_bytes:
            raise ValueError("too big")
        return t.detach()
    return pack, lambda t: t


def disk_hooks_unpack_raises(directory, min_bytes):
    def unpack(packed):
        raise KeyError("nothing to unpack")
    return run_solution("06.2")["make_disk_hooks"](directory, min_bytes)[0], unpack


def disk_hooks_unpack_gives_zeros(directory, min_bytes):
    pack, unpack = run_solution("06.2")["make_disk_hooks"](directory, min_bytes)
    return pack, lambda packed: torch.zeros_like(unpack(packed))


def disk_hooks_delete_on_second_unpack(directory, min_bytes):
    # the file goes when backward (the second unpack) has read it: a graph dropped without backward keeps its files
    reads = {}

    def pack(t):
        if t.numel() * t.element_size() < min_bytes:
            return t.detach()
        name = os.path.join(directory, str(uuid.uuid4()))
        torch.save(t.detach(), name)
        return name

    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        t = torch.load(packed, weights_only=True)
        reads[packed] = reads.get(packed, 0) + 1
        if reads[packed] == 2:
            os.remove(packed)
        return t

    return pack, unpack


def disk_hooks_del_raises_after_removing(directory, min_bytes):
    class SelfDeletingTempFile:
        def __init__(self, name):
            self.name = name

        def __del__(self):
            os.remove(self.name)
            self.log.append(self.name)  # AttributeError: there is no log

    def pack(t):
        if t.numel() * t.element_size() < min_bytes:
            return t.detach()
        name = os.path.join(directory, str(uuid.uuid4()))
        torch.save(t.detach(), name)
        return SelfDeletingTempFile(name)

    return pack, lambda packed: packed if isinstance(packed, torch.Tensor) else torch.load(packed.name, weights_only=True)


def disk_hooks_fallback_forgets_cleanup(directory, min_bytes):
    # when the directory is gone it is made again, but the file written then is kept by name only: never deleted
    pack, unpack = run_solution("06.2")["make_disk_hooks"](directory, min_bytes)

    def pack_or_recreate(t):
        try:
            return pack(t)
        except RuntimeError:
            os.makedirs(directory, exist_ok=True)
            name = os.path.join(directory, str(uuid.uuid4()))
            torch.save(t.detach(), name)
            return name

    return pack_or_recreate, lambda p: torch.load(p, weights_only=True) if isinstance(p, str) else unpack(p)


def disk_hooks_in_temp_files_of_their_own(directory, min_bytes):
    # mkstemp puts each file in the system's temp dir, not in `directory`
    class Spilled:
        def __init__(self, t):
            fd, self.name = tempfile.mkstemp(suffix=".pt")
            os.close(fd)
            torch.save(t, self.name)
            weakref.finalize(self, os.remove, self.name)

    def pack(t):
        return t.detach() if t.numel() * t.element_size() < min_bytes else Spilled(t.detach())

    return pack, lambda p: p if isinstance(p, torch.Tensor) else torch.load(p.name, weights_only=True)


def disk_hooks_forgot_return(directory, min_bytes):
    os.makedirs(directory, exist_ok=True)


@pytest.mark.parametrize("answer", [run_solution("06.2")["make_disk_hooks"], disk_hooks_with_finalize,
                                    disk_hooks_tolerant_del])
def test_06_2_accepts_right_answers(answer):
    assert verdict("06.2", answer) == "correct"


@pytest.mark.parametrize("answer, reason", [
    (disk_hooks_unguarded_del, "del-after-failed-write"), (disk_hooks_threshold_in_elements, "threshold-in-elements"),
    (disk_hooks_strict_threshold, "threshold-strict"), (disk_hooks_without_threshold, "file-count"),
    (disk_hooks_small_tensor_returned_itself, "reference-cycle"), (disk_hooks_delete_on_unpack, "second-unpack"),
    (disk_hooks_never_delete, "files-left-after-backward"), (disk_hooks_a_context_not_a_pair, "not-a-pair"),
    (disk_hooks_pack_raises_on_big_tensors, "pack-raised"), (disk_hooks_unpack_raises, "unpack-raised"),
    (disk_hooks_unpack_gives_zeros, "gradients-differ"), (disk_hooks_delete_on_second_unpack, "files-left-after-drop"),
    (disk_hooks_del_raises_after_removing, "del-raised"),
    (disk_hooks_fallback_forgets_cleanup, "files-left-after-failed-write"),
    (disk_hooks_forgot_return, "returned-none"), (disk_hooks_in_temp_files_of_their_own, "wrong-directory"),
])
def test_06_2_rejects_wrong_answers(answer, reason):
    assert judged("06.2", answer) == ("wrong", reason)


def test_06_2_a_wrong_answer_with_a_fragile_del_prints_nothing_afterwards(capsys):
    # the tutorial's __del__ and a threshold in elements: rejected, and no "Exception ignored" line appears
    # (the fixture also fails the test if anything is raised from a __del__ after the checker returned)
    def answer(directory, min_bytes):
        return _tutorial_like(directory, min_bytes, big=lambda t: t.numel() >= min_bytes)
    assert judged("06.2", answer) == ("wrong", "threshold-in-elements")
    gc.collect()
    assert capsys.readouterr().err == ""


def test_06_2_says_why():
    _, zh, en, _ = hooklab.course.exercises.verdict("06.2", disk_hooks_threshold_in_elements)
    assert "elements, not bytes" in en and "元素个数" in zh
    _, _, en, _ = hooklab.course.exercises.verdict("06.2", disk_hooks_strict_threshold)
    assert "`>=`, not `>`" in en
    _, _, en, _ = hooklab.course.exercises.verdict("06.2", disk_hooks_unguarded_del)
    assert "FileNotFoundError" in en and "__del__" in en
    _, _, en, _ = hooklab.course.exercises.verdict("06.2", disk_hooks_never_delete)
    assert "files are left in `directory` after backward" in en
    _, _, en, _ = hooklab.course.exercises.verdict("06.2", disk_hooks_delete_on_unpack)
    assert "FileNotFoundError" in en


def test_06_2_blank_start_is_not_solved():
    def make_disk_hooks(directory, min_bytes):
        pass
    assert verdict("06.2", make_disk_hooks) == "not solved"
    assert verdict("06.2", None) == "not solved"


# ---- 06.3 who packs --------------------------------------------------------------------------

def test_06_3_accepts_the_recorded_counts_as_list_or_tuple():
    my_files = run_solution("06.3")["my_files"]
    assert verdict("06.3", my_files) == "correct"
    assert verdict("06.3", tuple(my_files)) == "correct"


@pytest.mark.parametrize("answer, reason", [
    ([2, 2, 3, 2], "prediction"),     # every op writes a file: the outer pair wraps the inner one
    ([0, 0, 2, 0], "prediction"),     # the outer SaveOnDisk never runs when another context is inside
    ([1, 1, 3, 0], "prediction"),     # a storage saved twice written twice
    ([1, 0, 2, 0], "prediction"),     # b: sin runs outside the disk context, but exp ran inside it
    ([1, 1, 2], "not-four-ints"),     # one missing
    ([1.0, 1.0, 2.0, 0.0], "not-four-ints"),
    ("1120", "not-four-ints"),
])
def test_06_3_rejects_wrong_predictions(answer, reason):
    assert judged("06.3", answer) == ("wrong", reason)


def test_06_3_names_the_first_wrong_snippet():
    _, _, en, _ = hooklab.course.exercises.verdict("06.3", [1, 0, 2, 0], strict=True)
    assert en.startswith("1 of 4 predictions wrong; for example snippet b:") and "is 1, you predicted 0" in en


def test_06_3_blank_start_is_not_solved():
    assert judged("06.3", []) == ("not solved", "blank")
    assert verdict("06.3", None) == "not solved"
