"""Keep the tensors saved for backward somewhere cheaper: on the CPU, on disk, or compressed.

Each helper is a ``saved_tensors_hooks`` context manager with a size threshold and counters::

    with SaveOnDisk(min_bytes=64 * 1024) as disk:   # tensors >= 64 KiB go to a private temp dir
        loss = model(x).sum()
    loss.backward()                                   # each file is deleted when the graph frees it
    print(disk.stats)

Use them around part of a network with :func:`offload_module` (hooks on the module, the
state_dict is unchanged) or :class:`OffloadWrapper` (an ``nn.Module`` wrapper, as in the
tutorial). :func:`hooklab.checkpoint_modules` makes the opposite trade (keep nothing, recompute
in backward). :func:`hooklab.gradient_error` says how far a lossy helper moves the gradients.

The rooms of this package, one idea each: ``_base`` (what every context shares: threshold, ``keep``,
one packed copy per storage, :class:`OffloadStats`), the strategies ``cpu`` (:class:`SaveOnCpu`),
``overlap`` (:class:`OverlappedOffload`, the CPU strategy with its copies overlapped on a GPU), ``disk``
(:class:`SaveOnDisk`) and ``compress`` (:class:`CompressSaved`), ``_store`` (the disk store's private,
locked folders: operating-system work, no hooks) and ``modules`` (:func:`offload_module`,
:class:`OffloadWrapper`).

Saved-tensor hooks are thread-local: a forward run in another thread inside the block is not
offloaded (its ``stats`` stay at zero); enter the context in that thread (:class:`OffloadWrapper`
does, inside ``forward``).

Common rules: parameters (leaf tensors that require grad, and views of them such as the
``weight.t()`` that ``nn.Linear`` saves) stay where they are, and so do the tensors and modules
listed in ``keep`` (pass the model and the batch: buffers and inputs are alive anyway, and a
copy of them would only add memory); a storage saved by several ops (ReLU's
output is also the next conv's input) is packed once; nothing keeps a reference to the
original tensor, so memory really is released. A tensor kept where it is (not copied) has its
version checked in backward: an in-place change after the save raises PyTorch's "modified by an
inplace operation" error, as without saved-tensor hooks; a copied tensor gives backward the values
as they were saved, which is the right gradient.
"""
from ._base import Keep, OffloadStats
from .compress import CompressSaved, Format
from .cpu import SaveOnCpu
from .disk import SaveOnDisk
from .modules import HooksFactory, OffloadScope, OffloadWrapper, offload_module
from .overlap import OverlappedOffload

__all__ = [
    "CompressSaved",
    "Format",
    "HooksFactory",
    "Keep",
    "OffloadScope",
    "OffloadStats",
    "OffloadWrapper",
    "OverlappedOffload",
    "SaveOnCpu",
    "SaveOnDisk",
    "offload_module",
]
