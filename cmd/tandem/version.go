package main

import (
	"fmt"
	"io"

	"github.com/tandemsearch/tandem/engine"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tandem %s\n", version)
	loc := engine.Native()
	prefix := loc.Prefix
	if prefix == "" {
		prefix = "(none: libraries and models from the system directories)"
	}
	fmt.Fprintf(stdout, "native prefix:  %s\n", prefix)
	fmt.Fprintf(stdout, "onnxruntime:    %s\n", orNone(loc.ONNXRuntime))
	fmt.Fprintf(stdout, "models:         %s\n", orNone(loc.Models))
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(not found; run scripts/setup.sh, then scripts/install.sh)"
	}
	return s
}
