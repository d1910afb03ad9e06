"""The kernel's replies are read in short polls (autograder/kernel_polls.py).

pyzmq's missed wake-up cannot be produced on demand, so ``MissedWakeUp`` stands in for a channel
after one: the message is there, and its poll sees it only when the poll's own timer fires (what
pyzmq's asyncio ``poll`` does: one last look at the socket at the timeout). Without slices, reading
it takes the whole timeout (the negative control); with them, one slice. Then: a real kernel run by
each of the course's notebook runners reads its channels through the slices.
"""
from __future__ import annotations

import asyncio
import time
from queue import Empty

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder import bench, draw_key, execute_notebooks, grading
from autograder.kernel_polls import POLL_SLICE_S, CourseNotebookClient, SlicedPolls, poll_in_slices
from autograder.sandboxed_execute import SandboxedExecute


class MissedWakeUp:
    """A channel whose message, if it has one, is seen only when a poll times out."""

    def __init__(self, message=None):
        self.message, self.polls = message, []

    async def get_msg(self, timeout=None):
        self.polls.append(timeout)
        if timeout is None:
            await asyncio.Event().wait()  # an unbounded poll that missed its wake-up waits forever
        await asyncio.sleep(timeout)
        if self.message is None:
            raise Empty
        return self.message


def _timed(coro):
    start = time.monotonic()
    try:
        return asyncio.run(coro), time.monotonic() - start
    except (Empty, asyncio.TimeoutError) as stop:
        return type(stop), time.monotonic() - start


def test_without_slices_a_missed_wake_up_costs_the_whole_timeout():
    channel = MissedWakeUp({"msg": "reply"})
    got, took = _timed(channel.get_msg(timeout=3))
    assert got == {"msg": "reply"} and took >= 3, "the stand-in must reproduce the stall it is for"


def test_with_slices_a_missed_wake_up_costs_one_slice():
    channel = MissedWakeUp({"msg": "reply"})
    poll_in_slices(channel)
    got, took = _timed(channel.get_msg(timeout=3))
    assert got == {"msg": "reply"}
    assert took < 2 * POLL_SLICE_S, f"the reply was read after {took:.2f} s, not within a slice"
    assert channel.polls == [POLL_SLICE_S]


def test_an_unbounded_wait_is_sliced_too():
    channel = MissedWakeUp({"msg": "output"})
    poll_in_slices(channel, slice_s=0.1)
    got, took = _timed(asyncio.wait_for(channel.get_msg(timeout=None), 2))
    assert got == {"msg": "output"} and took < 1, "an iopub read without a timeout must not hang"


def test_nothing_to_read_still_times_out_at_the_deadline():
    channel = MissedWakeUp(None)
    poll_in_slices(channel, slice_s=0.2)
    got, took = _timed(channel.get_msg(timeout=1))
    assert got is Empty, "a timeout must still raise queue.Empty, as nbclient expects"
    assert 1 <= took < 1.3, f"Empty came after {took:.2f} s, not at the 1 s deadline"
    assert len(channel.polls) >= 5 and max(channel.polls) <= 0.2


def test_every_notebook_runner_of_the_course_uses_the_slices():
    assert issubclass(SandboxedExecute, SlicedPolls), "autograde's executor"
    for module in (bench, draw_key, execute_notebooks):
        assert "CourseNotebookClient" in open(module.__file__, encoding="utf-8").read(), module.__name__
        assert "NotebookClient(" not in open(module.__file__, encoding="utf-8").read().replace(
            "CourseNotebookClient(", ""), f"{module.__name__} builds a plain NotebookClient"


@pytest.mark.parametrize("sync", [False, True], ids=["execute", "setup_kernel"])
def test_a_real_kernels_channels_are_read_in_slices(sync):
    """Both ways nbclient starts a client (``execute``, and ``setup_kernel``, which nbconvert's
    ExecutePreprocessor uses through the sync name) patch the shell and iopub channels."""
    nb = new_notebook(cells=[new_code_cell("import ipywidgets\nipywidgets.IntSlider(3)"),
                             new_code_cell("print(6 * 7)")])
    seen = []

    def look(cell, cell_index):
        seen.append([c.get_msg.__qualname__ for c in (client.kc.shell_channel, client.kc.iopub_channel)])

    client = CourseNotebookClient(nb, kernel_name=grading.KERNEL_NAME, timeout=60, on_cell_start=look)
    if sync:
        with client.setup_kernel():
            for i, cell in enumerate(nb.cells):
                client.execute_cell(cell, i)
    else:
        client.execute()
    assert nb.cells[1].outputs[0]["text"] == "42\n"
    assert "application/vnd.jupyter.widget-view+json" in nb.cells[0].outputs[0]["data"]
    assert seen == [["poll_in_slices.<locals>.get_msg"] * 2] * 2, f"the channels' readers: {seen}"
