#!/usr/bin/env bash
# The main job, run by `make demo` after `make build`: make the demo
# collection (the Go standard library's package documentation, generated
# from this machine's Go toolchain by scripts/gendemo), index it, and run
# example searches with metadata filters. A step that fails prints one
# line naming it (the tool's own error is above it) and the script exits
# non-zero.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TANDEM="$ROOT/bin/tandem"
DEMO="$ROOT/.native/demo"
step="start"
# The ERR trap; a subshell leaves the message to the script's own shell.
fail() {
	local rc=$1
	[ "$BASH_SUBSHELL" -eq 0 ] && echo "demo: FAILED at step \"$step\" (exit status $rc; its error is above)" >&2
	exit "$rc"
}
trap 'fail $?' ERR
[ -x "$TANDEM" ] || { echo "demo: $TANDEM is missing: run make build" >&2; exit 2; }
mkdir -p "$DEMO"

step="generate the demo corpus (scripts/gendemo)"
corpus="$DEMO/gostd.jsonl"
go -C "$ROOT" run ./scripts/gendemo -o "$corpus.tmp"
mv "$corpus.tmp" "$corpus"

step="index the corpus (tandem index --dir $DEMO/collection)"
col="$DEMO/collection"
rm -rf "$col"
"$TANDEM" index --dir "$col" --corpus "$corpus"

search() {
	local filter=$1 query=$2
	step="search: $query"
	printf "\n$ tandem search --filter '%s' '%s'\n" "$filter" "$query"
	"$TANDEM" search --dir "$col" --filter "$filter" -k 5 "$query"
}
search '{"term":{"area":"crypto"}}' "secure random numbers"
search '{"term":{"area":"encoding"}}' "decode structured text into Go values"
search '{"and":[{"range":{"depth":{"gte":2}}},{"not":{"term":{"deprecated":true}}}]}' "compress a stream of bytes"
step="tandem stats"
printf '\n$ tandem stats\n'
# sed, not head: it reads the rest, so that tandem never meets a closed pipe.
"$TANDEM" stats --dir "$col" | sed -n 1,12p
