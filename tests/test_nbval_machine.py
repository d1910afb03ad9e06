"""Strict nbval across kinds of machine (autograder/machine.py, tests/conftest.py): a solution's saved
outputs are compared exactly on the kind of machine that computed them, and with every number
masked elsewhere, where a changed word, name or verdict still fails."""
import json
import os
import subprocess
import sys

import nbformat

from autograder import grading, machine


def test_masking_drops_digits_and_keeps_words_names_and_shape():
    here = ("lr-sign-typo: non-finite at step 17; loss ['2.89', '6.77e+07', '3.39e+08']\n"
            "    3      7960    2.447e+06\n"
            "   17          nan   (the run stops)\n"
            "first non-finite tensor: blocks.0.mlp.2.bias, fp16 range 6.55e+04\n")
    there = ("lr-sign-typo: non-finite at step 12; loss ['2.89', '6.77e+07']\n"
             "    3      7960    2.447e+06\n"
             "    4  1.19e+04     4.17e+06\n"
             "   12          nan   (the run stops)\n"
             "first non-finite tensor: blocks.0.mlp.2.bias, fp16 range 6.55e+04\n")
    assert machine.masked(here) == machine.masked(there), machine.masked(there)
    assert "blocks.0.mlp.2.bias" in machine.masked(here) and "fp16" in machine.masked(here), \
        "names that contain digits must survive the masking"
    for changed in (here.replace("nan", "inf"), here.replace("blocks.0", "blocks.1"),
                    here.replace("non-finite at", "finite at")):
        assert machine.masked(changed) != machine.masked(there), f"masking hid a real change: {changed!r}"


def test_masking_drops_the_digits_of_a_factor_and_keeps_x86_64():
    here = "an increase between 0.035 and 0.058 (a spread of x1.6), its excess spreads x6.8 on x86_64\n"
    there = "an increase between 0.034 and 0.061 (a spread of x1.8), its excess spreads x16.8 on x86_64\n"
    assert machine.masked(here) == machine.masked(there), machine.masked(there)
    assert "x86_64" in machine.masked(here), "a name like x86_64 must survive the masking"
    assert machine.masked(here.replace("spread of", "ratio of")) != machine.masked(there), \
        "masking hid a real change next to a factor"


def _notebook(path, printed, saved):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(f"print({printed!r})", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=saved + "\n")]
    nb.cells = [cell]
    nb.metadata["kernelspec"] = {"name": grading.KERNEL_NAME, "display_name": "course", "language": "python"}
    nbformat.write(nb, path)


def test_nbval_is_exact_on_the_machine_that_made_the_outputs_and_masks_numbers_elsewhere(tmp_path):
    printed = "loss 0.5000 after 3 steps: fits"
    cases = {  # notebook -> (the machine its record names, saved output, should nbval pass?)
        "same_machine_other_digits": (machine.fingerprint(), "loss 0.2500 after 3 steps: fits", False),
        "same_machine_same_digits": (machine.fingerprint(), printed, True),
        "other_machine_other_digits": ("another kind of machine", "loss 0.2500 after 3 steps: fits", True),
        "other_machine_other_verdict": ("another kind of machine", "loss 0.2500 after 3 steps: MISSES", False),
    }
    for name, (_, saved, _) in cases.items():
        _notebook(tmp_path / f"{name}.ipynb", printed, saved)
    record = tmp_path / "outputs_machine.json"
    record.write_text(json.dumps({name: made_on for name, (made_on, _, _) in cases.items()}))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "--nbval", "--nbval-kernel-name", grading.KERNEL_NAME, "-rA", "-W", "default",
         *[str(tmp_path / f"{n}.ipynb") for n in cases]],
        cwd=grading.REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "COURSE_OUTPUTS_RECORD": str(record)})
    out = proc.stdout + proc.stderr
    for name, (_, _, passes) in cases.items():
        verdict = "PASSED" if passes else "FAILED"
        assert any(line.startswith(verdict) and f"/{name}.ipynb::" in line for line in out.splitlines()), \
            f"{name}: nbval should have {verdict}\n{out[-3000:]}"
    assert "numbers are not compared" in out, "a masked comparison must say so"
