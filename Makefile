# `make test` is the project's one test command; CI runs it through .ci/run.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DELETE_ON_ERROR:
.DEFAULT_GOAL := test
MAKEFLAGS += --no-builtin-rules

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DESTDIR ?=
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

# Root needs no sudo; anyone else gets it where it exists, else apt-get says why it failed.
SUDO := $(if $(filter 0,$(shell id -u)),,$(shell command -v sudo 2>/dev/null))

.PHONY: deps deps-redis test demo bench install-c dist

# The demo needs only a redis-server binary (it starts its own server on loopback).
deps-redis:
	@command -v redis-server >/dev/null || { \
	  $(SUDO) apt-get update; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server; }

# Only what is missing, so a machine that has everything never waits on apt-get update.
deps:
	@missing=(); \
	command -v redis-server >/dev/null || missing+=(redis-server); \
	command -v valgrind >/dev/null || missing+=(valgrind); \
	command -v pkg-config >/dev/null || missing+=(pkg-config); \
	command -v faketime >/dev/null || missing+=(faketime); \
	command -v c++ >/dev/null || missing+=(g++); \
	command -v objdump >/dev/null || missing+=(binutils); \
	python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv); \
	if (( $${#missing[@]} )); then \
	  echo "deps: installing $${missing[*]}"; \
	  $(SUDO) apt-get update; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y --no-install-recommends "$${missing[@]}"; \
	fi
	@cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
	@cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
	scripts/venv.sh
	scripts/servers.sh install
	scripts/gen-header.sh --install-only

test: deps
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
	cargo test --workspace --exclude redmutex-sim
	# The compatibility suites again, against Redis 6.2, Redis 8.2 and Valkey 8.1.
	scripts/test-servers.sh
	# The simulator (sim/) runs its thousands of sequences and worlds optimized.
	cargo test --release -p redmutex-sim
	scripts/gen-header.sh --check
	# The crate ships the license texts (links to the root's files).
	cargo package --list -p redmutex --allow-dirty | grep -qx LICENSE-MIT
	cargo package --list -p redmutex --allow-dirty | grep -qx LICENSE-APACHE
	# What users build has no `sim_support`: the C, Python and command-line builds leave the
	# simulator's feature off.
	for p in redmutex-ffi redmutex-py redmutex-cli; do \
	  ! cargo tree -q -p $$p -e features,no-dev -i redmutex | grep -q 'feature "sim-support"' || \
	  { echo "$$p turns on redmutex's sim-support feature" >&2; exit 1; }; \
	done
	# The `metrics` feature: its facade code, and its test through a test recorder; what
	# users build by default does not depend on the metrics crate.
	cargo clippy -p redmutex --features metrics -- -D warnings
	cargo test -p redmutex-tests --features metrics --test metrics
	for p in redmutex redmutex-ffi redmutex-py redmutex-cli; do \
	  ! cargo tree -q -p $$p -e normal | grep -q '^.*metrics v' || \
	  { echo "$$p depends on the metrics crate by default" >&2; exit 1; }; \
	done
	scripts/test-c.sh
	scripts/test-py.sh
	scripts/run-examples.sh
	$(MAKE) --no-print-directory dist
	scripts/test-dist.sh

demo: deps-redis
	cargo run --release -q -p redmutex-examples --bin nightly_invoice

# The benchmark (bench/): starts its own redis-servers, prints one table of ratios to a PING
# round trip, and rewrites BENCHMARKS.md and bench/benchmarks.svg. The Python rows need
# .venv (bench/python/setup.sh); without it they are skipped with a note. A short run that
# writes nothing: make bench BENCH_ARGS=--quick
BENCH_ARGS ?=
bench: deps
	bench/python/setup.sh || echo "bench: Python setup failed; those rows will be skipped" >&2
	cargo build --profile dist -p redmutex-ffi -p redmutex-cli -p redmutex-bench
	"$(TARGET_DIR)/dist/redmutex-bench" --write $(BENCH_ARGS)

# Installs libredmutex (libredmutex.so.X.Y.Z with its SONAME links, and .a), the headers,
# redmutex.pc, the CMake package and the licenses, so that
# `cc app.c $$(pkg-config --cflags --libs redmutex)` and `find_package(redmutex)` work.
# DESTDIR is for packagers.
install-c:
	DESTDIR="$(DESTDIR)" scripts/install-c.sh "$(PREFIX)" "$(LIBDIR)" "$(INCLUDEDIR)"

# The release artifacts in dist/: the abi3 manylinux2014 wheel and the sdist, and a tarball
# of the C library, headers, pkg-config and CMake files, licenses and the redmutex command.
dist: deps
	scripts/dist.sh
