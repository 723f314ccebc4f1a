#!/usr/bin/env bash
# Installs the browser the server's page test drives (server/browser_test.go):
# Debian's chromium, headless, with a font so that screenshots show text.
# Idempotent: when chromium is on PATH it only says so.
source "$(dirname "$0")/lib.sh"

for b in chromium chromium-browser google-chrome; do
	if path=$(command -v "$b"); then
		log "browser: $path ($("$path" --version 2>/dev/null || echo "version unknown"))"
		exit 0
	fi
done
log "browser: chromium not found; installing Debian's chromium and fonts-dejavu-core with apt-get"
need_debs chromium fonts-dejavu-core
log "browser: $(command -v chromium) ($(chromium --version 2>/dev/null || echo "version unknown"))"
