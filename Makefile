# The two commands of the README: `make lab` (the reference run with its plots) and `make test`.
# Both set everything up on a fresh machine: the virtualenv, the pinned requirements, FashionMNIST.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: lab test data release handout bench clean

lab: $(INSTALLED) data
	$(PY) -m labutils lab --out artifacts

test: $(INSTALLED) data
	$(PY) -m pytest -q

$(INSTALLED): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

# FashionMNIST: LAB_DATA_DIR, else Debian's dataset-fashion-mnist (installed here when we are root with apt),
# else torchvision's download; `python -m labutils data` says which fix applies when none works.
data: $(INSTALLED)
	@if ! $(PY) -c "import sys; from labutils.data import find_raw_dir; sys.exit(find_raw_dir() is None)"; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing dataset-fashion-mnist with apt-get"; \
	    apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null; \
	  fi; \
	fi
	$(PY) -m labutils data

release: $(INSTALLED)
	$(PY) -m autograder release

handout: $(INSTALLED)
	$(PY) -m autograder handout --out dist/loop-lab-handout.zip

bench: $(INSTALLED) data
	$(PY) benchmarks/bench_loop.py

clean:
	rm -rf artifacts dist .pytest_cache
