#!/usr/bin/env bash
# make cluster-demo: three `tandem serve --cluster` processes on loopback,
# protected as on a network: a cluster key between nodes and an API key
# for clients. A collection of 3 shards x 3 replicas, the demo corpus
# uploaded through one node as a task (wait=false) and followed until it
# ends, then searched through another node, then the cluster's status, and
# a request to a node's /_cluster/ route without the cluster key, which is
# refused. The nodes stop when the script ends; their data and logs stay
# in .native/cluster-demo.
#
# The calls go through scripts/apicall, which prints the server's own
# error message when one fails; the `$ curl` lines say what each sends. A
# step that fails prints one line naming it and the nodes' logs, and the
# script exits non-zero.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TANDEM="$ROOT/bin/tandem"
DEMO="$ROOT/.native/cluster-demo"
LOGS="$DEMO/n0.log, n1.log, n2.log"

step="start"
# fail is the ERR trap: the step that failed and where the logs are. A
# subshell leaves the message to the shell that runs the script.
fail() {
	local rc=$1
	[ "$BASH_SUBSHELL" -eq 0 ] && echo "cluster-demo: FAILED at step \"$step\" (exit status $rc); the nodes' logs: $LOGS" >&2
	exit "$rc"
}
trap 'fail $?' ERR
die() { # a failure found by the script itself
	echo "cluster-demo: $*" >&2
	false
}

[ -x "$TANDEM" ] || { echo "cluster-demo: $TANDEM is missing: run make build" >&2; exit 2; }
rm -rf "$DEMO"
mkdir -p "$DEMO"

step="generate the demo corpus (scripts/gendemo)"
corpus="$DEMO/gostd.jsonl"
go -C "$ROOT" run ./scripts/gendemo -o "$corpus"
step="build scripts/apicall"
API="$DEMO/apicall"
CGO_ENABLED=0 go -C "$ROOT" build -o "$API" ./scripts/apicall

# The cluster key, the same on every node, and the clients' admin key
# (apicall reads it from TANDEM_API_KEY).
step="make the keys"
hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }
hex 32 >"$DEMO/cluster.key"
chmod 600 "$DEMO/cluster.key"
KEY=$(hex 16)
[ ${#KEY} -eq 32 ] || die "could not read 16 random bytes from /dev/urandom"
export TANDEM_API_KEY=$KEY

step="start the nodes"
PEERS="n0=127.0.0.1:7811/127.0.0.1:7711,n1=127.0.0.1:7812/127.0.0.1:7712,n2=127.0.0.1:7813/127.0.0.1:7713"
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT
for i in 0 1 2; do
	TANDEM_API_KEYS=$KEY "$TANDEM" serve --cluster --node "n$i" --peers "$PEERS" --data "$DEMO/n$i" \
		--cluster-key-file "$DEMO/cluster.key" >"$DEMO/n$i.log" 2>&1 &
	pids+=($!)
done
for i in 0 1 2; do
	step="wait for node n$i (http://127.0.0.1:771$((i + 1))/readyz)"
	ready=no
	for _ in $(seq 1 600); do
		if curl -fsS "http://127.0.0.1:771$((i + 1))/readyz" >/dev/null 2>&1; then
			ready=yes
			break
		fi
		kill -0 "${pids[$i]}" 2>/dev/null || die "node n$i exited: $(tail -n 1 "$DEMO/n$i.log")"
		sleep 0.1
	done
	[ "$ready" = yes ] || die "node n$i is not ready after 60 s: $(tail -n 1 "$DEMO/n$i.log")"
done
echo "3 nodes up: http://127.0.0.1:7711, :7712, :7713, with a cluster key ($DEMO/cluster.key) and an API key (logs in $DEMO)"

step="create the collection through n0"
printf '\n$ curl -H "$AUTH" -X PUT :7711/v1/collections/gostd   # 3 shards x 3 replicas, strict schema, dense + late\n'
"$API" -t '{{"created "}}{{.name}} retrievers {{join .retrievers ", "}}{{"\n"}}' PUT http://127.0.0.1:7711/v1/collections/gostd '{
  "schema": {"strict": true, "fields": [
    {"name": "title", "type": "text"}, {"name": "text", "type": "text"},
    {"name": "area", "type": "keyword"}, {"name": "depth", "type": "number"},
    {"name": "deprecated", "type": "bool"}, {"name": "exported", "type": "number"}]},
  "dense": ["bge-small-en-v1.5"], "late": ["bge-small-en-v1.5"]}'

step="upload the corpus through n1 as a task, and follow it"
printf '\n$ curl -H "$AUTH" -X POST ":7712/v1/collections/gostd/documents?wait=false" --data-binary @gostd.jsonl   # a task, through another node\n'
printf '$ curl -H "$AUTH" :7712/v1/tasks/{id}   # until it has ended\n'
"$API" upload http://127.0.0.1:7712/v1/collections/gostd "$corpus"

search() {
	local filter=$1 query=$2
	step="search through n2: $query"
	printf '\n$ curl -H "$AUTH" :7713/v1/collections/gostd/search  text=%q filter=%s mode=hybrid\n' "$query" "$filter"
	"$API" -t '{{range .hits}}  {{printf "%.3f" .score}}  {{printf "%-24s" .id}}{{range .sources}}{{if .rank}} {{.retriever}} #{{.rank}}{{end}}{{end}}{{"\n"}}{{end}}' \
		POST http://127.0.0.1:7713/v1/collections/gostd/search "{\"text\": \"$query\", \"filter\": $filter, \"mode\": \"hybrid\", \"k\": 5}"
}
search '{"term":{"area":"crypto"}}' "secure random numbers"
search '{"term":{"area":"encoding"}}' "decode structured text into Go values"
search '{"and":[{"range":{"depth":{"gte":2}}},{"not":{"term":{"deprecated":true}}}]}' "compress a stream of bytes"

step="the cluster's status through n0"
printf '\n$ curl -H "$AUTH" :7711/_cluster/status\n'
"$API" -t 'node {{.node}} metadata leader {{.meta_leader}}
{{range $c := .collections}}{{range $i, $sh := $c.shards}}  {{$c.spec.name}} shard {{$sh.shard}}: leader {{get $sh "leader" "none"}}, replicas {{join (index $c.spec.placement $i) ","}}, this node {{get $sh "state" "-"}}, applied {{int (get $sh "applied" 0.0)}}, {{int (get $sh "docs" 0.0)}} documents
{{end}}{{end}}' GET http://127.0.0.1:7711/_cluster/status

step="a route between nodes without the cluster key"
printf '\n$ curl -H "$AUTH" -X POST :7711/_cluster/apply/gostd/0   # a route between nodes, without the cluster key\n'
if out=$("$API" POST http://127.0.0.1:7711/_cluster/apply/gostd/0 2>&1); then
	die "POST /_cluster/apply/gostd/0 without the cluster key was accepted: $out"
fi
case "$out" in
*"HTTP 401"* | *"HTTP 403"*) echo "  refused: ${out#apicall: }" ;;
*) die "POST /_cluster/apply/gostd/0 without the cluster key: want a 401 or 403, got: $out" ;;
esac
