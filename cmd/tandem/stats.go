package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/bench"
)

func runStats(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("stats", stderr)
	dir := fs.String("dir", "", "collection directory")
	asJSON := fs.Bool("json", false, "print every statistic (and the schema) as JSON")
	if err := parseOrUsage(fs, args, stderr, "tandem stats --dir DIR [--json]", func() bool { return *dir == "" }); err != nil {
		return err
	}
	e, err := engine.Open(*dir, &engine.Options{MustExist: true})
	if err != nil {
		return err
	}
	defer e.Close()
	s, err := e.Stats()
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	fmt.Fprintf(stdout, "documents   %d (bm25 index: %d)\n", s.Docs, s.BleveDocs)
	fmt.Fprintf(stdout, "retrievers  %s\n", strings.Join(s.Retrievers, ", "))
	for _, m := range s.Schema.Models {
		var kinds []string
		if m.Dense {
			kinds = append(kinds, fmt.Sprintf("dense %d-d", m.Dim))
		}
		if m.Late {
			kinds = append(kinds, fmt.Sprintf("late %d-d tokens", m.TokenDim))
		}
		if m.Similarity != "" {
			kinds = append(kinds, m.Similarity)
		}
		if m.External {
			kinds = append(kinds, "external: documents and queries bring their vectors")
		}
		fmt.Fprintf(stdout, "model       %s (%s)\n", m.Name, strings.Join(kinds, ", "))
	}
	for _, d := range s.Dense {
		var retrain string
		if d.Retraining {
			retrain = fmt.Sprintf("; retraining in the background (%s, %d of %d vectors, %s more in memory)", d.RetrainPhase, d.RetrainFilled, d.RetrainTarget, bench.Size(int64(d.RetrainBytes)))
		}
		if d.RetrainError != "" {
			retrain += "; last retraining failed: " + d.RetrainError
		}
		fmt.Fprintf(stdout, "dense       %s: %d vectors, FAISS %s, %s in memory%s\n", d.Model, d.Vectors, d.Description, bench.Size(int64(d.MemoryBytes)), retrain)
	}
	for _, l := range s.Late {
		if l.Centroids > 0 {
			var fallback string
			if l.ExactStale > 0 {
				fallback += fmt.Sprintf(", %d stale documents scored from codes", l.ExactStale)
			}
			if l.ExactReadErrors > 0 {
				fallback += fmt.Sprintf(", %d unreadable documents scored from codes (latest: %s)", l.ExactReadErrors, l.ExactReadError)
			}
			fmt.Fprintf(stdout, "late        %s: %d docs, %d tokens, %s (%d centroids, drift %.3f), %s in memory (%.1f bytes/token)%s\n",
				l.Model, l.Docs, l.Tokens, l.Description, l.Centroids, l.Drift, bench.Size(l.MemoryBytes), l.BytesPerToken, fallback)
			continue
		}
		fmt.Fprintf(stdout, "late        %s: %d docs, %d tokens (%d keys), FAISS %s, %s in memory (%.1f bytes/token), %s of it token blobs\n",
			l.Model, l.Docs, l.Tokens, l.TokenKeys, l.Description, bench.Size(l.MemoryBytes), l.BytesPerToken, bench.Size(l.StoredBytes))
	}
	for _, q := range s.QueryEncoding {
		fmt.Fprintf(stdout, "queries     %s: cache %d hits, %d misses, %d entries in %s of %s; %d queries in %d model runs (this process)\n",
			q.Model, q.CacheHits, q.CacheMisses, q.CacheEntries, bench.Size(q.CacheBytes), bench.Size(q.CacheCapacityBytes), q.Queries, q.Runs)
	}
	fmt.Fprintf(stdout, "disk        badger %s, blobs %s, bleve %s, snapshots %s\n", bench.Size(s.DiskBytes["badger"]), bench.Size(s.DiskBytes["blobs"]), bench.Size(s.DiskBytes["bleve"]), bench.Size(s.DiskBytes["snapshots"]))
	fmt.Fprintf(stdout, "sequence    %d\n", s.LastSeq)
	if l := s.Log; l.Entries == 0 {
		fmt.Fprintf(stdout, "log         empty (truncated through %d)\n", l.Floor)
	} else {
		fmt.Fprintf(stdout, "log         %d entries, sequences %d to %d (truncated through %d; held by %s)\n", l.Entries, l.Oldest, l.Last, l.Floor, l.HeldBy)
	}
	return nil
}
