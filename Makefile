# metashift — `make test` and `make demo` set up everything they need on a fresh Debian machine
# (as root): Debian packages, a virtualenv at .venv with the project and its test extras.
# Running either twice is fast: each step is skipped when its stamp is newer than its inputs.
# A stock Apache Pulsar release (broker, bookie, pulsar-admin: packaging/pulsar/) is fetched by Maven
# from Maven Central into .cache/pulsar (ignored by git; `make clean` removes it).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# krb5-*: the tests' Kerberos KDC (secured ZooKeeper); libkrb5-dev, gcc and python3-dev build the
# gssapi package (PyPI serves it as source only)
DEBS := zookeeper etcd-server etcd-client default-jre-headless default-jdk-headless libcurator-recipes-java libcurator-framework-java libcurator-client-java openssl util-linux maven prometheus xz-utils systemd \
	krb5-kdc krb5-admin-server krb5-user libkrb5-dev gcc python3-dev
# three test processes on two cores: most of a test's time is spent waiting on servers, sessions and
# Spark, so three overlap well (the suite on a fresh clone here: 1,312 tests in 1,727 s with -n 3,
# another Pulsar sandbox loading the machine, against 2,904 s with -n 2). `make pytest PYTEST_ARGS=`
# runs them in one process
PYTEST_ARGS ?= -n 3 --dist worksteal

# The Spark driver's class archive (spark/session.py): every Spark context the tests and the demo
# start maps it, and starts in about half the time and CPU
SPARK_ARCHIVE := .cache/spark/driver.jsa
export METASHIFT_SPARK_CLASS_ARCHIVE := $(CURDIR)/$(SPARK_ARCHIVE)

.PHONY: setup test lint pytest demo demo-copy demo-pulsar bench proto clean oxia

PULSAR_CACHE := .cache/pulsar
PULSAR_POMS := packaging/pulsar/pom.xml packaging/pulsar/server/pom.xml packaging/pulsar/server-4.2/pom.xml \
	packaging/pulsar/admin/pom.xml packaging/pulsar/settings.xml
# settings.xml reads every repository from Maven Central; the local repository stays in the cache
MVN := mvn -B -q -s packaging/pulsar/settings.xml -Dmaven.repo.local=$(CURDIR)/$(PULSAR_CACHE)/m2 \
	-Dpulsar.cache=$(CURDIR)/$(PULSAR_CACHE)

setup: .stamp-debs .stamp-venv $(PULSAR_CACHE)/.stamp oxia $(SPARK_ARCHIVE)

# The Oxia server of the tests (no registry carries it): unpacked from the project's shared tools,
# beside the repository (or, for a clone made elsewhere, beside the local repository it was cloned
# from), into .cache/oxia; METASHIFT_OXIA names another binary instead.
ORIGIN := $(shell git remote get-url origin 2>/dev/null)
OXIA_INSTALL := $(firstword $(wildcard ../shared/tools/oxia/install.sh $(if $(filter /%,$(ORIGIN)),$(ORIGIN)/../shared/tools/oxia/install.sh)) ../shared/tools/oxia/install.sh)
oxia: .stamp-debs
	@if [ -n "$$METASHIFT_OXIA" ]; then \
		test -x "$$METASHIFT_OXIA" || { echo "METASHIFT_OXIA=$$METASHIFT_OXIA is not an executable file"; exit 1; }; \
	elif [ ! -x .cache/oxia/oxia ]; then \
		test -f $(OXIA_INSTALL) || { echo "no Oxia server: $(OXIA_INSTALL) is missing (or set METASHIFT_OXIA to an oxia binary)"; exit 1; }; \
		sh $(OXIA_INSTALL) .cache/oxia >/dev/null || { echo "installing the Oxia server from $(OXIA_INSTALL) failed"; exit 1; }; \
	fi

.stamp-debs: Makefile
	@if ! dpkg -s $(DEBS) >/dev/null 2>&1; then \
		echo "installing Debian packages: $(DEBS)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEBS) >/dev/null; \
	fi
	@touch $@

$(SPARK_ARCHIVE): .stamp-venv spark/class_archive.py
	@echo "making the Spark driver's class archive ($@) ..."
	@$(BIN)/python -m metashift.spark.class_archive $@ >/dev/null 2>&1 || \
		{ echo "making $@ failed: run '$(BIN)/python -m metashift.spark.class_archive $@' to see why"; exit 1; }

# metashift (the runtime, with the test extras) and its lab (lab/: the sandbox, the Pulsar harness,
# the benchmarks, a distribution of its own), both editable
.stamp-venv: pyproject.toml lab/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "metashift needs Python 3.11 or newer ($(PYTHON) is older)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	PIP_DISABLE_PIP_VERSION_CHECK=1 $(BIN)/pip install -q -e '.[test]' -e ./lab
	@$(BIN)/python -c 'import metashift, metashift_lab' || { echo "installing metashift into $(VENV) failed"; exit 1; }
	@touch $@

# the Pulsar releases' jars: 4.0.7/lib/ and 4.2.4/lib/ (broker, bookie, PulsarClusterMetadataSetup) and
# admin-lib/ (pulsar-admin), each with every dependency and the log4j2 binding
$(PULSAR_CACHE)/.stamp: $(PULSAR_POMS) | .stamp-debs
	@echo "fetching the Pulsar releases with Maven into $(PULSAR_CACHE) (once) ..."
	rm -rf $(PULSAR_CACHE)/lib $(PULSAR_CACHE)/4.0.7 $(PULSAR_CACHE)/4.2.4 $(PULSAR_CACHE)/admin-lib
	$(MVN) -f packaging/pulsar/pom.xml dependency:copy-dependencies
	@touch $@

# mypy and import-linter read the package through build/view (packaging/source_view.py): they do
# not follow pyproject's package-dir mapping of the top-level folders into metashift
VIEW := build/view
lint: setup
	$(BIN)/python packaging/source_view.py $(VIEW)
	$(BIN)/ruff check .
	$(BIN)/mypy
	cd $(VIEW) && $(CURDIR)/$(BIN)/lint-imports --config $(CURDIR)/pyproject.toml

pytest: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test: setup lint pytest

# the whole migration on this machine (metashift sandbox: ZooKeeper -> etcd with agents and writers)
demo: setup
	$(BIN)/metashift sandbox

# the copy alone (Spark copy + verification of a sample tree)
demo-copy: setup
	$(BIN)/metashift demo

# the migration of a real Pulsar cluster (brokers, a bookie, producers and consumers) on this machine
demo-pulsar: setup
	$(BIN)/metashift sandbox --pulsar

bench: setup
	$(BIN)/python bench/store_latency.py

# regenerate the Python code of proto/ (committed; tests/test_agent.py fails when it is stale)
proto: setup
	$(BIN)/python proto/generate.py

clean:
	rm -rf $(VENV) .stamp-* .cache .mypy_cache .ruff_cache .pytest_cache *.egg-info .import_linter_cache
