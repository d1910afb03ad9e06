# Build, release, grade and test the course. The repository root is the nbgrader course root:
# solutions/<a>/<a>.ipynb are the nbgrader source notebooks, notebooks/<a>/<a>.ipynb the releases.
# Assignments are found by listing solutions/<a>/<a>.ipynb; nothing here names them.
#
#   make lab        open the first notebook in JupyterLab (builds the venv first)
#   make test       unit tests + end-to-end release/autograde tests + strict nbval of solutions
#   make release    regenerate notebooks/ from solutions/ (commit the result)
#   make solutions  rebuild solutions/<a>/<a>.ipynb from <a>.py (jupytext) and execute it in place
#   make autograde  nbgrader autograde every assignment that has submissions in submitted/
#   make feedback   nbgrader generate_feedback for every autograded assignment
#   make export     nbgrader export -> grades.csv
#   make bench      print notebook execution and autograde times on this machine
#   make clean      remove grading work folders (autograded/, feedback/, grades.csv, .build/)

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
KERNEL := debug-course
KERNEL_DISPLAY := Python 3 (debug course)
NBGRADER := $(BIN)/python -m nbgrader
# The venv's executables first: nbgrader runs `alembic` by name when it creates a gradebook.
export PATH := $(CURDIR)/$(BIN):$(PATH)

# An assignment is a folder solutions/<a>/ holding <a>.ipynb (as in autograder/grading.py).
ASSIGNMENTS = $(sort $(foreach a,$(patsubst solutions/%/,%,$(wildcard solutions/*/)),\
                $(if $(wildcard solutions/$(a)/$(a).ipynb),$(a))))
SOLUTION_NOTEBOOKS = $(foreach a,$(ASSIGNMENTS),solutions/$(a)/$(a).ipynb)
# jupyter refuses to start a server as root without --allow-root
ALLOW_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: venv lab test test-unit test-notebooks release solutions autograde feedback export bench clean

venv: $(STAMP)

# Re-installs only when the dependency files change. Registers the course kernel inside the
# venv (--sys-prefix), so notebooks, nbval and nbgrader all run on the venv's Python.
$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -r requirements.txt -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "$(KERNEL_DISPLAY)"
	touch $@

# The file browser is rooted at notebooks/ (given a file, jupyter would root it at that file's
# folder and hide the other notebooks).
lab: venv
	$(BIN)/jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir="$(CURDIR)/notebooks" \
	  "$(CURDIR)/notebooks/00_start_here/00_start_here.ipynb"

test: test-unit test-notebooks

test-unit: venv
	$(BIN)/python -m pytest tests/

# Strict nbval: re-runs each solution notebook and compares outputs with the saved ones.
# tests/conftest.py (loaded with -p: pytest would not apply it to solutions/) skips stderr.
test-notebooks: venv
	$(if $(SOLUTION_NOTEBOOKS),$(BIN)/python -m pytest -p tests.conftest --nbval \
	  --nbval-kernel-name $(KERNEL) --nbval-sanitize-with tests/nbval_sanitize.cfg \
	  $(SOLUTION_NOTEBOOKS),@echo "no solution notebooks: nbval skipped")

release: venv
	@set -e; for a in $(ASSIGNMENTS); do $(NBGRADER) generate_assignment "$$a" --force; done

solutions: venv
	$(BIN)/python -m autograder.execute_notebooks $(SOLUTION_NOTEBOOKS)

# generate_assignment first (via release): autograde needs the assignment's source cells in the
# gradebook. A failed submission does not stop the others; the target fails at the end.
autograde: release
	@status=0; for a in $(ASSIGNMENTS); do \
	  if compgen -G "submitted/*/$$a" >/dev/null; then \
	    $(NBGRADER) autograde "$$a" --force || status=1; fi; done; exit $$status

feedback: venv
	@status=0; for a in $(ASSIGNMENTS); do \
	  if compgen -G "autograded/*/$$a" >/dev/null; then \
	    $(NBGRADER) generate_feedback "$$a" --force || status=1; fi; done; exit $$status

export: venv
	$(NBGRADER) export --to grades.csv

bench: venv
	$(BIN)/python benchmarks/train.py
	$(BIN)/python -m autograder.bench

clean:
	rm -rf autograded feedback grades.csv .build
