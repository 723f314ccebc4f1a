#!/usr/bin/env bash
# Builds .native/lib/libfaiss_c.so, the C library go-faiss links (-lfaiss_c):
#   - FAISS 1.7.3 itself from Debian bookworm (libfaiss-dev: static libfaiss.a
#     and headers) with OpenBLAS;
#   - the upstream C API (c_api/*.cpp) from Debian's faiss source package;
#   - Tandem's extension functions (native/faiss_c_ex), which go-faiss v1.1.5
#     calls and FAISS 1.7.3 lacks.
# Headers go to .native/include/faiss/c_api. Skipped when nothing changed.
source "$(dirname "$0")/lib.sh"

EX="$ROOT/native/faiss_c_ex"
out="$NATIVE/lib/libfaiss_c.so"
# Debian builds libfaiss.a for any x86-64, so its scalar quantiser and
# distance kernels run one float at a time. On a CPU with AVX2, FMA and
# F16C, FAISS 1.7.3's own sources of those kernels are compiled again with
# them and linked ahead of libfaiss.a, whose copies are then never pulled
# in: the IVF-SQ8 scan of the automatic dense index runs about 5x faster
# (docs/ingest.md). The CPU's flags are part of the hash, so a machine
# without them rebuilds the portable library.
simd=""
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then
	simd="-mavx2 -mfma -mf16c -mpopcnt"
fi
hash=$( (inputs_hash "$0" "$ROOT/scripts/lib.sh" "$EX/faiss_c_ex.cpp" $(find "$EX/include" -type f | sort); echo "$simd") | sha256sum | cut -d' ' -f1)
if up_to_date faiss_c "$hash" "$out"; then
	exit 0
fi

need_debs libfaiss-dev libopenblas-dev liblapack-dev g++ dpkg-dev

# The C API sources come from Debian's faiss source package.
src="$NATIVE/src/faiss-1.7.3"
if [ ! -f "$src/c_api/Index_c.cpp" ]; then
	# Under the lock of need_debs: other set-up steps may run apt beside.
	exec 9>"$NATIVE/apt.lock"
	flock 9
	if ! apt-cache showsrc faiss 2>/dev/null | grep -q '^Version: 1.7.3'; then
		log "enabling Debian source packages (deb-src) for bookworm"
		as_root tee /etc/apt/sources.list.d/tandem-deb-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
		as_root apt-get update -qq
	fi
	log "fetching Debian's faiss 1.7.3 source package"
	rm -rf "$NATIVE/src" && mkdir -p "$NATIVE/src"
	(cd "$NATIVE/src" && apt-get source -qq faiss=1.7.3-2 >/dev/null 2>&1 || apt-get source -qq faiss >/dev/null)
	[ -f "$src/c_api/Index_c.cpp" ] || { log "faiss source package has no c_api/Index_c.cpp"; exit 1; }
	exec 9>&-
fi

# Headers: upstream c_api headers, Tandem's extension headers, and
# AuxIndexStructures_c.h made to declare the extensions (go-faiss's
# selector.go includes only that header).
inc="$NATIVE/include/faiss/c_api"
rm -rf "$inc" && mkdir -p "$inc"
(cd "$src/c_api" && find . -name '*.h' ! -path './gpu/*' -exec cp --parents {} "$inc/" \;)
cp -r "$EX/include/faiss/c_api/." "$inc/"
printf '\n/* Added by Tandem: the extensions go-faiss expects (see tandem_ex_c.h). */\n#include <faiss/c_api/tandem_ex_c.h>\n' >>"$inc/impl/AuxIndexStructures_c.h"

log "building libfaiss_c.so (FAISS 1.7.3 C API + Tandem extensions)"
obj="$NATIVE/build/faiss_c"
rm -rf "$obj" && mkdir -p "$obj"
CXXFLAGS=(-O2 -fPIC -std=c++17 -fopenmp -DNDEBUG -I"$NATIVE/include" -I"$src/c_api")
# The C API's files are thin wrappers that each parse the same FAISS
# headers, so they are compiled as one unit (a fifth of the CPU of one
# compiler run each). Tandem's extensions and, on a CPU that has them, the
# SIMD kernels are compiled beside it.
for f in "$src"/c_api/*.cpp "$src"/c_api/impl/*.cpp "$src"/c_api/utils/*.cpp; do
	printf '#include "%s"\n' "$f"
done >"$obj/c_api_unity.cpp"
pids=()
# compile NAME SOURCE [FLAG...] compiles SOURCE into NAME.o in the background.
compile() {
	local name=$1 source=$2
	shift 2
	g++ "${CXXFLAGS[@]}" "$@" -c "$source" -o "$obj/$name.o" &
	pids+=($!)
}
compile c_api_unity "$obj/c_api_unity.cpp"
compile faiss_c_ex "$EX/faiss_c_ex.cpp"
if [ -n "$simd" ]; then
	log "compiling FAISS's scalar quantiser and distance kernels with $simd"
	for f in impl/ScalarQuantizer utils/distances_simd utils/distances; do
		compile "simd_$(basename $f)" "$src/faiss/$f.cpp" -O3 $simd -I"$src"
	done
fi
failed=0
for pid in "${pids[@]}"; do
	wait "$pid" || failed=1
done
[ $failed -eq 0 ] || { log "compiling libfaiss_c.so failed"; exit 1; }
g++ -shared -fopenmp -o "$out.tmp" "$obj"/*.o -Wl,-soname,libfaiss_c.so \
	/usr/lib/x86_64-linux-gnu/libfaiss.a -lopenblas -llapack -Wl,--no-undefined
mv "$out.tmp" "$out"
mark_done faiss_c "$hash"
log "libfaiss_c -> $out"
