#!/usr/bin/env bash
# Sets up everything Tandem needs on a fresh Debian bookworm machine, under the
# git-ignored prefix .native/: the FAISS C API (libfaiss_c.so), ONNX Runtime
# (libonnxruntime.so.1) and the default models. Each step is skipped when its
# inputs have not changed, so a second run finishes in seconds.
source "$(dirname "$0")/lib.sh"

bash "$ROOT/scripts/setup-faiss.sh"
bash "$ROOT/scripts/setup-onnxruntime.sh"
if [ -f "$ROOT/scripts/setup-models.sh" ]; then
	bash "$ROOT/scripts/setup-models.sh"
fi
