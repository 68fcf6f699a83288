# Two entry points: `make demo` runs the main job, `make test` runs the tests. Both install the
# system packages they need (root on Debian/Ubuntu; the list is scripts/system-packages.sh) and
# set up a virtual environment (draft-enabled pyzmq with our libzmq patch, compiled kernels).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.edgegossip-installed

.PHONY: venv demo test lint docs bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py native/_kernels_c.pyx native/_udp_c.pyx native/patches/*.patch scripts/install-pyzmq-draft.sh native/_wire_c.pyx native/_codec.pxi
	bash scripts/system-packages.sh install build
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0" numpy
	bash scripts/install-pyzmq-draft.sh $(PY)
	$(PY) -m pip install --quiet --no-build-isolation -e ".[test,lint,onnx,fleet,docs]"
	$(PY) -c "import edgegossip.kernels as k; print('kernels:', k.IMPLEMENTATION)"
	touch $(STAMP)

# exit 3: cannot install here (not root, no apt-get); demo.sh then runs the loopback backend and
# make test the tests that need no root, and each says why
demo: venv
	bash scripts/system-packages.sh install demo || [ $$? = 3 ]
	bash scripts/demo.sh

# style (ruff), types (mypy), the layers (import-linter, the contract in pyproject.toml), the
# size of functions (ruff's PLR0913/PLR0915 and scripts/check-size.py: 10 parameters, 50
# statements, 60 lines), and
# every relative link of the README and the docs to a file that exists (pytest-check-links; the
# anchors: `make docs` within the site, tests/test_docs.py from the README)
lint: venv
	$(VENV)/bin/ruff check edgegossip tests scripts
	$(VENV)/bin/ruff format --check edgegossip tests scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) scripts/check-size.py edgegossip
	$(PY) -m pytest -q -p no:cacheprovider -o addopts= --check-links \
	  --check-links-ignore 'https?://.*' README.md docs/*.md

# the docs site in build/site; a warning (a broken link or anchor, a page outside nav) fails it
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

test: venv lint docs
	bash scripts/system-packages.sh install test || [ $$? = 3 ]
	mkdir -p build
	$(VENV)/bin/edgegossip data fetch mnist
	$(VENV)/bin/edgegossip data fetch fashion-mnist
	$(PY) -m pytest -ra --junitxml=build/test-results.xml $(PYTEST_ARGS)

bench: venv
	$(VENV)/bin/edgegossip bench kernels
	$(VENV)/bin/edgegossip bench transport

clean:
	rm -rf $(VENV) build .cache *.egg-info edgegossip/*.so
