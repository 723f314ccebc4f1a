#!/usr/bin/env bash
# Sets up .native/peers, the Python environment of `make bench-peers`
# (never part of `make test`): Lucene through Pyserini when it installs
# (it also needs a JDK 21 or newer at run time) and PyLate (PLAID, with
# PyTorch) when they install, then the pinned peers of
# requirements.txt, last so that their pins win over Pyserini's
# dependencies (onnxruntime stays Tandem's version). A peer that does not
# install is reported missing by the benchmark, never dropped silently.
# Idempotent.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV="$ROOT/.native/peers"
if [ ! -x "$VENV/bin/python" ]; then
	echo "[peers] creating $VENV" >&2
	python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import pyserini" 2>/dev/null; then
	echo "[peers] installing pyserini (optional: Lucene)" >&2
	"$VENV/bin/pip" install -q --disable-pip-version-check pyserini ||
		echo "[peers] pyserini did not install: Lucene will be reported missing" >&2
fi
if ! "$VENV/bin/python" -c "import pylate" 2>/dev/null; then
	echo "[peers] installing pylate (optional: late interaction, PLAID)" >&2
	"$VENV/bin/pip" install -q --disable-pip-version-check pylate==1.6.0 ||
		echo "[peers] pylate did not install: PLAID will be reported missing" >&2
fi
echo "[peers] installing scripts/peers/requirements.txt" >&2
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/scripts/peers/requirements.txt"
