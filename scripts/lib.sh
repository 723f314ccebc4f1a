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
# Steps run side by side (scripts/setup.sh), so apt runs under a lock.
need_debs() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	(
		flock 9
		log "installing Debian packages: ${missing[*]}"
		as_root apt-get update -qq
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	) 9>"$NATIVE/apt.lock"
}

# VENV is the Python virtual environment of the set-up's Python steps
# (scripts/models/quantize.py; benchmarks may add their own packages).
VENV="$NATIVE/venv"

# need_venv REQUIREMENTS... creates .native/venv when it is missing or
# broken, then installs each pinned requirements file into it, skipping a
# file that is installed already (stamp venv-BASENAME). Run Python steps
# with "$VENV/bin/python".
need_venv() {
	local req name hash
	if ! "$VENV/bin/python" -c '' 2>/dev/null; then
		log "creating the Python environment $VENV"
		rm -rf "$VENV" "$STAMPS"/venv-*
		# Debian's python3 has the venv module but not ensurepip without
		# python3-venv, so the first attempt may fail.
		if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
			rm -rf "$VENV"
			need_debs python3-venv
			python3 -m venv "$VENV"
		fi
	fi
	for req in "$@"; do
		name=venv-$(basename "$req" .txt)
		hash=$(inputs_hash "$req")
		up_to_date "$name" "$hash" && continue
		log "installing ${req#"$ROOT"/} into $VENV"
		"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2
		mark_done "$name" "$hash"
	done
}

# now prints the wall clock in seconds with microseconds.
now() { printf '%s\n' "$EPOCHREALTIME"; }

# since T0 prints the seconds since T0 (from now), to a tenth.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# step NAME CMD... runs CMD and then logs NAME with its wall time, or its
# failure; it returns CMD's status.
step() {
	local name=$1 t0=$EPOCHREALTIME rc=0
	shift
	"$@" || rc=$?
	if [ $rc -eq 0 ]; then
		log "$(printf '%-34s %6ss' "$name" "$(since "$t0")")"
	else
		log "$(printf '%-34s FAILED (exit %d) after %ss' "$name" $rc "$(since "$t0")")"
	fi
	return $rc
}
