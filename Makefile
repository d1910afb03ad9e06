# Build, release, grade and test the course. The repository root is the nbgrader course root:
# solutions/<a>/<a>.ipynb are the nbgrader source notebooks, notebooks/<a>/<a>.ipynb the releases.
# Assignments are found by listing solutions/<a>/<a>.ipynb; nothing here names them.
#
#   make lab        open the first notebook in JupyterLab (builds the venv first)
#   make lab-instructor  JupyterLab at the repository root (Formgrader, Create Assignment)
#   make test       unit tests (test-unit) + end-to-end autograde (test-autograde) + strict nbval
#                   of solutions (test-notebooks) + every notebook run in JupyterLab in headless
#                   Chromium (test-browser)
#   make release    regenerate notebooks/ from solutions/ (commit the result)
#   make solutions  rebuild solutions/<a>/<a>.ipynb from <a>.py (jupytext) and execute it in place
#   make draw-key   draw the course's key of hidden draws, kept only if every solution passes under
#                   it (autograder/draw_key.py; writes .draw_key: keep it with the gradebook)
#   make autograde  grade every submission in submitted/, in parallel (autograder/grade_class.py)
#   make summary    class summary from the gradebook: scores per cell, failures, manual grading
#   make feedback   nbgrader generate_feedback for every autograded assignment
#   make export     nbgrader export -> grades.csv
#   make docs       build the documentation site (docs/, the toolkit reference) into .build/site
#   make bench      print notebook execution and autograde times on this machine
#   make bench-dask the class through Dask workers against the local pool (submissions/minute)
#   make hub        the course's JupyterHub on localhost (as root): an instructor and two learner
#                   accounts, nbgrader's exchange, 00_start_here released; Ctrl-C removes them
#   make proxy      configurable-http-proxy (npm, pinned in hub/package.json) for the hub
#   make duedate A=<a> DUE="2026-12-11 17:00 UTC"  set an assignment's due date in the gradebook
#   make clean      remove grading work folders (autograded/, feedback/, grades.csv, .build/)
#   make gpu-kernel register the kernel "Python 3 (debug course, GPU)" (GPU_PYTHON=/path/to/python
#                   with a CUDA torch, or a new .venv-gpu with the CUDA build of torch 2.13.0)
#   make test-gpu   notebook 10 on the GPU kernel (nbval) and its autograde with GRADE_KERNEL=gpu

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

.PHONY: hub proxy duedate draw-key
.PHONY: venv lab docs test test-unit test-autograde test-notebooks release solutions autograde summary feedback export bench bench-dask clean test-browser system-deps sandbox gpu-kernel test-gpu

venv: $(STAMP)

# Re-installs only when the dependency files change. Registers the course kernel inside the
# venv (--sys-prefix), so notebooks, nbval and nbgrader all run on the venv's Python.
# requirements.txt is installed by uv (its version pinned here, itself installed by pip): it
# resolves, downloads, unpacks and byte-compiles in parallel. On 2 cores without AVX-512, empty
# caches (2026-12-07): make venv 38 s, against 114-157 s with pip install, the same packages at the
# same versions. tools/uv_pip_install.py hands uv the package sources pip is configured with (a
# machine may keep the CPU build of torch in pip's find-links).
UV_VERSION := 0.13.10
$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install uv==$(UV_VERSION)
	$(BIN)/python tools/uv_pip_install.py -r requirements.txt -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "$(KERNEL_DISPLAY)"
	touch $@

# JupyterLab from the repository root (python -m: the pre-save hook is imported from autograder/;
# nbgrader's Validate reads nbgrader_config.py from here). The hook drops the metadata a kernel
# adds on opening (language_info), so opening and closing a notebook leaves its file unchanged.
LAB = $(BIN)/python -m jupyterlab $(ALLOW_ROOT) \
      --ContentsManager.pre_save_hook=autograder.execute_notebooks.lab_pre_save

# The learner's view: the file browser is rooted at notebooks/ (given a file, jupyter would root
# it at that file's folder and hide the other notebooks).
lab: venv
	$(LAB) --ServerApp.root_dir="$(CURDIR)/notebooks" \
	  "$(CURDIR)/notebooks/00_start_here/00_start_here.ipynb"

# The instructor's view: rooted at the repository root, so the Formgrader's folder links
# (solutions/, notebooks/, submitted/, autograded/, feedback/) open, and its Assignments panel
# reads the course's nbgrader_config.py (exchange root: COURSE_EXCHANGE).
.PHONY: lab-instructor
lab-instructor: venv
	$(LAB) --ServerApp.root_dir="$(CURDIR)"

test: test-unit test-autograde test-notebooks test-browser

# The documentation site (mkdocs.yml): the reader pages of docs/, the README as home page and the
# toolkit's reference from its docstrings. Strict: a broken link, anchor or reference stops the build.
# tests/test_docs.py builds it too; tests/browser/test_docs_site.py opens it in Chromium.
docs: venv
	$(BIN)/python -m mkdocs build --strict --site-dir .build/site
	@echo "the site: $(CURDIR)/.build/site/index.html (serve it: $(BIN)/python -m mkdocs serve)"

# pytest-xdist: one worker per core for the unit tests and nbval, one more for the browser phase,
# whose tests wait as much as they compute (TEST_JOBS=0 runs in one process; any other value sets
# all three). Unit tests are spread by file (a module's fixtures are built once), nbval by notebook (a
# notebook's cells share a kernel), browser tests one by one (each worker starts its own JupyterLab
# and Chromium). Notebooks and tests run torch on one thread, so workers do not fight over threads.
TEST_JOBS ?= auto
XDIST = -n $(TEST_JOBS)
JOBS_PLUS_ONE = $(if $(filter auto,$(TEST_JOBS)),$(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 ))),$(TEST_JOBS))

# Unit tests of course/ and of the grading machinery (sandbox, class runner, hostile submissions).
# One worker per core, though the grading tests wait on kernels, cell limits, locks and killed
# workers (14% of the CPU idle): three workers on two cores (no AVX-512, 2026-12-07) took 406 s
# against 443 s in the working checkout, but 466 s against 433 s on a fresh clone, where a guard
# kernel of tests/test_guard_forgets.py died before its first reply.
test-unit: venv system-deps sandbox
	$(BIN)/python -m pytest $(XDIST) --dist loadfile tests/ --ignore=tests/browser \
	  --ignore=tests/test_autograde.py --durations=10

# End-to-end: every notebook's solution, untouched release and targeted cases through nbgrader.
test-autograde: venv sandbox
	$(BIN)/python -m pytest tests/test_autograde.py --durations=10

# Strict nbval: re-runs each solution notebook and compares outputs with the saved ones.
# tests/conftest.py (loaded with -p: pytest would not apply it to solutions/) skips stderr.
test-notebooks: venv
	$(if $(SOLUTION_NOTEBOOKS),$(BIN)/python -m pytest $(XDIST) --dist loadfile -p tests.conftest --nbval \
	  --nbval-kernel-name $(KERNEL) --nbval-sanitize-with tests/nbval_sanitize.cfg \
	  $(SOLUTION_NOTEBOOKS),@echo "no solution notebooks: nbval skipped")

# The course in a real browser (tests/browser): JupyterLab on loopback, every solution and student
# notebook run in headless Chromium, widgets moved through the page, nbgrader's Validate and
# Assignments views; screenshots in .screenshots/. Skips (saying why) without Chromium, unless CI
# is set. BROWSER_VALIDATE=all validates every assignment (default: the first).
# One worker more than cores (BROWSER_JOBS): a browser test waits
# on the page and the kernel as much as it computes. Measured on 2 cores (AVX-512, 57 tests, the hub
# test left out): 2 workers 463 s with 8-26% of the CPU idle (vmstat, 30 s means); 3 workers 412 s,
# 0-7% idle, all passing.
BROWSER_JOBS ?= $(JOBS_PLUS_ONE)
test-browser: venv system-deps proxy
	$(BIN)/python -m pytest -n $(BROWSER_JOBS) --dist load tests/browser --durations=10

# JupyterHub's proxy from npm, at the version hub/package-lock.json pins (npm ci: exactly the lock).
# Re-installs only when the lock changes. Needs Node.js >= 20 and npm (make system-deps).
PROXY_BIN := hub/node_modules/.bin/configurable-http-proxy
proxy: $(PROXY_BIN)
# Without npm it says so and goes on: the hub test then skips (fails under CI).
$(PROXY_BIN): hub/package.json hub/package-lock.json
	@if command -v npm >/dev/null; then cd hub && npm ci --no-audit --no-fund && touch node_modules/.bin/configurable-http-proxy; \
	else echo "npm is missing (make system-deps): no proxy, the hub test skips"; fi

# The class on a real hub, on 127.0.0.1:HUB_PORT (autograder/hub.py with hub/jupyterhub_config.py):
# as root, creates dc-instructor, dc-learner1 and dc-learner2 with random passwords, a temporary
# exchange, releases HUB_ASSIGNMENT from the instructor's ~/debug-course, prints the URL and the
# accounts; Ctrl-C stops the hub and removes the accounts, their homes and the temporary folders.
HUB_PORT ?= 8000
HUB_ASSIGNMENT ?= 00_start_here
hub: venv proxy sandbox
	$(BIN)/python -m autograder.hub --port $(HUB_PORT) --assignment $(HUB_ASSIGNMENT)

# An assignment's due date, where nbgrader keeps it (the gradebook's assignment row); autograde
# then gives a later submission the late policy's penalty (nbgrader_config.py, autograder/late_policy.py).
duedate: venv
	@test -n "$(A)" -a -n "$(DUE)" || { echo 'usage: make duedate A=<assignment> DUE="2026-12-11 17:00 UTC"'; exit 2; }
	$(NBGRADER) db assignment add "$(A)" --duedate="$(DUE)"

release: venv
	@set -e; for a in $(ASSIGNMENTS); do $(NBGRADER) generate_assignment "$$a" --force; done

solutions: venv
	$(BIN)/python -m autograder.execute_notebooks $(SOLUTION_NOTEBOOKS)

# generate_assignment first (via release): autograde needs the assignment's source cells in the
# gradebook. nbgrader autograde runs once per submission, JOBS at a time (default: all cores), on
# the gradebook of COURSE_DB_URL (default SQLite gradebook.db). Every submission gets a score and
# a reason (autograded/_reports/<a>.json); a failed one does not stop the others; the target
# fails at the end when any could not be graded.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
# SCHEDULER=tcp://host:8786: grade on that Dask scheduler's workers instead (docs/instructors.md, "A class beyond
# one machine"; needs COURSE_DB_URL=postgresql://...).
SCHEDULER ?=
draw-key: venv
	$(BIN)/python -m autograder.draw_key new

autograde: release sandbox
	$(BIN)/python -m autograder.grade_class --all $(if $(SCHEDULER),--scheduler $(SCHEDULER),--jobs $(JOBS))

# Autograde runs student code only in a bubblewrap sandbox (autograder/sandbox.py): register the
# kernelspec debug-course-sandboxed in the venv and say whether the sandbox works here. Without it,
# autograde refuses to run (COURSE_ALLOW_UNSANDBOXED=1 overrides) and the sandbox tests fail.
sandbox: venv system-deps
	@$(BIN)/python -m autograder.sandbox install
	@$(BIN)/python -m autograder.sandbox check || true

summary: venv
	$(BIN)/python -m autograder.summary

# Debian packages the tests need beyond Python: chromium (the browser test; Playwright drives it,
# `playwright install` is never used), bubblewrap (the grading sandbox), postgresql (the
# PostgreSQL gradebook test starts a server on loopback), acl (setfacl: the hub's accounts reach a
# Python under a private home) and npm (the hub's proxy; it needs Node.js >= 20). Installed in one apt-get run when
# missing and we are root, as on CI's fresh machine; otherwise each test that needs one skips and
# says why (or fails, when CI is set).
SYSTEM_PACKAGES = $(if $(wildcard /usr/bin/chromium),,chromium) \
                  $(if $(shell command -v bwrap),,bubblewrap) \
                  $(if $(wildcard /usr/lib/postgresql/*/bin/initdb),,postgresql) \
                  $(if $(shell command -v setfacl),,acl) \
                  $(if $(shell command -v npm),,npm)
system-deps:
	@missing="$(strip $(SYSTEM_PACKAGES))"; if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages: $$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) \
	      || echo "could not install $$missing: the tests that need them will fail under CI"; \
	  else echo "not installed: $$missing (as root: apt-get install -y $$missing); the tests that need them skip"; fi; fi

feedback: venv
	@status=0; for a in $(ASSIGNMENTS); do \
	  if compgen -G "autograded/*/$$a" >/dev/null; then \
	    $(NBGRADER) generate_feedback "$$a" --force || status=1; fi; done; exit $$status

export: venv
	$(NBGRADER) export --to grades.csv

# stdin from /dev/null: a bench started as a background job must not hand the terminal to kernels
bench: venv
	$(BIN)/python benchmarks/train.py --threads 1 </dev/null
	$(BIN)/python -m autograder.bench </dev/null

# The class on Dask (autograder/bench_dask.py): submissions per minute with the local pool, one
# and two dask workers on this machine, and the coordinator's own seconds per submission. Starts a
# throw-away PostgreSQL (needs Debian's postgresql binaries: make system-deps) and the scheduler
# and workers on the loopback. Prints; checks nothing.
bench-dask: venv
	$(BIN)/python -m autograder.bench_dask </dev/null

clean:
	rm -rf autograded feedback grades.csv .build

# ----- the optional GPU kernel (notebook 10's GPU sections and their tests) -----------------------
# GPU_PYTHON=/path/to/python: a Python whose torch already has CUDA. The course (-e ., no
# dependencies) and requirements.txt without its torch line go into it, with its installed torch
# pinned as a constraint: its torch is never replaced. Without GPU_PYTHON: .venv-gpu is created and
# gets torch==2.13.0 from PyPI, whose Linux wheels are the CUDA build (network needed; about 5-6 GB
# of disk for torch and its nvidia-* libraries, against about 1 GB for the CPU venv).
# Registers, inside .venv (where JupyterLab, nbval and nbgrader look): debug-course-gpu ("Python 3
# (debug course, GPU)") and the grading kernel debug-course-gpu-sandboxed that GRADE_KERNEL=gpu
# selects (autograder/sandboxed_execute.py).
GPU_VENV := .venv-gpu
GPU_PYTHON ?=
GPU_PY = $(if $(GPU_PYTHON),$(GPU_PYTHON),$(CURDIR)/$(GPU_VENV)/bin/python)
GPU_KERNEL := debug-course-gpu
GPU_NOTEBOOK := solutions/10_amp_memory/10_amp_memory.ipynb

gpu-kernel: venv
	@mkdir -p .build
	@if [ -n "$(GPU_PYTHON)" ]; then \
	  "$(GPU_PYTHON)" -c "import sys, torch; sys.exit(0 if torch.version.cuda else 'GPU_PYTHON: torch ' + torch.__version__ + ' is not a CUDA build')"; \
	else \
	  [ -x $(GPU_VENV)/bin/python ] || $(PYTHON) -m venv $(GPU_VENV); \
	  $(GPU_VENV)/bin/python -c "import torch; assert torch.version.cuda" 2>/dev/null || \
	    $(GPU_VENV)/bin/python -m pip install torch==2.13.0; \
	fi
	"$(GPU_PY)" -c "import torch; print('torch==' + torch.__version__)" > .build/gpu-torch-constraint.txt
	grep -v -E '^torch([=<> ]|$$)' requirements.txt > .build/requirements-gpu.txt
	"$(GPU_PY)" -m pip install -r .build/requirements-gpu.txt -c .build/gpu-torch-constraint.txt
	"$(GPU_PY)" -m pip install --no-deps -e .
	"$(GPU_PY)" -m ipykernel install --prefix $(CURDIR)/$(VENV) --name $(GPU_KERNEL) --display-name "Python 3 (debug course, GPU)"
	$(BIN)/python -m autograder.sandbox install --name $(GPU_KERNEL)-sandboxed --python "$(GPU_PY)" \
	  --display-name "Python 3 (debug course, GPU, autograder sandbox)"
	"$(GPU_PY)" -c "import torch; print('GPU kernel: torch', torch.__version__, '| CUDA available:', torch.cuda.is_available())"

# Notebook 10 on the GPU kernel: nbval in lax mode (every cell must run without error; outputs are
# not compared, since step times, memory figures and the GPU's name vary), then the end-to-end
# autograde of notebook 10 with GRADE_KERNEL=gpu: the solution must earn full marks including its
# GPU test, the untouched release zero, and every case (GPU_CASES of tests/autograde_cases_10.py
# included) lose exactly its cells. Fails at once when the GPU kernel's torch sees no CUDA device.
test-gpu: gpu-kernel sandbox
	"$(GPU_PY)" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'test-gpu: torch sees no CUDA device')"
	$(BIN)/python -m pytest -p no:xdist -p tests.conftest --nbval-lax --nbval-kernel-name $(GPU_KERNEL) $(GPU_NOTEBOOK)
	GRADE_KERNEL=gpu $(BIN)/python -m pytest -p no:xdist tests/test_autograde.py -k 10_amp_memory --durations=10
