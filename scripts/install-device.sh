#!/usr/bin/env bash
# Installs edgegossip for a device into PREFIX (default /opt/edgegossip): its own venv at
# PREFIX/venv and a regular (not editable) install of this source tree, so the installed copy
# keeps working after the source folder is removed. Runs on the device itself (cloud-init's
# runcmd, or by hand): only the package index is needed, and pip takes binary wheels for every
# dependency, pyzmq included (the index's pyzmq serves the default `udp` transport and the
# control socket). Only edgegossip's own extensions are compiled; a wheelhouse built on the
# operator's machine (`fleet wheelhouse --for`) spares the device even that.
#   --extras onnx    also install onnx and onnxruntime (the `onnx` training backend, `export`)
#   --zmq-draft      also build pyzmq with the libzmq draft API and our patch, which the `zmq`
#                    transport needs (RADIO/DISH): a long compile, 25 minutes under emulation
set -euo pipefail
prefix=/opt/edgegossip
extras=""
draft=0
while [ $# -gt 0 ]; do
  case "$1" in
    --extras) extras=${2:?--extras needs a value}; shift 2 ;;
    --zmq-draft) draft=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
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
if [ "$draft" = 1 ]; then bash "$src/scripts/install-pyzmq-draft.sh" "$py"; fi
"$py" -m pip install --quiet --no-build-isolation "$src${extras:+[$extras]}"
"$py" -c "import edgegossip.kernels as k, zmq; print('installed in', '$prefix', '- kernels:', k.IMPLEMENTATION, '- zmq draft:', zmq.has('draft'))"
