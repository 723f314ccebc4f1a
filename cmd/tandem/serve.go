package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/server"
)

// serveConfig is what `tandem serve` runs: the server's configuration and
// the address to listen on.
type serveConfig struct {
	addr    string
	cfg     server.Config
	cluster clusterFlags
}

func parseServe(args []string, stderr io.Writer) (*serveConfig, error) {
	fs := newFlagSet("serve", stderr)
	sc := &serveConfig{}
	fs.StringVar(&sc.cfg.DataDir, "data", "", "data directory: one collection per subdirectory (created if absent)")
	fs.StringVar(&sc.addr, "addr", server.DefaultAddr, "address to listen on; a non-loopback address needs an API key")
	admin := repeated(fs, "api-key", "admin API key (every route); repeatable; also TANDEM_API_KEYS, comma separated", nonEmpty)
	read := repeated(fs, "read-key", "read-only API key (list, get, search, metrics); repeatable; also TANDEM_READ_KEYS, comma separated", nonEmpty)
	keysFile := fs.String("keys-file", "", "file of keys, one per line: 'admin KEY' or 'read KEY' ('#' starts a comment)")
	fs.Int64Var(&sc.cfg.MaxBody, "max-body", server.DefaultMaxBody, "largest request body in bytes (413 above)")
	fs.IntVar(&sc.cfg.MaxLine, "max-line", server.DefaultMaxLine, "largest NDJSON line or array element of an upsert in bytes (413 above)")
	fs.IntVar(&sc.cfg.MaxK, "max-k", server.DefaultMaxK, "largest k+offset of a search (400 above)")
	fs.IntVar(&sc.cfg.MaxQuery, "max-query", server.DefaultMaxQuery, "longest query text in bytes (400 above)")
	fs.IntVar(&sc.cfg.Engine.FilterLimits.MaxClauses, "max-filter-clauses", filter.DefaultMaxClauses, "most clauses of a search's filter, each term, range, prefix and exists, each value of a terms list and each empty and/or counting one (400 above, refused as the filter is read)")
	fs.IntVar(&sc.cfg.Engine.FilterLimits.MaxDepth, "max-filter-depth", filter.DefaultMaxDepth, "deepest nesting of a search's filter, one clause being 1 level and each and, or and not adding one (400 above)")
	fs.DurationVar(&sc.cfg.Timeout, "timeout", server.DefaultTimeout, "longest time of a request: 504 past it, every stage of a search stopping with it, and 408 for a body not received within it")
	fs.Int64Var(&sc.cfg.MaxRestore, "max-restore", server.DefaultMaxRestore, "largest backup a restore (POST /v1/collections/{name}/restore) takes in bytes, in place of --max-body (413 above)")
	fs.Int64Var(&sc.cfg.AsyncAbove, "async-above", server.DefaultAsyncAbove, "an upload (POST .../documents) without wait= whose body is larger, in bytes, runs as a task: 202 and a task id once it is received, then indexed in the background (GET /v1/tasks/{id})")
	fs.Int64Var(&sc.cfg.MaxQueued, "max-queued", server.DefaultMaxQueued, "most bytes of uploads queued as tasks and not yet indexed, kept in --data/.tasks: an upload beyond it answers 429 queue_full (413 when it alone is larger)")
	fs.IntVar(&sc.cfg.MaxCollections, "max-collections", server.DefaultMaxCollections, "most collections the server holds, those already in --data (or in the cluster) included; creating one more answers 409 too_many_collections")
	fs.IntVar(&sc.cfg.Engine.EncoderThreads, "encoder-threads", 0, "ONNX Runtime threads of one query's encoding (default min(cores, 4))")
	fs.IntVar(&sc.cfg.Engine.DocumentThreads, "ingest-threads", max(1, runtime.NumCPU()/2), "one-thread runs that encode upserted documents at once, apart from the queries' threads, so that ingest never holds a search up; 0 lets documents share the queries' threads (faster ingest, slower searches meanwhile)")
	fs.Int64Var(&sc.cfg.Engine.QueryCacheBytes, "query-cache-bytes", encoder.DefaultQueryCacheBytes, "memory of each model's cache of query encodings (a repeated query skips the model); 0 turns it off")
	fs.IntVar(&sc.cfg.Engine.QueryBatch, "query-batch", encoder.DefaultQueryBatch, "most queries that share one model run: those that arrive while a run is busy wait and go in the next one")
	fs.DurationVar(&sc.cfg.Engine.QueryBatchWait, "query-batch-wait", 0, "how long a query that finds the model idle waits for others to share its run (0: it runs at once)")
	sc.cluster.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if sc.cfg.Engine.QueryCacheBytes == 0 {
		sc.cfg.Engine.QueryCacheBytes = -1 // the engine's 0 is its default
	}
	if sc.cluster.on {
		if err := sc.cluster.parse(); err != nil {
			return nil, err
		}
		sc.addr = sc.cluster.self.HTTP // the node's HTTP address serves the API
	}
	if sc.cfg.Engine.EncoderThreads < 0 || sc.cfg.Engine.DocumentThreads < 0 || sc.cfg.Engine.QueryCacheBytes < -1 || sc.cfg.Engine.QueryBatchWait < 0 {
		return nil, fmt.Errorf("--encoder-threads, --ingest-threads, --query-cache-bytes and --query-batch-wait must be 0 or more")
	}
	if sc.cfg.Engine.QueryBatch < 1 {
		return nil, fmt.Errorf("--query-batch must be 1 or more")
	}
	if sc.cfg.DataDir == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: tandem serve --data DIR [--addr 127.0.0.1:7700] [--api-key KEY] [--read-key KEY] [limits]")
		fmt.Fprintln(stderr, "       tandem serve --cluster --node ID --peers ID=RAFT/HTTP,... --data DIR [--shards 3] [--replicas 3]")
		fs.PrintDefaults()
		return nil, errUsage
	}
	for _, v := range []struct {
		name  string
		value int64
	}{{"--max-body", sc.cfg.MaxBody}, {"--max-line", int64(sc.cfg.MaxLine)}, {"--max-k", int64(sc.cfg.MaxK)}, {"--max-query", int64(sc.cfg.MaxQuery)},
		{"--max-filter-clauses", int64(sc.cfg.Engine.FilterLimits.MaxClauses)}, {"--max-filter-depth", int64(sc.cfg.Engine.FilterLimits.MaxDepth)}, {"--timeout", int64(sc.cfg.Timeout)}, {"--max-collections", int64(sc.cfg.MaxCollections)}, {"--max-restore", sc.cfg.MaxRestore},
		{"--async-above", sc.cfg.AsyncAbove}, {"--max-queued", sc.cfg.MaxQueued}} {
		if v.value <= 0 {
			return nil, fmt.Errorf("%s must be positive", v.name)
		}
	}
	*admin = append(*admin, splitKeys(os.Getenv("TANDEM_API_KEYS"))...)
	*read = append(*read, splitKeys(os.Getenv("TANDEM_READ_KEYS"))...)
	if *keysFile != "" {
		a, r, err := readKeysFile(*keysFile)
		if err != nil {
			return nil, err
		}
		*admin, *read = append(*admin, a...), append(*read, r...)
	}
	sc.cfg.AdminKeys, sc.cfg.ReadKeys = *admin, *read
	sc.cfg.ReleaseAfterTimeout = true // the process is the server
	if err := server.CheckExposure(sc.addr, &sc.cfg); err != nil {
		return nil, err
	}
	return sc, nil
}

func splitKeys(s string) []string {
	var out []string
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

// readKeysFile reads --keys-file (server.ParseKeys).
func readKeysFile(path string) (admin, read []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--keys-file: %w", err)
	}
	if admin, read, err = server.ParseKeys(data); err != nil {
		return nil, nil, fmt.Errorf("--keys-file %s: %w", path, err)
	}
	return admin, read, nil
}

func runServe(args []string, stdout, stderr io.Writer) error {
	sc, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	if sc.cluster.on {
		return serveCluster(ctx, sc, logger, stderr, func(addr string) {
			fmt.Fprintf(stdout, "tandem serve: node %s listening on http://%s (data %s)\n", sc.cluster.node, addr, sc.cfg.DataDir)
		})
	}
	return serve(ctx, sc, logger, func(addr string) {
		fmt.Fprintf(stdout, "tandem serve: listening on http://%s (data %s)\n", addr, sc.cfg.DataDir)
	})
}

// serve opens the collections, listens on sc.addr and serves until ctx is
// done; listening is called with the bound address once it accepts.
func serve(ctx context.Context, sc *serveConfig, logger *slog.Logger, listening func(addr string)) error {
	sc.cfg.Logger = logger
	srv, err := server.New(&sc.cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", sc.addr)
	if err != nil {
		return errors.Join(fmt.Errorf("listen: %w", err), srv.Close())
	}
	if listening != nil {
		listening(ln.Addr().String())
	}
	return srv.Serve(ctx, ln)
}
