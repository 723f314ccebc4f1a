#!/usr/bin/env python3
"""Generate the synthetic qrels and runs in evaluate/testdata.

Deterministic (fixed seed). The data is small but exercises what the metric
code must get right: graded and negative grades, tied scores, a qrels query
missing from a run, a run query missing from the qrels, a query whose
judgments are all non-relevant, and relevant docs beyond ranks 10 and 100.

    python3 scripts/crosscheck/make_eval_fixtures.py
"""
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "evaluate", "testdata")


def main():
    rng = random.Random(20240607)
    qids = [f"q{i:02d}" for i in range(1, 25)] + ["7", "10", "100"]
    docs = [f"d{i:03d}" for i in range(400)]
    qrels = {}
    for q in qids:
        judged = rng.sample(docs, rng.randint(3, 12))
        qrels[q] = {d: rng.choice([0, 0, 1, 1, 2, 3, -1]) for d in judged}
        if all(g <= 0 for g in qrels[q].values()):
            qrels[q][judged[0]] = 1
    # A query whose judgments are all non-relevant.
    qrels["q24"] = {d: 0 for d in rng.sample(docs, 4)}

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "qrels.tsv"), "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q in qids:
            for d, g in qrels[q].items():
                f.write(f"{q}\t{d}\t{g}\n")

    for name, quality in (("run_a", 0.6), ("run_b", 0.3)):
        lines = []
        for q in qids + ["q99"]:  # q99 is not in the qrels
            if name == "run_a" and q == "q05":
                continue  # a qrels query with no results
            depth = 130 if q in ("q01", "q02", "7") else rng.randint(5, 40)
            pool = [d for d in docs if d not in qrels.get(q, {})]
            picked = rng.sample(pool, depth)
            # Put some judged docs in, at random depths (some past 10/100).
            for d in qrels.get(q, {}):
                if rng.random() < quality:
                    picked.insert(rng.randint(0, len(picked)), d)
            picked = picked[:depth]
            if q == "q02" and name == "run_a":
                # A relevant doc just past the Recall@100 cut.
                rel = [d for d, g in qrels[q].items() if g > 0][0]
                if rel in picked:
                    picked.remove(rel)
                picked.insert(105, rel)
            # Scores rounded to one decimal: many ties, broken by doc id.
            score = 20.0
            for rank, d in enumerate(picked, 1):
                score -= rng.choice([0.0, 0.0, 0.1, 0.3])
                lines.append(f"{q} Q0 {d} {rank} {score:.1f} {name}\n")
        with open(os.path.join(OUT, name + ".trec"), "w") as f:
            f.writelines(lines)


if __name__ == "__main__":
    main()
