# Shared helpers for Tandem's setup scripts. Source it; do not run it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NATIVE="$ROOT/.native"
STAMPS="$NATIVE/stamps"
mkdir -p "$NATIVE/lib" "$NATIVE/include" "$STAMPS"

log() { printf '[setup] %s\n' "$*" >&2; }

# as_root runs a command as root, through sudo when needed.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# inputs_hash prints one hash over the named files' contents and their
# paths relative to the repository, however the script was invoked.
inputs_hash() {
	local f
	for f in "$@"; do
		f=$(realpath "$f")
		printf '%s\n' "${f#"$ROOT"/}"
		cat "$f"
	done | sha256sum | cut -d' ' -f1
}

# up_to_date NAME HASH OUTPUT... succeeds when step NAME last ran with HASH
# and all its outputs exist.
up_to_date() {
	local name=$1 hash=$2 out
	shift 2
	[ -f "$STAMPS/$name" ] && [ "$(cat "$STAMPS/$name")" = "$hash" ] || return 1
	for out in "$@"; do [ -e "$out" ] || return 1; done
}

mark_done() { printf '%s\n' "$2" >"$STAMPS/$1"; }

# need_debs installs the named Debian packages that are missing.
need_debs() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing Debian packages: ${missing[*]}"
	as_root apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
