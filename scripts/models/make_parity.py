#!/usr/bin/env python3
"""Writes the parity fixtures encoder/testdata/parity/<model>.{json,f32}.

The reference implementation is Hugging Face `tokenizers` (the Rust
tokenizer transformers uses) plus onnxruntime in Python on the very same
model.onnx that scripts/setup-models.sh installs, with the pooling,
normalisation, prefix and truncation that the model's tandem.json declares,
implemented here independently of Tandem's Go code. Texts are encoded in
batches exactly as TestParity's Go call batches them: float32 models in
padded batches of 8 of mixed lengths, int8 models (NAME-int8, made by
quantize.py) one text at a time, as Tandem runs them, since they quantise
their activations with one scale per batch tensor. (The float32 vectors
do not depend on the batching: in input order, as the script first
batched, they came out byte-identical.)

<model>.json lists the cases (side, text); <model>.f32 holds one vector per
case, little-endian float32, in the same order. encoder/parity_test.go
requires cosine >= 0.9999 for each.

An int8 model's vectors depend on the CPU's kernels: ONNX Runtime's
float32 parts (layer norm, GELU, softmax) round differently with AVX-512
than with AVX2, and an activation quantised per tensor then falls on the
other side of a rounding step now and then (bge-small-en-v1.5-int8: cosine
0.9983 between an AVX2 Zen 3 and an AVX-512 VNNI EPYC, in Python as in Go;
the float32 models' vectors are byte-identical on both). So int8 vectors
go to <model>.<isa>.f32, isa as cpu_class() names this CPU, and the test
reads the file of its own CPU's class.

Run from the repository root after scripts/setup.sh, in the set-up's
Python environment (which has onnxruntime 1.30.0 and numpy):
    .native/venv/bin/pip install tokenizers
    .native/venv/bin/python scripts/models/make_parity.py [models-dir]
"""
import json
import os
import sys

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "encoder", "testdata", "parity")
MODELS = ["bge-small-en-v1.5", "all-MiniLM-L6-v2", "e5-small-v2",
          "bge-small-en-v1.5-int8", "all-MiniLM-L6-v2-int8", "e5-small-v2-int8"]
# TestParity's batch size for float32 models (parityBatchSize in
# encoder/parity_test.go); int8 models run one text at a time.
BATCH = 8
# encoder.Options.BatchTokens' default.
BATCH_TOKENS = 1024


def cpu_class():
    """The CPU class whose ONNX Runtime kernels made the vectors, from the
    flags in /proc/cpuinfo: avx512vnni, avx512, avx2 or generic (the
    same rule as cpuClass in encoder/parity_test.go)."""
    try:
        flags = set()
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        return "generic"
    if "avx512_vnni" in flags:
        return "avx512vnni"
    if "avx512f" in flags and "avx512bw" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    return "generic"


def batch_size(name):
    return 1 if name.endswith("-int8") else BATCH

LONG = " ".join(["Scurvy is a disease resulting from a lack of vitamin C, which is required for collagen synthesis."] * 60)
TEXTS = [
    "",
    "a",
    "?",
    " ",
    "\t\n",
    "hello",
    "Hello, world!",
    "What causes scurvy?",
    "vitamin C deficiency and collagen synthesis",
    "The quick brown fox jumps over the lazy dog.",
    "0-dimensional biomaterials show inductive properties.",
    "1,000 genomes project enables mapping of genetic sequence variation.",
    "ALDH1 expression is associated with poor prognosis in breast cancer.",
    "Anthrax spores can be disposed of easily after they are dispersed.",
    "BRCA1/2 mutations increase the risk of ovarian cancer by ~40%.",
    "COVID-19 (SARS-CoV-2) spreads via respiratory droplets; masks reduce transmission.",
    "pH 7.4 ± 0.05 at 37°C",
    "E = mc² and ∑ᵢ xᵢ² ≥ 0",
    "naïve café résumé façade coöperate",
    "Ünïcödé àccents éverywhere: Ångström, Øresund, Łódź",
    "Größe und Maßstab der Straße",
    "Привет, как дела? Это тест на русском языке.",
    "Ελληνικά: η γρήγορη καφέ αλεπού",
    "مرحبا بالعالم",
    "שלום עולם",
    "日本語のテキストです。東京は首都です。",
    "中文文本测试：机器学习与信息检索",
    "한국어 문장입니다",
    "ภาษาไทย",
    "emoji 🙂🚀 test 👩‍🔬 science",
    "MixedCASE WoRdS and ALLCAPS",
    "https://example.org/path?q=tandem&x=1 email@example.com",
    "C++ and C# and F# are languages; so is Go.",
    "\"Quoted\" 'single' «guillemets» „German“",
    "line one\nline two\r\nline three",
    "tabs\tbetween\twords",
    "multiple     spaces    here",
    "hyphenated-words and under_scores and dots.in.words",
    "Numbers: 3.14159, 2.71828, 1e-10, -42, +7",
    "The mitochondria is the powerhouse of the cell; ATP synthase drives oxidative phosphorylation.",
    "Low-dose aspirin reduces the risk of colorectal cancer in randomized trials.",
    "Dietary sodium intake correlates with blood pressure across populations.",
    "antibiotic resistance genes spread through horizontal gene transfer in bacterial communities",
    "Which proteins regulate the circadian clock in mammals?",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "!!!???...,,,;;;:::",
    "Ⅻ ⅓ ﬁ ﬂ ＡＢＣ full-width and ligatures",
    "zero\u200bwidth\u200bspace and soft\u00adhyphen",
    "control\u0007char and nbsp\u00a0here",
    LONG,
    " ".join(["日本語"] * 400),
    "word " * 700,
]
# Queries get the model's query prefix and length; a handful suffices.
QUERIES = [
    "",
    "what causes scurvy",
    "Does vitamin D supplementation reduce fracture risk in older adults?",
    "naïve Bayes für Textklassifikation",
    "糖尿病の治療",
    LONG,
]


def pad_id(path, tok):
    """The padding id as Tandem's Go tokenizer loader chooses it: the
    tokenizer's padding configuration, else [PAD] or <pad>, else 0."""
    padding = json.load(open(path, encoding="utf-8")).get("padding")
    if padding:
        return padding["pad_id"]
    for name in ("[PAD]", "<pad>"):
        if tok.token_to_id(name) is not None:
            return tok.token_to_id(name)
    return 0


def batches(lengths, batch, budget=BATCH_TOKENS):
    """Cuts indices sorted by length as encoder.go's run does: a batch ends
    at batch texts, or before its padded size (texts x longest) would pass
    budget tokens; a text longer than budget runs alone."""
    out, start = [], 0
    while start < len(lengths):
        end = start + 1
        while end < len(lengths) and end - start < batch and (end - start + 1) * lengths[end] <= budget:
            end += 1
        out.append((start, end))
        start = end
    return out


def encode(sess, tok, pad, cfg, side, texts, batch=BATCH, tokens=False):
    """Encodes texts as the Go encoder batches them (encoder.go, run and
    runBatch): stably sorted by token count, special tokens included, cut
    into batches (batches()), each padded with pad to its longest text,
    token_type_ids all 0. Returns the pooled vectors in input order; with
    tokens, also a list of each text's hidden states, one row per token
    (padding excluded, not normalised)."""
    sc = cfg.get(side, {})
    max_len = sc.get("max_length", 64 if side == "query" else 512)
    prefix = sc.get("prefix", "")
    tok.enable_truncation(max_length=max_len)
    tok.no_padding()
    names = [i.name for i in sess.get_inputs()]
    encs = tok.encode_batch([prefix + t for t in texts])
    order = sorted(range(len(texts)), key=lambda i: len(encs[i].ids))
    out = [None] * len(texts)
    states = [None] * len(texts)
    for start, end in batches([len(encs[i].ids) for i in order], batch):
        idx = order[start:end]
        width = max(len(encs[i].ids) for i in idx)
        ids = np.full((len(idx), width), pad, np.int64)
        mask = np.zeros((len(idx), width), np.int64)
        for row, i in enumerate(idx):
            n = len(encs[i].ids)
            ids[row, :n] = encs[i].ids
            mask[row, :n] = encs[i].attention_mask
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
            pooled = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        for row, i in enumerate(idx):
            out[i] = pooled[row].astype(np.float32)
            states[i] = hidden[row, :len(encs[i].ids)]
    if tokens:
        return np.stack(out), states
    return np.stack(out)


def main():
    models_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".native", "models")
    os.makedirs(OUT, exist_ok=True)
    for name in MODELS:
        d = os.path.join(models_dir, name)
        cfg = json.load(open(os.path.join(d, "tandem.json")))
        tok_path = os.path.join(d, "tokenizer.json")
        tok = Tokenizer.from_file(tok_path)
        pad = pad_id(tok_path, tok)
        sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
        docs = encode(sess, tok, pad, cfg, "document", TEXTS, batch_size(name))
        queries = encode(sess, tok, pad, cfg, "query", QUERIES, batch_size(name))
        cases = [{"side": "document", "text": t} for t in TEXTS] + [{"side": "query", "text": t} for t in QUERIES]
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            json.dump({"model": name, "dim": int(docs.shape[1]), "cases": cases}, f, ensure_ascii=False, indent=1)
            f.write("\n")
        vec = name + (("." + cpu_class()) if name.endswith("-int8") else "") + ".f32"
        np.concatenate([docs, queries]).astype("<f4").tofile(os.path.join(OUT, vec))
        print(f"{vec}: {len(cases)} vectors of {docs.shape[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
