#!/usr/bin/env bash
# make bench-serve: `tandem serve` under load on loopback. Indexes SciFact
# once (with the default model: bm25, dense and late; LATE_INDEX=Residual
# for residual codes) into $BENCH_SERVE_DATA/$COLLECTION, starts the server
# on it, and runs
# `tandem bench serve`: SEARCHERS concurrent searchers cycling through the
# modes with SciFact's queries while one writer upserts SciFact documents
# (the same content again, so reruns meet the same collection), for
# DURATION. SERVE_FLAGS adds flags to `tandem serve` (--ingest-threads 0,
# say), MODES picks the modes, ZIPF=1.1 draws the queries from a Zipfian
# distribution with that exponent instead of in turn, so that they repeat
# as in a query log. Prints the table docs/server.md reports, searches/s
# and the server's query encodings (cache hit rate, queries per model
# run); any failed request fails the run. SERVE_BIN runs another binary's
# `tandem serve` (the previous build, to compare alternating runs) under
# this build's `tandem bench serve`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TANDEM="$ROOT/bin/tandem"
SERVE_BIN=${SERVE_BIN:-$TANDEM}
DATA=${BENCH_SERVE_DATA:-$ROOT/.bench-serve}
SCIFACT=${SCIFACT:-$ROOT/../shared/data/scifact}
PORT=${BENCH_SERVE_PORT:-7791}
DURATION=${DURATION:-2m}
SEARCHERS=${SEARCHERS:-8}
WRITERS=${WRITERS:-1}
MODES=${MODES:-bm25,dense,late,hybrid}
SERVE_FLAGS=${SERVE_FLAGS:-}
ZIPF=${ZIPF:-}
LATE_INDEX=${LATE_INDEX:-}
COLLECTION=${COLLECTION:-scifact${LATE_INDEX:+-$(echo "$LATE_INDEX" | tr 'A-Z' 'a-z')}}

if [ ! -f "$SCIFACT/corpus.jsonl" ]; then
	echo "bench-serve: $SCIFACT/corpus.jsonl not found (SciFact in BEIR layout; set SCIFACT=DIR)" >&2
	exit 1
fi
if [ ! -d "$DATA/$COLLECTION" ]; then
	echo "bench-serve: indexing SciFact into $DATA/$COLLECTION (once; minutes with the default model)"
	mkdir -p "$DATA/.indexing"
	rm -rf "$DATA/.indexing/$COLLECTION"
	"$TANDEM" index --dir "$DATA/.indexing/$COLLECTION" --corpus "$SCIFACT/corpus.jsonl" ${LATE_INDEX:+--late-index "$LATE_INDEX"}
	mv "$DATA/.indexing/$COLLECTION" "$DATA/$COLLECTION"
fi

log="$DATA/serve.log"
"$SERVE_BIN" serve --data "$DATA" --addr "127.0.0.1:$PORT" $SERVE_FLAGS 2>"$log" &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
	if curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then break; fi
	if ! kill -0 $server 2>/dev/null; then
		echo "bench-serve: the server exited; its log:" >&2
		cat "$log" >&2
		exit 1
	fi
	sleep 0.2
done
echo "bench-serve: server pid $server on 127.0.0.1:$PORT (log $log)"
"$TANDEM" bench serve --url "http://127.0.0.1:$PORT" --collection "$COLLECTION" \
	--queries "$SCIFACT/queries.jsonl" --corpus "$SCIFACT/corpus.jsonl" \
	--duration "$DURATION" --searchers "$SEARCHERS" --writers "$WRITERS" --modes "$MODES" ${ZIPF:+--zipf "$ZIPF"}
