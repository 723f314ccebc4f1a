#!/usr/bin/env bash
# The main job, run by `make demo` after `make build`: make the demo
# collection (the Go standard library's package documentation, generated
# from this machine's Go toolchain by scripts/gendemo), index it, and run
# example searches with metadata filters.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TANDEM="$ROOT/bin/tandem"
DEMO="$ROOT/.native/demo"
mkdir -p "$DEMO"

corpus="$DEMO/gostd.jsonl"
go run "$ROOT/scripts/gendemo" -o "$corpus.tmp" && mv "$corpus.tmp" "$corpus"

col="$DEMO/collection"
rm -rf "$col"
"$TANDEM" index --dir "$col" --corpus "$corpus"

search() {
	local filter=$1 query=$2
	printf "\n$ tandem search --filter '%s' '%s'\n" "$filter" "$query"
	"$TANDEM" search --dir "$col" --filter "$filter" -k 5 "$query"
}
search '{"term":{"area":"crypto"}}' "secure random numbers"
search '{"term":{"area":"encoding"}}' "decode structured text into Go values"
search '{"and":[{"range":{"depth":{"gte":2}}},{"not":{"term":{"deprecated":true}}}]}' "compress a stream of bytes"
printf '\n$ tandem stats\n'
"$TANDEM" stats --dir "$col" | head -12
