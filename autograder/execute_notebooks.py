"""Rebuild solution notebooks from their text sources and execute them (``make solutions``).

    python -m autograder.execute_notebooks solutions/*/*.ipynb

Contract, per notebook path ``<dir>/<a>.ipynb`` given:
- If the jupytext text file ``<dir>/<a>.py`` exists, it is the source: the notebook is rebuilt
  from it (its cells, their nbgrader metadata and the header's kernelspec), without jupytext
  metadata (nbgrader would copy that into the release). Cell ids are made deterministic (the
  grade_id, else a hash of the cell's type and source), so rebuilding an unchanged text file
  changes no id and no release. Without a text file the notebook itself is executed.
- Every cell runs with nbclient on the ``debug-course`` kernel, with ``<dir>`` as working
  directory. A cell that raises stops the run and the file is left unchanged (a cell meant to
  raise needs the ``raises-exception`` tag); the exit status is then 1.
- Before saving, what changes on every run is removed so diffs show real changes only:
  ``stderr`` stream outputs (progress bars, warnings), per-cell timing metadata
  (``metadata.execution``), widget state (``metadata.widgets``) and widget views (their text/plain
  stays); consecutive stdout chunks are merged. Other outputs are kept as they are.
"""
import hashlib
import sys
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

KERNEL_NAME = "debug-course"
CELL_TIMEOUT = 600  # seconds; a solution cell is never expected to get near it


def from_text(text: Path) -> nbformat.NotebookNode:
    """The notebook that jupytext reads from ``text``, minus jupytext metadata, with ids that
    depend only on the cells (jupytext draws random ones)."""
    nb = jupytext.read(text)
    nb.metadata.pop("jupytext", None)
    seen = set()
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        base = grade_id or hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:8]
        cell_id, n = base, 1
        while cell_id in seen:
            n += 1
            cell_id = f"{base}-{n}"
        seen.add(cell_id)
        cell.id = cell_id
    return nb


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def strip_volatile(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Make ``nb`` (in place) the same on every run of the same code: drop stderr streams, cell
    timing metadata, widget state and widget views (random model ids pointing at that state; the
    output's text/plain stays), and merge consecutive stdout chunks (split where the kernel
    happened to flush)."""
    nb.metadata.pop("widgets", None)
    # The kernel records its exact Python version here; a patch release elsewhere would change the
    # saved notebook and so the committed release. Jupyter fills it in again when a notebook runs.
    nb.metadata.pop("language_info", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.outputs:
            if out.output_type == "stream":
                if out.name == "stderr":
                    continue
                if outputs and outputs[-1].output_type == "stream" and outputs[-1].name == out.name:
                    outputs[-1].text += out.text
                    continue
            elif WIDGET_VIEW in out.get("data", {}):
                del out.data[WIDGET_VIEW]
            outputs.append(out)
        cell.outputs = outputs
    return nb


def execute(path: Path) -> None:
    """(Re)build notebook ``path`` from its text twin if any, run it top to bottom, save it."""
    text = path.with_suffix(".py")
    nb = from_text(text) if text.exists() else nbformat.read(path, as_version=4)
    # store_widget_state stays on: with it off, nbclient 0.11 raises KeyError in
    # output_widget.py when an Output widget receives output. The state is stripped below.
    client = NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=CELL_TIMEOUT, record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    nbformat.write(strip_volatile(nb), path)


def main(argv: list[str]) -> int:
    """Execute each notebook path in ``argv``; return 1 if any failed, else 0."""
    failed = []
    for name in argv:
        print(f"executing {name}", flush=True)
        try:
            execute(Path(name).resolve())
        except CellExecutionError as err:
            print(f"FAILED {name}:\n{err}", file=sys.stderr)
            failed.append(name)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {' '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
