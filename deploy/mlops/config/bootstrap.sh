#!/usr/bin/env bash
# Run by the FedML MLOps agent before the entry point: install fedml-fes (and its pinned
# dependencies) from the wheel shipped in the package. On Jetson / Raspberry Pi, install a
# torch build for the board first (see docs/DEPLOY.md); pip then keeps it if it matches.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
python3 -m pip install -q "$HERE"/../wheels/fedml_fes-*.whl
