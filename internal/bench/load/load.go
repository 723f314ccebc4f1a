package load

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

	"github.com/tandemsearch/tandem/internal/bench"
)

// Config is one run of the benchmark. Collection, QueriesFile, Duration,
// Searchers and WriteBatch are required.
type Config struct {
	URL         string        // base URL of the server
	Collection  string        // collection to search and write
	QueriesFile string        // BEIR queries.jsonl: the query texts, used in turn
	CorpusFile  string        // JSONL documents the writers upsert in turn (BEIR corpus lines); empty: no writers
	Duration    time.Duration // how long to load the server
	Searchers   int           // concurrent searchers
	Writers     int           // concurrent writers (with CorpusFile)
	WriteBatch  int           // documents per upsert request
	// Modes is the comma-separated list of search modes each searcher
	// cycles through: bm25, dense, late, hybrid (every retriever fused);
	// those the collection lacks are dropped. Its errors name the flag
	// that sets it, --modes.
	Modes string
	K     int    // hits per search
	Key   string // API key sent as a bearer token; empty: none

	// Log receives the progress lines (nil: nothing); Quiet leaves them out.
	Log   io.Writer
	Quiet bool
}

// Report is what a run measured.
type Report struct {
	Searchers, Writers, WriteBatch int // Writers: those that ran, no more than the documents
	Elapsed                        time.Duration
	Collection, URL                string
	Modes                          []Mode // the search modes, then "upsert" when writers ran
}

// Mode is one mode's requests: the latencies of those that succeeded, and
// the errors of the others.
type Mode struct {
	Name      string
	Latencies []time.Duration
	Errors    []error
}

// Failed is the number of requests that failed.
func (r *Report) Failed() int {
	n := 0
	for _, m := range r.Modes {
		n += len(m.Errors)
	}
	return n
}

// Run loads the server for c.Duration (or until ctx ends) and reports
// every request. A request that failed is in the report, not an error of
// Run's: Run fails only when the load cannot start (bad files or modes,
// a collection the server does not have).
func Run(ctx context.Context, c Config) (*Report, error) {
	if c.Collection == "" || c.QueriesFile == "" || c.Duration <= 0 || c.Searchers <= 0 || c.Writers < 0 || c.WriteBatch <= 0 {
		return nil, errors.New("bench serve: Collection, QueriesFile, Duration, Searchers and WriteBatch are required, and Writers may not be negative")
	}
	log := c.Log
	if log == nil {
		log = io.Discard
	}
	queries, err := readQueryTexts(c.QueriesFile)
	if err != nil {
		return nil, err
	}
	var docs [][]byte
	if c.CorpusFile != "" && c.Writers > 0 {
		if docs, err = readLines(c.CorpusFile, 100_000); err != nil {
			return nil, err
		}
	}
	cl := &loadClient{base: strings.TrimRight(c.URL, "/"), coll: c.Collection, key: c.Key, http: &http.Client{
		Timeout:   time.Minute,
		Transport: &http.Transport{MaxIdleConnsPerHost: c.Searchers + c.Writers + 1},
	}}
	retrievers, err := cl.retrievers()
	if err != nil {
		return nil, err
	}
	modes, err := loadModes(c.Modes, retrievers)
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	stats := make([]*modeStats, len(modes))
	for i, m := range modes {
		stats[i] = &modeStats{name: m.name}
	}
	writes := &modeStats{name: "upsert"}
	var wg sync.WaitGroup
	start := time.Now()
	for s := range c.Searchers {
		wg.Go(func() {
			for j := 0; ctx.Err() == nil; j++ {
				m := (j + s) % len(modes)
				q := queries[(j*c.Searchers+s)%len(queries)]
				body, _ := json.Marshal(map[string]any{"text": q, "retrievers": modes[m].retrievers, "k": c.K, "ids_only": true})
				stats[m].record(cl.post(ctx, "/search", "application/json", body))
			}
		})
	}
	var next atomic.Int64
	for range min(c.Writers, len(docs)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				var buf bytes.Buffer
				for range c.WriteBatch {
					buf.Write(docs[int(next.Add(1)-1)%len(docs)])
					buf.WriteByte('\n')
				}
				writes.record(cl.post(ctx, "/documents", "application/x-ndjson", buf.Bytes()))
			}
		})
	}
	if !c.Quiet {
		wg.Go(func() {
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
						ok, e := s.counts()
						n, errs = n+ok, errs+e
					}
					wn, we := writes.counts()
					fmt.Fprintf(log, "%s / %s: %d searches (%.0f/s), %d upserts, %d errors, ETA %s\n",
						el.Round(time.Second), c.Duration, n, float64(n)/el.Seconds(), wn, errs+we, (c.Duration - el).Round(time.Second))
				}
			}
		})
	}
	wg.Wait()
	r := &Report{Searchers: c.Searchers, Writers: min(c.Writers, len(docs)), WriteBatch: c.WriteBatch, Elapsed: time.Since(start),
		Collection: c.Collection, URL: cl.base}
	if len(docs) > 0 {
		stats = append(stats, writes)
	}
	for _, s := range stats {
		r.Modes = append(r.Modes, Mode{Name: s.name, Latencies: s.lat, Errors: s.errs})
	}
	return r, nil
}

// WriteMarkdown writes the report: a line that says what ran, a Markdown
// table with one row a mode, then up to three errors of each mode.
func (r *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "%d searchers, %d writers (%d documents per upsert), %s, collection %s at %s\n\n",
		r.Searchers, r.Writers, r.WriteBatch, r.Elapsed.Round(time.Second), r.Collection, r.URL)
	fmt.Fprintln(w, "| mode | requests | QPS | p50 ms | p95 ms | p99 ms | errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, m := range r.Modes {
		fmt.Fprintln(w, m.row(r.Elapsed))
	}
	for _, m := range r.Modes {
		for i, e := range m.Errors {
			if i == 3 {
				fmt.Fprintf(w, "%s: %d more errors\n", m.Name, len(m.Errors)-3)
				break
			}
			fmt.Fprintf(w, "%s error: %v\n", m.Name, e)
		}
	}
}

// row formats the mode's line of the results table.
func (m Mode) row(el time.Duration) string {
	q := func(p float64) string {
		if len(m.Latencies) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", bench.Ms(bench.Percentile(m.Latencies, p)))
	}
	return fmt.Sprintf("| %s | %d | %.1f | %s | %s | %s | %d |", m.Name, len(m.Latencies)+len(m.Errors),
		float64(len(m.Latencies))/el.Seconds(), q(0.50), q(0.95), q(0.99), len(m.Errors))
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
