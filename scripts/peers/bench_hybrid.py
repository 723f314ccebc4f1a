#!/usr/bin/env python3
"""Tandem's hybrid search (BM25 + dense, RRF) beside LanceDB's, on the same text and vectors, with and without a filter.

    make bench-peers            # runs this after bench_dense.py
    .native/peers/bin/python scripts/peers/bench_hybrid.py [--rounds 3] [--dir COLLECTION]

For SciFact from ../shared/data, with the Tandem collection bench_dense.py
uses (the default model's dense vectors; --dir to name another):

- Tandem: `tandem eval --mode bm25+dense --fusion rrf,minmax` (query
  encoding included);
- LanceDB (PyPI `lancedb`): one table of the documents' title and text (as
  one field), a keyword column and the vectors Tandem stored (`tandem
  export`), its native full-text index with English stemming and stop
  words, and hybrid search (full text plus vector, fused by its
  RRFReranker) with each query encoded by onnxruntime in Python as
  bench_dense.py does.

Both take 100 hits from each side and keep the fused top 100.

Filtered: SciFact has no metadata, so each document gets a keyword,
bucket, "b0" to "b9" from a hash of its id, and the filter keeps b0, b1
and b2 (about 30% of the documents): Tandem's `--filter
{"terms":{"bucket":[...]}}` on a second collection of the same documents
and vectors (they bring their vectors, so nothing is re-encoded), and
LanceDB's prefiltered `where("bucket IN (...)")`. Those rankings are
scored against the qrels restricted to the documents the filter keeps,
over the queries that keep a relevant document.

Rankings are scored by the same pytrec_eval code; latency rounds alternate;
each figure is the median over rounds of a round's p50. The Markdown table
goes to standard output and to .native/peers/hybrid.md.
"""
import hashlib
import json
import os
import statistics
import subprocess
import time

# Lance warns on every hybrid query that its scoring columns will change.
os.environ.setdefault("LANCE_LOG", "error")

from bench_dense import Peer as Encoder
from bench_dense import exported, parse_args
from common import load, pct, progress, read_run, score, workdir, write_table

K = 100
KEEP = ["b0", "b1", "b2"]  # the filter's buckets


def bucket(doc_id):
    """The keyword the filtered runs select on, from a hash of the id."""
    return "b%d" % (int(hashlib.sha1(doc_id.encode()).hexdigest(), 16) % 10)


class LanceDB:
    name = "LanceDB"

    def __init__(self, docs, ids, vecs, encoder, folder):
        import lancedb
        import pyarrow as pa
        from lancedb.rerankers import RRFReranker

        text = dict(docs)
        self.version = "lancedb " + lancedb.__version__
        self.encoder = encoder
        db = lancedb.connect(os.path.join(folder, "lancedb"))
        t0 = time.perf_counter()
        table = pa.table({
            "id": pa.array(ids),
            "text": pa.array([text[i] for i in ids]),
            "bucket": pa.array([bucket(i) for i in ids]),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), vecs.shape[1]),
        })
        self.tbl = db.create_table("docs", data=table)
        self.tbl.create_fts_index("text", language="English", stem=True, remove_stop_words=True)
        self.build = time.perf_counter() - t0
        self.reranker = RRFReranker()

    def round(self, queries, filtered=False):
        where = "bucket IN (%s)" % ", ".join("'%s'" % b for b in KEEP)
        lat, run = [], {}
        for qid, text in queries.items():
            t0 = time.perf_counter()
            q = self.encoder.encode(text)[0]
            b = self.tbl.search(query_type="hybrid").vector(q).text(text)
            if filtered:
                b = b.where(where, prefilter=True)
            res = b.limit(K).rerank(self.reranker).select(["id"]).to_list()
            lat.append((time.perf_counter() - t0) * 1000)
            run[qid] = {r["id"]: float(r.get("_relevance_score", 0.0)) for r in res}
        return run, pct(lat, 0.5)


def tandem_round(binary, coll, data, runs, qrels=None, filter=None):
    """Returns {fusion: (run, p50)} for RRF and min-max (Tandem's default)."""
    cmd = [binary, "eval", "--dir", coll, "--queries", os.path.join(data, "queries.jsonl"),
           "--qrels", qrels or os.path.join(data, "qrels", "test.tsv"), "--mode", "bm25+dense,bm25+dense",
           "--fusion", "rrf,minmax", "--json", "--runs", runs]
    if filter:
        cmd += ["--filter", filter]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():  # the later rows of each mode: a warm process
        if line.strip():
            row = json.loads(line)
            rows[row["mode"].split("/")[1]] = row
    res = {}
    for fusion, row in rows.items():
        run = read_run(os.path.join(runs, f"bm25-dense_{fusion}.trec"))
        res[fusion] = (run, row["p50_ms"])
    return res


def filtered_collection(args, data, ids, vecs, work):
    """Indexes the documents again with their bucket and the vectors
    Tandem stored, which they bring (nothing is encoded)."""
    coll = os.path.join(work, "filtered")
    vec = dict(zip(ids, vecs))
    corpus = os.path.join(work, "filtered.jsonl")
    with open(os.path.join(data, "corpus.jsonl")) as src, open(corpus, "w") as out:
        for line in src:
            o = json.loads(line)
            i = str(o["_id"])
            if i not in vec:
                continue  # a document Tandem skipped (no text)
            o["bucket"] = bucket(i)
            o["_vectors"] = {args.model: {"dense": [float(x) for x in vec[i]]}}
            out.write(json.dumps(o) + "\n")
    subprocess.run([args.tandem, "index", "--dir", coll, "--corpus", corpus, "--models", "dense:" + args.model, "--quiet"],
                   check=True)
    return coll


def main():
    args = parse_args(__doc__, "hybrid")
    data = os.path.join(args.data, args.collection)
    docs, queries, qrels = load(args.data, args.collection)
    work = workdir("peers-hybrid-")
    coll, model_dir, ids, vecs = exported(args, work)
    enc = Encoder(model_dir, ids, vecs, args.threads)
    peer = LanceDB(docs, ids, vecs, enc, work)
    progress(f"LanceDB table and full-text index built in {peer.build:.1f} s")
    fcoll = filtered_collection(args, data, ids, vecs, work)
    kept = {i for i in ids if bucket(i) in KEEP}
    fqrels = {q: {d: r for d, r in rel.items() if d in kept} for q, rel in qrels.items()}
    fqrels = {q: rel for q, rel in fqrels.items() if any(r > 0 for r in rel.values())}
    fqueries = {q: t for q, t in queries.items() if q in fqrels}
    fqrels_path = os.path.join(work, "filtered-qrels.tsv")
    with open(fqrels_path, "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, rel in fqrels.items():
            for d, r in rel.items():
                f.write(f"{q}\t{d}\t{r}\n")
    filt = json.dumps({"terms": {"bucket": KEEP}})
    progress(f"filtered: {len(kept)} of {len(ids)} documents kept, {len(fqueries)} queries with a relevant one")

    t50 = {(f, filtered): [] for f in ("rrf", "minmax") for filtered in (False, True)}
    p50 = {False: [], True: []}
    runs = {}
    for r in range(args.rounds):
        for filtered in (False, True):
            res = (tandem_round(args.tandem, fcoll, data, os.path.join(work, "runs-f"), fqrels_path, filt) if filtered
                   else tandem_round(args.tandem, coll, data, os.path.join(work, "runs")))
            for fusion, (run, x) in res.items():
                runs[(fusion, filtered)] = run
                t50[(fusion, filtered)].append(x)
            runs[("peer", filtered)], x = peer.round(fqueries if filtered else queries, filtered)
            p50[filtered].append(x)
        progress(f"round {r + 1} of {args.rounds}: Tandem p50 {t50[('rrf', False)][-1]:.2f} ms (RRF), "
                 f"{t50[('rrf', True)][-1]:.2f} ms filtered; LanceDB p50 {p50[False][-1]:.2f} ms, {p50[True][-1]:.2f} ms filtered")
    lines = ["| collection | engine | nDCG@10 | R@100 | p50 ms, encoding included | Tandem p50 / peer p50 |",
             "|---|---|---|---|---|---|"]
    for filtered in (False, True):
        name = f"{args.collection}, filtered ({len(kept)} of {len(ids)} documents, {len(fqueries)} queries)" if filtered else args.collection
        q = fqrels if filtered else qrels
        pm = statistics.median(p50[filtered])
        for fusion, label in (("rrf", "RRF"), ("minmax", "min-max, its default")):
            n, rc = score(runs[(fusion, filtered)], q)
            tm = statistics.median(t50[(fusion, filtered)])
            lines.append(f"| {name} | Tandem, bm25+dense, {label} | {n:.4f} | {rc:.4f} | {tm:.2f} | {tm / pm:.2f} |")
        pn, pr = score(runs[("peer", filtered)], q)
        lines.append(f"| {name} | {peer.name} hybrid, RRF ({peer.version}) | {pn:.4f} | {pr:.4f} | {pm:.2f} | |")
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
