#!/usr/bin/env bash
# Installs pyzmq 25.1.2 with the libzmq draft API (RADIO/DISH, udp://) into the given Python,
# building the libzmq 4.3.4 bundled in the sdist with our patch for two udp_engine defects:
# a datagram whose first byte is >= 0x80 aborts a DISH, an oversized RADIO body overflows the heap.
# Only the package index is needed. The built wheel is cached (the XDG cache, as edgegossip's own
# cache: paths.py) so a second venv installs in seconds and `fleet wheelhouse` finds it.
set -euo pipefail
PY=${1:?usage: install-pyzmq-draft.sh PYTHON}
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${EDGEGOSSIP_BUILD_CACHE:-${EDGEGOSSIP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegossip}/pyzmq}
patch=$here/native/patches/libzmq-4.3.4-udp-engine.patch
stamp=$(sha256sum "$patch" | cut -c1-12)
wheeldir=$cache/wheels-$stamp

if "$PY" -c "import zmq, sys; sys.exit(0 if zmq.has('draft') and zmq.pyzmq_version()=='25.1.2' else 1)" 2>/dev/null \
   && [ -f "$cache/installed-$stamp" ]; then
  echo "pyzmq with draft API already installed"; exit 0
fi
if ! ls "$wheeldir"/pyzmq-*.whl >/dev/null 2>&1; then
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  "$PY" -m pip download --quiet --no-binary pyzmq --no-deps pyzmq==25.1.2 -d "$work"
  tar -xzf "$work"/pyzmq-25.1.2.tar.gz -C "$work"
  (cd "$work/pyzmq-25.1.2" && patch -p1 --quiet < "$patch")
  echo "building pyzmq 25.1.2 + patched libzmq 4.3.4 with the draft API (about a minute)"
  ZMQ_DRAFT_API=1 ZMQ_PREFIX=bundled "$PY" -m pip wheel --quiet --no-deps -w "$wheeldir" "$work/pyzmq-25.1.2"
fi
"$PY" -m pip install --quiet --force-reinstall --no-deps "$wheeldir"/pyzmq-*.whl
"$PY" -c "import zmq; assert zmq.has('draft'), 'pyzmq built without the draft API'"
touch "$cache/installed-$stamp"
echo "pyzmq $("$PY" -c 'import zmq; print(zmq.pyzmq_version(), "libzmq", zmq.zmq_version())') with draft API"
