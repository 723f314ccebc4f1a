package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/bench"
)

func runIndex(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("index", stderr)
	dir := fs.String("dir", "", "collection directory (created if absent)")
	corpus := fs.String("corpus", "", "JSONL file to index ('-' for stdin)")
	batch := fs.Int("batch", 0, "documents per atomic batch (default 1000, or 256 when encoding)")
	models := fs.String("models", "", "new collection: encoder models, comma-separated: NAME for dense and late retrieval, dense:NAME or late:NAME for one of them; 'none' for BM25 only (default: the installed default model, or none if it is not installed or --external is given; with --server, the default model, which a server without it refuses)")
	lateIndex := fs.String("late-index", "", "new collection: late-interaction index, 'Residual' for residual codes (centroid ids and 1-bit residuals in memory, full-precision tokens on disk; the default), 'FAISS' or a FAISS factory string for FAISS over every token key")
	lateEncoding := fs.String("late-encoding", "", "new collection: how token vectors are stored, 'i8' (int8, which the exact stage scores in int8: the default for installed models) or 'f16' (the default for --external ones)")
	skipBad := fs.Bool("skip-bad", false, "skip bad lines (and count them) instead of stopping")
	schemaFile := fs.String("schema", "", "JSON schema file for a new collection (default: BEIR _id, title, text)")
	idField := fs.String("id-field", "", "JSON key of the document id for a new collection (default _id)")
	strict := fs.Bool("strict", false, "new collection: reject fields the schema does not declare")
	fields := repeated(fs, "field", "new collection: declare or override a field type, name=type (text, keyword, keywords, number, date, bool); repeatable", tandem.ParseField)
	external := repeated(fs, "external", "new collection: an external model, whose vectors every line brings under \"_vectors\", as NAME:dense=DIM,tokens=DIM,similarity=cosine|dot (dense or tokens or both); repeatable", tandem.ParseExternalModel)
	quiet := fs.Bool("quiet", false, "no progress output")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	var up upload
	fs.StringVar(&up.server, "server", "", "upload through this server's API (e.g. http://127.0.0.1:7700) as a task into --collection, instead of indexing --dir here; bad lines are refused one by one and listed, and any makes the command fail unless --skip-bad (the other documents are stored either way)")
	fs.StringVar(&up.collection, "collection", "", "with --server: the collection, created as a new collection here would be when it does not exist")
	// The key from the environment is read after parsing, so that -h
	// never prints it as the default.
	fs.StringVar(&up.key, "key", "", "with --server: admin API key (default $TANDEM_API_KEY, else the first of $TANDEM_API_KEYS)")
	fs.BoolVar(&up.noWait, "no-wait", false, "with --server: print the task and return once the server has the file, instead of following the task to its end")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	local := up.server == ""
	if !local && (*dir != "" || *batch != 0 || *cpuProfile != "" || up.collection == "") {
		fmt.Fprintln(stderr, "usage: tandem index --server URL --collection NAME --corpus FILE.jsonl [flags] (not --dir, --batch or --cpuprofile: the server indexes)")
		fs.PrintDefaults()
		return errUsage
	}
	if local && *dir == "" || *corpus == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: tandem index --dir DIR --corpus FILE.jsonl [flags], or --server URL --collection NAME in place of --dir")
		fs.PrintDefaults()
		return errUsage
	}
	schema, err := buildSchema(*schemaFile, *idField, *strict, *fields)
	if err != nil {
		return err
	}
	schema.Models = append(schema.Models, *external...)
	if !local {
		up.create.Schema = schema
		up.create.LateIndex, up.create.LateEncoding = *lateIndex, *lateEncoding
		if len(*external) == 0 || *models != "" {
			if up.create.Dense, up.create.Late, err = serverModels(*models); err != nil {
				return err
			}
		}
		up.creating = *schemaFile != "" || *idField != "" || *strict || len(*fields) > 0 || *models != "" || len(*external) > 0 || *lateIndex != "" || *lateEncoding != ""
		up.corpus, up.skipBad, up.quiet = *corpus, *skipBad, *quiet
		up.key = cmp.Or(up.key, os.Getenv("TANDEM_API_KEY"), strings.Split(os.Getenv("TANDEM_API_KEYS"), ",")[0])
		// Ctrl-C stops following the task, never the task.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return up.run(ctx, stdout, stderr)
	}
	stopProfile, err := bench.StartCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	var in io.Reader = os.Stdin
	var size int64
	if *corpus != "-" {
		f, err := os.Open(*corpus)
		if err != nil {
			return err
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			size = st.Size()
		}
		in = f
	}
	_, statErr := os.Stat(*dir)
	existed := statErr == nil
	var dense, late []string
	if len(*external) == 0 || *models != "" {
		// With --external alone, the collection runs no model of its own.
		if dense, late, err = modelNames(*models, stderr); err != nil {
			return err
		}
	}
	e, err := engine.Open(*dir, &engine.Options{Schema: schema, BatchSize: *batch, Dense: dense, Late: late, LateIndex: *lateIndex, LateEncoding: *lateEncoding})
	if err != nil {
		return err
	}
	if existed && (*schemaFile != "" || *idField != "" || *strict || len(*fields) > 0 || *models != "" || len(*external) > 0) {
		fmt.Fprintf(stderr, "note: %s exists; its stored schema and models are used and --schema, --id-field, --strict, --field, --models and --external are ignored\n", *dir)
	}
	if !*quiet {
		fmt.Fprintf(stderr, "retrievers: %s\n", strings.Join(e.Retrievers(), ", "))
	}
	var last time.Time
	defer func() {
		if err := e.Close(); err != nil {
			fmt.Fprintf(stderr, "close: %v\n", err)
		}
	}()
	opts := engine.JSONLOptions{
		SkipBad: *skipBad,
		OnSkip:  func(err error) { fmt.Fprintf(stderr, "skipped: %v\n", err) },
		Progress: func(p engine.Progress) {
			if *quiet || time.Since(last) < time.Second {
				return
			}
			last = time.Now()
			fmt.Fprintln(stderr, progressLine(p, size, e.Retraining()))
		},
	}
	p, err := e.IndexJSONL(context.Background(), in, opts)
	if !*quiet {
		fmt.Fprintln(stderr, progressLine(p, size, e.Retraining()))
	}
	if err != nil {
		var de *engine.DocError
		if errors.As(err, &de) && !*skipBad {
			return fmt.Errorf("%s: %w (documents before this line's batch are stored; use --skip-bad to skip bad lines)", *corpus, err)
		}
		return err
	}
	if err := waitRetrain(e, *quiet, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "indexed %d documents (%d lines, %d skipped) in %s\n", p.Docs, p.Lines, p.Skipped, p.Elapsed.Round(time.Millisecond))
	return nil
}

// waitRetrain lets a retraining that the load started (a dense index's
// IVF, a late index's residual codes) finish, so that the collection is
// saved with its new index (Close would cancel it and the next Open would
// start it again), saying so every few seconds.
func waitRetrain(e *engine.Engine, quiet bool, stderr io.Writer) error {
	names := e.Retraining()
	if len(names) == 0 {
		return nil
	}
	start := time.Now()
	if !quiet {
		fmt.Fprintf(stderr, "%s: retraining in the background (searches and writes would go on)\n", strings.Join(names, ", "))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.WaitRetrain(ctx) }()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
			if !quiet {
				fmt.Fprintf(stderr, "retraining done after %s\n", time.Since(start).Round(time.Second))
			}
			return nil
		case <-tick.C:
			if !quiet {
				fmt.Fprintf(stderr, "still retraining %s (%s)\n", strings.Join(e.Retraining(), ", "), time.Since(start).Round(time.Second))
			}
		}
	}
}

// modelNames turns --models into the models of dense and of late
// retrieval (encoder.ParseModels): "" is the installed default model for
// both, none when it is not installed.
func modelNames(flag string, stderr io.Writer) (dense, late []string, err error) {
	if strings.TrimSpace(flag) == "" {
		if _, err := encoder.Find(""); err != nil {
			fmt.Fprintf(stderr, "note: default model %s is not installed (%v); indexing for BM25 only\n", encoder.DefaultModel, err)
			return nil, nil, nil
		}
		return []string{encoder.DefaultModel}, []string{encoder.DefaultModel}, nil
	}
	if dense, late, err = encoder.ParseModels(flag); err != nil {
		return nil, nil, fmt.Errorf("--models: %w", err)
	}
	return dense, late, nil
}

// progressLine describes a load's progress; retraining names the late
// indexes retraining in the background.
func progressLine(p engine.Progress, size int64, retraining []string) string {
	secs := p.Elapsed.Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(p.Docs) / secs
	}
	s := fmt.Sprintf("%d docs, %.1f docs/s", p.Docs, rate)
	if p.Tokens > 0 && secs > 0 {
		s += fmt.Sprintf(", %.0f tokens/s", float64(p.Tokens)/secs)
	}
	if size > 0 && p.Bytes > 0 {
		frac := float64(p.Bytes) / float64(size)
		eta := time.Duration(secs/frac*(1-frac)) * time.Second
		s += fmt.Sprintf(", %.0f%%, ETA %s", 100*frac, eta.Round(time.Second))
	}
	if p.Skipped > 0 {
		s += fmt.Sprintf(", %d skipped", p.Skipped)
	}
	if len(retraining) > 0 {
		s += ", retraining " + strings.Join(retraining, ", ")
	}
	return s
}

// buildSchema is a new collection's schema: --schema's file, or the BEIR
// default, with --id-field, --strict and --field applied.
func buildSchema(file, idField string, strict bool, fields []tandem.Field) (*tandem.Schema, error) {
	schema := tandem.DefaultSchema()
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if schema, err = tandem.ReadSchema(b); err != nil {
			return nil, fmt.Errorf("schema %s: %w", file, err)
		}
	}
	if idField != "" {
		schema.IDField = idField
	}
	schema.Strict = schema.Strict || strict
	for _, f := range fields {
		schema.SetField(f)
	}
	return schema, nil
}
