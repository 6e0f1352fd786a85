#!/usr/bin/env bash
# Prints the workspace version ([workspace.package] version in Cargo.toml), which the
# Rust crates, the C library and the Python package all share.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version=$(awk '
  /^\[/ { section = $0 }
  section == "[workspace.package]" && $1 == "version" { gsub(/"/, "", $3); print $3; exit }
' Cargo.toml)
[[ -n "$version" ]] || { echo "version.sh: no [workspace.package] version in Cargo.toml" >&2; exit 1; }
echo "$version"
