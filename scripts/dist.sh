#!/usr/bin/env bash
# Writes the release artifacts into dist/ (make dist):
#   redmutex-VERSION-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
#       the Python package for CPython 3.9+ on any Linux with glibc 2.17 or newer, built by
#       maturin with zig as the linker (no container), installable without Rust;
#   redmutex-VERSION.tar.gz        the Python sdist (builds with a Rust toolchain);
#   redmutex-VERSION-TARGET.tar.gz the C library (.so with its SONAME links, .a), headers,
#       redmutex.pc, the CMake package, the license texts and the `redmutex` command;
#   SHA256SUMS.
# The C library and the command are built for this machine's target and glibc.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/venv.sh
export PATH="$PWD/.venv/bin:$PATH"
version=$(scripts/version.sh)
target=$(rustc -vV | sed -n 's/^host: //p')
target_dir=${CARGO_TARGET_DIR:-target}

rm -rf dist
mkdir -p dist

# abi3 (pyo3's abi3-py39): one wheel for every CPython from 3.9 on.
maturin build --profile dist --strip --zig --compatibility manylinux2014 --manifest-path py/Cargo.toml \
  --interpreter "$PWD/.venv/bin/python" --out dist
maturin sdist --manifest-path py/Cargo.toml --out dist

name="redmutex-$version-$target"
stage="$PWD/dist/$name"
scripts/install-c.sh "$stage"
cargo build --profile dist -p redmutex-cli
install -D -m 755 "$target_dir/dist/redmutex" "$stage/bin/redmutex"
# The dist profile keeps the release one's line tables for the developers' backtraces; users
# get the code.
strip --strip-debug "$stage/bin/redmutex" "$stage/lib/libredmutex.so.$version" \
  "$stage/lib/libredmutex.a"
tar -C dist --owner=0 --group=0 --numeric-owner -czf "dist/$name.tar.gz" "$name"
rm -rf "$stage"

(cd dist && sha256sum -- * >SHA256SUMS)
echo "dist: wrote"
ls -l dist
