// Command gendemo writes Tandem's demo collection: one JSON document per
// package of the Go standard library installed on this machine, made from
// the package's own documentation (BSD-licensed, like Go). It needs nothing
// but the Go toolchain, so the demo never depends on ../shared.
//
// Each line is {"_id", "title", "text", "area", "depth", "deprecated",
// "exported"}: area is the first element of the import path ("crypto",
// "net", ...), depth the number of path elements, deprecated whether the
// package doc says so, exported the number of exported functions and types.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

type document struct {
	ID         string `json:"_id"`
	Title      string `json:"title"`
	Text       string `json:"text"`
	Area       string `json:"area"`
	Depth      int    `json:"depth"`
	Deprecated bool   `json:"deprecated"`
	Exported   int    `json:"exported"`
}

func main() {
	out := flag.String("o", "", "output JSONL file (default stdout)")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gendemo:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	src := filepath.Join(runtime.GOROOT(), "src")
	var dirs []string
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		switch d.Name() {
		case "internal", "vendor", "testdata", "cmd", "builtin":
			return filepath.SkipDir
		}
		if path != src {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(dirs)
	w := os.Stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	n := 0
	for _, dir := range dirs {
		d, ok, err := describe(src, dir)
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if !ok {
			continue
		}
		if err := enc.Encode(d); err != nil {
			return err
		}
		n++
	}
	fmt.Fprintf(os.Stderr, "gendemo: %d packages\n", n)
	return nil
}

// describe builds the document of the package in dir, if it has one.
func describe(src, dir string) (document, bool, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		return document{}, false, nil // unparsable for this toolchain: skip
	}
	importPath, _ := filepath.Rel(src, dir)
	importPath = filepath.ToSlash(importPath)
	var pkg *ast.Package
	for name, p := range pkgs {
		if name != "main" && name != "documentation" {
			pkg = p
		}
	}
	if pkg == nil {
		return document{}, false, nil
	}
	p := doc.New(pkg, importPath, 0)
	if strings.TrimSpace(p.Doc) == "" {
		return document{}, false, nil
	}
	var b strings.Builder
	b.WriteString(strings.TrimSpace(p.Doc))
	exported := 0
	add := func(name, text string) {
		exported++
		if s := p.Synopsis(text); s != "" {
			fmt.Fprintf(&b, "\n%s: %s", name, s)
		}
	}
	for _, f := range p.Funcs {
		add(f.Name, f.Doc)
	}
	for _, t := range p.Types {
		add(t.Name, t.Doc)
		for _, f := range t.Funcs {
			add(f.Name, f.Doc)
		}
		for _, m := range t.Methods {
			add(t.Name+"."+m.Name, m.Doc)
		}
	}
	parts := strings.Split(importPath, "/")
	return document{
		ID:         importPath,
		Title:      importPath + ": " + p.Synopsis(p.Doc),
		Text:       b.String(),
		Area:       parts[0],
		Depth:      len(parts),
		Deprecated: strings.Contains(p.Doc, "Deprecated:"),
		Exported:   exported,
	}, true, nil
}
