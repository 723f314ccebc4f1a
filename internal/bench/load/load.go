package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
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
	// Zipf, when set, draws each search's query from a Zipfian
	// distribution over the queries with this exponent (above 1; 1.1 is
	// typical of query logs), so that a few queries come often and most
	// rarely, instead of using them in turn; the Report then shows what
	// the server's cache of query encodings made of it. Its errors name
	// the flag that sets it, --zipf.
	Zipf float64
	// Seed seeds the Zipfian draws and the order of popularity; 0 means 1.
	Seed uint64
	// MinPerMode, when positive, ends the load as soon as every mode, and
	// the upserts when writers run, has had that many requests answered
	// (failed ones included); Duration still bounds it. It is for a run
	// that must see each mode at work rather than load for a while: a
	// test's, which then does not depend on the machine's speed.
	MinPerMode int

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
	Zipf                           float64
	// Queries is what the server's /metrics said of its query encodings
	// over the run; nil when it did not say (an older server, say).
	Queries *QueryEncodings
}

// QueryEncodings are the changes of the server's query-encoding counters
// over a run, summed over its models (the tandem_query_cache_* and
// tandem_query_encoder_* series of /metrics).
type QueryEncodings struct {
	CacheHits, CacheMisses int64
	// Runs is the model runs that encoded queries and Queries the queries
	// they encoded.
	Runs, Queries int64
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

// Run loads the server for c.Duration (or until ctx ends, or each mode
// has c.MinPerMode answers) and reports
// every request. A request that failed is in the report, not an error of
// Run's: Run fails only when the load cannot start (bad files or modes,
// a collection the server does not have).
func Run(ctx context.Context, c Config) (*Report, error) {
	if c.Collection == "" || c.QueriesFile == "" || c.Duration <= 0 || c.Searchers <= 0 || c.Writers < 0 || c.WriteBatch <= 0 || c.MinPerMode < 0 {
		return nil, errors.New("bench serve: Collection, QueriesFile, Duration, Searchers and WriteBatch are required, and Writers and MinPerMode may not be negative")
	}
	if c.Zipf != 0 && !(c.Zipf > 1) {
		return nil, fmt.Errorf("--zipf %v: the exponent must be above 1 (0 uses the queries in turn)", c.Zipf)
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

	pick := c.picker(len(queries))
	before, beforeErr := cl.queryEncodings()

	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	stats := make([]*modeStats, len(modes))
	for i, m := range modes {
		stats[i] = &modeStats{name: m.name}
	}
	writes := &modeStats{name: "upsert"}
	// enough ends the load once each mode has Config.MinPerMode answers.
	counted := stats
	if min(c.Writers, len(docs)) > 0 {
		counted = append(slices.Clip(stats), writes)
	}
	enough := func() {
		if c.MinPerMode <= 0 {
			return
		}
		for _, s := range counted {
			if ok, errs := s.counts(); ok+errs < c.MinPerMode {
				return
			}
		}
		cancel()
	}
	var wg sync.WaitGroup
	start := time.Now()
	for s := range c.Searchers {
		wg.Go(func() {
			next := pick(s)
			for j := 0; ctx.Err() == nil; j++ {
				m := (j + s) % len(modes)
				q := queries[next(j)]
				body, _ := json.Marshal(map[string]any{"text": q, "retrievers": modes[m].retrievers, "k": c.K, "ids_only": true})
				stats[m].record(cl.post(ctx, "/search", "application/json", body))
				enough()
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
				writes.record(cl.post(ctx, "/documents?wait=true", "application/x-ndjson", buf.Bytes())) // timed as synchronous upserts
				enough()
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
		Collection: c.Collection, URL: cl.base, Zipf: c.Zipf}
	if after, err := cl.queryEncodings(); err == nil && beforeErr == nil {
		r.Queries = &QueryEncodings{CacheHits: after.CacheHits - before.CacheHits, CacheMisses: after.CacheMisses - before.CacheMisses,
			Runs: after.Runs - before.Runs, Queries: after.Queries - before.Queries}
	}
	if len(docs) > 0 {
		stats = append(stats, writes)
	}
	for _, s := range stats {
		r.Modes = append(r.Modes, Mode{Name: s.name, Latencies: s.lat, Errors: s.errs})
	}
	return r, nil
}

// WriteMarkdown writes the report: a line that says what ran, a Markdown
// table with one row a mode, the searches per second of all modes, the
// server's query encodings (cache hit rate, queries per model run), then
// up to three errors of each mode.
func (r *Report) WriteMarkdown(w io.Writer) {
	order := "in turn"
	if r.Zipf > 0 {
		order = fmt.Sprintf("Zipfian draw, exponent %g", r.Zipf)
	}
	fmt.Fprintf(w, "%d searchers (queries %s), %d writers (%d documents per upsert), %s, collection %s at %s\n\n",
		r.Searchers, order, r.Writers, r.WriteBatch, r.Elapsed.Round(time.Second), r.Collection, r.URL)
	fmt.Fprintln(w, "| mode | requests | QPS | p50 ms | p95 ms | p99 ms | errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	searches := 0
	for _, m := range r.Modes {
		fmt.Fprintln(w, m.row(r.Elapsed))
		if m.Name != "upsert" {
			searches += len(m.Latencies)
		}
	}
	fmt.Fprintf(w, "\nsearches: %d, %.1f/s\n", searches, float64(searches)/r.Elapsed.Seconds())
	if q := r.Queries; q == nil {
		fmt.Fprintln(w, "query encodings: none on the server's /metrics (no model, or a server older than its query cache)")
	} else {
		rate, batch := 0.0, 0.0
		if n := q.CacheHits + q.CacheMisses; n > 0 {
			rate = 100 * float64(q.CacheHits) / float64(n)
		}
		if q.Runs > 0 {
			batch = float64(q.Queries) / float64(q.Runs)
		}
		fmt.Fprintf(w, "query encodings: cache hit rate %.1f%% (%d hits, %d misses); %d queries encoded in %d model runs, %.2f a run\n",
			rate, q.CacheHits, q.CacheMisses, q.Queries, q.Runs, batch)
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

// picker returns, for searcher s, the index of the query of its j-th
// search: in turn, the searchers interleaved, or a Zipfian draw over the
// queries in an order of popularity shuffled once.
func (c *Config) picker(n int) func(s int) func(j int) int {
	if c.Zipf == 0 || n < 2 {
		return func(s int) func(int) int {
			return func(j int) int { return (j*c.Searchers + s) % n }
		}
	}
	seed := c.Seed
	if seed == 0 {
		seed = 1
	}
	popular := rand.New(rand.NewPCG(seed, 0)).Perm(n)
	return func(s int) func(int) int {
		z := rand.NewZipf(rand.New(rand.NewPCG(seed, uint64(s)+1)), c.Zipf, 1, uint64(n-1))
		return func(int) int { return popular[z.Uint64()] }
	}
}

// queryEncodings reads the server's query-encoding counters from
// /metrics, summed over models. A server without them is an error.
func (c *loadClient) queryEncodings() (QueryEncodings, error) {
	req, err := http.NewRequest(http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return QueryEncodings{}, err
	}
	body, err := c.do(req)
	if err != nil {
		return QueryEncodings{}, err
	}
	var q QueryEncodings
	found := false
	for line := range strings.Lines(string(body)) {
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "tandem_query_cache_hits_total":
			dst = &q.CacheHits
		case "tandem_query_cache_misses_total":
			dst = &q.CacheMisses
		case "tandem_query_encoder_runs_total":
			dst = &q.Runs
		case "tandem_query_encoder_queries_total":
			dst = &q.Queries
		default:
			continue
		}
		_, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return QueryEncodings{}, fmt.Errorf("/metrics: %q: %w", strings.TrimSpace(line), err)
		}
		*dst += int64(v)
		found = true
	}
	if !found {
		return QueryEncodings{}, errors.New("/metrics has no tandem_query_cache series")
	}
	return q, nil
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
	if err == nil && strings.HasPrefix(path, "/documents") {
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
