#!/usr/bin/env bash
# Installs the C library: libredmutex.so with its SONAME links (libredmutex.so ->
# libredmutex.so.0 -> libredmutex.so.X.Y.Z), libredmutex.a, redmutex.h and redmutex.hpp,
# redmutex.pc, the CMake package (find_package(redmutex) -> redmutex::redmutex), and the
# license texts. The .pc and CMake files find everything relative to themselves, so an
# installed tree can be moved (make dist packs one).
#
#   scripts/install-c.sh PREFIX [LIBDIR [INCLUDEDIR]]    (DESTDIR from the environment)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

prefix=${1:?usage: $0 PREFIX [LIBDIR [INCLUDEDIR]]}
libdir=${2:-$prefix/lib}
includedir=${3:-$prefix/include}
dest=${DESTDIR:-}
version=$(scripts/version.sh)
IFS=. read -r major minor _ <<<"$version"
target_dir=${CARGO_TARGET_DIR:-target}

# The dist profile: the release build optimized across crates (see Cargo.toml).
cargo build --profile dist -p redmutex-ffi
# The include directory as seen from the library directory, for the relocatable files.
include_from_libdir=$(realpath -m --relative-to="$libdir" "$includedir")

install -d "$dest$libdir/pkgconfig" "$dest$libdir/cmake/redmutex" "$dest$includedir" \
  "$dest$prefix/share/licenses/redmutex"
install -m 644 "$target_dir/dist/libredmutex.a" "$dest$libdir/"
install -m 755 "$target_dir/dist/libredmutex.so" "$dest$libdir/libredmutex.so.$version"
ln -sfn "libredmutex.so.$version" "$dest$libdir/libredmutex.so.$major"
ln -sfn "libredmutex.so.$major" "$dest$libdir/libredmutex.so"
install -m 644 include/redmutex.h include/redmutex.hpp "$dest$includedir/"
install -m 644 LICENSE-MIT LICENSE-APACHE "$dest$prefix/share/licenses/redmutex/"

fill() { # fill TEMPLATE OUTPUT
  sed -e "s|@VERSION@|$version|g" -e "s|@MAJOR@|$major|g" -e "s|@MINOR@|$minor|g" \
    -e "s|@INCLUDEDIR_FROM_LIBDIR@|$include_from_libdir|g" "$1" >"$2"
  chmod 644 "$2"
}
fill ffi-c/redmutex.pc.in "$dest$libdir/pkgconfig/redmutex.pc"
fill ffi-c/redmutexConfig.cmake.in "$dest$libdir/cmake/redmutex/redmutexConfig.cmake"
fill ffi-c/redmutexConfigVersion.cmake.in "$dest$libdir/cmake/redmutex/redmutexConfigVersion.cmake"
