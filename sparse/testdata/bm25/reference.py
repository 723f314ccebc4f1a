#!/usr/bin/env python3
"""Textbook BM25 scores for the fixture, from tokens.json to expected.json.

    python3 sparse/testdata/bm25/reference.py

An implementation independent of Tandem's (standard library only), over the
tokens Bleve's analysers produced (tokens.json, written by
TestBM25MatchesReference with TANDEM_UPDATE_BM25=1). For each query and each
searched field f with boost w:

    score(d) += w * qtf(t) * idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
    idf(t)    = ln(1 + (N - df + 0.5) / (df + 0.5))

over the distinct query terms t, where N is the number of documents whose
field has a token, avgdl their mean length, df the number holding t, tf the
occurrences of t in d's field and dl its length. Documents no query term
reaches are not listed.
"""
import collections
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))

with open(os.path.join(HERE, "tokens.json")) as f:
    fx = json.load(f)
k1, b = fx["k1"], fx["b"]
docs = fx["docs"]

expected = {}
for qid, fields in fx["boosts"].items():
    scores = collections.defaultdict(float)
    for field, boost in sorted(fields.items()):
        lengths = {d: len(f.get(field, [])) for d, f in docs.items()}
        holders = [d for d, n in lengths.items() if n > 0]
        n_docs = len(holders)
        if n_docs == 0:
            continue
        avgdl = sum(lengths[d] for d in holders) / n_docs
        tfs = {d: collections.Counter(docs[d][field]) for d in holders}
        qtf = collections.Counter(fx["queries"][qid][field])
        for term, count in sorted(qtf.items()):
            df = sum(1 for d in holders if tfs[d][term] > 0)
            if df == 0:
                continue
            idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
            for d in holders:
                tf = tfs[d][term]
                if tf == 0:
                    continue
                dl = lengths[d]
                scores[d] += boost * count * idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
    expected[qid] = {d: round(s, 12) for d, s in sorted(scores.items())}

with open(os.path.join(HERE, "expected.json"), "w") as f:
    json.dump(expected, f, indent=1, sort_keys=True)
    f.write("\n")
print("wrote", os.path.join(HERE, "expected.json"), {q: len(s) for q, s in expected.items()})
