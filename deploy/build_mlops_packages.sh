#!/usr/bin/env bash
# Build the FedML MLOps (Octopus) packages of FeS with `fedml build`:
#   bash deploy/build_mlops_packages.sh [DEST]      (default: deploy/build)
# gives DEST/dist-packages/client-package.zip and server-package.zip. Each holds the entry
# point (deploy/mlops/entry), a fedml-fes wheel built from this checkout, and the configs
# (deploy/mlops/config: the MLOps shell fedml_config.yaml, the FeS job fes_config.yaml,
# bootstrap.sh). Upload them on the platform's Octopus "Create Application" page.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
DEST=$(mkdir -p "${1:-$HERE/build}" && cd "${1:-$HERE/build}" && pwd)
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || PY=python3
FEDML="$(dirname "$PY")/fedml"
[ -x "$FEDML" ] || FEDML=fedml
STAGE="$DEST/stage"
rm -rf "$STAGE" "$DEST/dist-packages"
mkdir -p "$STAGE/src/wheels" "$STAGE/source"
# Build the wheel from a copy, so that setuptools' build/ and egg-info stay out of the checkout.
tar -C "$ROOT" --exclude=./.venv --exclude=./.git --exclude=./runs --exclude=./build --exclude=./deploy/build \
  --exclude='*.egg-info' --exclude=__pycache__ -cf - . | tar -C "$STAGE/source" -xf -
"$PY" -m pip wheel --no-deps --no-build-isolation -q -w "$STAGE/src/wheels" "$STAGE/source"
cp "$HERE/mlops/entry/fes_mlops_entry.py" "$STAGE/src/"
# `fedml build` works in ~/.fedml/fedml-mlops-build: give it a throwaway home instead.
BUILD_HOME=$(mktemp -d)
trap 'rm -rf "$BUILD_HOME"' EXIT
for kind in client server; do
  HOME="$BUILD_HOME" "$FEDML" build -t "$kind" -sf "$STAGE/src" -ep fes_mlops_entry.py \
    -cf "$HERE/mlops/config" -df "$DEST" >"$STAGE/fedml-build-$kind.log" 2>&1 \
    || { cat "$STAGE/fedml-build-$kind.log" >&2; exit 1; }
  [ -f "$DEST/dist-packages/$kind-package.zip" ] \
    || { echo "fedml build made no $kind-package.zip (see $STAGE/fedml-build-$kind.log)" >&2; exit 1; }
done
echo "$DEST/dist-packages/client-package.zip"
echo "$DEST/dist-packages/server-package.zip"
