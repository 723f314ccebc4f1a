package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/tandemsearch/tandem/internal/synth"
)

// runBenchText writes, in BEIR layout, the documents and queries that
// `tandem bench ingest --text-from` indexes and searches (the same text,
// document by document), so that another engine can index the very same
// collection: scripts/peers/bench_bm25.py --data.
func runBenchText(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("bench text", stderr)
	from := fset.String("text-from", "", "a BEIR collection directory (corpus.jsonl, queries.jsonl) whose term statistics the text follows")
	docs := fset.Int("docs", 1_000_000, "documents to write")
	out := fset.String("out", "", "directory to write corpus.jsonl and queries.jsonl into; must not exist")
	if err := parseOrUsage(fset, args, stderr, "tandem bench text --text-from BEIR_DIR --out DIR [--docs N]", func() bool {
		return *from == "" || *out == "" || *docs <= 0 || fset.NArg() > 0
	}); err != nil {
		return err
	}
	c := synth.Default()
	c.TextFrom = *from
	g, err := synth.New(c)
	if err != nil {
		return err
	}
	if _, err := os.Stat(*out); err == nil {
		return fmt.Errorf("--out %s exists", *out)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	fmt.Fprintln(stderr, g.TextModel().Stats())
	if err := writeJSONL(filepath.Join(*out, "corpus.jsonl"), *docs, func(i int) any {
		return map[string]string{"_id": synth.ID(i), "title": "", "text": g.DocText(i)}
	}); err != nil {
		return err
	}
	n := g.TextModel().Queries()
	if err := writeJSONL(filepath.Join(*out, "queries.jsonl"), n, func(i int) any {
		text, _ := g.Query(i)
		return map[string]string{"_id": fmt.Sprint("q", i), "text": text}
	}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d documents and %d queries to %s\n", *docs, n, *out)
	return nil
}

// writeJSONL writes item(0)..item(n-1) as JSON lines to path, made by one
// goroutine per core, in order.
func writeJSONL(path string, n int, item func(int) any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	workers := max(1, runtime.GOMAXPROCS(0))
	const chunk = 1024
	for lo := 0; lo < n; lo += chunk * workers {
		lines := make([][]byte, min(n-lo, chunk*workers))
		var wg sync.WaitGroup
		errs := make([]error, workers)
		for wk := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := wk; j < len(lines); j += workers {
					b, err := json.Marshal(item(lo + j))
					if err != nil {
						errs[wk] = err
						return
					}
					lines[j] = append(b, '\n')
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				f.Close()
				return err
			}
		}
		for _, l := range lines {
			if _, err := w.Write(l); err != nil {
				f.Close()
				return err
			}
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
