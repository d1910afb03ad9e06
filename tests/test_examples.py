"""examples/own_model.py, the worked example of docs/toolkit.md's "Your own model", runs and its healthy
model passes every pre-flight check; its frozen block is named and failed."""

import runpy
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "own_model.py"


def test_the_own_model_example_runs(capsys):
    report = runpy.run_path(str(EXAMPLE), run_name="example")["main"]()
    out = capsys.readouterr().out
    assert report.ok, str(report)
    assert "update: frozen-unexpected | frozen: 12 tensors (blocks.layers.1." in out, out
    assert "first non-finite: None" in out
