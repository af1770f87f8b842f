#!/usr/bin/env bash
# Neuron Studio set-up in one command. Usage:
#   bash run.sh lab    install (first start only), then start JupyterLab on working copies of the tutorials
#   bash run.sh test   install (first start only; plus test tools and Debian chromium), then run the full test suite
# Creates/uses a virtual environment in .venv (override with NEURON_STUDIO_VENV). The installation is done
# once and redone only when the project's dependencies change: a stamp in the venv holds a hash of the files
# that decide what gets installed (see deps_hash). NEURON_STUDIO_TORCH_INDEX: an extra package index to take
# torch from (e.g. PyTorch's CPU wheel index; see README). The tutorials are served from working copies in
# workspace/ (override with NEURON_STUDIO_WORKSPACE), so running them never changes the tracked notebooks;
# `neuron-studio lab` (neuron_studio/cli.py) makes those copies and starts JupyterLab.
set -euo pipefail

TORCH_VERSION="2.13.0"
STAMP_FILE="neuron-studio-install.sha256"

# Files and directories whose content decides what `install` puts into the venv. The studio itself is an
# editable install (its sources are used in place); the extension is a regular install, so its sources count.
DEPS_INPUTS=(run.sh pyproject.toml setup.py neuron_studio/device/emulator/csrc extension/pyproject.toml extension/package.json extension/yarn.lock
             extension/install.json extension/tsconfig.json extension/src extension/style
             extension/neuron_studio_lab extension/jupyter-config)

sha256_command() {
  if command -v sha256sum >/dev/null 2>&1; then echo "sha256sum"; else echo "shasum -a 256"; fi
}

deps_hash() {
  # One hash over the names and contents of DEPS_INPUTS' files (build outputs and caches left out).
  # shellcheck disable=SC2086 # $sha is a command and its arguments
  local existing=() p sha
  sha="$(sha256_command)"
  for p in "${DEPS_INPUTS[@]}"; do
    if [ -e "$p" ]; then existing+=("$p"); fi
  done
  find "${existing[@]}" -type f ! -path '*/labextension/*' ! -path '*/__pycache__/*' ! -name '_version.py' \
      ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 $sha | $sha | cut -d' ' -f1
}

install_needed() {
  # True when the venv has no stamp or the stamp's hash differs from the current one.
  local stamp="$VENV/$STAMP_FILE"
  [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$(deps_hash)" ]
}

install() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
  if ! install_needed; then
    return 0
  fi
  echo "run.sh: installing into $VENV (first start, or the project's dependencies changed)" >&2
  local want
  want="$(deps_hash)"
  python -m pip install -q --upgrade pip setuptools wheel
  # torch pinned first. Which build pip picks depends on the index: on Linux x86_64 the default index
  # serves the CUDA build; NEURON_STUDIO_TORCH_INDEX (e.g. PyTorch's CPU index) adds an index to take it from.
  if [ -n "${NEURON_STUDIO_TORCH_INDEX:-}" ]; then
    python -m pip install -q --extra-index-url "$NEURON_STUDIO_TORCH_INDEX" "torch==$TORCH_VERSION"
  else
    python -m pip install -q "torch==$TORCH_VERSION"
  fi
  # The emulated device's C++ extension is compiled here, against the torch just installed (so no build
  # isolation: an isolated build would compile against another torch). Needs a C++ compiler (g++/clang).
  python -m pip install -q --no-build-isolation -e ".[lab,test]"
  if [ -f extension/pyproject.toml ]; then
    python -m pip install -q ./extension
  fi
  printf '%s\n' "$want" > "$VENV/$STAMP_FILE.tmp"
  mv "$VENV/$STAMP_FILE.tmp" "$VENV/$STAMP_FILE"
}

install_browser() {
  # Browser tests drive Debian's chromium through Playwright (never `playwright install`).
  if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ]; then
      apt-get update -qq && apt-get install -y -qq chromium >/dev/null
    else
      sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null
    fi
  fi
}

main() {
  cd "$(dirname "${BASH_SOURCE[0]}")"
  VENV="${NEURON_STUDIO_VENV:-.venv}"
  PY="${PYTHON:-python3}"
  WORKSPACE="${NEURON_STUDIO_WORKSPACE:-workspace}"
  case "${1:-}" in
    lab)
      install
      # `neuron-studio lab` copies the tutorials into the workspace (never overwriting a copy), adds
      # --allow-root only as root, binds 127.0.0.1 and passes every other argument to JupyterLab.
      case "$WORKSPACE" in /*) ;; *) WORKSPACE="$PWD/$WORKSPACE" ;; esac
      export NEURON_STUDIO_WORKSPACE="$WORKSPACE"
      exec "$VENV/bin/neuron-studio" lab "${@:2}"
      ;;
    test)
      install
      install_browser
      if [ $# -gt 1 ]; then
        exec python -m pytest -q "${@:2}"
      fi
      # Three sessions: the extension's route tests load pytest-jupyter's autouse event-loop fixtures,
      # which must not leak into the core suite or the browser tests (Playwright runs its own loop).
      local status=0
      python -m pytest -n 2 -q tests || status=$?
      python -m pytest -q extension/tests || status=$?
      python -m pytest -q extension/ui-tests || status=$?
      exit $status
      ;;
    *)
      echo "usage: bash run.sh lab|test [extra args]" >&2
      exit 2
      ;;
  esac
}

# Sourcing the file (tests) defines the functions without running anything.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
