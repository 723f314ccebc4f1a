#!/usr/bin/env bash
# make bench-collections: what collections cost `tandem serve` in memory.
# For each binary given (default bin/tandem), ROUNDS times, alternating
# binaries within a round: start `tandem serve` on loopback on an empty
# data directory, read its VmRSS (/proc/PID/status), create one collection
# (PUT with "dense":[MODEL]) and upsert DOCS short documents into it, read
# VmRSS, create and fill COLLECTIONS-1 more the same way, read VmRSS again.
# Each reading waits SETTLE seconds first. It prints one line per run and
# the verdict of issue #27's acceptance 4: COLLECTIONS collections raise
# RSS by less than twice what the first one did.
#
#   scripts/bench/collections.sh [TANDEM_BINARY...]
#
# MODEL="" creates BM25-only collections (what a collection costs with no
# model at all). SERVE_FLAGS adds flags to `tandem serve`. Open files
# (/proc/PID/fd) and threads are reported beside RSS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PORT=${BENCH_COLLECTIONS_PORT:-7792}
COLLECTIONS=${COLLECTIONS:-20}
DOCS=${DOCS:-5}
ROUNDS=${ROUNDS:-1}
SETTLE=${SETTLE:-2}
MODEL=${MODEL-bge-small-en-v1.5}
SERVE_FLAGS=${SERVE_FLAGS:-}
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=("$ROOT/bin/tandem")

base="http://127.0.0.1:$PORT"
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-collections.XXXXXX")
server=""
cleanup() {
	if [ -n "$server" ]; then
		kill -TERM "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# status PID FIELD prints a /proc/PID/status field's number (kB for VmRSS).
status() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }

# sample PID prints "RSS_MB FILES THREADS" after SETTLE seconds.
sample() {
	sleep "$SETTLE"
	printf '%d %d %d' $(($(status "$1" VmRSS) / 1024)) "$(ls "/proc/$1/fd" | wc -l)" "$(status "$1" Threads)"
}

body='{}'
[ -z "$MODEL" ] || body="{\"dense\":[\"$MODEL\"]}"
docs=$(for i in $(seq 1 "$DOCS"); do
	printf '{"_id":"d%d","title":"Note %d","text":"Short document number %d about glaciers, bees and trains."}\n' "$i" "$i" "$i"
done)

# fill NAME creates collection NAME and upserts the documents into it.
fill() {
	local code
	code=$(curl -sS -o "$work/answer" -w '%{http_code}' -X PUT "$base/v1/collections/$1" -H 'Content-Type: application/json' -d "$body")
	if [ "$code" != 201 ]; then
		echo "bench-collections: PUT $1 answered $code: $(cat "$work/answer")" >&2
		return 1
	fi
	code=$(curl -sS -o "$work/answer" -w '%{http_code}' -X POST "$base/v1/collections/$1/documents" -H 'Content-Type: application/x-ndjson' --data-binary "$docs")
	if [ "$code" != 200 ] || ! grep -q "\"indexed\":$DOCS" "$work/answer"; then
		echo "bench-collections: upsert into $1 answered $code: $(cat "$work/answer")" >&2
		return 1
	fi
}

# run BINARY serves an empty data directory with BINARY and prints one
# result line.
run() {
	local bin=$1 data="$work/data" log="$work/serve.log"
	rm -rf "$data"
	# shellcheck disable=SC2086
	"$bin" serve --data "$data" --addr "127.0.0.1:$PORT" $SERVE_FLAGS >"$log" 2>&1 &
	server=$!
	for _ in $(seq 1 300); do
		if curl -fsS "$base/readyz" >/dev/null 2>&1; then break; fi
		if ! kill -0 "$server" 2>/dev/null; then
			echo "bench-collections: the server exited; its log:" >&2
			cat "$log" >&2
			exit 1
		fi
		sleep 0.1
	done
	read -r rss0 fd0 th0 <<<"$(sample "$server")"
	fill c01
	read -r rss1 fd1 th1 <<<"$(sample "$server")"
	for i in $(seq 2 "$COLLECTIONS"); do
		fill "$(printf 'c%02d' "$i")"
	done
	read -r rssN fdN thN <<<"$(sample "$server")"
	kill -TERM "$server"
	wait "$server" || true
	server=""
	local one=$((rss1 - rss0)) all=$((rssN - rss0))
	local verdict="FAIL"
	[ "$all" -lt $((2 * one)) ] && verdict="pass"
	[ -n "$MODEL" ] || verdict="-" # no model to share: the bound does not apply
	printf '%-40s %7d %7d %7d %7d %7d %8.1f %7d/%d/%d %6d/%d/%d  %s\n' "$bin" \
		"$rss0" "$rss1" "$rssN" "$one" "$all" "$(awk -v a="$rssN" -v b="$rss1" -v n="$COLLECTIONS" 'BEGIN {print (a - b) / (n - 1)}')" \
		"$fd0" "$fd1" "$fdN" "$th0" "$th1" "$thN" "$verdict"
}

echo "bench-collections: $COLLECTIONS collections, model ${MODEL:-none (BM25 only)}, $DOCS documents each, $ROUNDS round(s); RSS in MB after ${SETTLE}s"
echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
printf '%-40s %7s %7s %7s %7s %7s %8s %13s %13s  %s\n' binary start "1 coll" "$COLLECTIONS coll" "+1st" "+all" "per next" "files" "threads" "all<2x1st"
for _ in $(seq 1 "$ROUNDS"); do
	for bin in "${BINS[@]}"; do
		run "$bin"
	done
done
