//go:build cgo

package ort

import (
	"fmt"
	"os"
	"sync"

	onnx "github.com/yalue/onnxruntime_go"

	"github.com/tandemsearch/tandem/internal/native"
)

// env is the reference-counted process-wide environment.
var env struct {
	sync.Mutex
	refs int
	lib  string // library loaded by the live environment
}

// acquire initialises the environment on first use and counts a user.
// libPath overrides the library found by package native when not empty.
func acquire(libPath string) error {
	env.Lock()
	defer env.Unlock()
	if env.refs > 0 {
		env.refs++
		return nil
	}
	if libPath == "" {
		libPath = native.ONNXRuntimeLibrary()
	}
	if libPath == "" {
		return ErrNoLibrary
	}
	if _, err := os.Stat(libPath); err != nil {
		return fmt.Errorf("%w: %v", ErrNoLibrary, err)
	}
	onnx.SetSharedLibraryPath(libPath)
	if err := onnx.InitializeEnvironment(onnx.WithLogLevelError()); err != nil {
		return fmt.Errorf("ort: initialise ONNX Runtime from %s: %w", libPath, err)
	}
	env.refs = 1
	env.lib = libPath
	return nil
}

// release drops one user and destroys the environment with the last one.
func release() error {
	env.Lock()
	defer env.Unlock()
	if env.refs == 0 {
		return nil
	}
	env.refs--
	if env.refs > 0 {
		return nil
	}
	env.lib = ""
	if err := onnx.DestroyEnvironment(); err != nil {
		return fmt.Errorf("ort: destroy environment: %w", err)
	}
	return nil
}

// Version returns the loaded ONNX Runtime version, or "" when no session is
// open.
func Version() string {
	env.Lock()
	defer env.Unlock()
	if env.refs == 0 {
		return ""
	}
	return onnx.GetVersion()
}
