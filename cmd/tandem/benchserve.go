package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// runBenchServe loads a running `tandem serve` over HTTP: concurrent
// searchers cycle through the search modes with real queries while writers
// upsert documents, for a fixed time; it reports QPS, latency percentiles
// per mode and every error. It measures the server as a client sees it:
// JSON encoding, HTTP and the engine together.
func runBenchServe(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("bench serve", stderr)
	url := fset.String("url", "http://127.0.0.1:7700", "base URL of the server")
	coll := fset.String("collection", "", "collection to search and write")
	queriesPath := fset.String("queries", "", "BEIR queries.jsonl: the query texts, used in turn")
	corpusPath := fset.String("corpus", "", "JSONL documents the writers upsert in turn (BEIR corpus lines); empty: no writers")
	duration := fset.Duration("duration", 2*time.Minute, "how long to load the server")
	searchers := fset.Int("searchers", 8, "concurrent searchers")
	writers := fset.Int("writers", 1, "concurrent writers (with --corpus)")
	writeBatch := fset.Int("write-batch", 8, "documents per upsert request")
	modesFlag := fset.String("modes", "bm25,dense,late,hybrid", "search modes each searcher cycles through: bm25, dense, late, hybrid (every retriever fused); those the collection lacks are dropped")
	k := fset.Int("k", 10, "hits per search")
	key := fset.String("key", os.Getenv("TANDEM_API_KEY"), "API key sent as a bearer token (default $TANDEM_API_KEY)")
	quiet := fset.Bool("quiet", false, "no progress output")
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	if *coll == "" || *queriesPath == "" || *searchers <= 0 || *writers < 0 || *writeBatch <= 0 || *duration <= 0 || fset.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: tandem bench serve --collection NAME --queries queries.jsonl [--corpus corpus.jsonl] [--url URL] [--duration 2m] [--searchers 8] [--writers 1]")
		return errUsage
	}
	queries, err := readQueryTexts(*queriesPath)
	if err != nil {
		return err
	}
	var docs [][]byte
	if *corpusPath != "" && *writers > 0 {
		if docs, err = readLines(*corpusPath, 100_000); err != nil {
			return err
		}
	}
	c := &loadClient{base: strings.TrimRight(*url, "/"), coll: *coll, key: *key, http: &http.Client{
		Timeout:   time.Minute,
		Transport: &http.Transport{MaxIdleConnsPerHost: *searchers + *writers + 1},
	}}
	retrievers, err := c.retrievers()
	if err != nil {
		return err
	}
	modes, err := loadModes(*modesFlag, retrievers)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	stats := make([]*modeStats, len(modes))
	for i, m := range modes {
		stats[i] = &modeStats{name: m.name}
	}
	writes := &modeStats{name: "upsert"}
	var wg sync.WaitGroup
	start := time.Now()
	for s := range *searchers {
		wg.Go(func() {
			for j := 0; ctx.Err() == nil; j++ {
				m := (j + s) % len(modes)
				q := queries[(j*(*searchers)+s)%len(queries)]
				body, _ := json.Marshal(map[string]any{"text": q, "retrievers": modes[m].retrievers, "k": *k, "ids_only": true})
				stats[m].record(c.post(ctx, "/search", "application/json", body))
			}
		})
	}
	var next atomic.Int64
	for range min(*writers, len(docs)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				var buf bytes.Buffer
				for range *writeBatch {
					buf.Write(docs[int(next.Add(1)-1)%len(docs)])
					buf.WriteByte('\n')
				}
				writes.record(c.post(ctx, "/documents", "application/x-ndjson", buf.Bytes()))
			}
		})
	}
	if !*quiet {
		go func() {
			tick := time.NewTicker(10 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					el := time.Since(start)
					var n, errs int
					for _, s := range stats {
						c, e := s.counts()
						n, errs = n+c, errs+e
					}
					wn, we := writes.counts()
					fmt.Fprintf(stderr, "%s / %s: %d searches (%.0f/s), %d upserts, %d errors, ETA %s\n",
						el.Round(time.Second), *duration, n, float64(n)/el.Seconds(), wn, errs+we, (*duration - el).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)

	fmt.Fprintf(stdout, "%d searchers, %d writers (%d documents per upsert), %s, collection %s at %s\n\n",
		*searchers, min(*writers, len(docs)), *writeBatch, el.Round(time.Second), *coll, c.base)
	fmt.Fprintln(stdout, "| mode | requests | QPS | p50 ms | p95 ms | p99 ms | errors |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|")
	total := 0
	for _, s := range append(stats, writes) {
		if s == writes && len(docs) == 0 {
			continue
		}
		fmt.Fprintln(stdout, s.row(el))
		total += len(s.errs)
	}
	for _, s := range append(stats, writes) {
		for i, e := range s.errs {
			if i == 3 {
				fmt.Fprintf(stdout, "%s: %d more errors\n", s.name, len(s.errs)-3)
				break
			}
			fmt.Fprintf(stdout, "%s error: %v\n", s.name, e)
		}
	}
	if total > 0 {
		return fmt.Errorf("bench serve: %d requests failed", total)
	}
	return nil
}

// loadMode is one search mode: its name and the retrievers it asks for.
type loadMode struct {
	name       string
	retrievers []string
}

// loadModes resolves the --modes names against the collection's
// retrievers, dropping the modes it cannot serve.
func loadModes(flag string, have []string) ([]loadMode, error) {
	var out []loadMode
	for name := range strings.SplitSeq(flag, ",") {
		switch name = strings.TrimSpace(name); name {
		case "bm25", "dense", "late":
			if slices.ContainsFunc(have, func(r string) bool { return r == name || strings.HasPrefix(r, name+":") }) {
				out = append(out, loadMode{name, []string{name}})
			}
		case "hybrid":
			if len(have) > 1 {
				out = append(out, loadMode{name, have})
			}
		default:
			return nil, fmt.Errorf("--modes: unknown mode %q (want bm25, dense, late or hybrid)", name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--modes %q: the collection's retrievers %v serve none of them", flag, have)
	}
	return out, nil
}

// loadClient sends the benchmark's requests to one collection.
type loadClient struct {
	base, coll, key string
	http            *http.Client
}

func (c *loadClient) do(req *http.Request) ([]byte, error) {
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the response: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// retrievers asks the server which retrievers the collection has.
func (c *loadClient) retrievers() ([]string, error) {
	req, err := http.NewRequest(http.MethodGet, c.base+"/v1/collections/"+c.coll, nil)
	if err != nil {
		return nil, err
	}
	body, err := c.do(req)
	if err != nil {
		return nil, err
	}
	var info struct {
		Retrievers []string `json:"retrievers"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("collection %s: decoding its description: %w", c.coll, err)
	}
	return info.Retrievers, nil
}

// post sends one request to the collection and returns its latency. A
// request the benchmark's own deadline cut short is not an error: it
// returns a negative latency, which record ignores.
func (c *loadClient) post(ctx context.Context, path, contentType string, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/collections/"+c.coll+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", contentType)
	t := time.Now()
	resp, err := c.do(req)
	if ctx.Err() != nil {
		return -1, nil
	}
	if err == nil && path == "/documents" {
		var r struct {
			Failed int `json:"failed"`
		}
		if err = json.Unmarshal(resp, &r); err == nil && r.Failed > 0 {
			err = fmt.Errorf("upsert: %d documents failed: %s", r.Failed, resp)
		}
	}
	return time.Since(t), err
}

// modeStats gathers one mode's latencies and errors.
type modeStats struct {
	name string
	mu   sync.Mutex
	lat  []time.Duration
	errs []error
}

func (s *modeStats) record(d time.Duration, err error) {
	if d < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs = append(s.errs, err)
		return
	}
	s.lat = append(s.lat, d)
}

func (s *modeStats) counts() (ok, errs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lat), len(s.errs)
}

// row formats the mode's line of the results table.
func (s *modeStats) row(el time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lat := slices.Clone(s.lat)
	slices.Sort(lat)
	q := func(p float64) string {
		if len(lat) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())/1000)
	}
	return fmt.Sprintf("| %s | %d | %.1f | %s | %s | %s | %d |", s.name, len(lat)+len(s.errs),
		float64(len(lat))/el.Seconds(), q(0.50), q(0.95), q(0.99), len(s.errs))
}

// readQueryTexts reads the "text" of each line of a BEIR queries file.
func readQueryTexts(path string) ([]string, error) {
	lines, err := readLines(path, 0)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(lines))
	for i, l := range lines {
		var q struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(l, &q); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, i+1, err)
		}
		if q.Text == "" {
			return nil, fmt.Errorf("%s: line %d: no \"text\"", path, i+1)
		}
		out = append(out, q.Text)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no queries", path)
	}
	return out, nil
}

// readLines returns the non-blank lines of a file, at most limit of them
// (0: all).
func readLines(path string, limit int) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() && (limit == 0 || len(out) < limit) {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
			out = append(out, bytes.Clone(l))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, errors.New(path + ": empty")
	}
	return out, nil
}
