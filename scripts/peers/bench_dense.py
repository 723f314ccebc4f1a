#!/usr/bin/env python3
"""Tandem's dense retrieval beside FAISS and onnxruntime in Python, on the same vectors and model.

    make bench-peers            # runs this after bench_bm25.py
    .native/peers/bin/python scripts/peers/bench_dense.py [--rounds 3] [--dir COLLECTION]

For SciFact from ../shared/data: a Tandem collection indexed for dense
retrieval with the default model (`tandem index --models
dense:bge-small-en-v1.5`, unless --dir names an existing one), its stored
document vectors exported with `tandem export`, and:

- Tandem: `tandem eval --mode dense` (query encoding included; latency
  measured inside the process around each search);
- the peer: the current FAISS release from PyPI (`faiss-cpu`, an exact
  inner-product index over the exported vectors), with each query encoded
  by onnxruntime in Python on the same ONNX file, with the model's own
  tokenizer, query length, pooling and normalisation (its tandem.json),
  and the same number of threads as Tandem's encoder (2 on a 2-core
  machine). Its latency is reported with encoding and for the FAISS search
  alone.

Rankings are scored by the same pytrec_eval code; latency rounds alternate
between the two, and each figure is the median over rounds of a round's
p50. The Markdown table goes to standard output and to
.native/peers/dense.md.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import time

import numpy as np

from common import ROOT, load, pct, progress, read_run, score, workdir, write_table

K = 100


class Peer:
    name = "FAISS + onnxruntime (Python)"

    def __init__(self, model_dir, ids, vecs, threads):
        import faiss
        import onnxruntime as ort
        from tokenizers import Tokenizer

        with open(os.path.join(model_dir, "tandem.json")) as f:
            self.cfg = json.load(f)
        self.tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tok.enable_truncation(self.cfg.get("query", {}).get("max_length", 512))
        self.tok.no_padding()
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(os.path.join(model_dir, "model.onnx"), so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.sess.get_inputs()}
        faiss.omp_set_num_threads(1)
        self.index = faiss.IndexFlatIP(vecs.shape[1])
        self.index.add(vecs)
        self.ids = ids
        self.version = f"faiss-cpu {faiss.__version__}, onnxruntime {ort.__version__}"

    def hidden(self, text):
        """The model's output for text: one row per token."""
        e = self.tok.encode(text)
        ids = np.array([e.ids], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        return self.sess.run(None, feed)[0][0]

    def encode(self, text):
        h = self.hidden(text)
        if self.cfg.get("pooling") == "mean":
            v = h.mean(axis=0)
        else:
            v = h[0]
        if self.cfg.get("normalize", True):
            v = v / np.linalg.norm(v)
        return v.astype(np.float32)[None, :]

    def round(self, queries):
        total, alone, run = [], [], {}
        for qid, text in queries.items():
            t0 = time.perf_counter()
            q = self.encode(text)
            t1 = time.perf_counter()
            s, i = self.index.search(q, K)
            t2 = time.perf_counter()
            total.append((t2 - t0) * 1000)
            alone.append((t2 - t1) * 1000)
            run[qid] = {self.ids[j]: float(x) for j, x in zip(i[0], s[0]) if j >= 0}
        return run, pct(total, 0.5), pct(alone, 0.5)


def tandem_round(binary, coll, data, runs):
    out = subprocess.run([binary, "eval", "--dir", coll, "--queries", os.path.join(data, "queries.jsonl"),
                          "--qrels", os.path.join(data, "qrels", "test.tsv"), "--mode", "dense,dense", "--json",
                          "--runs", runs], check=True, capture_output=True, text=True).stdout
    row = [json.loads(l) for l in out.splitlines() if l.strip()][-1]  # the second row: a warm process
    run = read_run(os.path.join(runs, "dense.trec"))
    return run, row["p50_ms"]


def tandem_collection(args, kind="dense", late_index=""):
    """Returns the Tandem collection with the model's vectors of kind, dense
    or late (args.dir, else one indexed once under .native/peers, with
    late_index as `tandem index --late-index`), and the model's directory."""
    data = os.path.join(args.data, args.collection)
    coll = args.dir
    if not coll:
        suffix = "" if kind == "dense" else "-" + kind
        if late_index:
            suffix += "-" + late_index.lower()
        coll = os.path.join(ROOT, ".native", "peers", f"{args.collection}-{args.model}{suffix}")
        if not os.path.isdir(coll):
            progress(f"indexing {args.collection} for {kind} retrieval with {args.model} (minutes: every document is encoded)")
            cmd = [args.tandem, "index", "--dir", coll + ".partial", "--corpus", os.path.join(data, "corpus.jsonl"),
                   "--models", kind + ":" + args.model, "--skip-bad"]
            if late_index:
                cmd += ["--late-index", late_index]
            shutil.rmtree(coll + ".partial", ignore_errors=True)
            subprocess.run(cmd, check=True)
            os.rename(coll + ".partial", coll)
    model_dir = os.path.join(ROOT, ".native", "models", args.model)
    out = subprocess.run([args.tandem, "version"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("native prefix:"):
            model_dir = os.path.join(line.split(":", 1)[1].strip(), "models", args.model)
    return coll, model_dir


def parse_args(doc, name, extra=(), collection="scifact"):
    """Parses the options the dense, hybrid and late benchmarks share, and
    extra ones, given as (flag, help) pairs."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    for flag, help in extra:
        ap.add_argument(flag, help=help)
    ap.add_argument("--tandem", default=os.path.join(ROOT, "bin", "tandem"))
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data"))
    ap.add_argument("--collection", default=collection)
    ap.add_argument("--model", default="bge-small-en-v1.5")
    ap.add_argument("--dir", help="an existing Tandem collection of the collection with the model's vectors")
    ap.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 4), help="encoder threads (Tandem's default)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, ".native", "peers", name + ".md"))
    return ap.parse_args()


def exported(args, work):
    """Returns the Tandem collection, the model's directory, and the
    document ids and vectors `tandem export` writes from it into work."""
    coll, model_dir = tandem_collection(args)
    subprocess.run([args.tandem, "export", "--dir", coll, "--out", work], check=True, stdout=subprocess.DEVNULL)
    base = os.path.join(work, args.model)
    vecs = np.load(base + ".npy")
    with open(base + ".ids") as f:
        ids = f.read().split("\n")[:-1]
    return coll, model_dir, ids, vecs


def main():
    args = parse_args(__doc__, "dense")
    data = os.path.join(args.data, args.collection)
    _, queries, qrels = load(args.data, args.collection)
    work = workdir("peers-dense-")
    coll, model_dir, ids, vecs = exported(args, work)
    peer = Peer(model_dir, ids, vecs, args.threads)
    progress(f"{len(ids)} vectors of {vecs.shape[1]} dimensions; {len(queries)} queries; {args.threads} encoder threads")

    t50, p50, a50, runs = [], [], [], {}
    for r in range(args.rounds):
        run, x = tandem_round(args.tandem, coll, data, os.path.join(work, "runs"))
        runs["tandem"] = run
        t50.append(x)
        run, x, y = peer.round(queries)
        runs["peer"] = run
        p50.append(x)
        a50.append(y)
        progress(f"round {r + 1} of {args.rounds}: Tandem p50 {t50[-1]:.2f} ms, peer p50 {p50[-1]:.2f} ms (search alone {a50[-1]:.3f} ms)")
    tn, tr = score(runs["tandem"], qrels)
    pn, pr = score(runs["peer"], qrels)
    tm, pm, am = statistics.median(t50), statistics.median(p50), statistics.median(a50)
    write_table([
        "| collection | engine | nDCG@10 | R@100 | p50 ms, encoding included | p50 ms, search alone | Tandem p50 / peer p50 |",
        "|---|---|---|---|---|---|---|",
        f"| {args.collection} | Tandem, {args.model} | {tn:.4f} | {tr:.4f} | {tm:.2f} | | |",
        f"| {args.collection} | {peer.name} ({peer.version}) | {pn:.4f} | {pr:.4f} | {pm:.2f} | {am:.3f} | {tm / pm:.2f} |",
    ], args.out)

if __name__ == "__main__":
    main()
