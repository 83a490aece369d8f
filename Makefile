# vtrr — `make help` lists the targets.
SHELL := /bin/bash
MODULE_DEBUG   := target/debug/libvtrr.so
MODULE_RELEASE := target/release/libvtrr.so
APT_PACKAGES   := redis-server redis-tools libclang-dev valgrind chromium chromium-driver tmux
PORT           ?= 6379
# The instruction-count gate counts the Debian server under callgrind
# whatever VTRR_REDIS_SERVER says: make test runs it, the matrix skips it.
GATE_TEST      := instruction_counts_stay_within_the_committed_baseline
# make test runs every suite on both layouts on Redis 7.0. The matrix runs a
# representative set on each other server: on the keys layout the suites
# that meet the server's own behaviour (commands end to end, blocking, ACL,
# cluster, replication, the timer and schedules, Lua), not those whose subject is the
# module's own logic whatever the server (rankings, the bench's report) or
# that set their layout themselves and so run in the native pass (native,
# differential, defrag); on the native layout these. Of the slowest on the
# native layout, replication (about a minute) runs on the newest Redis,
# cluster on Valkey 9 (its own, atomic slot migration; Valkey 8 migrates as
# Redis does, met by the keys layout's cluster suite) and defrag on the
# newest of each (the two servers' defrag APIs); hostile input and hostile
# timing, whose subjects are the module's parsing and its own cost, run on
# Redis 7.0 only (make test, both layouts).
MATRIX_SUITES := --test lifecycle --test lease --test enqueue --test reclaim --test stats --test contract --test faults \
                 --test blocking --test security --test cluster --test replication --test timer --test tenants \
                 --test lua_compat --test worker --test schedule
NATIVE_MATRIX_SUITES := --test native --test differential --test lifecycle --test lease --test faults \
                        --test blocking
NATIVE_REPLICATION_SERVERS := redis-8.2
NATIVE_CLUSTER_SERVERS := valkey-9
NATIVE_DEFRAG_SERVERS := redis-8.2 valkey-9
# The integration suites mostly wait on servers (replicas syncing, clusters
# forming, timers): four tests at a time on two cores took the keys suites
# on Redis 7.4 from 92 s to 75 s, all passing; make test runs them so too.
MATRIX_TEST_THREADS := 4
# Random runs per core property in make test: 400 of the 1,000 a plain
# `cargo test --lib` runs (the unit and property tests took 98 s of CI's
# 25 minutes at 1,000, 44 s at 400; the debug build runs them).
TEST_PROPTEST_CASES := 400
# The Python package: make test runs its whole suite on the keys layout and,
# on the native one, all but the files whose subject no layout changes (the
# extras installed alone in fresh venvs, the web page in a browser, the
# terminal view). The matrix runs the files that talk to the server most
# directly (client, worker, CLI, cluster, sharded queue) on the keys layout
# of the newest Redis and Valkey. Its tests mostly wait on servers and
# worker processes, so three run at once.
# Both ends of the redis-py range pyproject.toml accepts are tested: make test
# and the matrix's Redis 8.2 pass with the newest (python/constraints.txt),
# the Valkey 9 pass with the oldest (python/.venv-oldest, make python-env-oldest).
PYTEST := .venv/bin/pytest -q -n 3
PYTEST_OLDEST := .venv-oldest/bin/pytest -q -n 3
PYTHON_LAYOUT_FREE := tests/test_install.py tests/test_web_browser.py tests/test_top.py
PYTHON_MATRIX_TESTS := tests/test_client.py tests/test_worker.py tests/test_cli.py tests/test_cluster.py tests/test_sharded.py
PYTHON_MATRIX_SERVERS := redis-8.2
PYTHON_OLDEST_SERVERS := valkey-9
# The Node package (node/): make test runs its whole node:test suite on the
# keys layout and, on the native one, the files a layout can change (the
# client, the worker, the cluster, ioredis, the kill -9 loop); packing and
# installing, the Python interop and the declarations' check against the
# module's table run once. Its tests mostly wait on servers and worker
# processes, so three files run at once. The summary reporter ends each pass
# with pytest's closing-line form, which .ci/run's count reads.
NODE_TEST := node --test --test-concurrency=3 --test-timeout=120000 --test-reporter=spec --test-reporter-destination=stdout \
             --test-reporter=./build/test/summary.js --test-reporter-destination=stdout
NODE_NATIVE_TESTS := client worker cluster ioredis chaos sharded
# The package runs on Node 20; its test runner's options (--test-concurrency,
# --test-timeout) came in 20.11.
NODE_RECENT := const [major, minor] = process.versions.node.split(".").map(Number); process.exit(major > 20 || (major === 20 && minor >= 11) ? 0 : 1)

.PHONY: help deps build release lint unit integration test test-matrix python-env python-env-oldest python-lint python-test node-env node-lint node-test fuzz soak bench bench-e2e bench-cluster bench-instructions bench-baseline run clean mutants

help: ## Show this help
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-20s %s\n", $$1, $$2}'

deps: ## Install what a fresh Debian machine lacks (redis-server, redis-tools, libclang-dev, valgrind, chromium and its driver for the web view's browser tests, tmux for vtrr top's, redis-py); say if Node 20+ and npm are missing
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@rustup component list --installed 2>/dev/null | grep -q rustfmt || rustup component add rustfmt clippy >/dev/null 2>&1 || true
	@python3 -c 'import redis' 2>/dev/null || python3 -m pip install --quiet redis 2>/dev/null \
	  || python3 -m pip install --quiet --break-system-packages redis 2>/dev/null \
	  || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq python3-redis >/dev/null; }
	@command -v npm >/dev/null && node -e '$(NODE_RECENT)' 2>/dev/null \
	  || echo "note: Node 20.11+ and npm not found: the Node package's targets (node-lint, node-test, part of make test) need them; Debian 12's nodejs is 18, see https://nodejs.org/en/download"

build: deps ## Build the module (debug): target/debug/libvtrr.so, and the bench program
	cargo build --lib --examples

release: deps ## Build the module (release): target/release/libvtrr.so
	cargo build --release

lint: deps ## rustfmt check and clippy with warnings denied
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

unit: deps ## Unit and property tests of the core (no server)
	cargo test --lib

integration: build release ## Integration suites against real redis-server processes (the instruction-count gate needs the release module)
	cargo test --tests --test '*'

test: deps lint build release python-env ## Everything CI runs: lint, unit, property and integration tests (on both layouts), the instruction-count gate, the Python and Node packages' suites
	@echo "=== $$(date +%T) built; the Rust tests, keys layout"
	VTRR_PROPTEST_CASES=$(TEST_PROPTEST_CASES) cargo test --lib
	RUST_TEST_THREADS=$(MATRIX_TEST_THREADS) cargo test --test '*'
	@echo "=== $$(date +%T) the Rust integration suites, native layout"
	VTRR_LAYOUT=native RUST_TEST_THREADS=$(MATRIX_TEST_THREADS) cargo test --test '*' -- --skip $(GATE_TEST)
	@echo "=== $$(date +%T) the Python package"
	$(MAKE) --no-print-directory python-lint python-test
	@echo "=== $$(date +%T) the Node package"
	$(MAKE) --no-print-directory node-lint node-test
	@echo "=== $$(date +%T) make test done"

python-env: ## A Python 3.12+ virtualenv in python/.venv with the package (editable) and its test tools
	bash scripts/python-env.sh

python-env-oldest: ## The same virtualenv with the oldest redis-py the package accepts, in python/.venv-oldest
	bash scripts/python-env.sh oldest

python-lint: python-env ## The Python package: ruff (lint and format) and mypy --strict
	cd python && .venv/bin/ruff check src tests && .venv/bin/ruff format --check src tests && .venv/bin/mypy

python-test: build python-env ## The Python package's pytest suite against real servers, on both layouts (VTRR_REDIS_SERVER as for cargo)
	cd python && $(PYTEST)
	cd python && VTRR_LAYOUT=native $(PYTEST) $(addprefix --ignore=,$(PYTHON_LAYOUT_FREE))

node-env: ## The Node package's dependencies in node/node_modules: npm ci from package-lock.json (again only when it or package.json changed)
	@command -v npm >/dev/null && node -e '$(NODE_RECENT)' 2>/dev/null \
	  || { echo "the Node package's tools need Node 20.11+ and npm, found $$(node --version 2>/dev/null || echo neither): install Node 20 (https://nodejs.org/en/download)"; exit 1; }
	@stamp=node/node_modules/.package-lock.json; \
	  if [ "$$stamp" -nt node/package-lock.json ] && [ "$$stamp" -nt node/package.json ]; then :; \
	  else cd node && npm ci --no-audit --no-fund; fi

node-lint: node-env ## The Node package: biome (lint and format) and tsc --noEmit (strict)
	cd node && npx biome check src test bench && npx tsc -p tsconfig.json --noEmit

node-test: build node-env python-env ## The Node package's node:test suite against real servers, on both layouts (VTRR_REDIS_SERVER as for cargo)
	cd node && npx tsc -p tsconfig.json && $(NODE_TEST) build/test/*.test.js
	cd node && VTRR_LAYOUT=native $(NODE_TEST) $(foreach file,$(NODE_NATIVE_TESTS),build/test/$(file).test.js)

test-matrix: build python-env python-env-oldest ## Integration suites on Redis 7.4, Redis 8.2, Valkey 8 and Valkey 9 (fetched into .servers/): a representative set on each layout and of the Python suite
	bash scripts/fetch-servers.sh
	@set -e; summary=""; for server in .servers/bin/*; do \
	  name=$$(basename $$server); echo "=== $$name: $$($$server --version)"; \
	  native="$(NATIVE_MATRIX_SUITES)"; \
	  case " $(NATIVE_REPLICATION_SERVERS) " in *" $$name "*) native="$$native --test replication";; esac; \
	  case " $(NATIVE_CLUSTER_SERVERS) " in *" $$name "*) native="$$native --test cluster";; esac; \
	  case " $(NATIVE_DEFRAG_SERVERS) " in *" $$name "*) native="$$native --test defrag";; esac; \
	  python="true"; \
	  case " $(PYTHON_MATRIX_SERVERS) " in *" $$name "*) python="$(PYTEST) $(PYTHON_MATRIX_TESTS)";; esac; \
	  case " $(PYTHON_OLDEST_SERVERS) " in *" $$name "*) python="$(PYTEST_OLDEST) $(PYTHON_MATRIX_TESTS)";; esac; \
	  if { VTRR_REDIS_SERVER=$$PWD/$$server RUST_TEST_THREADS=$(MATRIX_TEST_THREADS) cargo test $(MATRIX_SUITES) && \
	       VTRR_LAYOUT=native VTRR_REDIS_SERVER=$$PWD/$$server RUST_TEST_THREADS=$(MATRIX_TEST_THREADS) cargo test $$native && \
	       (cd python && VTRR_REDIS_SERVER=$$OLDPWD/$$server $$python); } 2>&1 \
	       | tee .servers/$$name.log | grep -E '^test result|FAILED|panicked|^[0-9]+ (passed|failed)'; \
	     [ $${PIPESTATUS[0]} -eq 0 ]; then result=pass; else result=FAIL; fi; \
	  passed=$$(awk '/^test result:/ {p += $$4} /^[0-9]+ (passed|failed)/ {for (i = 2; i <= NF; i++) if ($$i ~ /^passed/) p += $$(i-1)} END {print p+0}' .servers/$$name.log); \
	  summary="$$summary\n| $$name | $$result ($$passed tests) |"; \
	done; printf "| server | integration suite |\n|---|---|$$summary\n"; \
	! grep -q FAILED .servers/*.log

bench: release ## Module vs Lua vs Streams vs list, scaling, fairness, timer; writes BENCHMARKS.md
	cargo build --release --example bench
	VTRR_MODULE=$$PWD/$(MODULE_RELEASE) VTRR_REDIS_SERVER=$$PWD/scripts/pinned-server.sh \
	  taskset -c 1 target/release/examples/bench --out BENCHMARKS.md --plot docs/fairness.svg

bench-e2e: release python-env ## One worker process draining a queue: vtrr.Worker and the Node package's Worker (both layouts) vs BullMQ, Celery, RQ (installs them into bench/e2e/bullmq/node_modules, node/node_modules and .bench/; E2E_JOBS, E2E_ROUNDS); writes docs/e2e.md
	python/.venv/bin/python bench/e2e/run.py --out docs/e2e.md

bench-cluster: release python-env ## A 3-master Redis Cluster on loopback: a ShardedQueue's sub-queues over 1,000,000 tenants, workers per shard against one master, fairness across shards, a live reshard under load (CLUSTER_TENANTS, CLUSTER_JOBS, ROUNDS; VTRR_MODULE); writes docs/cluster-bench.md
	python/.venv/bin/python bench/cluster/run.py --out docs/cluster-bench.md

bench-instructions: release ## Instructions per operation, each system, counted by callgrind (exact, repeatable); writes docs/instructions.md
	cargo build --release --example bench
	counts=$$(mktemp -d); \
	VTRR_MODULE=$$PWD/$(MODULE_RELEASE) VTRR_REDIS_SERVER=$$PWD/scripts/callgrind-server.sh VTRR_CALLGRIND_DIR=$$counts \
	  target/release/examples/bench --instructions --out docs/instructions.md --json docs/instructions.json; \
	status=$$?; rm -rf $$counts; exit $$status

bench-baseline: release ## Rewrites the instruction-count gate's baseline (tiny sizes, release build, callgrind); commit it with an intended change
	cargo build --example bench
	counts=$$(mktemp -d); \
	VTRR_MODULE=$$PWD/$(MODULE_RELEASE) VTRR_REDIS_SERVER=$$PWD/scripts/callgrind-server.sh VTRR_CALLGRIND_DIR=$$counts \
	  target/debug/examples/bench --instructions --smoke --json examples/bench/instructions-baseline.json > /dev/null; \
	status=$$?; rm -rf $$counts; exit $$status

fuzz: build release ## The hostile campaigns: a long random-argument one (FUZZ_CALLS=200000), then hostile timing with the release module and its budgets, quiet and with every core busy, both layouts
	VTRR_FUZZ_CALLS=$${FUZZ_CALLS:-200000} cargo test --test hostile random_arguments -- --nocapture
	@status=0; for layout in keys native; do \
	  echo "=== hostile timing, $$layout layout, release module, budgets held"; \
	  VTRR_LAYOUT=$$layout VTRR_TIMING_BUDGETS=1 VTRR_MODULE=$$PWD/$(MODULE_RELEASE) \
	    cargo test --test hostile_timing -- --nocapture --test-threads 1 || status=1; \
	done; exit $$status

soak: build ## Cluster soak: the queue's slot moved ROUNDS times each way under traffic (ROUNDS=20; SERVER=path for another server)
	VTRR_SOAK_ROUNDS=$${ROUNDS:-20} VTRR_REDIS_SERVER=$${SERVER:-redis-server} cargo test --test cluster -- --nocapture

# The port is checked before anything is built (the first release build
# takes about 4 minutes on a 2-core machine), and a port found free is offered.
run: ## Start redis-server in the foreground with the module (redis.conf.example); the first build takes about 4 minutes on 2 cores
	@if (echo > /dev/tcp/127.0.0.1/$(PORT)) 2>/dev/null; then \
	  free=$$(for p in $$(seq 6380 6479); do (echo > /dev/tcp/127.0.0.1/$$p) 2>/dev/null || { echo $$p; break; }; done); \
	  echo "port $(PORT) is taken (another redis-server?): stop it, or run: make run PORT=$$free"; exit 1; fi
	@[ -f $(MODULE_RELEASE) ] || echo "building the module (release): about 4 minutes on a 2-core machine the first time"
	@$(MAKE) --no-print-directory release
	redis-server redis.conf.example --port $(PORT)

clean: ## Remove build output
	cargo clean

mutants: deps ## Mutation testing of the core against its unit and property tests (cargo-mutants; FILES="src/core/a.rs src/core/b.rs" narrows it; CASES random runs per property, 64)
	@command -v cargo-mutants >/dev/null || cargo install --locked cargo-mutants
	VTRR_PROPTEST_CASES=$${CASES:-64} cargo mutants --no-shuffle -j 2 $(foreach file,$(or $(FILES),src/core/*.rs),-f $(file)) -- --lib
