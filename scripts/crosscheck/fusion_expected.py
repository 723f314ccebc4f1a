#!/usr/bin/env python3
"""Generate fusion/testdata/runs.json and fuse it with ranx into
fusion/testdata/expected.json, which fusion's TestCrossCheck compares with.

    pip install ranx
    python3 scripts/crosscheck/fusion_expected.py

The runs are synthetic and deterministic (fixed seed): three retrievers with
different score scales (BM25-like, cosine with negatives, a late-interaction
sum), partial overlap, per-list depths that cut some lists, and distinct
scores within a list so that ranx's sort by score agrees with list order.

ranx has no weighted RRF and no DBSF. Weighted RRF is ranx's rrf applied to
each run alone, then ranx's wsum; DBSF normalises with numpy (population
std, mean ± 3σ, ranx's 1e-9 floor) and then uses ranx's wsum.
"""
import json
import os
import random

import numpy as np
from ranx import Run, fuse
from ranx.fusion import rrf, wsum

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "fusion", "testdata")
K = 60


def make_runs():
    rng = random.Random(7)
    retrievers = [
        ("bm25", 1.0, 0, lambda: rng.uniform(2, 30)),
        ("dense", 2.5, 15, lambda: rng.uniform(-0.3, 0.95)),
        ("late", 0.5, 12, lambda: rng.uniform(5, 20)),
    ]
    queries = []
    for q in range(12):
        pool = rng.sample(range(1, 200), 40)
        lists = []
        for name, weight, depth, draw in retrievers:
            docs = rng.sample(pool, rng.randint(3, 25))
            scores = sorted({round(draw(), 6) for _ in docs}, reverse=True)
            while len(scores) < len(docs):  # keep scores distinct
                scores = sorted({round(draw(), 6) for _ in docs}, reverse=True)
            items = [[d, s] for d, s in zip(docs, scores)]
            lists.append({"name": name, "weight": weight, "depth": depth, "items": items})
        queries.append({"id": f"q{q}", "lists": lists})
    return {"k": K, "queries": queries}


def to_runs(data):
    """One ranx Run per retriever, each cut to its depth."""
    runs = []
    for i in range(len(data["queries"][0]["lists"])):
        d = {}
        for q in data["queries"]:
            lst = q["lists"][i]
            items = lst["items"][: lst["depth"] or None]
            d[q["id"]] = {str(doc): float(s) for doc, s in items}
        runs.append(Run(d))
    return runs


def dbsf_norm(run):
    out = {}
    for q, res in run.to_dict().items():
        s = np.array(list(res.values()))
        mean, sd = s.mean(), s.std()
        lo, den = mean - 3 * sd, max(6 * sd, 1e-9)
        out[q] = {d: (v - lo) / den for d, v in res.items()}
    return Run(out)


def main():
    os.makedirs(DATA, exist_ok=True)
    data = make_runs()
    with open(os.path.join(DATA, "runs.json"), "w") as f:
        json.dump(data, f, indent=None, separators=(",", ":"))
        f.write("\n")
    runs = to_runs(data)
    weights = [l["weight"] for l in data["queries"][0]["lists"]]
    fused = {
        "rrf": fuse(runs, norm=None, method="rrf", params={"k": K}),
        "wrrf": wsum([rrf([r], k=K) for r in runs], weights),
        "minmax": fuse(runs, norm="min-max", method="wsum", params={"weights": weights}),
        "zscore": fuse(runs, norm="zmuv", method="wsum", params={"weights": weights}),
        "max": fuse(runs, norm="max", method="wsum", params={"weights": weights}),
        "dbsf": wsum([dbsf_norm(r) for r in runs], weights),
        "combsum": fuse(runs, method="sum"),  # ranx default norm: min-max
        "combmnz": fuse(runs, method="mnz"),
    }
    out = {}
    for method, run in fused.items():
        out[method] = {
            q: [[int(d), s] for d, s in sorted(res.items(), key=lambda kv: (-kv[1], int(kv[0])))]
            for q, res in run.to_dict().items()
        }
    with open(os.path.join(DATA, "expected.json"), "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"), sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
