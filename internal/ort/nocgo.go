//go:build !cgo

package ort

import (
	"context"
	"fmt"

	"github.com/tandemsearch/tandem/internal/native"
)

// Without cgo there is no ONNX Runtime: Inspect and OpenSession fail with
// native.ErrNoCgo wrapped with the model they were given, so no Session
// ever exists.

// Inspect returns an error wrapping native.ErrNoCgo.
func Inspect(path string, _ *SessionOptions) (inputs, outputs []IOInfo, err error) {
	return nil, nil, fmt.Errorf("ort: inspect %s: %w", path, native.ErrNoCgo)
}

// Session is unavailable without cgo.
type Session struct{}

// OpenSession returns an error wrapping native.ErrNoCgo.
func OpenSession(path string, _, _ []string, _ *SessionOptions) (*Session, error) {
	return nil, fmt.Errorf("ort: load %s: %w", path, native.ErrNoCgo)
}

// Run returns an error wrapping native.ErrNoCgo.
func (*Session) Run(context.Context, []Tensor, []Tensor) error {
	return fmt.Errorf("ort: run: %w", native.ErrNoCgo)
}

// Close does nothing.
func (*Session) Close() error { return nil }

// Version returns "": no ONNX Runtime is ever loaded.
func Version() string { return "" }
