#!/usr/bin/env bash
# Runs the simulate rows of a sweep file, PARALLEL at a time (default 2: one BLAS thread each on a
# 2-core machine), longest first as listed. A sweep file has one row a line, "name|simulate
# arguments"; blank lines and # comments are skipped. Each row writes OUT/NAME.json (the final
# row), OUT/NAME.cmd (the command) and, every EVAL_EVERY epochs (default 1), a row to
# OUT/NAME.history.jsonl, so a sweep cut short still has every row at the last epoch all reached.
# A row whose NAME.json exists is skipped, so a sweep can be resumed.
#   scripts/sweep.sh scripts/sweeps/rps-claim.rows runs/rps-claim
#   python scripts/sweep_markdown.py runs/rps-claim rps-claim [EPOCH]
set -euo pipefail
rows=${1:?usage: scripts/sweep.sh SWEEP_FILE OUT}
out=${2:?usage: scripts/sweep.sh SWEEP_FILE OUT}
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
grep -v '^\s*\(#\|$\)' "$rows" | \
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 xargs -d '\n' -P "${PARALLEL:-2}" -I{} bash -c '
    name=${1%%|*}; args=${1#*|}; out=$2; py=$3; every=$4
    [ -s "$out/$name.json" ] && exit 0
    echo "edgegossip simulate $args --json" > "$out/$name.cmd"
    rm -f "$out/$name.history.jsonl"
    if "$py" -m edgegossip.cli.app simulate $args --json --eval-every "$every" \
         --history "$out/$name.history.jsonl" > "$out/$name.json.tmp" 2> "$out/$name.log"; then
      mv "$out/$name.json.tmp" "$out/$name.json"; echo "done $name"
    else
      echo "FAILED $name: $(tail -1 "$out/$name.log")" >&2
    fi
  ' _ {} "$out" "$python" "${EVAL_EVERY:-1}"
