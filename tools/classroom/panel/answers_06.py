"""Honest answers to notebook 06's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
import weakref

import torch
from torch.autograd.graph import saved_tensors_hooks

from tools.classroom.panel import answer

# --- 06.1: count the bytes of activations one forward pass saves --------------------------------------------------


@answer("06.1", right=True)
def saved_activation_bytes_with_a_closure(model, x):
    alive_anyway = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x]}
    seen = set()
    total = [0]

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in alive_anyway and ptr not in seen:
            seen.add(ptr)
            total[0] += storage.nbytes()
        return t.detach()

    def unpack(t):
        return t

    with saved_tensors_hooks(pack, unpack):
        model(x)
    return total[0]


@answer("06.1", right=True)
def saved_activation_bytes_with_a_counter_object(model, x):
    class StorageCounter:
        def __init__(self, skip):
            self.skip = {t.untyped_storage().data_ptr() for t in skip}
            self.storages = {}

        def pack(self, t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in self.skip:
                self.storages[ptr] = t.untyped_storage().nbytes()
            return t.detach()

        def unpack(self, t):
            return t

    counter = StorageCounter([*model.parameters(), *model.buffers(), x])
    with saved_tensors_hooks(counter.pack, counter.unpack):
        out = model(x)
    del out
    return int(sum(counter.storages.values()))


@answer("06.1", mistake="count", says="adds the bytes of every saved tensor, so a storage saved by two ops (a ReLU's "
        "output saved again by the next layer) is counted twice")
def saved_activation_bytes_without_deduplication(model, x):
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x]}
    total = [0]

    def pack(t):
        if t.untyped_storage().data_ptr() not in skip:
            total[0] += t.untyped_storage().nbytes()
        return t.detach()

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total[0]


@answer("06.1", mistake="wrong-target", says="leaves out only the parameters and buffers: the input x, which the first "
        "layer saves, is counted as an activation")
def saved_activation_bytes_counting_the_input(model, x):
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    storages = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            storages[ptr] = t.untyped_storage().nbytes()
        return t.detach()

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(storages.values())


@answer("06.1", mistake="logic", says="recognises parameters by identity (`t is p`), but the pack hook receives new "
        "tensor objects (a Linear saves the view W.T), so the parameters' bytes are counted as activations")
def saved_activation_bytes_skipping_parameters_by_identity(model, x):
    params = [*model.parameters(), *model.buffers()]
    storages = {}

    def pack(t):
        if t is x or any(t is p for p in params):
            return t.detach()
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t.detach()

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(storages.values())


@answer("06.1", mistake="late-registration", says="enters the saved_tensors_hooks context and leaves it before the "
        "forward pass, so the pack hook never runs and the count is 0")
def saved_activation_bytes_counting_outside_the_context(model, x):
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x]}
    storages = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            storages[ptr] = t.untyped_storage().nbytes()
        return t.detach()

    with saved_tensors_hooks(pack, lambda t: t):
        pass
    model(x)
    return sum(storages.values())


@answer("06.1", mistake="detach-or-graph", says="the pack hook returns the tensor itself instead of t.detach(), so an "
        "op that saves its own output stores it with its grad_fn and forms a cycle that leaks when the graph is "
        "dropped without a backward")
def saved_activation_bytes_packing_without_detach(model, x):
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x]}
    storages = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            storages[ptr] = t.untyped_storage().nbytes()
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(storages.values())


@answer("06.1", mistake="detach-or-graph", says="the pack hook returns a (tensor, bytes) tuple and the unpack hook "
        "returns that tuple as it is instead of the tensor, so backward (or a read of _saved_*) gets no tensor")
def saved_activation_bytes_unpacking_the_tuple(model, x):
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x]}
    storages = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        nbytes = t.untyped_storage().nbytes()
        if ptr not in skip:
            storages[ptr] = nbytes
        return t.detach(), nbytes

    def unpack(packed):
        return packed

    with saved_tensors_hooks(pack, unpack):
        model(x)
    return sum(storages.values())


# --- 06.2: disk hooks with a threshold in bytes -------------------------------------------------------------------


@answer("06.2", right=True)
def make_disk_hooks_with_weakref_finalize(directory, min_bytes):
    class OnDisk:
        def __init__(self, name):
            self.name = name

    def remove_quietly(name):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)

    def pack_hook(t):
        if t.numel() * t.element_size() < min_bytes:
            return t.detach()
        name = os.path.join(directory, f"{uuid.uuid4().hex}.pt")
        torch.save(t.detach(), name)      # if the write fails, no file and no finalizer exist yet
        on_disk = OnDisk(name)
        weakref.finalize(on_disk, remove_quietly, name)
        return on_disk

    def unpack_hook(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        return torch.load(packed.name, weights_only=True)

    return pack_hook, unpack_hook


@answer("06.2", right=True)
def make_disk_hooks_with_a_tolerant_del(directory, min_bytes):
    class SelfDeletingTempFile:
        def __init__(self):
            self.name = os.path.join(directory, str(uuid.uuid4()))

        def __del__(self):
            try:
                os.remove(self.name)
            except OSError:
                pass  # the write failed, or the file is already gone: nothing to delete

    def threshold_pack(t):
        if t.nbytes < min_bytes:
            return t.detach()
        temp_file = SelfDeletingTempFile()
        torch.save(t.detach(), temp_file.name)
        return temp_file

    def threshold_unpack(tensor_or_file):
        if isinstance(tensor_or_file, torch.Tensor):
            return tensor_or_file
        return torch.load(tensor_or_file.name, weights_only=True)

    return threshold_pack, threshold_unpack


@answer("06.2", mistake="logic", says="compares the number of elements with min_bytes instead of the number of bytes, "
        "so tensors of min_bytes / 4 to min_bytes float32 elements stay in memory")
def make_disk_hooks_with_an_element_threshold(directory, min_bytes):
    class OnDisk:
        def __init__(self, name):
            self.name = name

    def remove_quietly(name):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)

    def pack_hook(t):
        if t.numel() < min_bytes:
            return t.detach()
        name = os.path.join(directory, f"{uuid.uuid4().hex}.pt")
        torch.save(t.detach(), name)
        on_disk = OnDisk(name)
        weakref.finalize(on_disk, remove_quietly, name)
        return on_disk

    def unpack_hook(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        return torch.load(packed.name, weights_only=True)

    return pack_hook, unpack_hook


@answer("06.2", mistake="other", says="deletes the file right after reading it in the unpack hook, so a second unpack "
        "of the same saved tensor (retain_graph, double backward, a read of _saved_*) finds no file")
def make_disk_hooks_deleting_on_unpack(directory, min_bytes):
    def pack_hook(t):
        if t.numel() * t.element_size() < min_bytes:
            return t.detach()
        name = os.path.join(directory, str(uuid.uuid4()))
        torch.save(t.detach(), name)
        return name

    def unpack_hook(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        t = torch.load(packed, weights_only=True)
        os.remove(packed)
        return t

    return pack_hook, unpack_hook


@answer("06.2", mistake="other", says="keeps the tutorial's SelfDeletingTempFile, created before torch.save and "
        "removing its file unconditionally in __del__, so a failed write raises FileNotFoundError from __del__")
def make_disk_hooks_with_the_tutorial_del(directory, min_bytes):
    class SelfDeletingTempFile:
        def __init__(self):
            self.name = os.path.join(directory, str(uuid.uuid4()))

        def __del__(self):
            os.remove(self.name)

    def pack_hook(t):
        if t.numel() * t.element_size() < min_bytes:
            return t.detach()
        temp_file = SelfDeletingTempFile()
        torch.save(t.detach(), temp_file.name)
        return temp_file

    def unpack_hook(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        return torch.load(packed.name, weights_only=True)

    return pack_hook, unpack_hook


@answer("06.2", mistake="other", says="stores the file name as a plain string, so nothing deletes the file when the "
        "graph frees it: the files stay after backward")
def make_disk_hooks_that_never_delete(directory, min_bytes):
    def pack_hook(t):
        if t.numel() * t.element_size() < min_bytes:
            return t.detach()
        name = os.path.join(directory, f"{uuid.uuid4()}.pt")
        torch.save(t.detach(), name)
        return name

    def unpack_hook(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        return torch.load(packed, weights_only=True)

    return pack_hook, unpack_hook


@answer("06.2", mistake="logic", says="uses `>` instead of `>=`, so a tensor of exactly min_bytes bytes stays in "
        "memory instead of going to a file")
def make_disk_hooks_with_a_strict_threshold(directory, min_bytes):
    class OnDisk:
        def __init__(self, name):
            self.name = name

    def remove_quietly(name):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)

    def pack_hook(t):
        if not t.numel() * t.element_size() > min_bytes:
            return t.detach()
        name = os.path.join(directory, f"{uuid.uuid4().hex}.pt")
        torch.save(t.detach(), name)
        on_disk = OnDisk(name)
        weakref.finalize(on_disk, remove_quietly, name)
        return on_disk

    def unpack_hook(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        return torch.load(packed.name, weights_only=True)

    return pack_hook, unpack_hook


@answer("06.2", mistake="wrong-target", says="writes the files into a fresh tempfile.mkdtemp() directory instead of "
        "the directory it is given")
def make_disk_hooks_in_their_own_directory(directory, min_bytes):
    own_dir = tempfile.mkdtemp()

    class OnDisk:
        def __init__(self, name):
            self.name = name

    def remove_quietly(name):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)

    def pack_hook(t):
        if t.numel() * t.element_size() < min_bytes:
            return t.detach()
        name = os.path.join(own_dir, f"{uuid.uuid4().hex}.pt")
        torch.save(t.detach(), name)
        on_disk = OnDisk(name)
        weakref.finalize(on_disk, remove_quietly, name)
        return on_disk

    def unpack_hook(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        return torch.load(packed.name, weights_only=True)

    return pack_hook, unpack_hook


@answer("06.2", mistake="detach-or-graph", says="returns a small tensor itself from the pack hook instead of "
        "t.detach(), so an op that saves its own output keeps it with its grad_fn (a cycle that leaks)")
def make_disk_hooks_keeping_small_tensors_undetached(directory, min_bytes):
    class OnDisk:
        def __init__(self, name):
            self.name = name

    def remove_quietly(name):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)

    def pack_hook(t):
        if t.numel() * t.element_size() < min_bytes:
            return t
        name = os.path.join(directory, f"{uuid.uuid4().hex}.pt")
        torch.save(t.detach(), name)
        on_disk = OnDisk(name)
        weakref.finalize(on_disk, remove_quietly, name)
        return on_disk

    def unpack_hook(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        return torch.load(packed.name, weights_only=True)

    return pack_hook, unpack_hook


# --- 06.3: which context wins ---------------------------------------------------------------------------------------


@answer("06.3", right=True, built=True)
def my_files_innermost_context_wins():
    # a: sin saves y under the disk hooks; b: exp's output on disk; c: y saved twice, written once, plus sin's output;
    # d: everything under the inner save_on_cpu
    return [1, 1, 2, 0]


@answer("06.3", built=True, mistake="count", says="counts one file per saved tensor, forgetting that SaveOnDisk "
        "writes a storage saved by several ops (exp's output, saved again by sin) only once")
def my_files_one_file_per_save():
    return [1, 1, 3, 0]


@answer("06.3", built=True, mistake="logic", says="assumes the outer SaveOnDisk still applies inside the inner "
        "save_on_cpu, so snippet d is predicted to write a file")
def my_files_outer_context_wraps_the_inner():
    return [1, 1, 2, 1]


@answer("06.3", built=True, mistake="logic", says="assumes the files are deleted when the `with SaveOnDisk()` block "
        "exits, although they live as long as the graph that holds them")
def my_files_deleted_when_the_block_exits():
    return [0, 0, 0, 0]
