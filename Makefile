# pimphony: every target runs inside .venv/, created and filled on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup sim test test-all bench lint clean rtl wave area cosim-campaign wheel-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/pimphony precompile
	touch $(STAMP)

setup: $(STAMP)  ## create .venv, install everything from PyPI, compile the numba kernels once

sim: $(STAMP)  ## default demo: QK^T, SV and FC GEMV under static, ping-pong and DCS
	$(BIN)/pimphony demo

test: $(STAMP)  ## the test suite CI runs (slow cases excluded), one worker per core (a test file per worker); per-test times in build/test-report.xml
	$(BIN)/python -m pytest -q -m "not slow" -n auto --dist loadfile --durations=25 --junitxml=build/test-report.xml

test-all: $(STAMP)  ## every test, including the slow ones
	$(BIN)/python -m pytest -q -n auto --dist loadfile

bench: $(STAMP)  ## CLI start-up, TLM speed per scheduler, decode-step and RTL simulation speed
	$(BIN)/pimphony bench

rtl: $(STAMP)  ## Verilog of every RTL block into build/rtl/
	$(BIN)/pimphony rtl

# make wave KERNEL=qk TOKENS=256 DH=128 SCHED=dcs  (or KERNEL=gemv DOUT=256 DIN=256)
# make wave BLOCK=dpa | bank_slice | pingpong | dcs | static_sched
KERNEL ?= qk
TOKENS ?= 256
DH     ?= 128
DOUT   ?= 256
DIN    ?= 256
SCHED  ?= dcs
BLOCK  ?=
wave: $(STAMP)  ## VCD + GTKWave save file under build/waves/, then its summary
	$(BIN)/pimphony wave record --kernel $(KERNEL) \
	    $(if $(filter gemv,$(KERNEL)),--dout $(DOUT) --din $(DIN),--tokens $(TOKENS) --dh $(DH)) \
	    --sched $(SCHED) $(if $(BLOCK),--block $(BLOCK))

# make cosim-campaign N=10000 SEED=0 [PRESET=aim-ramulator] [BLOCK=dcs] [WORKERS=2]
N      ?= 1000
SEED   ?= 0
PRESET ?=
cosim-campaign: $(STAMP)  ## N random + compiler streams (items) per RTL block, RTL vs TLM
	$(BIN)/pimphony verify campaign --block $(or $(BLOCK),all) --streams $(N) --seed $(SEED) \
	    $(if $(PRESET),--preset $(PRESET)) $(if $(WORKERS),--workers $(WORKERS))

area: $(STAMP)  ## Yosys synth + stat of every block at the papers' parameters
	$(BIN)/pimphony area

wheel-check: $(STAMP)  ## build the wheel, install it in a fresh venv, run it outside the repo
	.ci/wheel_check

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf build .pytest_cache
