#!/usr/bin/env bash
# Takes libonnxruntime.so.1 from the npm package onnxruntime-node, which ships
# the prebuilt CPU library, into .native/lib. Nothing is installed globally.
source "$(dirname "$0")/lib.sh"

ORT_VERSION=1.30.0
out="$NATIVE/lib/libonnxruntime.so.1"
hash=$(printf 'onnxruntime-node@%s' "$ORT_VERSION" | sha256sum | cut -d' ' -f1)
if up_to_date onnxruntime "$hash" "$out"; then
	exit 0
fi
command -v npm >/dev/null || need_debs npm
log "fetching onnxruntime-node@$ORT_VERSION"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "onnxruntime-node@$ORT_VERSION" >/dev/null)
tar -xzf "$work"/onnxruntime-node-*.tgz -C "$work"
src="$work/package/bin/napi-v6/linux/x64"
lib=$(ls "$src"/libonnxruntime.so.1* | head -n 1)
cp "$lib" "$out.tmp" && mv "$out.tmp" "$out"
ln -sf libonnxruntime.so.1 "$NATIVE/lib/libonnxruntime.so"
mark_done onnxruntime "$hash"
log "onnxruntime $ORT_VERSION -> $out"
