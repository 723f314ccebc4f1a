#!/usr/bin/env bash
# Installs what scripts/setup.sh built under .native/ where a Go program
# that imports Tandem builds and runs with no environment variables:
#
#   PREFIX/lib                 libfaiss_c.so, libonnxruntime.so.1 and its
#                              libonnxruntime.so link, then ldconfig
#   PREFIX/include/faiss/...   the FAISS C API headers with Tandem's
#                              extensions (go-faiss's #include lines)
#   PREFIX/lib/pkgconfig/tandem.pc
#   DATADIR/tandem/models/     every model in .native/models
#   PREFIX/bin/tandem          only with --bin
#
# As root, or when /usr/local is writable: PREFIX=/usr/local and
# DATADIR=/usr/local/share. gcc and the dynamic loader search /usr/local on
# Debian, and internal/native finds the library and the models there.
# Otherwise PREFIX=~/.local and DATADIR=${XDG_DATA_HOME:-~/.local/share},
# and the script prints the CGO_CFLAGS and CGO_LDFLAGS a Go build then
# needs. --system refuses that fallback (make example uses it).
#
# Usage: scripts/install.sh [--system] [--bin] [--prefix DIR] [--datadir DIR]
#
# A file is copied (to a temporary name, then renamed, so a running program
# keeps its mapping) only when its size or modification time differs from
# the installed one, so a second run finishes in well under a second.
source "$(dirname "$0")/lib.sh"

log() { printf '[install] %s\n' "$*" >&2; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

system=0 bin=0 prefix="" datadir=""
while [ $# -gt 0 ]; do
	case $1 in
	--system) system=1 ;;
	--bin) bin=1 ;;
	--prefix) prefix=${2:?--prefix needs a directory}; shift ;;
	--datadir) datadir=${2:?--datadir needs a directory}; shift ;;
	-h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (usage: scripts/install.sh [--system] [--bin] [--prefix DIR] [--datadir DIR])" ;;
	esac
	shift
done

for f in lib/libfaiss_c.so lib/libonnxruntime.so.1 include/faiss/c_api/faiss_c.h include/faiss/c_api/tandem_ex_c.h; do
	[ -e "$NATIVE/$f" ] || die "$NATIVE/$f is missing: run scripts/setup.sh (or make setup) first"
done

# writable DIR succeeds when DIR, or its nearest existing parent, is
# writable by this user.
writable() {
	local d=$1
	while [ ! -e "$d" ]; do d=$(dirname "$d"); done
	[ -w "$d" ]
}

user=0
if [ -z "$prefix" ]; then
	if [ "$(id -u)" -eq 0 ] || { writable /usr/local/lib && writable /usr/local/include && writable /usr/local/share; }; then
		prefix=/usr/local
	elif [ $system -eq 1 ]; then
		die "user $(id -un) cannot write to /usr/local: run it as root (sudo bash scripts/install.sh), or run scripts/install.sh without --system to install under ~/.local and set the CGO_* flags it prints"
	else
		prefix=$HOME/.local user=1
	fi
fi
if [ -z "$datadir" ]; then
	if [ $user -eq 1 ]; then
		datadir=${XDG_DATA_HOME:-$HOME/.local/share}
	else
		datadir=$prefix/share
	fi
fi
prefix=$(realpath -m "$prefix") datadir=$(realpath -m "$datadir")
for d in "$prefix/lib" "$prefix/include" "$datadir"; do
	writable "$d" || die "cannot write to $d as $(id -un)"
done

changed=0 same=0

# put SRC DST MODE installs file SRC as DST unless DST has SRC's size and
# modification time.
put() {
	local src=$1 dst=$2 mode=$3
	if [ -f "$dst" ] && [ ! -L "$dst" ] && [ "$(stat -c '%s %Y' "$src")" = "$(stat -c '%s %Y' "$dst")" ]; then
		same=$((same + 1))
		return 0
	fi
	mkdir -p "$(dirname "$dst")"
	cp --preserve=timestamps "$src" "$dst.install-tmp"
	chmod "$mode" "$dst.install-tmp"
	mv -f "$dst.install-tmp" "$dst"
	changed=$((changed + 1))
}

# put_tree SRC DST MODE installs every file under directory SRC.
put_tree() {
	local src=$1 dst=$2 mode=$3 f
	while IFS= read -r -d '' f; do
		put "$f" "$dst/${f#"$src"/}" "$mode"
	done < <(find "$src" -type f ! -name '*.install-tmp' -print0 | sort -z)
}

# put_text DST CONTENT writes CONTENT to DST when it differs.
put_text() {
	local dst=$1 content=$2
	if [ -f "$dst" ] && [ "$(cat "$dst")" = "$content" ]; then
		same=$((same + 1))
		return 0
	fi
	mkdir -p "$(dirname "$dst")"
	printf '%s\n' "$content" >"$dst.install-tmp"
	chmod 644 "$dst.install-tmp"
	mv -f "$dst.install-tmp" "$dst"
	changed=$((changed + 1))
}

# Libraries and headers.
libdir=$prefix/lib
libs_before=$changed
put "$NATIVE/lib/libfaiss_c.so" "$libdir/libfaiss_c.so" 755
put "$NATIVE/lib/libonnxruntime.so.1" "$libdir/libonnxruntime.so.1" 755
if [ "$(readlink "$libdir/libonnxruntime.so" 2>/dev/null)" = libonnxruntime.so.1 ]; then
	same=$((same + 1))
else
	ln -sfn libonnxruntime.so.1 "$libdir/libonnxruntime.so"
	changed=$((changed + 1))
fi
libs_changed=$((changed - libs_before))
put_tree "$NATIVE/include/faiss" "$prefix/include/faiss" 644

put_text "$libdir/pkgconfig/tandem.pc" "prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: tandem
Description: Tandem's native stack: the FAISS C API with Tandem's extensions (libfaiss_c); ONNX Runtime (libonnxruntime.so.1, beside it) is loaded at run time
Version: 0.0.0
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lfaiss_c"

# The loader's cache, for a system install: refreshed when a library
# changed or the cache does not list this directory's libfaiss_c.
if [ $user -eq 0 ] && [ "$(id -u)" -eq 0 ] && command -v ldconfig >/dev/null; then
	cached() { ldconfig -p | grep -F " => $libdir/libfaiss_c.so" >/dev/null; }
	if [ $libs_changed -gt 0 ] || ! cached; then
		ldconfig
		if ! cached; then
			# A prefix the loader does not search (not /usr/local).
			put_text /etc/ld.so.conf.d/tandem.conf "$libdir"
			ldconfig
			cached || die "ldconfig does not list $libdir/libfaiss_c.so"
		fi
		log "ldconfig: $libdir"
	fi
fi

# Models.
models=$datadir/tandem/models
n=0
for m in "$NATIVE"/models/*/; do
	m=${m%/}
	case $m in *.partial) continue ;; esac
	[ -f "$m/tandem.json" ] || continue
	put_tree "$m" "$models/$(basename "$m")" 644
	n=$((n + 1))
done
[ $n -gt 0 ] || log "note: no models in $NATIVE/models (run scripts/setup-models.sh); none installed"

# The command, built without the checkout's baked-in prefix so that it
# finds what was installed here.
if [ $bin -eq 1 ]; then
	command -v go >/dev/null || die "--bin needs go on PATH"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$ROOT" && CGO_ENABLED=1 CGO_CFLAGS="-I$prefix/include" CGO_LDFLAGS="-L$libdir -Wl,-rpath,$libdir" go build -o "$tmp/tandem" ./cmd/tandem)
	if cmp -s "$tmp/tandem" "$prefix/bin/tandem"; then
		same=$((same + 1))
	else
		touch "$tmp/tandem" # a new build: never taken for the old one
		put "$tmp/tandem" "$prefix/bin/tandem" 755
	fi
fi

log "$changed files installed, $same up to date: libraries and headers in $prefix, models in $models"

if [ $user -eq 1 ]; then
	cat >&2 <<EOF
[install] note: $(id -un) cannot write to /usr/local, so Tandem is installed under $prefix.
[install] Go builds that import Tandem need its headers and libfaiss_c, which the compiler does not search there:
  export CGO_CFLAGS="-I$prefix/include"
  export CGO_LDFLAGS="-L$libdir -Wl,-rpath,$libdir"
[install] (or, with PKG_CONFIG_PATH=$libdir/pkgconfig: CGO_CFLAGS=\$(pkg-config --cflags tandem) CGO_LDFLAGS=\$(pkg-config --libs tandem)).
[install] Programs then find libfaiss_c through that rpath (without it: export LD_LIBRARY_PATH=$libdir), ONNX Runtime in $libdir and the models in $models by themselves.
EOF
fi
