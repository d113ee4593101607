# Two commands do everything on a fresh machine:
#   make demo   install into .venv, generate the demo data, run scan -> bucket -> plan -> write -> verify
#   make test   install into .venv, run the test suite
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint bench clean

install: $(STAMP)

# CPU torch first: without it pip would pull the CUDA build (several GB) for transformers/energon.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: install
	$(PY) -m vlmpack_offline.synthetic.demo demo_out
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/pack_wds.sh configs/demo.yaml

test: install
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check vlmpack_offline tests benchmarks examples

clean:
	rm -rf demo_out
