#!/usr/bin/env python3
"""Compute the expected metrics for the evaluate package's cross-check test.

Reads evaluate/testdata/qrels.tsv and every evaluate/testdata/*.trec, scores
them with pytrec_eval (trec_eval's own C code) and writes
evaluate/testdata/expected.json, which evaluate's TestCrossCheck compares
with to 1e-9.

    pip install pytrec_eval-terrier
    python3 scripts/crosscheck/eval_expected.py

Conventions (the Go package documents the same ones):
  - mean over every query in the qrels; a query pytrec_eval does not score
    (no results) counts 0;
  - MRR@10 is trec_eval's recip_rank on the run cut to its top 10 in
    trec_eval order (score descending, then doc id descending).
"""
import glob
import json
import os

import pytrec_eval

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "evaluate", "testdata")


def read_qrels(path):
    qrels = {}
    with open(path) as f:
        next(f)  # header
        for line in f:
            q, d, g = line.rstrip("\n").split("\t")
            qrels.setdefault(q, {})[d] = int(g)
    return qrels


def read_run(path):
    run = {}
    with open(path) as f:
        for line in f:
            q, _, d, _, s, _ = line.split()
            run.setdefault(q, {})[d] = float(s)
    return run


def top(results, k):
    ranked = sorted(results.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    return dict(ranked[:k])


def main():
    qrels = read_qrels(os.path.join(DATA, "qrels.tsv"))
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_100", "map"})
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
    out = {}
    for path in sorted(glob.glob(os.path.join(DATA, "*.trec"))):
        run = read_run(path)
        a = full.evaluate(run)
        b = rr.evaluate({q: top(r, 10) for q, r in run.items()})
        per_query = {}
        for q in qrels:
            per_query[q] = {
                "ndcg@10": a.get(q, {}).get("ndcg_cut_10", 0.0),
                "mrr@10": b.get(q, {}).get("recip_rank", 0.0),
                "recall@100": a.get(q, {}).get("recall_100", 0.0),
                "map": a.get(q, {}).get("map", 0.0),
            }
        mean = {k: sum(m[k] for m in per_query.values()) / len(per_query)
                for k in ("ndcg@10", "mrr@10", "recall@100", "map")}
        out[os.path.basename(path)] = {"mean": mean, "per_query": per_query}
    with open(os.path.join(DATA, "expected.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
