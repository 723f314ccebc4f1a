#!/usr/bin/env python3
"""Generates the synthetic tiny ONNX encoders under encoder/testdata/.

Each model is a hand-built graph whose output is exactly predictable from
three integer-valued tables, so the Go unit tests can assert exact outputs
for every pooling, marker, augmentation and skip path:

    E[i][j] = (i*(j+1)) % 7 - 3          token embedding of id i
    P[p][j] = (p + j) % 3                position embedding of position p
    T[k][j] = 10*k if j == 0 else 0      token-type embedding (BERT only)

    hidden[b,t,:] = (E[ids[b,t]] + P[t] + T[types[b,t]]) * mask[b,t]

tiny-bert   (H=4) inputs input_ids, attention_mask, token_type_ids;
            outputs last_hidden_state [B,L,4] and sentence_embedding
            [B,4] = 2*hidden[:,0,:]. WordPiece tokenizer.
tiny-t5     (H=4) inputs input_ids, attention_mask (no token_type_ids, as
            T5 encoders); output last_hidden_state. Unigram tokenizer
            with a "$A </s>" template.
tiny-colbert (H=8) BERT-shaped, then a MatMul projection to 128 with
            W[j][k] = 1 if k % 8 == j, so each output vector is the hidden
            vector repeated 16 times; output token_embeddings [B,L,128].

Run from the repository root: python3 scripts/models/make_tiny.py
Needs: pip install onnx tokenizers numpy
"""
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "encoder", "testdata")
MAX_POS = 64

BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]",
              ".", ",", "!", "?", "the", "cat", "sat", "on", "mat", "dog", "##s", "a",
              "hello", "world", "search", "query", "é", "ü", "日", "本", "##ing", "run"]

T5_PIECES = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0), ("▁the", -1.0),
             ("▁cat", -1.5), ("▁sat", -1.5), ("▁on", -1.2), ("▁mat", -1.6), ("s", -2.5),
             ("▁dog", -1.5), ("▁hello", -1.5), ("▁world", -1.5), (".", -1.8), ("t", -3.0),
             ("h", -3.0), ("e", -3.0), ("a", -3.0), ("c", -3.0), ("o", -3.0), ("d", -3.0),
             ("g", -3.0), ("n", -3.0), ("m", -3.0), ("▁a", -1.4)]


def tables(vocab, hidden):
    E = np.array([[(i * (j + 1)) % 7 - 3 for j in range(hidden)] for i in range(vocab)], np.float32)
    P = np.array([[(p + j) % 3 for j in range(hidden)] for p in range(MAX_POS)], np.float32)
    T = np.array([[10 * k if j == 0 else 0 for j in range(hidden)] for k in range(2)], np.float32)
    return E, P, T


def graph(name, vocab, hidden, with_types, project=0, output="last_hidden_state", pooled=False):
    E, P, T = tables(vocab, hidden)
    inits = [numpy_helper.from_array(E, "E"), numpy_helper.from_array(P, "P"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([1], np.int64), "idx1"),
             numpy_helper.from_array(np.array([-1], np.int64), "axis_last")]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])]
    nodes = [
        helper.make_node("Gather", ["E", "input_ids"], ["we"], axis=0),
        helper.make_node("Shape", ["input_ids"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seqlen"], axis=0),
        helper.make_node("Range", ["zero", "seqlen", "one"], ["pos"]),
        helper.make_node("Gather", ["P", "pos"], ["pe"], axis=0),
        helper.make_node("Add", ["we", "pe"], ["wpe"]),
    ]
    summed = "wpe"
    if with_types:
        inits.append(numpy_helper.from_array(T, "T"))
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "seq"]))
        nodes += [helper.make_node("Gather", ["T", "token_type_ids"], ["te"], axis=0),
                  helper.make_node("Add", ["wpe", "te"], ["wpte"])]
        summed = "wpte"
    nodes += [
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axis_last"], ["mask3"]),
        helper.make_node("Mul", [summed, "mask3"], ["hidden"]),
    ]
    outputs = []
    last = "hidden"
    dim = hidden
    if project:
        W = np.array([[1.0 if k % hidden == j else 0.0 for k in range(project)] for j in range(hidden)], np.float32)
        inits.append(numpy_helper.from_array(W, "W"))
        nodes.append(helper.make_node("MatMul", ["hidden", "W"], ["projected"]))
        last, dim = "projected", project
    nodes.append(helper.make_node("Identity", [last], [output]))
    outputs.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", "seq", dim]))
    if pooled:
        inits.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
        nodes += [helper.make_node("Gather", [last, "zero"], ["first"], axis=1),
                  helper.make_node("Mul", ["first", "two"], ["sentence_embedding"])]
        outputs.append(helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", dim]))
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="tandem make_tiny.py")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def bert_tokenizer():
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(BERT_VOCAB)}, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece()
    for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]:
        tok.add_special_tokens([t])
    return tok


def t5_tokenizer():
    tok = Tokenizer(models.Unigram(T5_PIECES, unk_id=2))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    for t in ["<pad>", "</s>", "<unk>"]:
        tok.add_special_tokens([t])
    return tok


def write(name, model, tok, config):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tandem.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def main():
    write("tiny-bert", graph("tiny-bert", len(BERT_VOCAB), 4, True, pooled=True), bert_tokenizer(), {
        "name": "tiny-bert", "pooling": "cls", "similarity": "dot",
        "query": {"max_length": 8}, "document": {"max_length": 16}})
    write("tiny-t5", graph("tiny-t5", len(T5_PIECES), 4, False), t5_tokenizer(), {
        "name": "tiny-t5", "pooling": "mean", "similarity": "cosine", "normalize": True,
        "query": {"max_length": 8}, "document": {"max_length": 16}})
    write("tiny-colbert", graph("tiny-colbert", len(BERT_VOCAB), 8, True, project=128, output="token_embeddings"),
          bert_tokenizer(), {
        "name": "tiny-colbert", "pooling": "none", "output": "token_embeddings", "similarity": "dot",
        "normalize": True,
        "query": {"max_length": 8, "marker": "[unused0]", "augment": True},
        "document": {"max_length": 16, "marker": "[unused1]", "skip_punctuation": True}})


if __name__ == "__main__":
    main()
