// Package encoder turns text into vectors with ONNX Runtime: one pooled
// vector per text for dense retrieval, and per-token vectors for late
// interaction. Packages dense and latecollect are both built on it.
//
// A model is a directory holding model.onnx, the Hugging Face
// tokenizer.json and tandem.json, Tandem's configuration (see Config and
// docs/models.md): pooling (cls, mean, none, or model for an already pooled
// output), similarity, normalisation, an optional projection, and per side
// (query, document) the maximum length, a text prefix, a marker token,
// ColBERT's [MASK] augmentation, skipped tokens and, for asymmetric
// encoders, a separate ONNX file.
//
// # Invariants
//
//   - The feeds follow the model: input_ids and attention_mask, plus
//     token_type_ids (all zero) only when the model declares it, as BERT
//     does and T5 encoders do not. Load refuses a configuration that
//     contradicts the model's inputs, outputs or the tokenizer vocabulary.
//   - A sequence is laid out as lead special tokens ([CLS]), the marker,
//     the prefixed text truncated to fit, trail special tokens ([SEP] or
//     </s>), then augmentation tokens: truncation never drops special
//     tokens, as in transformers.
//   - Pooled and token vectors are projected, then normalised if asked;
//     mean pooling averages the tokens with attention 1.
//   - Token output lists, per text, the attended tokens and augmentation
//     tokens that are not skipped, with their ids and input positions;
//     padding never appears.
//   - Results come back in input order whatever the batching: texts are
//     sorted by length into batches to limit padding, with input buffers
//     reused across batches.
//
// An Encoder is safe for concurrent use. Model runs in flight are bounded
// by Options.MaxConcurrentRuns, because each run already spreads over
// Options.IntraOpThreads cores; cancelling the context stops the run in
// progress inside ONNX Runtime.
//
// EncodeQuery is the search path: one query text, answered from a cache
// of recent query encodings bounded in bytes (Options.QueryCacheBytes,
// 64 MiB by default), or in a model run shared with the queries that
// arrived while the previous runs were in flight (Options.QueryBatch,
// QueryBatchWait). A lone query never waits, and a batched or cached
// query gets the bits its own run gives (TestQueryBatchSameVectors);
// cancelling one query never cancels the others in its run. Document
// encoding does not go through the batcher.
//
// A Cache shares one load of a model among the Encoders of one model
// directory and Options: its sessions, tokenizer and thread budgets. Each
// Encoder keeps its own Close, and the last one to close releases the
// sessions. Package engine keeps one Cache per process, so that the
// collections of a server load a model once.
//
// # Usage
//
//	e, err := encoder.Load(filepath.Join(native.ModelsDir(), "bge-small-en-v1.5"), nil)
//	if err != nil { ... }
//	defer e.Close()
//	if err := e.CheckDim(index.Dim()); err != nil { ... }
//	q, err := e.EncodeQuery(ctx, "what causes scurvy", false) // q.Vectors[0]
//	docs, err := e.EncodeDocuments(ctx, texts)
//
// Spans tokenizes a text as Encode does, without running the model, and
// places each token of its token output: its kind (text, prefix, special,
// marker, mask), its vocabulary form and its byte range in the text, for
// highlighting. Its ids are the token output's exactly
// (TestSpansMatchTokenOutput).
//
// List reports the models installed in a directory.
package encoder
