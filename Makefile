# The two commands of the README: `make lab` (the reference run with its plots) and `make test`.
# Both set everything up on a fresh machine: the virtualenv, the pinned requirements, FashionMNIST.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: lab test data system release handout bench clean

lab: $(INSTALLED) data
	$(PY) -m labutils lab --out artifacts

# The test modules run side by side, each whole on one worker (a module's class-grading fixture is graded once),
# longest first in tests/conftest.py's order (--no-loadscope-reorder: xdist would start the modules with the most
# tests first, and leave a long one for the end). The suite is bound by CPU: -n auto gives one worker per core. At
# most 4 (memory): a third worker on 2 cores made the suite slower (measured: contention cost more CPU than the idle
# time it filled). Bytecode is written even where PYTHONDONTWRITEBYTECODE is set (as on this project's machines): the
# suite starts ~110 Python processes that import the project's modules, and each compiled them again (one module's
# CPU went from 132 to 122 s with the cache).
test: $(INSTALLED) data system
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder

$(INSTALLED): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

# FashionMNIST: LAB_DATA_DIR, else Debian's dataset-fashion-mnist (installed here when we are root with apt),
# else torchvision's download; `python -m labutils data` says which fix applies when none works.
data: $(INSTALLED)
	@if ! $(PY) -c "import sys; from labutils.data_files import find_raw_dir; sys.exit(find_raw_dir() is None)"; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing dataset-fashion-mnist with apt-get"; \
	    apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null; \
	  fi; \
	fi
	$(PY) -m labutils data

# Debian's Chromium (the browser tests drive it through playwright) and PostgreSQL (the gradebook test starts a
# throwaway server): installed here when we are root with apt; elsewhere those tests skip, saying how to enable them.
system:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing$$missing with apt-get"; \
	  (apt-get update -qq && apt-get install -y -qq $$missing >/dev/null) || \
	    echo "apt-get could not install$$missing: the tests that need it will be skipped"; \
	fi

release: $(INSTALLED)
	$(PY) -m autograder release

handout: $(INSTALLED)
	$(PY) -m autograder handout --out dist/loop-lab-handout.zip

# The loop against its peers (Lightning, accelerate, torch.compile): their pins live in benchmarks/requirements.txt,
# installed only for the benchmark. BENCH_ARGS=--quick for a ~5 minute run.
BENCH_INSTALLED := $(VENV)/.bench-installed
$(BENCH_INSTALLED): $(INSTALLED) benchmarks/requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check -r benchmarks/requirements.txt
	touch $@

bench: $(BENCH_INSTALLED) data
	$(PY) benchmarks/bench_loop.py $(BENCH_ARGS)

clean:
	rm -rf artifacts dist .pytest_cache
