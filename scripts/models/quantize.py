#!/usr/bin/env python3
"""Makes the int8 variant of a float32 BERT encoder: SRC/model.onnx -> DST/model.onnx.

    .native/venv/bin/python scripts/models/quantize.py SRC_DIR DST_DIR

scripts/setup-models.sh runs it in the virtual environment .native/venv
(onnxruntime 1.30.0, the version of the Go side's ONNX Runtime, with the
packages pinned in scripts/models/requirements.txt) to make NAME-int8 from
each default model NAME. It writes only DST/model.onnx; the set-up adds
tokenizer.json and tandem.json.

The recipe, in two steps:

1. ONNX Runtime's transformer optimizer fuses the float32 graph
   (model_type bert, opt_level 0: its Python fusions only, as level 1
   would import torch). Attention, SkipLayerNormalization, BiasGelu and
   EmbedLayerNormalization replace the subgraphs that the export spells
   out op by op. The number of heads and the hidden size are read off the
   graph (num_heads=0, hidden_size=0); check_fusions fails the step when a
   layer was not fused or no head count was found.
2. Dynamic quantisation of the MatMul and Attention nodes: weights signed
   7-bit (QInt8 with reduce_range, values -64..63) with one scale per
   output channel (per_channel), activations
   unsigned int8 with one scale per tensor computed at run time. Attention
   becomes QAttention; each MatMul becomes DynamicQuantizeLinear +
   MatMulInteger + Mul, which ONNX Runtime fuses into DynamicQuantizeMatMul
   when it loads the model. The embeddings (EmbedLayerNormalization) stay
   float32: a table look-up gains nothing from int8, and its error would
   reach every layer.

Why this recipe: measured with bge-small-en-v1.5 on an AVX-512 VNNI CPU,
the fused int8 model encodes about 2x faster than the float32 model and
1.3x faster than the published Xenova quantised export of the same model,
and its pooled vectors keep cosine >= 0.99 with the float32 ones
(docs/models.md has the figures for the three models).

Why 7-bit weights: without VNNI (AVX2, or AVX-512 without VNNI), ONNX
Runtime multiplies uint8 activations by int8 weights with VPMADDUBSW,
which adds pairs of products into int16 and saturates: 2 x 255 x 127
does not fit. The same model file then gives different vectors on
different CPUs (bge-small-en-v1.5-int8 on an AVX2 Zen 3: pooled cosine
with float32 down to 0.9726, against 0.9970 on VNNI), and a collection
indexed on one machine would be searched with query vectors from another
arithmetic. With weights in -64..63 no pair can saturate (2 x 255 x 64 <
32768), so every CPU computes the same integer products; on AVX2 the
pooled cosine with float32 is back to 0.9967.

Because activation scales are per tensor, the vector of a text would
depend a little on the other texts in its batch and on their padding;
Tandem runs int8 models one text at a time (encoder.Options.BatchSize),
and the parity fixtures (make_parity.py) do the same.

Finally the script checks that the result keeps the interface Tandem's
encoder requires (encoder/encoder.go, openModel): the float32 model's
inputs (input_ids, attention_mask, token_type_ids), int64, and the output
last_hidden_state, float32 [batch, sequence, hidden].
"""
import logging
import os
import sys
import tempfile
import time

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers import optimizer

INPUTS = ["input_ids", "attention_mask", "token_type_ids"]
OUTPUT = "last_hidden_state"


def signature(path):
    """Returns {name: (elem_type, dims)} for the inputs and outputs of path."""
    m = onnx.load(path, load_external_data=False)

    def io(values):
        out = {}
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim]
            out[v.name] = (onnx.TensorProto.DataType.Name(t.elem_type), dims)
        return out

    return io(m.graph.input), io(m.graph.output)


def check_signature(src, dst):
    src_in, src_out = signature(src)
    ins, outs = signature(dst)
    for name in INPUTS:
        if name not in src_in:
            continue
        if name not in ins or ins[name][0] != "INT64":
            sys.exit(f"quantize: {dst}: input {name} is {ins.get(name)}, want INT64 as in {src}")
    if set(ins) != set(src_in):
        sys.exit(f"quantize: {dst}: inputs {sorted(ins)}, the float32 model has {sorted(src_in)}")
    if OUTPUT not in outs or outs[OUTPUT][0] != "FLOAT" or len(outs[OUTPUT][1]) != 3:
        sys.exit(f"quantize: {dst}: output {OUTPUT} is {outs.get(OUTPUT)}, want FLOAT [batch, seq, hidden]")
    if outs[OUTPUT][1][2] != src_out[OUTPUT][1][2]:
        sys.exit(f"quantize: {dst}: hidden size {outs[OUTPUT][1][2]}, the float32 model has {src_out[OUTPUT][1][2]}")
    return ins, outs


def check_fusions(path, stats):
    """Fails unless every layer was fused into one Attention and two
    SkipLayerNormalization nodes with a detected number of heads; returns
    (layers, heads)."""
    layers = stats.get("Attention", 0)
    if layers == 0 or stats.get("SkipLayerNormalization", 0) != 2 * layers or stats.get("EmbedLayerNormalization", 0) != 1:
        sys.exit(f"quantize: {path}: the optimizer did not fuse every layer: {stats}")
    heads = set()
    for node in onnx.load(path, load_external_data=False).graph.node:
        if node.op_type == "Attention":
            heads.update(a.i for a in node.attribute if a.name == "num_heads")
    if len(heads) != 1 or min(heads) <= 0:
        sys.exit(f"quantize: {path}: attention heads {sorted(heads)}; pass num_heads and hidden_size explicitly")
    return layers, heads.pop()


class DropPreprocessAdvice(logging.Filter):
    """quantize_dynamic advises running quant_pre_process first; the recipe
    runs the transformer optimizer instead, so the advice is noise here."""

    def filter(self, record):
        return "pre-processing before quantization" not in record.getMessage()


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: quantize.py SRC_DIR DST_DIR")
    src = os.path.join(sys.argv[1], "model.onnx")
    dst = os.path.join(sys.argv[2], "model.onnx")
    logging.getLogger().addFilter(DropPreprocessAdvice())
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        fused = os.path.join(tmp, "fused.onnx")
        opt = optimizer.optimize_model(src, model_type="bert", num_heads=0, hidden_size=0, opt_level=0)
        opt.save_model_to_file(fused)
        layers, heads = check_fusions(fused, opt.get_fused_operator_statistics())
        quantize_dynamic(
            fused,
            dst,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul", "Attention"],
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    ins, outs = check_signature(src, dst)
    ops = {}
    for node in onnx.load(dst, load_external_data=False).graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    print(f"quantize: {dst}: {layers} layers, {heads} heads, hidden {outs[OUTPUT][1][2]}; "
          f"{os.path.getsize(dst) / 1e6:.1f} MB in {time.monotonic() - start:.1f} s; "
          f"ops: {', '.join(f'{k} {v}' for k, v in sorted(ops.items()))}", file=sys.stderr)


if __name__ == "__main__":
    main()
