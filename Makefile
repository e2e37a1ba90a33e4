# Tasks people run. Everything installs itself into .venv (pip cache reused between runs).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PIPELINE_STAMP := $(VENV)/.pipeline-installed
PYTEST_ARGS ?=

.PHONY: install tools etcd run cluster compose-build compose-up compose-up-secure compose-down test test-all test-unit test-cluster lint bench bench-quick bench-cluster bench-eos bench-tls bench-clients bench-scaling bench-startup bench-recovery bench-topic-admin compat compat-fast verify parity clean pipeline-setup pipeline-demo pipeline-bench

RUN_STAMP := $(VENV)/.run-installed

# The broker alone (make run); the test and dev extras come with make install / make test.
$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(PY) -m pip install -q -e '.[test,dev]'
	touch $(STAMP)

install: $(STAMP)

# External tools the tests drive: kcat and etcd (Debian) and Apache Kafka's own CLI (Maven).
tools: install etcd
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat) >/dev/null 2>&1 \
	    || echo "warning: kcat could not be installed; kcat tests will be skipped"; \
	  else echo "warning: not root, kcat not installed; kcat tests will be skipped"; fi; }
	@if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 && [ -x compat/kafka/fetch.sh ]; then \
	  bash compat/kafka/fetch.sh || echo "warning: Apache Kafka jars unavailable; kafka_tools tests will be skipped"; fi

# etcd, the cluster's metadata store (Debian's etcd-server), and etcdctl (etcd-client) for its
# members' operations (docs/operations.md); a single broker needs neither.
etcd:
	@{ command -v etcd && command -v etcdctl; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client) >/dev/null 2>&1 \
	    || { echo "error: etcd-server and etcd-client could not be installed"; exit 1; }; \
	  else echo "error: etcd is not installed and this is not root: apt-get install etcd-server etcd-client"; exit 1; fi; }

# The Spark pipeline: pyspark (PyPI) and Spark's Kafka connector (4 jars from Maven Central, cached in
# ~/.cache/kbroker/spark-kafka-4.2.0, resolved only when missing). Without Java or Maven the
# pipeline tests are skipped with the reason.
$(PIPELINE_STAMP): $(STAMP)
	@if command -v java >/dev/null 2>&1; then \
	  $(PY) -m pip install -q -e '.[pipeline]' && touch $@ \
	    || echo "warning: pyspark could not be installed; pipeline tests will be skipped"; \
	else echo "warning: Java 17 not found; pyspark not installed, pipeline tests will be skipped"; fi

pipeline-setup: $(PIPELINE_STAMP)
	@if command -v java >/dev/null 2>&1; then \
	  bash pipeline/fetch_jars.sh >/dev/null \
	    || echo "warning: Spark's Kafka connector jars unavailable; pipeline tests will be skipped"; fi

pipeline-demo: pipeline-setup
	$(PY) -m pipeline.demo $(ARGS)

pipeline-bench: pipeline-setup
	$(PY) bench/pipeline_bench.py $(ARGS)

run: $(RUN_STAMP)
	$(PY) -m broker $(ARGS)

# Three nodes on loopback, each a broker (ports 9092-9094) and an etcd member; Ctrl-C stops them all.
cluster: $(RUN_STAMP) etcd
	$(PY) -m tools.devcluster --nodes 3 --data-dir kbroker-cluster $(ARGS)

# The same three brokers and etcd in docker-compose, published on 127.0.0.1:19092-19094.
# compose/stack.sh installs docker.io, docker-compose and debootstrap (apt) when missing, starts
# dockerd when none answers, and makes the base image (debootstrap) once.
compose-build:
	bash compose/stack.sh build

compose-up:
	bash compose/stack.sh up

# The same with SASL_SSL on every listener; prints the admin's client settings.
compose-up-secure:
	bash compose/stack.sh up --secure

compose-down:
	bash compose/stack.sh down

test: tools pipeline-setup
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: tools pipeline-setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-cluster: tools
	$(PY) -m pytest tests/cluster $(PYTEST_ARGS)

test-unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check protocol storage metadata coordinator security broker tools pipeline tests bench

bench: tools
	$(PY) bench/produce_bench.py --target both

bench-quick: tools
	$(PY) bench/produce_bench.py --target ours --quick

# Three-node clusters (RF 3, acks=all), ours then Apache Kafka: throughput, latency, CPU, failover.
bench-cluster: tools
	$(PY) bench/cluster_bench.py --target both $(ARGS)

# The same clusters: transactions (10 x 1 KB on RF 3) and kill -9 of the transaction and group
# coordinators, ours then Apache Kafka.
bench-eos: tools
	$(PY) bench/cluster_bench.py --target both --phases eos $(ARGS)

# What TLS 1.3 + SCRAM cost on one broker (throughput, CPU per GB, new connections), ours then
# Apache Kafka.
bench-tls: tools
	$(PY) bench/tls_bench.py --target both $(ARGS)

# One broker with 2000 idle connections, then 500 transactional producers, ours then Kafka:
# memory per connection and per producer id.
bench-clients: tools
	$(PY) bench/clients_bench.py --target both $(ARGS)

# Three nodes at 60, 1000, 3000 and 10000 partitions (RF 3), ours then Kafka: idle CPU, RSS, acks=all
# latency at 200 records/s, ISR fill, restart; a table, JSON and a PNG in bench/results/.
bench-scaling: tools
	$(PY) bench/scaling_bench.py --target both $(ARGS)

# A broker for a test: start to first Metadata and to first acknowledged record, EmbeddedBroker
# then Apache Kafka 4.3.1 (and its container where Docker holds the image).
bench-startup: tools
	$(PY) bench/startup_bench.py --target both $(ARGS)

# One broker holding 10000 partitions with data: SIGTERM to exit, then start to serving again
# after a clean shutdown and after kill -9, ours then Apache Kafka 4.3.1.
bench-recovery: tools
	$(PY) bench/recovery_bench.py --target both $(ARGS)

# One broker: a 10000-partition topic set (10x1000, 1000x10, 10000x1) created, described and
# deleted, ours then Apache Kafka 4.3.1.
bench-topic-admin: tools
	$(PY) bench/topic_admin_bench.py --target both $(ARGS)

# Other projects' test suites and Kafka's tools against fresh brokers (one kbroker node, three,
# then Apache Kafka 4.3.1 likewise); rewrites the matrix in compat/README.md. ARGS narrows it,
# e.g. ARGS="--suite kcat --target kbroker".
compat: tools
	$(PY) -m compat.run $(ARGS)

compat-fast: tools
	$(PY) -m compat.run --fast --target kbroker $(ARGS)

# kbroker-verify's standard matrix (workloads x faults x targets: the devcluster, then Apache Kafka
# 4.3.1), 60 s a run; rewrites the table in docs/verify.md. ARGS narrows it, e.g.
# ARGS="--targets devcluster --workloads copier --faults 'kill9,pause,term,client-kill' --repeat 5".
VERIFY_STAMP := $(VENV)/.verify-installed
$(VERIFY_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[verify]'
	touch $@

verify: tools $(VERIFY_STAMP)
	$(PY) -m tools.verify.matrix $(ARGS)

# Every module that runs against Apache Kafka as well (the exactly-once acceptance modules, the ACL
# table, fetch sessions, quotas, connection limits, transaction version 2, fenced brokers): once
# against kbroker, then against Apache Kafka 4.3.1 (KBROKER_EOS_TARGET=kafka); the side-by-side
# table in docs/parity.md, the JUnit files in bench/results/parity/.
PARITY_MODULES = $(shell grep -l -e KBROKER_EOS_TARGET -e tests.support.parity -e IS_KAFKA -e ON_KAFKA \
                   tests/integration/test_*.py tests/cluster/test_*.py)
PARITY_OUT := bench/results/parity
parity: tools
	@mkdir -p $(PARITY_OUT)
	-$(PY) -m pytest -m "not slow or parity_slow" $(PARITY_MODULES) --junitxml=$(PARITY_OUT)/kbroker.xml $(PYTEST_ARGS)
	-KBROKER_EOS_TARGET=kafka $(PY) -m pytest -m "not slow or kafka_parity" $(PARITY_MODULES) \
	  --junitxml=$(PARITY_OUT)/kafka.xml $(PYTEST_ARGS)
	$(PY) -m tests.support.parity_report $(PARITY_OUT)/kbroker.xml $(PARITY_OUT)/kafka.xml docs/parity.md

clean:
	rm -rf $(VENV) kbroker-data kbroker-cluster .pytest_cache
