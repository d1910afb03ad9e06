"""Which kind of machine made a solution notebook's saved outputs, and how strict nbval compares them
on another kind.

A training run's printed numbers depend on the CPU's floating-point code paths: torch and MKL pick
vector kernels (AVX2, AVX-512, ...) by what the CPU offers, the sums they compute round
differently, and a few training steps turn the last bit into the third digit (a run that diverges
turns it into another step number). Measured on notebook 02: ``lr-sign-typo`` goes non-finite at
step 17 on one machine, at step 12 on the machine the notebook was last executed on, at 9 with
``ATEN_CPU_CAPABILITY=avx2``. Saved outputs are therefore exact only for the kind of machine that
computed them.

* ``fingerprint()``: this machine's kind as the outputs see it (architecture, CPU vendor and model,
  the vector capability torch uses, the torch version, and any of the environment variables that
  change MKL's or oneDNN's code paths).
* ``RECORD`` (``solutions/outputs_machine.json``): assignment -> the fingerprint of the machine its
  solution notebook was last executed on; ``autograder.execute_notebooks`` writes it.
* ``NUMBERS_MASKED``: nbval sanitizer patterns for a notebook whose outputs another kind of machine
  made (``tests/conftest.py``): every number becomes ``#``, a list of numbers ``#, ...``, runs of
  spaces one space, repeated identical lines one line. What is still compared: every word, name,
  verdict and the shape of each output; a notebook whose claim changes on this machine (a check
  that now fails, a bug named differently) still fails. On the machine kind that made the outputs,
  comparison stays exact.
"""
import json
import os
import platform
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# COURSE_OUTPUTS_RECORD: another record file (the tests use one of their own).
RECORD = Path(os.environ.get("COURSE_OUTPUTS_RECORD") or REPO / "solutions" / "outputs_machine.json")
# Environment variables that change which kernels MKL, oneDNN or ATen run (and so the digits).
CODE_PATH_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")


def _cpu() -> str:
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return " ".join(v for v in (fields.get("vendor_id"), fields.get("model name")) if v) or platform.processor()


def fingerprint() -> str:
    """This machine's kind, as far as saved outputs depend on it (one line)."""
    import torch

    parts = [platform.machine(), _cpu(), f"torch {torch.__version__}",
             f"cpu capability {torch.backends.cpu.get_cpu_capability()}"]
    parts += [f"{k}={os.environ[k]}" for k in CODE_PATH_ENV if os.environ.get(k)]
    return "; ".join(parts)


def recorded(assignment: str, path: Path = RECORD) -> str | None:
    """The fingerprint of the machine that made ``assignment``'s saved outputs (None: unknown)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get(assignment)
    except (OSError, ValueError):
        return None


def record(assignment: str, path: Path = RECORD) -> None:
    """Note that ``assignment``'s solution outputs were just computed on this machine."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        entries = {}
    entries[assignment] = fingerprint()
    path.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n", encoding="utf-8")


NUMBER = r"(?<![\w.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?!\d)(?!\.\d)"
NUMBERS_MASKED = {
    # a factor written "x1.6" (a spread, a speed-up); "x86_64" and names stay
    r"(?<![\w.])x(?:\d+(?:\.\d*)?|\.\d+)(?![\d\w])(?!\.\d)": "x#",
    NUMBER: "#",
    r"'#'(?:, '#')+": "'#', ...",
    r"#(?:, #)+": "#, ...",
    r"[ \t]+": " ",
    r"(?m)^(.*\n)(?:\1)+": r"\1",
}


def masked(text: str) -> str:
    """``text`` as nbval compares it when another kind of machine made the outputs."""
    for pattern, replace in NUMBERS_MASKED.items():
        text = re.sub(pattern, replace, text)
    return text
