#!/usr/bin/env python3
"""Compares each int8 model NAME-int8 with its float32 model NAME on real texts.

For the first N SciFact documents (title + " " + text) and queries, it
encodes with both models in Python (make_parity.encode: Tandem's
tokenization, pooling and batching), batched as Tandem batches them:
one text per run, as Tandem runs an int8 model (Options.BatchSize),
queries one at a time (as a search does). It prints per model the minimum
and mean cosine of the pooled vectors and of the token vectors (the ones
late interaction reads), int8 against float32. docs/models.md quotes its output; quantize.py's
recipe should keep every pooled cosine >= 0.985, and the script fails
otherwise.

Run from the repository root after scripts/setup.sh:
    .native/venv/bin/pip install tokenizers
    .native/venv/bin/python scripts/models/compare_int8.py [N]
"""
import json
import os
import sys

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_parity  # noqa: E402

MODELS = ["bge-small-en-v1.5", "all-MiniLM-L6-v2", "e5-small-v2"]
SCIFACT = os.path.join(make_parity.ROOT, "..", "shared", "data", "scifact")
# Texts per batch on each side, as Tandem encodes them.
BATCH = {"document": 1, "query": 1}


def first_lines(path, n, text):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if len(out) == n:
                break
            out.append(text(json.loads(line)))
    return out


def load(models_dir, name):
    d = os.path.join(models_dir, name)
    cfg = json.load(open(os.path.join(d, "tandem.json")))
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
    return sess, tok, make_parity.pad_id(os.path.join(d, "tokenizer.json"), tok), cfg


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    models_dir = os.path.join(make_parity.ROOT, ".native", "models")
    texts = {
        "document": first_lines(os.path.join(SCIFACT, "corpus.jsonl"), n, lambda d: d["title"] + " " + d["text"]),
        "query": first_lines(os.path.join(SCIFACT, "queries.jsonl"), n, lambda q: q["text"]),
    }
    worst = 1.0
    for name in MODELS:
        f32, i8 = load(models_dir, name), load(models_dir, name + "-int8")
        for side, batch in texts.items():
            a = make_parity.encode(*f32, side, batch, BATCH[side], tokens=True)
            b = make_parity.encode(*i8, side, batch, BATCH[side], tokens=True)
            pooled = np.sum(a[0] * b[0], axis=1) / (np.linalg.norm(a[0], axis=1) * np.linalg.norm(b[0], axis=1))
            tok = np.concatenate([np.sum(x * y, axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
                                  for x, y in zip(a[1], b[1])])
            worst = min(worst, pooled.min())
            print(f"{name}-int8 vs {name}, {len(batch)} {side.replace('query', 'querie')}s: pooled cosine min {pooled.min():.4f} "
                  f"mean {pooled.mean():.4f}; {len(tok)} token vectors min {tok.min():.4f} mean {tok.mean():.4f}")
    if worst < 0.985:
        sys.exit(f"compare_int8: pooled cosine {worst:.4f} < 0.985")


if __name__ == "__main__":
    main()
