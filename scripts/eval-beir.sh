#!/usr/bin/env bash
# Indexes a BEIR collection (read in place from ../shared/data/NAME) with
# the default models and prints tandem eval's table of every mode and
# fusion method on its test queries: the figures of the README's evaluation
# table. Run by `make eval-cranfield`; usage: eval-beir.sh NAME [DIR]
# (DIR keeps the collection; an existing one is evaluated, not re-indexed).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TANDEM="$ROOT/bin/tandem"
name=${1:?usage: eval-beir.sh NAME [DIR]}
data="$ROOT/../shared/data/$name"
if [ ! -f "$data/corpus.jsonl" ]; then
	echo "eval-beir: $data/corpus.jsonl not found (needs ../shared beside the repository)" >&2
	exit 1
fi
dir=${2:-$ROOT/.native/eval/$name}
if [ ! -d "$dir" ]; then
	rm -rf "$dir.partial"
	start=$(date +%s)
	# Cranfield has two empty documents, which --skip-bad counts and skips.
	"$TANDEM" index --dir "$dir.partial" --corpus "$data/corpus.jsonl" --skip-bad
	mv "$dir.partial" "$dir"
	echo "indexing took $(($(date +%s) - start)) s" >&2
fi
"$TANDEM" stats --dir "$dir"
"$TANDEM" eval --dir "$dir" --queries "$data/queries.jsonl" --qrels "$data/qrels/test.tsv" \
	--mode bm25,dense,late,hybrid --fusion all
