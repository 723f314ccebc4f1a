#!/usr/bin/env bash
# make fuzz-api: Schemathesis, an outside property-based API tester, against
# a live `tandem serve` (docs/apifuzz.md).
#
# It starts bin/tandem serve on a free loopback port over a temporary data
# directory, with an admin key made for the run; creates a collection with
# the default model for dense retrieval and late interaction and uploads the
# demo corpus into it (scripts/gendemo: the Go standard library's package
# docs) as one task (wait=false), followed until it succeeds (scripts/apicall
# prints its progress), so that searches of every mode run real BM25, FAISS
# and ONNX Runtime; then runs Schemathesis on the server's own /openapi.json with
# every check and every phase (examples, coverage, fuzzing, stateful) for
# APIFUZZ_TIME. The server and the directory are removed on exit, also on a
# failure or an interrupt.
#
# Environment:
#   APIFUZZ_TIME  time budget of the Schemathesis run: 90, 90s, 10m, 1h (default 10m)
#   APIFUZZ_DOCS  documents of the corpus to index, 0 for all (default 0: 185 or so)
#   APIFUZZ_OUT   report directory, emptied first (default bin/apifuzz)
#   APIFUZZ_SEED  Schemathesis's seed, to repeat a run's generation
#   APIFUZZ_TASK_WAIT  seconds hooks.py waits for the task of an upsert
#                 answered 202 to end (default 120)
#
# Output: Schemathesis's progress and summary (operations, test cases,
# failures by check, failures dropped as false positives), then those
# dropped by reason (dropped.py), then the distinct failures, each with its
# count and a curl command (failures.py), then where the reports are:
# failures.md and dropped.md (those lists), junit.xml, events.ndjson
# (Schemathesis's event stream, every request and answer of a failing
# case), dropped.ndjson (one line per dropped failure), schemathesis.log
# (its full output) and server.log. Exit status: 0 when Schemathesis reports no
# failure and no error, else non-zero.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/scripts/apifuzz"
TANDEM="$ROOT/bin/tandem"
ST="$ROOT/.native/apifuzz/bin/st"
MODEL=bge-small-en-v1.5 # the default model (README, docs/models.md)
COLLECTION=gostd        # also in schemathesis.toml's dictionaries

budget=${APIFUZZ_TIME:-10m}
case "$budget" in
*h) secs=$((${budget%h} * 3600)) ;;
*m) secs=$((${budget%m} * 60)) ;;
*s) secs=${budget%s} ;;
*) secs=$budget ;;
esac
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
	echo "apifuzz: APIFUZZ_TIME=$budget: want a number of seconds, or one followed by s, m or h" >&2
	exit 2
fi
docs=${APIFUZZ_DOCS:-0}
out=${APIFUZZ_OUT:-$ROOT/bin/apifuzz}
[ -x "$TANDEM" ] || { echo "apifuzz: $TANDEM is missing: run make build" >&2; exit 2; }
[ -x "$ST" ] || { echo "apifuzz: $ST is missing: run scripts/apifuzz/setup.sh" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out"/junit.xml "$out"/events.ndjson "$out"/schemathesis.log "$out"/server.log "$out"/dropped.ndjson "$out"/dropped.md "$out"/failures.md
out=$(cd "$out" && pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/apifuzz.XXXXXX")
server=
fuzzer=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$fuzzer" ] && kill -0 "$fuzzer" 2>/dev/null; then
		kill -TERM "$fuzzer" 2>/dev/null || true
		wait "$fuzzer" 2>/dev/null || true
	fi
	# The data directory goes only once the server has exited: Badger,
	# closing over a removed directory, retries its flush for ever.
	if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
		kill -TERM "$server" 2>/dev/null || true
		for _ in $(seq 300); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { echo "apifuzz: $*" >&2; }

# The corpus.
go -C "$ROOT" run ./scripts/gendemo -o "$tmp/corpus.jsonl" || { say "FAIL: generating the corpus (scripts/gendemo) failed"; exit 1; }
if [ "$docs" -gt 0 ]; then
	head -n "$docs" "$tmp/corpus.jsonl" >"$tmp/corpus.part" && mv "$tmp/corpus.part" "$tmp/corpus.jsonl"
fi
ndocs=$(wc -l <"$tmp/corpus.jsonl")

# The server, with a key of its own (in the environment, not in ps).
key=$("$ROOT/.native/apifuzz/bin/python" -c 'import secrets; print(secrets.token_hex(16))')
TANDEM_API_KEYS=$key "$TANDEM" serve --data "$tmp/data" --addr 127.0.0.1:0 >"$tmp/serve.out" 2>"$out/server.log" &
server=$!
url=
for _ in $(seq 300); do
	url=$(sed -n 's|^tandem serve: listening on \(http://[^ ]*\).*|\1|p' "$tmp/serve.out")
	[ -n "$url" ] && break
	kill -0 "$server" 2>/dev/null || { say "tandem serve exited:"; tail -5 "$out/server.log" >&2; exit 1; }
	sleep 0.1
done
[ -n "$url" ] || { say "tandem serve did not listen within 30 s"; exit 1; }

# scripts/apicall: each call prints the server's own error message when
# it fails; the key goes in its environment, not on a command line.
CGO_ENABLED=0 go -C "$ROOT" build -o "$tmp/apicall" ./scripts/apicall ||
	{ say "building scripts/apicall failed"; exit 1; }
api() { TANDEM_API_KEY=$key "$tmp/apicall" "$@"; }
say "indexing $ndocs documents into $COLLECTION (bm25, dense and late interaction with $MODEL) on $url"
start=$(date +%s)
api -t 'apifuzz: created {{.name}}: {{join .retrievers ", "}}{{"\n"}}' PUT "$url/v1/collections/$COLLECTION" "{\"dense\":[\"$MODEL\"],\"late\":[\"$MODEL\"]}" >&2 ||
	{ say "FAIL: creating $COLLECTION failed (above; server.log in $out)"; exit 1; }
# One upload as a task (wait=false), followed until it ends: however slow
# the machine, no request waits for the encoding (a synchronous upsert is
# bounded by --timeout and answers 504 past it).
api upload -report 15s -deadline 60m "$url/v1/collections/$COLLECTION" "$tmp/corpus.jsonl" >&2 ||
	{ say "FAIL: indexing $COLLECTION failed (above; server.log in $out)"; exit 1; }
say "indexed in $(($(date +%s) - start)) s; server RSS $(ps -o rss= -p "$server" | awk '{printf "%d MB", $1/1024}')"

# Schemathesis, on the spec the server serves. /openapi.json takes a key
# like every other route, so it is fetched here: given to Schemathesis as a
# header, the key would go with every request, and its ignored_auth check
# could not send one without it. The working directory is the temporary
# one, so that what Schemathesis caches between runs stays out of the
# checkout.
api -raw GET "$url/openapi.json" >"$tmp/openapi.json" ||
	{ say "FAIL: fetching $url/openapi.json failed (above)"; exit 1; }
args=(--config-file "$HERE/schemathesis.toml" run "$tmp/openapi.json" --url "$url"
	--checks all --continue-on-failure --max-time "$secs" --request-timeout 60
	--report junit,ndjson --report-junit-path "$out/junit.xml" --report-ndjson-path "$out/events.ndjson"
	--no-color)
[ -n "${APIFUZZ_SEED:-}" ] && args+=(--seed "$APIFUZZ_SEED")
say "Schemathesis $("$ST" --version | awk '{print $NF}') for ${secs} s, every check and phase"
start=$(date +%s)
(
	cd "$tmp"
	# A request stuck past its timeout is reported by Schemathesis; this
	# bounds the whole run even if Schemathesis itself hangs.
	exec env SCHEMATHESIS_HOOKS="$HERE/hooks.py" APIFUZZ_KEY="$key" APIFUZZ_COLLECTION="$COLLECTION" APIFUZZ_DROPPED="$out/dropped.ndjson" \
		timeout -k 10 $((secs + 180)) "$ST" "${args[@]}"
) >"$out/schemathesis.log" 2>&1 &
fuzzer=$!
tail -n +1 -f --pid="$fuzzer" "$out/schemathesis.log" &
tailer=$!
rc=0
wait "$fuzzer" || rc=$?
fuzzer=
wait "$tailer" 2>/dev/null || true

alive=yes
kill -0 "$server" 2>/dev/null || alive=no
echo
say "ran $(($(date +%s) - start)) s; server alive: $alive$([ $alive = yes ] && ps -o rss= -p "$server" | awk '{printf ", RSS %d MB", $1/1024}')"
"$ROOT/.native/apifuzz/bin/python" "$HERE/dropped.py" "$out/dropped.ndjson" >"$out/dropped.md" || true
if [ -s "$out/dropped.md" ]; then
	echo
	cat "$out/dropped.md"
fi
"$ROOT/.native/apifuzz/bin/python" "$HERE/failures.py" "$out/events.ndjson" "$url" "$key" >"$out/failures.md" || true
if [ -s "$out/failures.md" ]; then
	echo
	cat "$out/failures.md"
	echo
fi
say "reports in $out: failures.md, dropped.md, junit.xml, events.ndjson, schemathesis.log, server.log"
if [ "$alive" = no ]; then
	say "FAIL: the server died during the run (server.log)"
	exit 1
fi
if [ "$rc" -ne 0 ]; then
	say "FAIL: Schemathesis exited with status $rc (failures or errors above; docs/apifuzz.md says how to read them)"
	exit "$rc"
fi
say "PASS: no failure"
