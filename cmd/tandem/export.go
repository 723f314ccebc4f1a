package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/export"
)

// runExport writes the vectors Tandem stored, so that another engine can
// search the same numbers: for each model, OUT/<model>.npy and .ids
// (dense), OUT/<model>.tokens.npy, .offsets.npy and .tokens.ids (late
// interaction), in the formats package export's doc gives.
func runExport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export", stderr)
	dir := fs.String("dir", "", "collection directory")
	out := fs.String("out", "", "directory to write the arrays and id lists into (created if absent)")
	if err := parseOrUsage(fs, args, stderr, "tandem export --dir DIR --out OUTDIR", func() bool { return *dir == "" || *out == "" }); err != nil {
		return err
	}
	e, err := engine.Open(*dir, &engine.Options{MustExist: true})
	if err != nil {
		return err
	}
	defer e.Close()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	ctx := context.Background()
	n := 0
	for _, m := range e.Models() {
		base := filepath.Join(*out, filepath.Base(m.Name))
		if m.Dense {
			count, err := export.Dense(ctx, e, m.Name, m.Dim, base)
			if err != nil {
				return fmt.Errorf("export %s: %w", m.Name, err)
			}
			fmt.Fprintf(stdout, "%s: %d vectors of %d dimensions: %s.npy, %s.ids\n", m.Name, count, m.Dim, base, base)
			n++
		}
		if m.Late {
			docs, tokens, err := export.Tokens(ctx, e, m.Name, m.TokenDim, base)
			if err != nil {
				return fmt.Errorf("export %s tokens: %w", m.Name, err)
			}
			fmt.Fprintf(stdout, "%s: %d documents, %d tokens of %d dimensions: %s.tokens.npy, %s.offsets.npy, %s.tokens.ids\n", m.Name, docs, tokens, m.TokenDim, base, base, base)
			n++
		}
	}
	if n == 0 {
		return errors.New("export: the collection has no dense or late-interaction model")
	}
	return nil
}
