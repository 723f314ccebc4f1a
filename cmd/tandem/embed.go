package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/tandemsearch/tandem/encoder"
)

// embedOutput is one JSON line of `tandem embed`.
type embedOutput struct {
	Model  string       `json:"model"`
	Side   string       `json:"side"`
	Text   string       `json:"text"`
	Dim    int          `json:"dim"`
	Vector []float32    `json:"vector,omitempty"`
	Tokens []embedToken `json:"tokens,omitempty"`
}

type embedToken struct {
	ID       int32     `json:"id"`
	Position int32     `json:"position"`
	Vector   []float32 `json:"vector"`
}

func runEmbed(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("embed", stderr)
	model := fs.String("model", "", "installed model name or model directory (default "+encoder.DefaultModel+")")
	query := fs.Bool("query", false, "encode as a query (query prefix, marker and length) instead of a document")
	tokens := fs.Bool("tokens", false, "also print per-token vectors")
	threads := fs.Int("threads", 0, "ONNX Runtime intra-op threads (0: one per core)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: tandem embed [flags] TEXT...\n\nPrints one JSON object per text; with no TEXT, reads one text per line from standard input.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	texts := fs.Args()
	if len(texts) == 0 {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			texts = append(texts, sc.Text())
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read standard input: %w", err)
		}
	}
	dir, err := encoder.Find(*model)
	if err != nil {
		return err
	}
	enc, err := encoder.Load(dir, &encoder.Options{IntraOpThreads: *threads})
	if err != nil {
		return err
	}
	defer enc.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	side := encoder.Document
	if *query {
		side = encoder.Query
	}
	b, err := enc.Encode(ctx, encoder.Request{Side: side, Texts: texts, Tokens: *tokens && enc.TokenDim() > 0})
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	je := json.NewEncoder(w)
	for i, text := range texts {
		out := embedOutput{Model: enc.Name(), Side: side.String(), Text: text, Dim: enc.Dim()}
		if b.Vectors != nil {
			out.Vector = b.Vectors[i]
		}
		if b.Tokens != nil {
			t := b.Tokens[i]
			out.Dim = max(out.Dim, t.Dim)
			for k := range t.Len() {
				out.Tokens = append(out.Tokens, embedToken{ID: t.IDs[k], Position: t.Positions[k], Vector: t.Vector(k)})
			}
		}
		if err := je.Encode(out); err != nil {
			return err
		}
	}
	return w.Flush()
}
