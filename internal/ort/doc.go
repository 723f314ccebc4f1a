// Package ort owns the process-wide ONNX Runtime environment
// (github.com/yalue/onnxruntime_go), loaded with dlopen at run time so that
// builds do not need the library installed.
//
// onnxruntime_go keeps one global environment. This package turns it into a
// reference count: every Session acquires the environment when it is opened
// and releases it when it is closed; the first acquire loads the shared
// library and initialises ONNX Runtime, and the last release destroys it.
// Nothing else in Tandem may call onnxruntime_go's InitializeEnvironment or
// DestroyEnvironment.
//
// # Usage
//
//	s, err := ort.OpenSession("model.onnx", &ort.SessionOptions{IntraOpThreads: 2})
//	if err != nil { ... }
//	defer s.Close()
//	outs, err := s.Run(ctx, []ort.Input{{Name: "input_ids", Shape: []int64{1, 3}, Int64: ids}}, []string{"last_hidden_state"})
//
// A Session is safe for concurrent use: ONNX Runtime allows concurrent Run
// calls on one session, and Close waits for runs in flight.
//
// The library is the one package native finds (its package documentation
// gives the search order) unless SessionOptions.Library names another. In
// a build without cgo, Inspect and OpenSession fail with native.ErrNoCgo.
package ort
