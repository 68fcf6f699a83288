# Two entry points: `make demo` runs the main job, `make test` runs the tests. Both set up a
# virtual environment first (draft-enabled pyzmq with our libzmq patch, compiled kernels).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.edgegossip-installed

.PHONY: venv demo test bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py native/_kernels_c.pyx native/_udp_c.pyx native/patches/*.patch scripts/install-pyzmq-draft.sh native/_wire_c.pyx native/_codec.pxi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0" numpy
	bash scripts/install-pyzmq-draft.sh $(PY)
	$(PY) -m pip install --quiet --no-build-isolation -e ".[test,onnx]"
	$(PY) -c "import edgegossip.kernels as k; print('kernels:', k.IMPLEMENTATION)"
	touch $(STAMP)

demo: venv
	bash scripts/demo.sh

test: venv
	mkdir -p build
	$(VENV)/bin/edgegossip data fetch mnist
	$(PY) -m pytest -ra --junitxml=build/test-results.xml $(PYTEST_ARGS)

bench: venv
	$(VENV)/bin/edgegossip bench kernels
	$(VENV)/bin/edgegossip bench transport

clean:
	rm -rf $(VENV) build .cache *.egg-info edgegossip/*.so
