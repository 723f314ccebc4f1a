// Package encode is the benchmark behind tandem bench encode: document
// encoding the way an ingest runs it, the texts in windows, each window
// tokenized while the model runs on the one before. scripts/bench/encode.sh
// sets its JSON report beside onnxruntime in Python on the same texts,
// model file and threads.
//
// Invariants: one untimed batch warms the model up first (ONNX Runtime
// allocates its arena on the first run); the texts are a BEIR corpus's
// first documents as title + " " + text, as Tandem's default schema
// encodes them; the Report's JSON fields keep their order and names.
//
// # Usage
//
//	r, err := encode.Run(ctx, encode.Config{Corpus: "corpus.jsonl", Docs: 512, Window: 256, Runs: 1, Tokens: true})
//	if err != nil {
//		return err
//	}
//	r.WriteLine(os.Stdout)
package encode
