# tidemark: `make run` for a first pipeline on generated data, `make test` for the suite.
PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .uv/bin/uv
VENV := .venv
export UV_PROJECT_ENVIRONMENT := $(VENV)
TM := $(VENV)/bin/tidemark
DEMO := demo

.PHONY: install run test test-lines test-unit test-integration lint typecheck bench chromium azurite mariadb prometheus kafka kafka-demo clean

$(UV):
	$(PYTHON) -m venv .uv
	.uv/bin/pip install --quiet uv==$(UV_VERSION)

$(VENV)/.installed: $(UV) pyproject.toml uv.lock setup.py src/tidemark/storage/_fastwalk.c src/tidemark/spark/jvm/TidemarkStateRewrite.scala \
		src/tidemark/spark/jvm/TidemarkPlanProbe.scala
	$(UV) sync --frozen --quiet --all-extras
	# Bytecode for tidemark's own modules too (uv compiles site-packages): CLI startup 0.75 s -> 0.3 s here.
	$(VENV)/bin/python -m compileall -q src >/dev/null
	# The state helper of `state repartition` and `check`, compiled against the pyspark wheel's jars (~10-40 s);
	# without Java it is built on first use instead.
	$(VENV)/bin/python -m tidemark.spark.jvm >/dev/null
	touch $@

install: $(VENV)/.installed

# Creates the venv, writes an example config and generated events, runs the pipeline, prints where the output is.
run: install
	rm -rf $(DEMO)
	$(TM) init $(DEMO)
	$(TM) run $(DEMO)/tidemark.toml --available-now
	@echo "next: $(TM) checkpoint inspect $(DEMO)/checkpoint   (or '. $(VENV)/bin/activate' once, then plain 'tidemark ...')"

# Headless Chromium renders the HTML report in the report tests (Debian package).
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# Azurite, the Azure Storage emulator the storage tests start on loopback (npm, pinned by tools/azurite's lock file).
AZURITE := tools/azurite/node_modules/.bin/azurite-blob
$(AZURITE): tools/azurite/package.json tools/azurite/package-lock.json
	npm ci --silent --no-audit --no-fund --prefix tools/azurite
	touch $@

azurite: $(AZURITE)

# Apache Kafka's broker for the Kafka tests: its jars from Maven Central (pinned by tools/kafka/pom.xml) stay in
# ~/.m2 (64 MB); only the classpath is written here: 5-9 s from an empty ~/.m2, 1.7 s when the jars are there.
KAFKA_CLASSPATH := tools/kafka/classpath.txt
# Each jar is then checked against tools/kafka/broker.lock.json (sha256 and size, as tidemark's own jar lock does):
# a jar Maven hands over is not trusted on first use; tests/kafka_broker.py checks again before each broker starts.
$(KAFKA_CLASSPATH): tools/kafka/pom.xml tools/kafka/broker.lock.json
	@command -v mvn >/dev/null 2>&1 \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven >/dev/null)
	mvn -q -B -f tools/kafka/pom.xml dependency:build-classpath -Dmdep.outputFile=$(CURDIR)/$@.new
	$(PYTHON) tools/kafka/lock.py verify $@.new
	mv $@.new $@

kafka: $(KAFKA_CLASSPATH)

# Kafka from the docs alone (docs/kafka.md, "Try it here"): the tests' broker, a topic with demo events flowing in,
# and ready configs in demo-kafka/; Ctrl-C stops the broker.
kafka-demo: install kafka
	$(VENV)/bin/python tools/kafka/demo.py $(DEMO)-kafka

# A real Prometheus, promtool and Pushgateway for the metrics tests (Debian packages). The tests start their own
# binaries on free loopback ports; the packages' services are not used.
prometheus:
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 \
		&& command -v prometheus-pushgateway >/dev/null 2>&1 \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			prometheus prometheus-pushgateway >/dev/null)

# MariaDB, the SQL metadata store of the Azurite the ABFS tests and the seed-incident benchmark use (AZURITE_DB):
# Debian's package, installed without letting Debian start its system service (policy-rc.d says no while apt runs;
# one that was there before is left alone). The tests start their own server in their own data folder.
mariadb:
	@command -v mariadbd >/dev/null 2>&1 && command -v mariadb-install-db >/dev/null 2>&1 || ( \
		made=; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d \
			&& chmod +x /usr/sbin/policy-rc.d && made=1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			mariadb-server >/dev/null; rc=$$?; [ -n "$$made" ] && rm -f /usr/sbin/policy-rc.d; exit $$rc)

lint: install
	$(VENV)/bin/ruff check src tests benchmarks setup.py
	$(VENV)/bin/ruff format --check src tests benchmarks setup.py
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo

# The whole suite on the default Spark (its smoke tests write what they proved to build/smoke/), then the smoke
# subset on every other Spark line and Python, then the README's compatibility table against build/smoke/ and the fault
# matrix of docs/reliability.md against build/reliability/ (what the tests marked @pytest.mark.reliability proved).
# Two pytest-xdist workers: the suite waits on JVM starts, kills, brokers and stores as much as it computes, so two
# on two cores take less than one (a module's tests, and all of tests/storage/, stay on one worker: tests/conftest.py).
# --durations: the 40 slowest tests in CI's log; build/junit-default.xml: every test's seconds (tools/test_time.py sums
# them by module: the issues' shares of the time budget).
test: install chromium azurite mariadb prometheus kafka lint
	rm -rf build/smoke build/reliability
	TIDEMARK_SMOKE_RESULTS=build/smoke/default-py3.11.json TIDEMARK_RELIABILITY_RESULTS=build/reliability/default-py3.11.json \
		$(VENV)/bin/pytest -q -p no:cacheprovider --timeout=600 --durations=40 -n 2 --junitxml=build/junit-default.xml
	$(MAKE) --no-print-directory test-lines

# Each other Spark line on Python 3.11 and each other Python on the default Spark: environments built the way users
# install tidemark, cached in ~/.cache/tidemark-ci/smoke keyed by the pins and uv.lock (tools/spark_lines/smoke.py).
test-lines: install
	$(PYTHON) tools/spark_lines/smoke.py run
	$(PYTHON) tools/spark_lines/compat.py
	$(PYTHON) tools/reliability.py

# The unit tests start no JVM, but some start Prometheus, Pushgateway and Chromium (Debian packages).
test-unit: install chromium prometheus
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/unit

bench: install
	@echo "benchmarks are run one by one: see BENCHMARKS.md"

clean:
	rm -rf $(VENV) .uv $(DEMO) $(DEMO)-kafka .pytest_cache .mypy_cache .ruff_cache tools/azurite/node_modules tools/kafka/classpath.txt
