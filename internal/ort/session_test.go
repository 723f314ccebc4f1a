package ort

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/tandemsearch/tandem/internal/native"
)

// tinyBERT is a synthetic model from scripts/models/make_tiny.py:
// last_hidden_state[b,t,j] = ((id*(j+1))%7 - 3 + (t+j)%3 + 10*type*(j==0)) * mask.
const tinyBERT = "../../encoder/testdata/tiny-bert/model.onnx"

func skipWithoutORT(t *testing.T) {
	t.Helper()
	if lib := native.ONNXRuntimeLibrary(); lib == "" {
		t.Skip("skipping: ONNX Runtime not installed (run scripts/setup.sh)")
	} else if _, err := os.Stat(lib); err != nil {
		t.Skipf("skipping: %s not found (run scripts/setup.sh)", lib)
	}
}

func TestInspect(t *testing.T) {
	skipWithoutORT(t)
	ins, outs, err := Inspect(tinyBERT, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 3 || ins[0].Name != "input_ids" || ins[0].Type != "int64" || ins[2].Name != "token_type_ids" {
		t.Fatalf("inputs %+v", ins)
	}
	if len(outs) != 2 || outs[0].Name != "last_hidden_state" || outs[0].Type != "float32" || outs[0].Shape[2] != 4 {
		t.Fatalf("outputs %+v", outs)
	}
	if _, _, err := Inspect("no-such.onnx", nil); err == nil {
		t.Fatal("Inspect of a missing file succeeded")
	}
}

func TestSessionRun(t *testing.T) {
	skipWithoutORT(t)
	s, err := OpenSession(tinyBERT, []string{"input_ids", "attention_mask", "token_type_ids"}, []string{"last_hidden_state"}, &SessionOptions{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A second session keeps the environment alive after the first closes.
	s2, err := OpenSession(tinyBERT, []string{"input_ids", "attention_mask", "token_type_ids"}, []string{"sentence_embedding"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if Version() == "" {
		t.Fatal("Version empty with sessions open")
	}
	shape := []int64{1, 2}
	ins := []Tensor{{Shape: shape, Int64: []int64{3, 1}}, {Shape: shape, Int64: []int64{1, 0}}, {Shape: shape, Int64: []int64{1, 0}}}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	// Preallocated output, written in place.
	buf := make([]float32, 8)
	outs := []Tensor{{Shape: []int64{1, 2, 4}, Float32: buf}}
	if err := s.Run(context.Background(), ins, outs); err != nil {
		t.Fatal(err)
	}
	// id 3, position 0, type 1: E[3] = [0 3 -1 2], P[0] = [0 1 2 0], T[1] = [10 0 0 0].
	want := []float32{10, 4, 1, 2, 0, 0, 0, 0}
	for i := range want {
		if buf[i] != want[i] {
			t.Fatalf("output %v, want %v", buf, want)
		}
	}
	// Allocated output.
	outs = []Tensor{{}}
	if err := s.Run(context.Background(), ins, outs); err != nil {
		t.Fatal(err)
	}
	if len(outs[0].Shape) != 3 || outs[0].Float32[0] != 10 {
		t.Fatalf("allocated output %+v", outs[0])
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx, ins, []Tensor{{}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	if err := s.Run(context.Background(), ins[:2], []Tensor{{}}); err == nil {
		t.Fatal("run with a missing input succeeded")
	}
	// A token id outside the embedding table fails inside ONNX Runtime:
	// the error is categorised.
	bad := []Tensor{{Shape: shape, Int64: []int64{3, 999}}, ins[1], ins[2]}
	var oe *Error
	if err := s.Run(context.Background(), bad, []Tensor{{}}); !errors.Is(err, ErrRunFailed) || !errors.As(err, &oe) || oe.Op != "run" {
		t.Fatalf("out-of-range id: err = %v, want ErrRunFailed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Run(context.Background(), ins, []Tensor{{}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("run after Close: %v", err)
	}
}
