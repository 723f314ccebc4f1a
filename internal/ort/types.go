package ort

import (
	"errors"
	"fmt"
)

// ErrNoLibrary reports that the ONNX Runtime shared library was not found.
var ErrNoLibrary = errors.New("ort: ONNX Runtime library not found (run scripts/setup.sh and scripts/install.sh, or set TANDEM_ONNXRUNTIME_LIB)")

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("ort: session closed")

// ErrRunFailed is the category of every failure reported by ONNX Runtime
// while running a model; Error values unwrap to it.
var ErrRunFailed = errors.New("ort: run failed")

// Error is a failure reported by ONNX Runtime. onnxruntime_go flattens the
// C status into a message, so the message is all we can carry.
type Error struct {
	Op    string // "load", "inspect" or "run"
	Model string // model file
	Msg   string // ONNX Runtime's message
}

func (e *Error) Error() string { return fmt.Sprintf("ort: %s %s: %s", e.Op, e.Model, e.Msg) }

// Is makes errors.Is(err, ErrRunFailed) true for run failures.
func (e *Error) Is(target error) bool { return target == ErrRunFailed && e.Op == "run" }

// IOInfo describes one model input or output.
type IOInfo struct {
	Name string
	// Shape has -1 for dynamic dimensions (batch, sequence).
	Shape []int64
	// Type is the element type as ONNX Runtime names it, e.g. "int64".
	Type string
}

// SessionOptions configure a Session. Zero fields mean defaults.
type SessionOptions struct {
	// IntraOpThreads is the number of threads one Run may use; 0 lets ONNX
	// Runtime choose (one per physical core).
	IntraOpThreads int
	// Library overrides the ONNX Runtime shared library path that package
	// native finds.
	Library string
}

// Tensor is a dense tensor passed to or returned from Run. Exactly one of
// Int64 and Float32 holds the data, in row-major order.
type Tensor struct {
	Shape   []int64
	Int64   []int64
	Float32 []float32
}
