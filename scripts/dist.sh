#!/usr/bin/env bash
# Builds the release archive dist/tandem-VERSION-linux-amd64.tar.gz (make
# dist): a tandem that runs where it is unpacked, with no build, no
# environment variables and no system packages beyond Debian's C and C++
# runtimes (libc6, libstdc++6, libgcc-s1).
#
#   tandem-VERSION-linux-amd64/
#     tandem                     finds lib/ through its rpath ($ORIGIN/lib),
#                                and lib/ and models/ as its native prefix
#                                (internal/native, releasePrefix)
#     lib/                       libfaiss_c.so, libonnxruntime.so.1, and the
#                                libraries they load that Debian's C and C++
#                                runtimes lack (OpenBLAS, libgomp,
#                                libgfortran, libquadmath)
#     models/bge-small-en-v1.5/  the default model
#     licenses/                  the licence of every component shipped
#     README.md                  scripts/dist/README.md
#
# Usage: scripts/dist.sh [--out DIR] [--version V] [--gzip N]
#   --out DIR     where the archive goes (default dist/)
#   --gzip N      gzip's level, 1 to 9 (default 6; the test takes 1, five
#                 times faster for an archive 8% larger)
#   --version V   the version in the name and in `tandem version` (default:
#                 git describe --tags --always --dirty)
# It prints the archive's path last.
source "$(dirname "$0")/lib.sh"

log() { printf '[dist] %s\n' "$*" >&2; }
die() { printf 'dist.sh: %s\n' "$*" >&2; exit 1; }

out="$ROOT/dist" version="" level=6
while [ $# -gt 0 ]; do
	case $1 in
	--out) out=${2:?--out needs a directory}; shift ;;
	--version) version=${2:?--version needs a value}; shift ;;
	--gzip) level=${2:?--gzip needs a level}; shift ;;
	-h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument $1 (usage: scripts/dist.sh [--out DIR] [--version V] [--gzip N])" ;;
	esac
	shift
done
[ -n "$version" ] || version=$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)
case $level in
[1-9]) ;;
*) die "--gzip $level: want a level from 1 to 9" ;;
esac
case $version in
*/* | *' '*) die "--version $version: no slashes or spaces" ;;
esac

for f in lib/libfaiss_c.so lib/libonnxruntime.so.1 models/bge-small-en-v1.5/model.onnx; do
	[ -e "$NATIVE/$f" ] || die "$NATIVE/$f is missing: run scripts/setup.sh (or make setup) first"
done

name="tandem-$version-linux-amd64"
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "$out/.dist-XXXXXX")
trap 'rm -rf "$work"' EXIT
stage="$work/$name"
mkdir -p "$stage/lib" "$stage/models" "$stage/licenses"

t0=$(now)
# The binary: no baked-in path of this checkout, its libraries through an
# rpath relative to itself. DT_RPATH (--disable-new-dtags) rather than
# DT_RUNPATH, because the loader applies an executable's DT_RPATH to the
# libraries its libraries load too (libopenblas's libgfortran).
log "building tandem $version"
(
	cd "$ROOT"
	env CGO_ENABLED=1 CGO_CFLAGS="-I$NATIVE/include" CGO_LDFLAGS="-L$NATIVE/lib" \
		go build -trimpath -ldflags "-X main.version=$version -X github.com/tandemsearch/tandem/internal/native.releasePrefix=. -extldflags '-Wl,--disable-new-dtags -Wl,-rpath,\$ORIGIN/lib'" \
		-o "$stage/tandem" ./cmd/tandem
)
log "$(printf '%-34s %6ss' "go build" "$(since "$t0")")"

# The libraries: Tandem's two, and every library they or the binary load
# (ldd, through this machine's loader) that is not part of libc6,
# libstdc++6 or libgcc-s1, which every Debian system has.
cp -L "$NATIVE/lib/libfaiss_c.so" "$NATIVE/lib/libonnxruntime.so.1" "$stage/lib/"
base='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|librt|libpthread|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'
deps=$( { LD_LIBRARY_PATH="$NATIVE/lib" ldd "$stage/tandem"; ldd "$NATIVE/lib/libfaiss_c.so" "$NATIVE/lib/libonnxruntime.so.1"; } |
	awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
while read -r soname path; do
	[ -n "$soname" ] || continue
	[[ $soname =~ $base ]] && continue
	[ -e "$stage/lib/$soname" ] && continue
	cp -L "$path" "$stage/lib/$soname"
done <<<"$deps"
for lib in "$stage"/lib/*; do
	if ldd "$lib" | grep -q 'not found'; then
		die "$(basename "$lib") has a dependency that is not found: $(ldd "$lib" | grep 'not found')"
	fi
done

# The default model.
cp -r "$NATIVE/models/bge-small-en-v1.5" "$stage/models/"

# The licences: texts from Debian's packages, FAISS's source, the Go
# modules compiled in, and those scripts/dist/licenses keeps for the
# components whose packages ship none (ONNX Runtime's npm package, the
# model's Maven jar).
lic="$stage/licenses"
cp "$ROOT"/scripts/dist/licenses/* "$lic/"
cp "$NATIVE/src/faiss-1.7.3/LICENSE" "$lic/faiss-LICENSE" 2>/dev/null || cp /usr/share/doc/libfaiss-dev/copyright "$lic/faiss-copyright"
for pkg in libopenblas0-pthread libgomp1 libgfortran5 libquadmath0; do
	if [ -f "/usr/share/doc/$pkg/copyright" ]; then cp "/usr/share/doc/$pkg/copyright" "$lic/debian-$pkg-copyright"; fi
done
(cd "$ROOT" && go list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Dir}}{{end}}{{end}}' ./cmd/tandem) | sort -u |
	while read -r mod dir; do
		[ -n "$dir" ] || continue
		for f in "$dir"/LICENSE* "$dir"/LICENCE* "$dir"/COPYING* "$dir"/NOTICE*; do
			if [ -f "$f" ]; then cp "$f" "$lic/go-${mod//\//_}-$(basename "$f")"; fi
		done
	done
cp "$ROOT/scripts/dist/README.md" "$stage/README.md"

# Files in a stable order with fixed owners, so the same inputs make the
# same tar stream.
log "writing $name.tar.gz"
tar --sort=name --owner=0 --group=0 --numeric-owner -C "$work" -cf - "$name" | gzip -n "-$level" >"$work/$name.tar.gz"
mv "$work/$name.tar.gz" "$out/$name.tar.gz"
log "$(printf '%-34s %6ss' "release archive, in all" "$(since "$t0")")"
echo "$out/$name.tar.gz"
