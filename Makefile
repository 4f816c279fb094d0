# kafka-lookupd: `make run` to try it, `make test` to check it (see README.md).
PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(VENV)/bin/pip
STAMP   := $(VENV)/.installed
# The log dir `make run` serves; a sample is generated there when it does not exist.
LOG_DIR ?= sample-data
SOCKET  ?= run/lookupd.sock
# Debian packages the tests and benchmarks drive for real: FUSE (fusepy loads libfuse.so.2),
# redis-server (the benchmark's reference service), util-linux's setpriv, systemd's tools.
DEB_PACKAGES := fuse3 libfuse2 redis-server util-linux systemd

.PHONY: all venv run test bench bench-quick system-deps node-deps clean

all: venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,bench]'
	touch $@

venv: $(STAMP)

$(LOG_DIR):
	$(PY) -m lookupd demo-data $(LOG_DIR)

run: venv $(LOG_DIR)
	$(PY) -m lookupd dump $(LOG_DIR)

# Installs missing Debian packages when running as root; otherwise says what is missing.
system-deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "missing Debian packages (tests that need them skip):$$missing"; fi; \
	fi

test: venv system-deps
	$(PY) -m pytest -q

bench: venv system-deps
	$(PY) bench/bench_index.py

bench-quick: venv system-deps
	$(PY) bench/bench_index.py --quick

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis lookupd/*.so
