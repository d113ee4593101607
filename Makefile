# Two commands do everything on a fresh machine:
#   make demo   install .venv from the lock, generate the demo data, run scan -> bucket -> plan -> write -> verify
#   make test   install .venv and .venv-ref from the lock, run the suite in both, build the docs, print the versions
#
# Every environment installs exactly requirements/*.txt (pip-tools locks with hashes); see docs/install.md.
#   make lock          refresh the locks to the newest releases the registry serves (then run make test)
#   make test-latest   the suite against the newest releases, unlocked: an early warning, not what CI gates on
#   make test-oldest   the core suite at pyproject.toml's lower bounds (requirements/oldest.txt)
#   make docs          the documentation site, offline, warnings as errors (site/)
#   make gpu-prep      the GPU suite's data and wheels in .gpu-suite/, to carry to a GPU machine (docs/performance.md)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
CORE_LOCK ?= requirements/core.txt
# The reference environment: the families' real HF processors need torchvision, which pairs with the CUDA
# build of torch (about 5 GiB; it runs on CPU). Core vlmpack never needs it, so it lives apart from .venv.
REF_VENV  ?= .venv-ref
REF_PY    := $(REF_VENV)/bin/python
REF_STAMP := $(REF_VENV)/.installed
REF_LOCK  ?= requirements/ref.txt
# NeMo Automodel, installed with --no-deps after the lock in .venv and .venv-ref (it pins an older transformers;
# its VLM collaters import with the lock's packages): requirements/automodel.in, bumped by hand, not by make lock.
NODEPS_LOCK := requirements/automodel.txt
# A training image without vlmpack: megatron-energon alone opens every packed layout (tests/test_energon_portability.py).
ENERGON_VENV  := .venv-energon
ENERGON_STAMP := $(ENERGON_VENV)/.installed
LOCK_VENV := .venv-lock
LATEST_VENV := .venv-latest
OLDEST_VENV := .venv-oldest
# pip-compile's flags: hashes for every file, no registry address written (the machine's pip configuration
# names the registry), setuptools / pip kept in the lock (the editable install builds without isolation).
COMPILE := CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile -q --generate-hashes --allow-unsafe \
	--no-emit-index-url --no-emit-find-links --no-emit-trusted-host --strip-extras --upgrade

.PHONY: install install-ref install-energon demo test test-core test-ref test-latest test-oldest versions docs config-doc lock lint clean gpu-prep

install: $(STAMP)

install-ref: $(REF_STAMP)

install-energon: $(ENERGON_STAMP)

# A fresh venv, the lock with --require-hashes (every dependency pinned and hashed, so nothing unlocked can
# slip in), the no-deps file $(3) if given (hashed too), then vlmpack itself without dependencies or build
# isolation (its build backend is in the lock).
define install_locked
	python3 -m venv --clear $(1)
	$(1)/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r $(2)
	$(if $(3),$(1)/bin/python -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r $(3))
	$(1)/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(1)/bin/python -c "$$FLAC_SCAN_CHECK"
	$(1)/bin/python scripts/lock_check.py --quiet $(2) $(if $(3),--with $(3))
endef
# vlmpack's one compiled module is optional (pyproject.toml): say so where the install could not build it.
export FLAC_SCAN_CHECK := from vlmpack_offline.media import flac_walk; flac_walk._flac_scan or print( \
	'note: vlmpack_offline/media/_flac_scan.c was not built (no C compiler or Python headers?): FLAC files are' \
	' probed in numpy, 2-5x slower, with the same counts (docs/install.md)')

$(STAMP): pyproject.toml $(CORE_LOCK) $(NODEPS_LOCK)
	$(call install_locked,$(VENV),$(CORE_LOCK),$(NODEPS_LOCK))
	touch $(STAMP)

$(REF_STAMP): pyproject.toml $(REF_LOCK) $(NODEPS_LOCK)
	$(call install_locked,$(REF_VENV),$(REF_LOCK),$(NODEPS_LOCK))
	touch $(REF_STAMP)

# Not vlmpack itself: only the lock (megatron-energon, torch and their dependencies).
$(ENERGON_STAMP): requirements/energon.txt
	python3 -m venv --clear $(ENERGON_VENV)
	$(ENERGON_VENV)/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r requirements/energon.txt
	$(ENERGON_VENV)/bin/python scripts/lock_check.py --quiet requirements/energon.txt
	touch $(ENERGON_STAMP)

demo: install
	$(PY) -m vlmpack_offline.synthetic.demo demo_out
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/pack_wds.sh configs/demo.yaml

# The core suite without torchvision (2 processes), then the checks against the families' real processors
# that need it (tests marked torchvision; they skip in .venv), the docs, and the versions both ran with.
test: test-core test-ref docs versions

test-core: install install-energon
	$(PY) -m pytest -n 2

# torchcodec (transformers' and qwen-vl-utils' default video reader) loads FFmpeg's shared libraries, which a
# machine may lack: the reference suite lends it PyAV's bundled ones (vlmpack_offline/synthetic/torchcodec_env.py).
test-ref: install-ref
	LD_LIBRARY_PATH="$$($(REF_PY) -m vlmpack_offline.synthetic.torchcodec_env $(REF_VENV)/ffmpeg-libs)" \
		$(REF_PY) -m pytest -n 2 -m torchvision

versions: install install-ref
	$(PY) scripts/lock_check.py $(CORE_LOCK) --with $(NODEPS_LOCK)
	$(REF_PY) scripts/lock_check.py $(REF_LOCK) --with $(NODEPS_LOCK)

docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# docs/config.md from the comments beside each field of vlmpack_offline/config.py (a test fails when stale).
config-doc: install
	$(PY) -m vlmpack_offline.config_reference > docs/config.md

# Refresh every lock to the newest releases (pip's configured registry and find-links decide what exists).
# requirements/automodel.txt is not compiled (it installs with --no-deps): bump it by hand (automodel.in).
lock:
	python3 -m venv --clear $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r requirements/tools.txt
	$(COMPILE) -o requirements/tools.txt requirements/tools.in
	$(COMPILE) --extra test --extra docs -o $(CORE_LOCK) pyproject.toml requirements/core.in
	$(COMPILE) -o requirements/energon.txt requirements/energon.in
	$(COMPILE) --extra test --extra ref -o $(REF_LOCK) pyproject.toml requirements/ref.in
	$(COMPILE) --extra test -o requirements/oldest.txt pyproject.toml requirements/oldest.in

# Unlocked, split like `make test`: the core suite where torchvision is absent (its tests of the PIL paths
# assume so), the reference checks where it is there; then what moved since the locks.
test-latest: install-energon
	python3 -m venv --clear $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q --disable-pip-version-check --upgrade -e '.[test,docs]'
	$(LATEST_VENV)/bin/python -m pytest -n 2
	python3 -m venv --clear $(LATEST_VENV)-ref
	$(LATEST_VENV)-ref/bin/python -m pip install -q --disable-pip-version-check --upgrade torchvision
	$(LATEST_VENV)-ref/bin/python -m pip install -q --disable-pip-version-check --upgrade -e '.[test,ref]'
	$(LATEST_VENV)-ref/bin/python -m pytest -n 2 -m torchvision
	$(LATEST_VENV)/bin/python scripts/lock_check.py --report-only $(CORE_LOCK)
	$(LATEST_VENV)-ref/bin/python scripts/lock_check.py --report-only $(REF_LOCK)

test-oldest: install-energon
	$(call install_locked,$(OLDEST_VENV),requirements/oldest.txt)
	$(OLDEST_VENV)/bin/python -m pytest -n 2

# benchmarks/gpu_suite.py's carried folder, built here (no network there): packs by the real stages, the wheels the
# GPU machine lacks, then the check that the working tree plus it fit the 64 MiB a device call carries.
gpu-prep: install
	$(PY) benchmarks/gpu_suite_prep.py --out .gpu-suite

lint: install
	$(VENV)/bin/ruff check vlmpack_offline tests benchmarks examples scripts

clean:
	rm -rf demo_out site
