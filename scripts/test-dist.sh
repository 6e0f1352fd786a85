#!/usr/bin/env bash
# Checks the artifacts that make dist wrote into dist/ the way a user meets them, on a PATH
# without cargo or rustc:
# - the wheel is abi3 and manylinux2014 (no glibc symbol newer than 2.17), carries the
#   licenses, installs into a fresh virtualenv and runs the Python nightly-invoice example;
# - the sdist carries the licenses;
# - the C tarball has the SONAME'd library and its links, the headers, redmutex.pc, the
#   CMake package, the licenses and a `redmutex` that names its version and TLS support; the
#   C example builds from it once with pkg-config and once with CMake, and runs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
version=$(scripts/version.sh)
fail() { echo "test-dist: $*" >&2; exit 1; }

# shellcheck source=scripts/lib/redis.sh
source scripts/lib/redis.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/redmutex-dist.XXXXXX")
redis_on_exit "rm -rf '$work'"

# A PATH without Rust: the system directories that hold neither cargo nor rustc, and cmake.
mkdir "$work/bin"
ln -s "$root/.venv/bin/cmake" "$work/bin/cmake"
norust="$work/bin"
for dir in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  [[ -x $dir/cargo || -x $dir/rustc ]] || norust+=":$dir"
done
run_norust() { env -i HOME="$work" PATH="$norust" LANG=C.UTF-8 "$@"; }
run_norust bash -c '! command -v cargo && ! command -v rustc' >/dev/null ||
  fail "the restricted PATH still has a Rust toolchain"

redis_start_servers 1
url=${REDIS_URLS[0]}

echo "test-dist: the wheel"
shopt -s nullglob
wheels=(dist/redmutex-"$version"-cp39-abi3-manylinux*2_17_x86_64*.whl)
sdists=(dist/redmutex-"$version".tar.gz)
shopt -u nullglob
((${#wheels[@]} == 1)) || fail "expected one abi3 manylinux2014 wheel in dist/, found: $(ls dist)"
((${#sdists[@]} == 1)) || fail "expected the sdist dist/redmutex-$version.tar.gz"
python3 - "${wheels[0]}" "${sdists[0]}" <<'PY'
import sys, tarfile, zipfile
wheel, sdist = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
for lic in ("LICENSE-MIT", "LICENSE-APACHE"):
    assert any(n.endswith("/licenses/" + lic) for n in names), (lic, names)
    assert any(n.endswith("/" + lic) for n in tarfile.open(sdist).getnames()), lic
assert any(n.endswith("py.typed") for n in names) and any(n.endswith(".pyi") for n in names)
PY
unzip_dir="$work/wheel"
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "${wheels[0]}" "$unzip_dir"
newest=$(objdump -T "$unzip_dir"/redmutex/_redmutex*.so | grep -o 'GLIBC_[0-9.]*' |
  sort -t. -k2,2n -k3,3n -u | tail -1)
[[ $newest =~ ^GLIBC_2\.([0-9]+)(\.[0-9]+)?$ ]] && ((BASH_REMATCH[1] <= 17)) ||
  fail "the wheel's extension needs $newest; manylinux2014 allows up to GLIBC_2.17"
echo "test-dist: the wheel's extension needs at most $newest"

python3 -m venv "$work/venv"
run_norust "$work/venv/bin/python" -m pip install --quiet --no-index --no-cache-dir \
  "$root/${wheels[0]}"
(cd "$work" && run_norust "$work/venv/bin/python" "$root/examples/python/nightly_invoice.py" "$url")

echo "test-dist: the C tarball"
tarball=dist/redmutex-$version-$(uname -m)-unknown-linux-gnu.tar.gz
[[ -f $tarball ]] || fail "no $tarball in dist/"
tar -C "$work" -xzf "$tarball"
prefix=$work/redmutex-$version-$(uname -m)-unknown-linux-gnu
for f in lib/libredmutex.so "lib/libredmutex.so.${version%%.*}" "lib/libredmutex.so.$version" \
  lib/libredmutex.a include/redmutex.h include/redmutex.hpp lib/pkgconfig/redmutex.pc \
  lib/cmake/redmutex/redmutexConfig.cmake lib/cmake/redmutex/redmutexConfigVersion.cmake \
  share/licenses/redmutex/LICENSE-MIT share/licenses/redmutex/LICENSE-APACHE bin/redmutex; do
  [[ -e $prefix/$f ]] || fail "the tarball lacks $f"
done
soname=$(objdump -p "$prefix/lib/libredmutex.so.$version" | awk '$1 == "SONAME" { print $2 }')
[[ $soname == "libredmutex.so.${version%%.*}" ]] || fail "SONAME is '$soname'"
run_norust "$prefix/bin/redmutex" --version | grep -qx \
  "redmutex $version (TLS: rustls with the ring provider; rediss:// URLs supported)" ||
  fail "redmutex --version does not name the version and TLS support"

# With pkg-config, as the README shows.
run_norust env PKG_CONFIG_PATH="$prefix/lib/pkgconfig" bash -c \
  'cc -std=c11 -Wall -Wextra -Werror "$1" $(pkg-config --cflags --libs redmutex) -o "$2"' _ \
  "$root/examples/c/nightly_invoice.c" "$work/nightly_invoice_pc"
objdump -p "$work/nightly_invoice_pc" | grep -q "NEEDED *libredmutex.so.${version%%.*}" ||
  fail "the example does not link against the SONAME"
run_norust env LD_LIBRARY_PATH="$prefix/lib" "$work/nightly_invoice_pc" "$url"

# With CMake's find_package(redmutex).
run_norust cmake -S "$root/examples/c" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
run_norust cmake --build "$work/cmake-build" >/dev/null
run_norust env LD_LIBRARY_PATH="$prefix/lib" "$work/cmake-build/nightly_invoice" "$url"

echo "test-dist: the wheel, the sdist and the C tarball work without Rust"
