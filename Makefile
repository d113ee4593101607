# Two commands do everything on a fresh machine:
#   make demo   install into .venv, generate the demo data, run scan -> bucket -> plan -> write -> verify
#   make test   install into .venv and .venv-ref, run the test suite in both
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The reference environment: the families' real HF processors need torchvision, which pulls the CUDA
# build of torch (about 5 GiB; it runs on CPU). Core vlmpack never needs it, so it lives apart from .venv.
REF_VENV  ?= .venv-ref
REF_PY    := $(REF_VENV)/bin/python
REF_STAMP := $(REF_VENV)/.installed
TORCHVISION ?= torchvision==0.29.1

.PHONY: install install-ref demo test test-core test-ref lint bench clean

install: $(STAMP)

install-ref: $(REF_STAMP)

# CPU torch first: without it pip would pull the CUDA build (several GB) for transformers/energon.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

$(REF_STAMP): pyproject.toml
	python3 -m venv $(REF_VENV)
	$(REF_PY) -m pip install -q --upgrade pip
	$(REF_PY) -m pip install -q $(TORCHVISION)
	$(REF_PY) -m pip install -q -e '.[test,ref]'
	touch $(REF_STAMP)

demo: install
	$(PY) -m vlmpack_offline.synthetic.demo demo_out
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/pack_wds.sh configs/demo.yaml

# The core suite without torchvision (2 processes), then the checks against the families' real processors
# that need it (tests marked torchvision; they skip in .venv).
test: test-core test-ref

test-core: install
	$(PY) -m pytest -n 2

test-ref: install-ref
	$(REF_PY) -m pytest -n 2 -m torchvision

lint: install
	$(VENV)/bin/ruff check vlmpack_offline tests benchmarks examples

clean:
	rm -rf demo_out
