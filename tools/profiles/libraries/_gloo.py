"""The process group that the distributed profiles (DDP, FSDP1, FSDP2, tensor parallel, pipelining) run in."""
from __future__ import annotations


def one_process_group() -> None:
    """A gloo process group of this one process (world size 1) over a FileStore in a temporary directory; both are
    removed when the process exits (the profile is measured in a process of its own), so nothing is left waiting."""
    import atexit
    import shutil
    import tempfile

    import torch.distributed as dist
    if not dist.is_initialized():
        folder = tempfile.mkdtemp(prefix="hooklab-profile-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # runs last: atexit is last in, first out
        dist.init_process_group("gloo", store=dist.FileStore(folder + "/store", 1), rank=0, world_size=1)
        atexit.register(dist.destroy_process_group)
