#!/usr/bin/env bash
# make cluster-demo: three `tandem serve --cluster` processes on loopback,
# protected as on a network: a cluster key between nodes and an API key
# for clients. A collection of 3 shards x 3 replicas, the demo corpus
# indexed through one node and searched through another, then the
# cluster's status, and a request to a node's /_cluster/ route without the
# cluster key, which is refused. The nodes stop when the script ends; their
# data and logs stay in .native/cluster-demo.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TANDEM="$ROOT/bin/tandem"
DEMO="$ROOT/.native/cluster-demo"
rm -rf "$DEMO"
mkdir -p "$DEMO"

corpus="$DEMO/gostd.jsonl"
go run "$ROOT/scripts/gendemo" -o "$corpus"

# The cluster key, the same on every node, and the clients' admin key.
python3 -c 'import secrets; print(secrets.token_hex(32))' >"$DEMO/cluster.key"
chmod 600 "$DEMO/cluster.key"
KEY=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
AUTH="Authorization: Bearer $KEY"

PEERS="n0=127.0.0.1:7811/127.0.0.1:7711,n1=127.0.0.1:7812/127.0.0.1:7712,n2=127.0.0.1:7813/127.0.0.1:7713"
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT
for i in 0 1 2; do
	TANDEM_API_KEYS=$KEY "$TANDEM" serve --cluster --node "n$i" --peers "$PEERS" --data "$DEMO/n$i" \
		--cluster-key-file "$DEMO/cluster.key" >"$DEMO/n$i.log" 2>&1 &
	pids+=($!)
done
for port in 7711 7712 7713; do
	for _ in $(seq 1 300); do
		curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
		sleep 0.1
	done
done
echo "3 nodes up: http://127.0.0.1:7711, :7712, :7713, with a cluster key ($DEMO/cluster.key) and an API key (logs in $DEMO)"

show() { python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin), indent=1)[:'"${2:-2000}"'])'; }

printf '\n$ curl -H "$AUTH" -X PUT :7711/v1/collections/gostd   # 3 shards x 3 replicas, strict schema, dense + late\n'
curl -fsS -H "$AUTH" -X PUT http://127.0.0.1:7711/v1/collections/gostd -H 'Content-Type: application/json' -d '{
  "schema": {"strict": true, "fields": [
    {"name": "title", "type": "text"}, {"name": "text", "type": "text"},
    {"name": "area", "type": "keyword"}, {"name": "depth", "type": "number"},
    {"name": "deprecated", "type": "bool"}, {"name": "exported", "type": "number"}]},
  "dense": ["bge-small-en-v1.5"], "late": ["bge-small-en-v1.5"]}' | python3 -c 'import json,sys; d=json.load(sys.stdin); print("created", d["name"], "retrievers", d["retrievers"])'

printf '\n$ curl -H "$AUTH" -X POST :7712/v1/collections/gostd/documents --data-binary @gostd.jsonl   # through another node\n'
start=$(date +%s.%N)
curl -fsS -H "$AUTH" -X POST http://127.0.0.1:7712/v1/collections/gostd/documents -H 'Content-Type: application/x-ndjson' --data-binary @"$corpus" | show - 300
echo "indexed in $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"

search() {
	local filter=$1 query=$2
	printf '\n$ curl -H "$AUTH" :7713/v1/collections/gostd/search  text=%q filter=%s mode=hybrid\n' "$query" "$filter"
	curl -fsS -H "$AUTH" -X POST http://127.0.0.1:7713/v1/collections/gostd/search -H 'Content-Type: application/json' \
		-d "{\"text\": \"$query\", \"filter\": $filter, \"mode\": \"hybrid\", \"k\": 5}" |
		python3 -c 'import json,sys
r=json.load(sys.stdin)
for h in r["hits"]:
    parts=", ".join("%s #%d" % (s["retriever"], s["rank"]) for s in h["sources"] if s["rank"])
    print("  %.3f  %-24s %s" % (h["score"], h["id"], parts))'
}
search '{"term":{"area":"crypto"}}' "secure random numbers"
search '{"term":{"area":"encoding"}}' "decode structured text into Go values"
search '{"and":[{"range":{"depth":{"gte":2}}},{"not":{"term":{"deprecated":true}}}]}' "compress a stream of bytes"

printf '\n$ curl -H "$AUTH" :7711/_cluster/status\n'
curl -fsS -H "$AUTH" http://127.0.0.1:7711/_cluster/status | python3 -c 'import json,sys
s=json.load(sys.stdin)
print("node", s["node"], "metadata leader", s["meta_leader"])
for c in s["collections"]:
    for sh in c["shards"]:
        print("  %s shard %d: leader %s, replicas %s, this node %s, applied %d, %d documents" % (c["spec"]["name"], sh["shard"], sh["leader"], ",".join(c["spec"]["placement"][sh["shard"]]), sh["state"], sh["applied"], sh["docs"]))'

printf '\n$ curl -H "$AUTH" -X POST :7711/_cluster/apply/gostd/0   # a route between nodes, without the cluster key\n'
curl -sS -H "$AUTH" -X POST http://127.0.0.1:7711/_cluster/apply/gostd/0 -w '  (HTTP %{http_code})\n'
