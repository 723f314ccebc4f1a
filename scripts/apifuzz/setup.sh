#!/usr/bin/env bash
# Sets up .native/apifuzz, the Python environment of `make fuzz-api`:
# Schemathesis and its dependencies at the versions pinned in
# scripts/apifuzz/requirements.txt. Idempotent: it installs only when the
# requirements changed since the last install (a copy of them is kept in the
# environment), so a second run takes well under a second.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV="$ROOT/.native/apifuzz"
REQ="$ROOT/scripts/apifuzz/requirements.txt"
if [ ! -x "$VENV/bin/python" ]; then
	echo "[apifuzz] creating $VENV" >&2
	python3 -m venv "$VENV"
fi
if ! cmp -s "$REQ" "$VENV/requirements.installed"; then
	echo "[apifuzz] installing scripts/apifuzz/requirements.txt" >&2
	"$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
	cp "$REQ" "$VENV/requirements.installed"
fi
