package main

import (
	"fmt"
	"io"

	"github.com/tandemsearch/tandem/internal/native"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tandem %s\n", version)
	prefix := native.Prefix()
	if prefix == "" {
		prefix = "(none: libraries and models from the system directories)"
	}
	fmt.Fprintf(stdout, "native prefix:  %s\n", prefix)
	fmt.Fprintf(stdout, "onnxruntime:    %s\n", orNone(native.ONNXRuntimeLibrary()))
	fmt.Fprintf(stdout, "models:         %s\n", orNone(native.ModelsDir()))
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(not found; run scripts/setup.sh, then scripts/install.sh)"
	}
	return s
}
