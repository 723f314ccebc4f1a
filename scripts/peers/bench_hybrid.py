#!/usr/bin/env python3
"""Tandem's hybrid search (BM25 + dense, RRF) beside LanceDB's, on the same text and vectors.

    make bench-peers            # runs this after bench_dense.py
    .native/peers/bin/python scripts/peers/bench_hybrid.py [--rounds 3] [--dir COLLECTION]

For SciFact from ../shared/data, with the Tandem collection bench_dense.py
uses (the default model's dense vectors; --dir to name another):

- Tandem: `tandem eval --mode bm25+dense --fusion rrf` (query encoding
  included);
- LanceDB (PyPI `lancedb`): one table of the documents' title and text (as
  one field) and the vectors Tandem stored (`tandem export`), its native
  full-text index with English stemming and stop words, and hybrid search
  (full text plus vector, fused by its RRFReranker) with each query encoded
  by onnxruntime in Python as bench_dense.py does.

Both take 100 hits from each side and keep the fused top 100. Rankings are
scored by the same pytrec_eval code; latency rounds alternate; each figure
is the median over rounds of a round's p50. The Markdown table goes to
standard output and to .native/peers/hybrid.md.
"""
import json
import os
import statistics
import subprocess
import tempfile
import time

# Lance warns on every hybrid query that its scoring columns will change.
os.environ.setdefault("LANCE_LOG", "error")

from bench_dense import Peer as Encoder
from bench_dense import exported, parse_args
from common import load, pct, progress, score, write_table

K = 100


class LanceDB:
    name = "LanceDB"

    def __init__(self, docs, ids, vecs, encoder, workdir):
        import lancedb
        import pyarrow as pa
        from lancedb.rerankers import RRFReranker

        text = dict(docs)
        self.version = "lancedb " + lancedb.__version__
        self.encoder = encoder
        db = lancedb.connect(os.path.join(workdir, "lancedb"))
        t0 = time.perf_counter()
        table = pa.table({
            "id": pa.array(ids),
            "text": pa.array([text[i] for i in ids]),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), vecs.shape[1]),
        })
        self.tbl = db.create_table("docs", data=table)
        self.tbl.create_fts_index("text", language="English", stem=True, remove_stop_words=True)
        self.build = time.perf_counter() - t0
        self.reranker = RRFReranker()

    def round(self, queries):
        lat, run = [], {}
        for qid, text in queries.items():
            t0 = time.perf_counter()
            q = self.encoder.encode(text)[0]
            res = (self.tbl.search(query_type="hybrid").vector(q).text(text)
                   .limit(K).rerank(self.reranker).select(["id"]).to_list())
            lat.append((time.perf_counter() - t0) * 1000)
            run[qid] = {r["id"]: float(r.get("_relevance_score", 0.0)) for r in res}
        return run, pct(lat, 0.5)


def tandem_round(binary, coll, data, runs):
    """Returns {fusion: (run, p50)} for RRF and min-max (Tandem's default)."""
    out = subprocess.run([binary, "eval", "--dir", coll, "--queries", os.path.join(data, "queries.jsonl"),
                          "--qrels", os.path.join(data, "qrels", "test.tsv"), "--mode", "bm25+dense,bm25+dense",
                          "--fusion", "rrf,minmax", "--json", "--runs", runs], check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():  # the later rows of each mode: a warm process
        if line.strip():
            row = json.loads(line)
            rows[row["mode"].split("/")[1]] = row
    res = {}
    for fusion, row in rows.items():
        run = {}
        with open(os.path.join(runs, f"bm25-dense_{fusion}.trec")) as f:
            for line in f:
                q, _, doc, _, sc, _ = line.split()
                run.setdefault(q, {})[doc] = float(sc)
        res[fusion] = (run, row["p50_ms"])
    return res


def main():
    args = parse_args(__doc__, "hybrid")
    data = os.path.join(args.data, args.collection)
    docs, queries, qrels = load(args.data, args.collection)
    work = tempfile.mkdtemp(prefix="peers-hybrid-")
    coll, model_dir, ids, vecs = exported(args, work)
    enc = Encoder(model_dir, ids, vecs, args.threads)
    peer = LanceDB(docs, ids, vecs, enc, work)
    progress(f"LanceDB table and full-text index built in {peer.build:.1f} s")

    t50 = {"rrf": [], "minmax": []}
    p50, runs = [], {}
    for r in range(args.rounds):
        for fusion, (run, x) in tandem_round(args.tandem, coll, data, os.path.join(work, "runs")).items():
            runs[fusion] = run
            t50[fusion].append(x)
        runs["peer"], x = peer.round(queries)
        p50.append(x)
        progress(f"round {r + 1} of {args.rounds}: Tandem p50 {t50['rrf'][-1]:.2f} ms (RRF), LanceDB p50 {p50[-1]:.2f} ms")
    pm = statistics.median(p50)
    lines = ["| collection | engine | nDCG@10 | R@100 | p50 ms, encoding included | Tandem p50 / peer p50 |",
             "|---|---|---|---|---|---|"]
    for fusion, label in (("rrf", "RRF"), ("minmax", "min-max, its default")):
        n, rc = score(runs[fusion], qrels)
        tm = statistics.median(t50[fusion])
        lines.append(f"| {args.collection} | Tandem, bm25+dense, {label} | {n:.4f} | {rc:.4f} | {tm:.2f} | {tm / pm:.2f} |")
    pn, pr = score(runs["peer"], qrels)
    lines.append(f"| {args.collection} | {peer.name} hybrid, RRF ({peer.version}) | {pn:.4f} | {pr:.4f} | {pm:.2f} | |")
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
