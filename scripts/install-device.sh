#!/usr/bin/env bash
# Installs edgegossip for a device into PREFIX (default /opt/edgegossip): its own venv at
# PREFIX/venv, the draft-enabled pyzmq, and a regular (not editable) install of this source tree,
# so the installed copy keeps working after the source folder is removed. Runs on the device
# itself (cloud-init's runcmd, or `fleet deploy`): only the package index is needed, and pip
# takes binary wheels for everything but pyzmq, which is built once and cached.
#   --extras onnx    also install onnx and onnxruntime (the `onnx` training backend, `export`)
set -euo pipefail
prefix=/opt/edgegossip
extras=""
while [ $# -gt 0 ]; do
  case "$1" in
    --extras) extras=${2:?--extras needs a value}; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    -*) echo "install-device.sh: unknown option $1" >&2; exit 2 ;;
    *) prefix=$1; shift ;;
  esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
case "$prefix" in /*) ;; *) prefix=$(pwd)/$prefix ;; esac
case "$prefix/" in "$src"/*) echo "install-device.sh: PREFIX must be outside the source tree" >&2; exit 2 ;; esac
py=$prefix/venv/bin/python
test -x "$py" || python3 -m venv "$prefix/venv"
"$py" -m pip install --quiet --upgrade pip
# build requirements of this project, so the install below needs no isolated build environment
"$py" -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0"
bash "$src/scripts/install-pyzmq-draft.sh" "$py"
"$py" -m pip install --quiet --no-build-isolation "$src${extras:+[$extras]}"
"$py" -c "import edgegossip.kernels as k, zmq; print('installed in', '$prefix', '- kernels:', k.IMPLEMENTATION, '- zmq draft:', zmq.has('draft'))"
