#!/usr/bin/env bash
# Document encoding, Tandem against onnxruntime in Python, side by side:
# the same texts (the first DOCS documents of SciFact), the same model file,
# the same threads, the same windows and batches. Tandem runs a window's
# batches as concurrent one-thread runs, as its ingest does; Python runs
# one batch at a time on all the threads, as onnxruntime's users do. The two run in
# turn, ROUNDS times, so that the machine's other load falls on both; the
# medians and their ratio are printed last.
#
#   scripts/bench/encode.sh [MODEL] [DOCS] [THREADS] [ROUNDS]
source "$(dirname "$0")/../lib.sh"

MODEL=${1:-bge-small-en-v1.5-int8}
DOCS=${2:-512}
THREADS=${3:-$(nproc)}
ROUNDS=${4:-3}
CORPUS=${CORPUS:-$ROOT/../shared/data/scifact/corpus.jsonl}
[ -f "$CORPUS" ] || { echo "encode.sh: no corpus at $CORPUS (set CORPUS)" >&2; exit 1; }
DIR="$NATIVE/models/$MODEL"
[ -f "$DIR/tandem.json" ] || { echo "encode.sh: model $MODEL is not installed in $DIR" >&2; exit 1; }
need_venv "$ROOT/scripts/models/requirements.txt" "$ROOT/scripts/bench/requirements.txt"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "model $MODEL, $DOCS SciFact documents, $THREADS threads, $ROUNDS rounds"
echo "Tandem runs a window's batches as $THREADS concurrent one-thread runs; Python as one run of $THREADS threads at a time"
for r in $(seq "$ROUNDS"); do
	line=$("$ROOT/bin/tandem" bench encode --model "$MODEL" --corpus "$CORPUS" --docs "$DOCS" --threads "$THREADS" --json)
	echo "$line" | tee -a "$out"
	# Python batches as Tandem did: the model's batch size and window.
	read -r window batch budget < <("$VENV/bin/python" -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["window"], r["batch"], r["batch_tokens"])' "$line")
	"$VENV/bin/python" "$ROOT/scripts/bench/encode_python.py" "$DIR" "$CORPUS" "$DOCS" "$THREADS" "$window" "$batch" "$budget" | tee -a "$out"
done
"$VENV/bin/python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = {e: statistics.median(r["docs_per_s"] for r in rows if r["engine"] == e) for e in ("tandem", "onnxruntime-python")}
tok = {e: statistics.median(r["tokens_per_s"] for r in rows if r["engine"] == e) for e in med}
print(f"median docs/s: Tandem {med['tandem']:.2f}, onnxruntime in Python {med['onnxruntime-python']:.2f}; "
      f"tokens/s: {tok['tandem']:.0f} vs {tok['onnxruntime-python']:.0f}; ratio Tandem/Python {med['tandem'] / med['onnxruntime-python']:.3f}")
PY
