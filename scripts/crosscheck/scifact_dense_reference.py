#!/usr/bin/env python3
"""Reference dense-retrieval figures on SciFact, independent of Tandem's Go code.

Encodes the SciFact corpus and test queries with onnxruntime and the
Hugging Face `tokenizers` library on the very model.onnx and tokenizer.json
that scripts/setup-models.sh installs, with the pooling, normalisation,
prefix and maximum lengths the model's tandem.json declares; ranks by exact
cosine (numpy, all 5,183 documents per query); scores the top 100 with
pytrec_eval. Writes engine/testdata/scifact_dense_<model>.json, which
engine's TestSciFact compares Tandem's dense nDCG@10 with (within 0.01).

A document's text is its title and text joined by a space (the engine
joins the schema's text fields in order, skipping empty ones).

    pip install onnxruntime tokenizers numpy pytrec_eval-terrier
    python3 scripts/crosscheck/scifact_dense_reference.py [model] [data-dir] [subset]

About 20 CPU-minutes for bge-small-en-v1.5 at 512 tokens. With subset M,
the corpus is cut to its first M documents (file order) plus every document
judged in qrels/test.tsv, exactly as engine's TestSciFact does with
TANDEM_SCIFACT_SUBSET=M, and the figure goes to
engine/testdata/scifact_dense_<model>_subset<M>.json. The qrels are not cut:
a relevant document outside the subset is simply never retrieved, on both
sides.
"""
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort
import pytrec_eval
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def encode(sess, tok, cfg, side, texts, batch=16):
    sc = cfg.get(side, {})
    max_len = sc.get("max_length", 64 if side == "query" else 512)
    prefix = sc.get("prefix", "")
    tok.enable_truncation(max_length=max_len)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    names = [i.name for i in sess.get_inputs()]
    # Sort by length so batches carry little padding; results go back in
    # input order.
    lens = [len(t) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: lens[i])
    out = np.zeros((len(texts), 0), np.float32)
    vecs = [None] * len(texts)
    for start in range(0, len(order), batch):
        idx = order[start:start + batch]
        encs = tok.encode_batch([prefix + texts[i] for i in idx])
        ids = np.array([e.ids for e in encs], np.int64)
        mask = np.array([e.attention_mask for e in encs], np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = sess.run(None, feeds)[0].astype(np.float64)
        if cfg["pooling"] == "cls":
            pooled = hidden[:, 0, :]
        elif cfg["pooling"] == "mean":
            m = mask[:, :, None].astype(np.float64)
            pooled = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        else:
            raise SystemExit("unsupported pooling " + cfg["pooling"])
        if cfg.get("normalize"):
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        for j, i in enumerate(idx):
            vecs[i] = pooled[j].astype(np.float32)
        if start // batch % 20 == 0:
            print(f"{side}: {start + len(idx)}/{len(texts)}", file=sys.stderr, flush=True)
    return np.stack(vecs) if vecs else out


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else "bge-small-en-v1.5"
    data = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "..", "shared", "data", "scifact")
    subset = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    d = os.path.join(ROOT, ".native", "models", model)
    cfg = json.load(open(os.path.join(d, "tandem.json")))
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(os.environ.get("THREADS", "2"))
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])

    qrels = {}
    with open(os.path.join(data, "qrels", "test.tsv")) as f:
        next(f)
        for line in f:
            q, doc, g = line.rstrip("\n").split("\t")
            qrels.setdefault(q, {})[doc] = int(g)
    judged = {doc for q in qrels for doc in qrels[q]}
    ids, texts = [], []
    with open(os.path.join(data, "corpus.jsonl"), encoding="utf-8") as f:
        for n, line in enumerate(f):
            o = json.loads(line)
            if subset and n >= subset and str(o["_id"]) not in judged:
                continue
            ids.append(str(o["_id"]))
            texts.append(" ".join(t for t in (o.get("title", ""), o.get("text", "")) if t))
    queries = {}
    with open(os.path.join(data, "queries.jsonl"), encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            if str(o["_id"]) in qrels:
                queries[str(o["_id"])] = o["text"]
    qids = sorted(queries)

    t0 = time.time()
    D = encode(sess, tok, cfg, "document", texts)
    Q = encode(sess, tok, cfg, "query", [queries[q] for q in qids])
    secs = time.time() - t0
    S = Q.astype(np.float64) @ D.astype(np.float64).T
    run = {}
    for i, q in enumerate(qids):
        top = np.argsort(-S[i], kind="stable")[:100]
        run[q] = {ids[j]: float(S[i, j]) for j in top}
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_100"})
    res = ev.evaluate(run)
    n = len(qrels)
    ndcg = sum(res.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / n
    rec = sum(res.get(q, {}).get("recall_100", 0.0) for q in qrels) / n
    out = {
        "model": model,
        "queries": n,
        "docs": len(ids),
        "ndcg@10": round(ndcg, 6),
        "recall@100": round(rec, 6),
        "method": "onnxruntime + tokenizers, exact cosine over all documents, pytrec_eval",
        "encode_seconds": round(secs, 1),
    }
    if subset:
        out["subset"] = subset
    suffix = f"_subset{subset}" if subset else ""
    path = os.path.join(ROOT, "engine", "testdata", f"scifact_dense_{model}{suffix}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(json.dumps(out), file=sys.stderr)


if __name__ == "__main__":
    main()
