#!/usr/bin/env python3
"""Encodes the first N documents of a BEIR corpus with onnxruntime in Python.

The reference side of scripts/bench/encode.sh: Hugging Face `tokenizers`
and onnxruntime on the very model.onnx that `tandem bench encode` runs,
with the model's tandem.json (document prefix and max_length), the same
windows of documents sorted by token count, the same batches (texts and padded-token bounds) and the
same intra-op threads. Tokenizing is timed with the model runs, as
Tandem's figure includes its own tokenizer. Prints one JSON object.

    encode_python.py MODEL_DIR CORPUS DOCS THREADS [WINDOW BATCH BATCH_TOKENS]
"""
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import make_parity  # noqa: E402


def main():
    model_dir, corpus, n, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    window = int(sys.argv[5]) if len(sys.argv) > 5 else 256
    batch = int(sys.argv[6]) if len(sys.argv) > 6 else 32
    budget = int(sys.argv[7]) if len(sys.argv) > 7 else 1024
    cfg = json.load(open(f"{model_dir}/tandem.json"))
    doc = cfg.get("document", {})
    prefix, max_len = doc.get("prefix", ""), doc.get("max_length", 512)
    texts = []
    with open(corpus) as f:
        for line in f:
            if len(texts) >= n:
                break
            d = json.loads(line)
            texts.append(prefix + (d.get("title", "") + " " + d.get("text", "")).strip())
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tok.enable_truncation(max_len)
    tok.no_padding()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(f"{model_dir}/{cfg.get('model', 'model.onnx')}", so, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in sess.get_inputs()}

    def run(encs):
        length = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), length), np.int64)
        mask = np.zeros_like(ids)
        for r, e in enumerate(encs):
            ids[r, : len(e.ids)] = e.ids
            mask[r, : len(e.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        return sess.run(None, feed)[0]

    run(tok.encode_batch(texts[:batch]))  # warm-up, as Tandem's side does
    start = time.perf_counter()
    ntok = 0
    for w in range(0, len(texts), window):
        encs = tok.encode_batch(texts[w : w + window])
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        # Batches cut as encoder.go's run cuts them (make_parity.batches).
        for b, e in make_parity.batches([len(encs[i].ids) for i in order], batch, budget):
            part = [encs[i] for i in order[b:e]]
            ntok += sum(len(e.ids) for e in part)
            run(part)
    secs = time.perf_counter() - start
    print(json.dumps({"engine": "onnxruntime-python", "model": cfg.get("name", model_dir), "docs": len(texts), "tokens": ntok,
                      "threads": threads, "batch": batch, "batch_tokens": budget, "window": window, "seconds": secs, "docs_per_s": len(texts) / secs, "tokens_per_s": ntok / secs}))


if __name__ == "__main__":
    main()
