// Package native locates the native prefix that scripts/setup.sh fills: the
// shared libraries (libfaiss_c, libonnxruntime) and the installed models.
//
// The prefix is found, in order, from the TANDEM_NATIVE environment variable,
// from the path baked in at build time by the Makefile (-ldflags -X), and from
// a ".native" directory beside or above the running executable. Binaries built
// by `make build` therefore run with no environment variables set.
package native

import (
	"os"
	"path/filepath"
)

// builtinPrefix is set by the Makefile:
//
//	-ldflags "-X github.com/tandemsearch/tandem/internal/native.builtinPrefix=/abs/.native"
var builtinPrefix string

// Prefix returns the native prefix directory, or "" when none is found.
func Prefix() string {
	if p := os.Getenv("TANDEM_NATIVE"); p != "" {
		return p
	}
	if builtinPrefix != "" && isDir(builtinPrefix) {
		return builtinPrefix
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	for dir := filepath.Dir(exe); ; {
		if p := filepath.Join(dir, ".native"); isDir(p) {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// LibDir returns the directory holding the shared libraries.
func LibDir() string { return join("lib") }

// ModelsDir returns the directory holding installed models, one per
// subdirectory.
func ModelsDir() string {
	if p := os.Getenv("TANDEM_MODELS"); p != "" {
		return p
	}
	return join("models")
}

// ONNXRuntimeLibrary returns the path of libonnxruntime.so.1.
func ONNXRuntimeLibrary() string {
	if p := os.Getenv("TANDEM_ONNXRUNTIME_LIB"); p != "" {
		return p
	}
	return join("lib", "libonnxruntime.so.1")
}

func join(parts ...string) string {
	p := Prefix()
	if p == "" {
		return ""
	}
	return filepath.Join(append([]string{p}, parts...)...)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
