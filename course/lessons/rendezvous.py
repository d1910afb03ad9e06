"""Where a job's gloo ranks meet: rank 0 listens on a port the operating system picks and tells the
other ranks its number through a file in the job's folder.

The usual recipe, picking a free port, closing it and giving its number to every rank
(``init_method="tcp://127.0.0.1:<port>"``), leaves a window: until rank 0 listens on the port, any
socket on the machine may take it, an outgoing connection of another job's ranks included. Seen
here: two jobs started at once, and one's rank 0 failed with EADDRINUSE. A store that binds
port 0 has no such window, because the port is already its own when its number is known.

Imports torch only when called, so a module that uses it stays cheap to import.
"""
from __future__ import annotations

import os
import time


def join(folder: str, rank: int, world: int, timeout_s: float):
    """Put this rank in the default process group of a ``world``-rank gloo job whose ranks share
    ``folder``. Rank 0 starts the ``TCPStore`` on a port of its own and writes the number to
    ``<folder>/port``; every other rank waits for that file, at most ``timeout_s`` seconds (then
    ``TimeoutError``), and connects. ``timeout_s`` is also the store's and the group's timeout."""
    from datetime import timedelta

    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    path = os.path.join(folder, "port")
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, world, is_master=True, timeout=timeout,
                              wait_for_workers=False)
        with open(path + ".tmp", "w") as f:
            f.write(str(store.port))
        os.replace(path + ".tmp", path)  # a reader sees the whole number or no file
    else:
        end = time.monotonic() + timeout_s
        while not os.path.exists(path):
            if time.monotonic() > end:
                raise TimeoutError(f"rank 0 did not start the job's store within {timeout_s} s")
            time.sleep(0.01)
        with open(path) as f:
            port = int(f.read())
        store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
