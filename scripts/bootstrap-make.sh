# shellcheck shell=bash
# Sourced by the README's two commands: everything else is installed by the Makefile's deps
# targets, but make itself has to come first on a machine that has only Rust, Python and gcc.
if ! command -v make >/dev/null; then
  sudo=""
  if [[ $(id -u) != 0 ]]; then sudo=sudo; fi
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends make
fi
