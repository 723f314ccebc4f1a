#!/usr/bin/env python3
"""Tandem's late interaction beside PyLate's PLAID index, on the same token vectors.

    make bench-peers            # Cranfield; sets up .native/peers first
    .native/peers/bin/python scripts/peers/bench_late.py [--collection cranfield] [--dir COLLECTION]
        [--rounds 3] [--plaid FOLDER/NAME]

The collection (../shared/data, read in place; Cranfield by default, as
PLAID's index of SciFact's 1.7 million tokens takes over 20 minutes to
build here) is indexed once by Tandem with late interaction (`tandem index
--models late:MODEL --late-index Residual`, under .native/peers: residual
codes, compressed like PLAID's) unless --dir names such a collection. Its stored token matrices are exported with `tandem export`,
and:

- Tandem: `tandem eval --mode late` (query encoding included; latency
  measured inside the process around each search, in a warm second pass);
  memory: bytes per token of the late-interaction index from `tandem
  stats`, and the eval process's peak RSS;
- PyLate (PyPI `pylate`): its PLAID index (fast-plaid) built from the
  exported token vectors, so both engines search the same numbers; each
  query's token vectors are computed by onnxruntime in Python on the same
  ONNX file, as Tandem's encoder gives them for this model (every token,
  each normalised), and PLAID searches them with its default settings
  (n_ivf_probe 8, n_full_scores 8192). Memory: the index's size on disk
  per token, which PLAID loads, and the Python process's peak RSS (PyTorch
  included, and the index build when this run builds it). --plaid reuses
  an index built by an earlier run.

Rankings are scored by the same pytrec_eval code; latency rounds alternate;
each figure is the median over rounds of a round's p50. A peer that cannot
be imported is listed as missing, with the reason. The Markdown table goes
to standard output and to .native/peers/late.md.
"""
import json
import os
import statistics
import subprocess
import time

import numpy as np

from bench_dense import Peer as Encoder
from bench_dense import parse_args, tandem_collection
from common import load, pct, progress, read_run, run_peak, score, vmhwm_kib, workdir, write_table

K = 100


class PyLate:
    name = "PyLate PLAID"

    def __init__(self, ids, tokens, offsets, encoder, folder, name, reuse):
        import pylate
        from pylate import indexes, retrieve

        self.version = "pylate " + pylate.__version__
        self.encoder = encoder
        t0 = time.perf_counter()
        self.index = indexes.PLAID(index_folder=folder, index_name=name, override=not reuse, show_progress=False)
        if not reuse:
            progress(f"building PLAID's index of {tokens.shape[0]} tokens (minutes)")
            self.index.add_documents(documents_ids=ids,
                                     documents_embeddings=[np.array(tokens[offsets[i]:offsets[i + 1]]) for i in range(len(ids))])
        self.build = time.perf_counter() - t0
        self.retriever = retrieve.ColBERT(index=self.index)
        self.bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(folder, name)) for f in fs)

    def encode(self, text):
        h = self.encoder.hidden(text)
        return (h / np.linalg.norm(h, axis=1, keepdims=True)).astype(np.float32)

    def round(self, queries):
        lat, run = [], {}
        for qid, text in queries.items():
            t0 = time.perf_counter()
            q = self.encode(text)
            res = self.retriever.retrieve(queries_embeddings=[q], k=K)[0]
            lat.append((time.perf_counter() - t0) * 1000)
            run[qid] = {r["id"]: float(r["score"]) for r in res}
        return run, pct(lat, 0.5)


def tandem_round(binary, coll, data, runs):
    """Returns the run, the p50 and the eval process's peak RSS in KiB."""
    out, peak = run_peak([binary, "eval", "--dir", coll, "--queries", os.path.join(data, "queries.jsonl"),
                          "--qrels", os.path.join(data, "qrels", "test.tsv"), "--mode", "late,late", "--json",
                          "--runs", runs])
    row = [json.loads(l) for l in out.splitlines() if l.strip()][-1]  # the second row: a warm process
    run = read_run(os.path.join(runs, "late.trec"))
    return run, row["p50_ms"], peak


def mib(kib):
    return f"{kib / 1024:.0f} MiB"


def main():
    args = parse_args(__doc__, "late", [
        ("--plaid", "an existing PLAID index (FOLDER/NAME) built by an earlier run from this collection's exported tokens"),
        ("--late-index", "Tandem's late-interaction index when it indexes the collection: Residual (the default here, "
                         "compressed like PLAID's) or FAISS (tandem index's default)"),
    ], collection="cranfield")
    data = os.path.join(args.data, args.collection)
    _, queries, qrels = load(args.data, args.collection)
    work = workdir("peers-late-")
    li = args.late_index or "Residual"
    coll, model_dir = tandem_collection(args, "late", "" if li.upper() == "FAISS" else li)
    subprocess.run([args.tandem, "export", "--dir", coll, "--out", work], check=True, stdout=subprocess.DEVNULL)
    base = os.path.join(work, args.model)
    tokens = np.load(base + ".tokens.npy", mmap_mode="r")
    offsets = np.load(base + ".offsets.npy")
    with open(base + ".tokens.ids") as f:
        ids = f.read().split("\n")[:-1]
    stats = json.loads(subprocess.run([args.tandem, "stats", "--dir", coll, "--json"], check=True,
                                      capture_output=True, text=True).stdout)
    late = stats.get("late") or [{}]
    bpt = late[0].get("bytes_per_token", 0)

    peer, missing = None, None
    try:
        enc = Encoder(model_dir, ids, np.zeros((1, tokens.shape[1]), dtype=np.float32), args.threads)
        if args.plaid:
            folder, name = os.path.split(os.path.normpath(args.plaid))
            peer = PyLate(ids, tokens, offsets, enc, folder, name, True)
        else:
            folder = os.path.join(os.path.dirname(coll), f"plaid-{args.collection}-{args.model}")
            peer = PyLate(ids, tokens, offsets, enc, folder, "index", False)
        progress(f"PLAID index of {tokens.shape[0]} tokens: {peer.build:.1f} s, {peer.bytes / 2**20:.1f} MiB "
                 f"(reuse it with --plaid {os.path.join(folder, 'index') if not args.plaid else args.plaid})")
    except Exception as e:  # reported, never dropped silently
        missing = f"{type(e).__name__}: {e}".splitlines()[0][:160]
        progress(f"PyLate: missing ({missing})")

    t50, p50, runs, trss = [], [], {}, 0
    for r in range(args.rounds):
        runs["tandem"], x, peak = tandem_round(args.tandem, coll, data, os.path.join(work, "runs"))
        t50.append(x)
        trss = max(trss, peak)
        if peer:
            runs["peer"], x = peer.round(queries)
            p50.append(x)
        progress(f"round {r + 1} of {args.rounds}: Tandem p50 {t50[-1]:.2f} ms" + (f", PyLate p50 {p50[-1]:.2f} ms" if peer else ""))
    tn, tr = score(runs["tandem"], qrels)
    tm = statistics.median(t50)
    lines = [
        "| collection | engine | nDCG@10 | R@100 | p50 ms, encoding included | index bytes/token | peak RSS | Tandem p50 / peer p50 |",
        "|---|---|---|---|---|---|---|---|",
        f"| {args.collection} | Tandem, {args.model} ({late[0].get('description', 'late')}) | {tn:.4f} | {tr:.4f} | {tm:.2f} | {bpt:.1f} in memory | {mib(trss)} | |",
    ]
    if peer:
        pn, pr = score(runs["peer"], qrels)
        pm = statistics.median(p50)
        prss = vmhwm_kib()
        lines.append(f"| {args.collection} | {peer.name} ({peer.version}) | {pn:.4f} | {pr:.4f} | {pm:.2f} | "
                     f"{peer.bytes / tokens.shape[0]:.1f} on disk | {mib(prss)} | {tm / pm:.2f} |")
    else:
        lines.append(f"| {args.collection} | PyLate PLAID | missing: {missing} | | | | | |")
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
