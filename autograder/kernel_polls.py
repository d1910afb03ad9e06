"""The kernel's replies, read in short polls: a missed wake-up costs half a second, not a cell's timeout.

nbclient waits for a cell's reply with one poll of the kernel client's shell socket, as long as the
cell's whole time limit (``Execute.timeout``, 120 s here), and for its output with one unbounded poll
of the iopub socket. pyzmq's asyncio poll can miss the socket's wake-up: it then resolves only when
its timer fires, where it checks the socket once more and finds the message that was there all
along. nbclient issue #312 reports this after cells that show an ipywidgets widget; here it was
measured on ``12_lr_instability``'s ``rate_explorer`` cell, autograded with both cores busy: the
kernel replied at once and the grader read the reply exactly 120.0 s later, with no error, so
nothing in the autograded notebook said why it took two minutes.

``SlicedPolls`` (a mixin for ``NotebookClient`` and its subclasses) makes every ``get_msg`` on those
two channels a loop of polls of at most ``POLL_SLICE_S``, with the same overall deadline as before:
a message that arrived is read within a slice, and a timeout still raises ``queue.Empty`` at the same
moment. Nothing else about how a notebook runs changes.
"""
from __future__ import annotations

import time
from queue import Empty

from nbclient import NotebookClient
from nbclient.util import run_sync

POLL_SLICE_S = 0.5


def poll_in_slices(channel, slice_s: float = POLL_SLICE_S) -> None:
    """Replace ``channel.get_msg`` (an async jupyter_client channel) with one that polls at most
    ``slice_s`` at a time until its ``timeout`` (None: no limit) and raises ``Empty`` only then."""
    whole = channel.get_msg

    async def get_msg(timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = slice_s if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await whole(timeout=min(slice_s, left))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    channel.get_msg = get_msg


class SlicedPolls:
    """Put before ``NotebookClient`` (or ``ExecutePreprocessor``) in the bases: the kernel client it
    starts reads its shell and iopub channels in slices (``poll_in_slices``)."""

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        for channel in (kc.shell_channel, kc.iopub_channel):
            poll_in_slices(channel)
        return kc

    # nbclient binds the sync name to its own method; ``setup_kernel`` (nbconvert's path) calls it
    start_new_kernel_client = run_sync(async_start_new_kernel_client)


class CourseNotebookClient(SlicedPolls, NotebookClient):
    """nbclient's client with ``SlicedPolls``: the one the course's tools run notebooks with."""
