//go:build cgo

package ort

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	onnx "github.com/yalue/onnxruntime_go"
)

// Inspect reads a model's inputs and outputs.
func Inspect(path string, opts *SessionOptions) (inputs, outputs []IOInfo, err error) {
	if opts == nil {
		opts = &SessionOptions{}
	}
	if err := acquire(opts.Library); err != nil {
		return nil, nil, err
	}
	defer release()
	in, out, err := onnx.GetInputOutputInfo(path)
	if err != nil {
		return nil, nil, &Error{Op: "inspect", Model: path, Msg: err.Error()}
	}
	return convertInfo(in), convertInfo(out), nil
}

func convertInfo(infos []onnx.InputOutputInfo) []IOInfo {
	out := make([]IOInfo, len(infos))
	for i, in := range infos {
		out[i] = IOInfo{Name: in.Name, Shape: append([]int64(nil), in.Dimensions...), Type: typeName(in.DataType)}
		if in.OrtValueType != onnx.ONNXTypeTensor {
			out[i].Type = in.OrtValueType.String()
		}
	}
	return out
}

// typeName turns ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT into "float32" and the
// like, the names Go programmers expect.
func typeName(t onnx.TensorElementDataType) string {
	switch t {
	case onnx.TensorElementDataTypeFloat:
		return "float32"
	case onnx.TensorElementDataTypeDouble:
		return "float64"
	case onnx.TensorElementDataTypeFloat16:
		return "float16"
	}
	return strings.ToLower(strings.TrimPrefix(t.String(), "ONNX_TENSOR_ELEMENT_DATA_TYPE_"))
}

// Session is one loaded model with a fixed list of fed inputs and fetched
// outputs. It is safe for concurrent use.
type Session struct {
	path    string
	inputs  []string
	outputs []string

	mu struct {
		sync.RWMutex // Run holds it shared, Close exclusively
		s            *onnx.DynamicAdvancedSession
	}
}

// OpenSession loads the model at path. Run must then be called with tensors
// for exactly the named inputs, and returns the named outputs, in order.
func OpenSession(path string, inputs, outputs []string, opts *SessionOptions) (*Session, error) {
	if opts == nil {
		opts = &SessionOptions{}
	}
	if opts.IntraOpThreads < 0 {
		return nil, fmt.Errorf("ort: IntraOpThreads %d is negative", opts.IntraOpThreads)
	}
	if err := acquire(opts.Library); err != nil {
		return nil, err
	}
	so, err := onnx.NewSessionOptions()
	if err != nil {
		release()
		return nil, &Error{Op: "load", Model: path, Msg: err.Error()}
	}
	defer so.Destroy()
	if opts.IntraOpThreads > 0 {
		if err := so.SetIntraOpNumThreads(opts.IntraOpThreads); err != nil {
			release()
			return nil, &Error{Op: "load", Model: path, Msg: err.Error()}
		}
	}
	// The intra-op workers spin while a run lasts, so that each operator
	// starts them without a wake-up, and stop when it ends: a worker
	// still spinning would take a core from the search that follows the
	// encoding of its query.
	for _, kv := range [][2]string{{"session.intra_op.allow_spinning", "1"}, {"session.force_spinning_stop", "1"}} {
		if err := so.AddSessionConfigEntry(kv[0], kv[1]); err != nil {
			release()
			return nil, &Error{Op: "load", Model: path, Msg: err.Error()}
		}
	}
	// One Run is one batch; parallelism inside an operator is what helps.
	if err := so.SetInterOpNumThreads(1); err != nil {
		release()
		return nil, &Error{Op: "load", Model: path, Msg: err.Error()}
	}
	s, err := onnx.NewDynamicAdvancedSession(path, inputs, outputs, so)
	if err != nil {
		release()
		return nil, &Error{Op: "load", Model: path, Msg: err.Error()}
	}
	sess := &Session{path: path, inputs: inputs, outputs: outputs}
	sess.mu.s = s
	return sess, nil
}

func (t Tensor) value() (onnx.Value, error) {
	shape := onnx.NewShape(t.Shape...)
	switch {
	case t.Int64 != nil:
		return onnx.NewTensor(shape, t.Int64)
	case t.Float32 != nil:
		return onnx.NewTensor(shape, t.Float32)
	}
	return nil, errors.New("ort: tensor has no data")
}

// Run feeds inputs (in the order given to OpenSession) and fills outputs.
// An output whose Float32 is preallocated to the exact size is written in
// place, which lets callers reuse buffers; otherwise Run allocates it and
// sets Shape. Cancelling ctx terminates the run inside ONNX Runtime.
func (s *Session) Run(ctx context.Context, inputs []Tensor, outputs []Tensor) error {
	if len(inputs) != len(s.inputs) || len(outputs) != len(s.outputs) {
		return fmt.Errorf("ort: run %s: got %d inputs and %d outputs, want %d and %d",
			s.path, len(inputs), len(outputs), len(s.inputs), len(s.outputs))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.s == nil {
		return ErrClosed
	}
	ins := make([]onnx.Value, len(inputs))
	defer destroyAll(ins)
	for i, t := range inputs {
		v, err := t.value()
		if err != nil {
			return fmt.Errorf("ort: input %s: %w", s.inputs[i], err)
		}
		ins[i] = v
	}
	outs := make([]onnx.Value, len(outputs))
	defer destroyAll(outs)
	for i, t := range outputs {
		if t.Float32 == nil {
			continue
		}
		v, err := t.value()
		if err != nil {
			return fmt.Errorf("ort: output %s: %w", s.outputs[i], err)
		}
		outs[i] = v
	}

	var ro *onnx.RunOptions
	if ctx.Done() != nil {
		var err error
		if ro, err = onnx.NewRunOptions(); err != nil {
			return &Error{Op: "run", Model: s.path, Msg: err.Error()}
		}
		defer ro.Destroy()
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			defer close(fired)
			ro.Terminate()
		})
		defer func() {
			if !stop() {
				<-fired // Terminate is running; let it finish before Destroy.
			}
		}()
	}
	if err := s.mu.s.RunWithOptions(ins, outs, ro); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		return &Error{Op: "run", Model: s.path, Msg: err.Error()}
	}
	for i := range outputs {
		if outputs[i].Float32 != nil {
			continue
		}
		t, ok := outs[i].(*onnx.Tensor[float32])
		if !ok {
			return fmt.Errorf("ort: run %s: output %s is not a float32 tensor", s.path, s.outputs[i])
		}
		outputs[i].Shape = append([]int64(nil), t.GetShape()...)
		outputs[i].Float32 = t.GetData()
	}
	return nil
}

func destroyAll(vs []onnx.Value) {
	for _, v := range vs {
		if v != nil {
			v.Destroy()
		}
	}
}

// Close releases the session and the environment reference. It waits for
// runs in flight and is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.s == nil {
		return nil
	}
	err := s.mu.s.Destroy()
	s.mu.s = nil
	if rerr := release(); err == nil {
		err = rerr
	} else if err != nil {
		err = fmt.Errorf("ort: close %s: %w", s.path, err)
	}
	return err
}
