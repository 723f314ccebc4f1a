#!/usr/bin/env bash
# Sets up .native/peers, the Python environment of `make bench-peers`
# (never part of `make test`): the peers in requirements.txt, then Lucene
# through Pyserini when it installs and a JDK 21 or newer is found. A peer
# that does not install is reported missing by the benchmark, never
# dropped silently. Idempotent.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV="$ROOT/.native/peers"
if [ ! -x "$VENV/bin/python" ]; then
	echo "[peers] creating $VENV" >&2
	python3 -m venv "$VENV"
fi
echo "[peers] installing scripts/peers/requirements.txt" >&2
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/scripts/peers/requirements.txt"
if ! "$VENV/bin/python" -c "import pyserini" 2>/dev/null; then
	echo "[peers] installing pyserini (optional: Lucene)" >&2
	"$VENV/bin/pip" install -q --disable-pip-version-check pyserini ||
		echo "[peers] pyserini did not install: Lucene will be reported missing" >&2
fi
