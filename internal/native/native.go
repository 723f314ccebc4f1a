// Package native locates what Tandem needs outside Go: the ONNX Runtime
// shared library, which package ort loads with dlopen, and the installed
// encoder models. (libfaiss_c is linked at build time, through the cgo
// flags or the compiler's default search path, and found at run time by
// the dynamic loader: see scripts/install.sh.)
//
// scripts/setup.sh fills a prefix, the git-ignored .native of a checkout;
// scripts/install.sh copies it into standard places. Both are searched, so
// a program built with plain `go build` runs with no environment variables
// once scripts/install.sh has run.
//
// # Search order
//
// The native prefix (Prefix) is, in order: $TANDEM_NATIVE; in a release
// build (scripts/dist.sh), the directory of the running executable
// (releasePrefix); the path the Makefile bakes in with -ldflags -X
// (builtinPrefix); a ".native" directory beside or above the running
// executable.
//
// The ONNX Runtime library (ONNXRuntimeLibrary), libonnxruntime.so.1 or
// else libonnxruntime.so, is the first that exists of:
//
//  1. $TANDEM_ONNXRUNTIME_LIB, as given;
//  2. <prefix>/lib;
//  3. the directories of $LD_LIBRARY_PATH;
//  4. the directories of /etc/ld.so.conf and the files it includes (what
//     ldconfig caches: /usr/local/lib on Debian), then the loader's
//     defaults /lib/<multiarch>, /usr/lib/<multiarch>, /lib, /usr/lib;
//  5. ~/.local/lib, where a user without root installs.
//
// The models directory (ModelsDir) is $TANDEM_MODELS, as given, or else
// the first existing directory of ModelDirs, which lists, in order:
//
//  1. <prefix>/models;
//  2. $XDG_DATA_HOME/tandem/models;
//  3. ~/.local/share/tandem/models;
//  4. <dir>/tandem/models for each dir of $XDG_DATA_DIRS;
//  5. /usr/local/share/tandem/models and /usr/share/tandem/models.
//
// Lookups read the environment and the file system on every call; nothing
// is cached, so a test may change either between calls.
package native

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// ErrNoCgo is returned, wrapped with what was attempted, by every
// operation that needs FAISS or ONNX Runtime in a build without cgo
// (CGO_ENABLED=0). Such a build serves BM25 only.
var ErrNoCgo = errors.New("tandem built without cgo: dense and late-interaction retrieval need a cgo build with FAISS and ONNX Runtime (see README)")

// builtinPrefix is set by the Makefile:
//
//	-ldflags "-X github.com/tandemsearch/tandem/internal/native.builtinPrefix=/abs/.native"
var builtinPrefix string

// releasePrefix is set by scripts/dist.sh, which lays lib/ and models/
// out beside the binary:
//
//	-ldflags "-X github.com/tandemsearch/tandem/internal/native.releasePrefix=."
//
// The prefix is then that path relative to the executable's directory.
var releasePrefix string

// Prefix returns the native prefix directory, or "" when none is found.
func Prefix() string {
	if p := os.Getenv("TANDEM_NATIVE"); p != "" {
		return p
	}
	exe, err := os.Executable()
	if err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		if releasePrefix != "" {
			if p := filepath.Join(filepath.Dir(exe), releasePrefix); isDir(p) {
				return p
			}
		}
	}
	if builtinPrefix != "" && isDir(builtinPrefix) {
		return builtinPrefix
	}
	if err != nil {
		return ""
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

// LibDir returns the prefix's directory of shared libraries, or "" when
// there is no prefix.
func LibDir() string { return join("lib") }

// ModelsDir returns the directory holding installed models, one per
// subdirectory: $TANDEM_MODELS, or else the first existing directory of
// ModelDirs, or "" when none exists.
func ModelsDir() string {
	if p := os.Getenv("TANDEM_MODELS"); p != "" {
		return p
	}
	for _, d := range ModelDirs() {
		if isDir(d) {
			return d
		}
	}
	return ""
}

// ModelDirs returns the directories searched for models when
// $TANDEM_MODELS is not set, in order, whether they exist or not.
func ModelDirs() []string {
	var dirs []string
	if p := join("models"); p != "" {
		dirs = append(dirs, p)
	}
	var data []string
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		data = append(data, d)
	}
	if h, err := os.UserHomeDir(); err == nil {
		data = append(data, filepath.Join(h, ".local", "share"))
	}
	for _, d := range filepath.SplitList(os.Getenv("XDG_DATA_DIRS")) {
		if filepath.IsAbs(d) {
			data = append(data, d)
		}
	}
	data = append(data, "/usr/local/share", "/usr/share")
	for _, d := range data {
		dirs = append(dirs, filepath.Join(d, "tandem", "models"))
	}
	return dedup(dirs)
}

// onnxRuntimeNames are the file names tried in each directory: the soname
// first, then the development link.
var onnxRuntimeNames = []string{"libonnxruntime.so.1", "libonnxruntime.so"}

// ONNXRuntimeLibrary returns the path of the ONNX Runtime shared library,
// or "" when none is found (see the package documentation for the order).
func ONNXRuntimeLibrary() string {
	if p := os.Getenv("TANDEM_ONNXRUNTIME_LIB"); p != "" {
		return p
	}
	for _, d := range LibraryDirs() {
		for _, n := range onnxRuntimeNames {
			if p := filepath.Join(d, n); isFile(p) {
				return p
			}
		}
	}
	return ""
}

// LibraryDirs returns the directories searched for the ONNX Runtime
// library, in order, whether they exist or not.
func LibraryDirs() []string {
	var dirs []string
	if p := LibDir(); p != "" {
		dirs = append(dirs, p)
	}
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if filepath.IsAbs(d) {
			dirs = append(dirs, d)
		}
	}
	dirs = append(dirs, ldSoConf("/etc/ld.so.conf", 0)...)
	if t := multiarch(); t != "" {
		dirs = append(dirs, "/lib/"+t, "/usr/lib/"+t)
	}
	dirs = append(dirs, "/lib", "/usr/lib", "/lib64", "/usr/lib64")
	if h, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(h, ".local", "lib"))
	}
	return dedup(dirs)
}

// ldSoConf returns the directories a ld.so.conf file lists, following its
// "include" lines (glob patterns, relative to the file's directory) as
// ldconfig does. A missing or unreadable file lists nothing.
func ldSoConf(path string, depth int) []string {
	if depth > 8 {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if pat, ok := strings.CutPrefix(line, "include"); ok && pat != "" && (pat[0] == ' ' || pat[0] == '\t') {
			pat = strings.TrimSpace(pat)
			if !filepath.IsAbs(pat) {
				pat = filepath.Join(filepath.Dir(path), pat)
			}
			files, _ := filepath.Glob(pat) // sorted, as ldconfig reads them
			for _, inc := range files {
				dirs = append(dirs, ldSoConf(inc, depth+1)...)
			}
			continue
		}
		if filepath.IsAbs(line) {
			dirs = append(dirs, filepath.Clean(line))
		}
	}
	return dirs
}

// multiarch returns Debian's multiarch triplet for the running
// architecture, or "" for one not listed.
func multiarch() string {
	if runtime.GOOS != "linux" {
		return ""
	}
	return map[string]string{
		"amd64":   "x86_64-linux-gnu",
		"arm64":   "aarch64-linux-gnu",
		"386":     "i386-linux-gnu",
		"arm":     "arm-linux-gnueabihf",
		"ppc64le": "powerpc64le-linux-gnu",
		"riscv64": "riscv64-linux-gnu",
		"s390x":   "s390x-linux-gnu",
	}[runtime.GOARCH]
}

func join(parts ...string) string {
	p := Prefix()
	if p == "" {
		return ""
	}
	return filepath.Join(append([]string{p}, parts...)...)
}

func dedup(dirs []string) []string {
	seen := make(map[string]bool, len(dirs))
	out := dirs[:0]
	for _, d := range dirs {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
