#!/usr/bin/env bash
# make check-task-scifact: issue #44's first acceptance line, end to end.
# A `tandem serve` with default flags; a collection with the default model
# (bm25, dense and late interaction, as `tandem index` makes by default);
# SciFact's whole corpus posted in one request (no wait=: it is over
# --async-above, so it is a task). It prints the 202's time beside the
# body's upload time, then every INTERVAL seconds the task's progress and
# a hybrid search's hit count and the collection's size (searches during
# the task must answer and see the committed batches). Once the task has
# succeeded it stops the server, indexes the same corpus with `tandem
# index`, evaluates both collections (bm25, dense, late, hybrid on the test
# queries, writing TREC run files) and compares the run files byte for
# byte: the task's collection must rank as the local one does.
#
#   scripts/bench/task-scifact.sh [TANDEM_BINARY]
#
# SCIFACT is the BEIR directory (default ../shared/data/scifact beside the
# checkout); WORK keeps the directories (default a new temporary one,
# removed at the end unless KEEP=1).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TANDEM=${1:-$ROOT/bin/tandem}
SCIFACT=${SCIFACT:-$ROOT/../shared/data/scifact}
PORT=${TASK_SCIFACT_PORT:-7796}
INTERVAL=${INTERVAL:-10}
MODEL=${MODEL:-bge-small-en-v1.5}
base="http://127.0.0.1:$PORT"

die() { echo "task-scifact: $*" >&2; exit 1; }
[ -x "$TANDEM" ] || die "no tandem binary at $TANDEM (make build)"
[ -f "$SCIFACT/corpus.jsonl" ] || die "no SciFact corpus at $SCIFACT/corpus.jsonl (set SCIFACT)"
command -v jq >/dev/null || die "jq is needed (apt-get install jq)"

work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/task-scifact.XXXXXX")}
mkdir -p "$work"
server=""
cleanup() {
	if [ -n "$server" ]; then
		kill -TERM "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
	fi
	[ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

# api METHOD PATH [curl args...]: the answer on stdout; an error status
# prints the server's message and fails.
api() {
	local method=$1 path=$2
	shift 2
	local code
	code=$(curl -sS -o "$work/answer" -w '%{http_code}' -X "$method" "$base$path" "$@") || die "$method $path: the server did not answer (log: $work/serve.log)"
	if [ "$code" -ge 400 ]; then
		die "$method $path: HTTP $code: $(jq -r '.error.message // .' "$work/answer" 2>/dev/null || cat "$work/answer")"
	fi
	cat "$work/answer"
}

"$TANDEM" serve --data "$work/data" --addr "127.0.0.1:$PORT" >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 600); do
	curl -fsS "$base/readyz" >/dev/null 2>&1 && break
	kill -0 "$server" 2>/dev/null || die "the server exited (log: $work/serve.log)"
	sleep 0.1
done
api PUT /v1/collections/scifact -H 'Content-Type: application/json' \
	-d "{\"dense\":[\"$MODEL\"],\"late\":[\"$MODEL\"]}" >/dev/null

size=$(stat -c %s "$SCIFACT/corpus.jsonl")
echo "posting $SCIFACT/corpus.jsonl ($size bytes) to $base/v1/collections/scifact/documents"
start=$(date +%s.%N)
curl -sS -o "$work/answer" -w '%{http_code} %{time_total} %{speed_upload}\n' \
	-X POST "$base/v1/collections/scifact/documents" -H 'Content-Type: application/x-ndjson' \
	--data-binary @"$SCIFACT/corpus.jsonl" >"$work/post"
read -r code total speed <"$work/post"
[ "$code" = 202 ] || die "the upload answered $code: $(cat "$work/answer")"
id=$(jq -r .id "$work/answer")
echo "202 in $total s, the body sent at $speed bytes/s: task $id, $(jq -r .received "$work/answer") documents received"

query='{"text":"vitamin d deficiency and bone density","mode":"hybrid","k":10,"ids_only":true}'
while :; do
	sleep "$INTERVAL"
	task=$(api GET "/v1/tasks/$id")
	hits=$(api POST /v1/collections/scifact/search -H 'Content-Type: application/json' -d "$query" | jq '.hits | length')
	docs=$(api GET /v1/collections/scifact | jq .docs)
	printf '%6.0f s  %-10s indexed %5s  committed lines %5s  %s docs/s  ETA %s s  | collection %5s docs, hybrid search %s hits\n' \
		"$(echo "$(date +%s.%N) - $start" | bc)" "$(jq -r .state <<<"$task")" "$(jq .indexed <<<"$task")" \
		"$(jq .committed_lines <<<"$task")" "$(jq '.docs_per_second // 0 | floor' <<<"$task")" \
		"$(jq '.eta_seconds // 0 | floor' <<<"$task")" "$docs" "$hits"
	case $(jq -r .state <<<"$task") in
	succeeded) break ;;
	failed | cancelled) die "task $id ended $(jq -c . <<<"$task")" ;;
	esac
done
jq -c '{state, received, indexed, refused, committed_lines, enqueued_at, started_at, finished_at}' <<<"$task"
kill -TERM "$server"
wait "$server" || true
server=""

echo "indexing the same corpus with tandem index"
/usr/bin/time -f '%e s wall, %U s user' "$TANDEM" index --dir "$work/local" --corpus "$SCIFACT/corpus.jsonl" | tail -1

for c in task:"$work/data/scifact" local:"$work/local"; do
	name=${c%%:*} dir=${c#*:}
	mkdir -p "$work/runs-$name"
	"$TANDEM" eval --dir "$dir" --queries "$SCIFACT/queries.jsonl" --qrels "$SCIFACT/qrels/test.tsv" \
		--mode bm25,dense,late,hybrid --runs "$work/runs-$name" | sed "s/^/$name  /"
done
if diff -r -q "$work/runs-task" "$work/runs-local"; then
	echo "the run files are byte-identical ($(ls "$work/runs-task" | tr '\n' ' '))"
else
	die "the run files differ"
fi
