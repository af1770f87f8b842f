#!/usr/bin/env bash
# Neuron Studio set-up in one command. Usage:
#   bash run.sh lab    install everything, then start JupyterLab on the tutorials (emulated device by default)
#   bash run.sh test   install everything (incl. test tools and Debian chromium), then run the full test suite
# Creates/uses a virtual environment in .venv (override with NEURON_STUDIO_VENV).
set -euo pipefail
cd "$(dirname "$0")"
VENV="${NEURON_STUDIO_VENV:-.venv}"
PY="${PYTHON:-python3}"

install() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
  python -m pip install -q --upgrade pip
  # The CPU build of torch, pinned first: an unpinned torch would pull a multi-GB CUDA build.
  python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".[lab,test]"
  if [ -f extension/pyproject.toml ]; then
    python -m pip install -q ./extension
  fi
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

case "${1:-}" in
  lab)
    install
    exec jupyter lab notebooks/ --ip 127.0.0.1 "${@:2}"
    ;;
  test)
    install
    install_browser
    if [ $# -gt 1 ]; then
      exec python -m pytest -q "${@:2}"
    fi
    # Three sessions: the extension's route tests load pytest-jupyter's autouse event-loop fixtures,
    # which must not leak into the core suite or the browser tests (Playwright runs its own loop).
    status=0
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
