package latecollect

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/internal/faiss"
)

// sweepIndex builds a token index with desc over the fixture's documents,
// sharing their in-memory matrices (Close leaves them to the fixture). It
// returns the index and the time to train and fill it (loading the blobs
// from the store, which Open also does, is not included).
func (f *sciFact) sweepIndex(tb testing.TB, desc string) (*Index, time.Duration) {
	tb.Helper()
	y := &Index{source: f.x.source}
	y.opts.Description = desc
	fam := &faissFamily{source: y.source}
	f.x.mu.RLock()
	from := faissOf(f.x)
	fam.docs, fam.tokens, fam.bytes, y.mu.applied = from.docs, from.tokens, from.bytes, f.x.mu.applied
	f.x.mu.RUnlock()
	y.mu.fam = fam
	start := time.Now()
	if err := fam.rebuildLocked(desc); err != nil {
		tb.Fatalf("build %s: %v", desc, err)
	}
	if fam.desc != desc {
		tb.Fatalf("build %s: got %s (too few tokens to train?)", desc, fam.desc)
	}
	return y, time.Since(start)
}

// sweepList reads a list from the environment variable name (items
// separated by sep), or returns def.
func sweepList(name, sep string, def []string) []string {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []string
	for _, s := range strings.Split(v, sep) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// TestSciFactIndexSweep measures token indexes (FAISS descriptions, with
// several nprobe) on SciFact: recall@10 of candidate mode against
// exhaustive scoring, query latency p50/p95 and the FAISS share of it,
// training and filling time, and FAISS bytes per token key. Latencies of
// all configurations are measured interleaved (query by query, in rotating
// order), so that a change in machine load affects them alike; they are
// logged, never asserted. The test asserts that the automatic description
// with the default knobs finds at least 95% of the exhaustive top 10.
//
// It is opt-in (TANDEM_LATE_INDEX_SWEEP=1) and takes many minutes.
// TANDEM_LATE_SWEEP_DESCS (separated by ';') and TANDEM_LATE_SWEEP_NPROBE
// (separated by ',') replace the configurations;
// TANDEM_LATE_SWEEP_KERNELS=asm,portable also runs each with the portable
// Go rescoring kernels instead of the assembly ones (same results up to
// rounding, for timing). The queries are those of the recall test
// (TANDEM_LATE_QUERY_STEP, TANDEM_LATE_ALL_QUERIES).
//
//	TANDEM_LATE_INDEX_SWEEP=1 go test -run IndexSweep -v -timeout 3h ./latecollect/
func TestSciFactIndexSweep(t *testing.T) {
	if os.Getenv("TANDEM_LATE_INDEX_SWEEP") == "" {
		t.Skip("skipping index sweep; set TANDEM_LATE_INDEX_SWEEP=1")
	}
	f := loadSciFact(t)
	ctx := context.Background()
	auto := faissOf(f.x).desc
	descs := sweepList("TANDEM_LATE_SWEEP_DESCS", ";", []string{
		"IVF512,SQ8", "IVF2048,SQ8", "IVF4096,SQ8",
		"IVF512,Flat", "IVF2048,Flat",
		"IVF512,PQ48", "IVF2048,PQ48", "IVF2048,PQ96",
	})
	var nprobes []int
	for _, s := range sweepList("TANDEM_LATE_SWEEP_NPROBE", ",", []string{"4", "8", "16", "32"}) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("TANDEM_LATE_SWEEP_NPROBE: %q", s)
		}
		nprobes = append(nprobes, n)
	}
	kernels := sweepList("TANDEM_LATE_SWEEP_KERNELS", ",", []string{"asm"})
	for _, k := range kernels {
		if k != "asm" && k != "portable" {
			t.Fatalf("TANDEM_LATE_SWEEP_KERNELS: %q (want asm or portable)", k)
		}
	}
	asm := [2]bool{useAVX2, useF16C}
	defer func() { useAVX2, useF16C = asm[0], asm[1] }()
	qs := f.recallQueries()
	for _, i := range qs {
		f.exhaustiveTop10(t, i)
	}

	type config struct {
		x      *Index
		desc   string
		nprobe int
		kernel string
		total  []time.Duration // whole Search
		fx     []time.Duration // the FAISS call alone
		hits   map[int][]Hit
	}
	var cfgs []*config
	for _, d := range descs {
		x, build := f.sweepIndex(t, d)
		defer x.Close()
		s, _ := x.Stats()
		t.Logf("%-14s built (train + add %d keys) in %v, FAISS %.1f bytes/key", d, s.TokenKeys, build.Round(100*time.Millisecond), float64(s.IndexBytes)/float64(s.TokenKeys))
		for _, np := range nprobes {
			for _, k := range kernels {
				cfgs = append(cfgs, &config{x: x, desc: d, nprobe: np, kernel: k, hits: map[int][]Hit{}})
			}
		}
	}
	for n, i := range qs {
		for c := range cfgs {
			cfg := cfgs[(c+n)%len(cfgs)]
			so := SearchOptions{K: 10, NProbe: cfg.nprobe}
			if cfg.kernel == "asm" {
				useAVX2, useF16C = asm[0], asm[1]
			} else {
				useAVX2, useF16C = false, false
			}
			start := time.Now()
			hits, err := cfg.x.Search(ctx, f.qtok[i], &so)
			if err != nil {
				t.Fatal(err)
			}
			cfg.total = append(cfg.total, time.Since(start))
			cfg.hits[i] = hits
			cfg.x.mu.RLock()
			start = time.Now()
			_, err = faissOf(cfg.x).fx.Search(ctx, f.qtok[i], cfg.x.opts.KPrime, faiss.SearchOptions{NProbe: cfg.nprobe})
			cfg.fx = append(cfg.fx, time.Since(start))
			cfg.x.mu.RUnlock()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d queries, k'=%d, cap %d; latency in ms", len(qs), f.x.opts.KPrime, f.x.opts.CandidateCap)
	t.Logf("%-14s %6s %8s %8s %8s %8s %8s %8s", "description", "nprobe", "kernel", "recall", "p50", "p95", "faissp50", "restp50")
	for _, c := range cfgs {
		r := f.recallAt10(t, qs, func(i int) []Hit { return c.hits[i] })
		rest := make([]time.Duration, len(c.total))
		for k := range rest {
			rest[k] = c.total[k] - c.fx[k]
		}
		t.Logf("%-14s %6d %8s %8.4f %8.1f %8.1f %8.1f %8.1f", c.desc, c.nprobe, c.kernel, r,
			ms(percentile(c.total, 50)), ms(percentile(c.total, 95)), ms(percentile(c.fx, 50)), ms(percentile(rest, 50)))
	}
	// The assertion is on the index Open built with the defaults.
	useAVX2, useF16C = asm[0], asm[1]
	if r := f.recallAt10(t, qs, f.searcher(t, SearchOptions{})); r < 0.95 {
		t.Errorf("defaults (%s, nprobe %d): recall@10 against exhaustive %.4f < 0.95", auto, f.x.opts.NProbe, r)
	} else {
		t.Logf("defaults (%s, nprobe %d): recall@10 against exhaustive %.4f", auto, f.x.opts.NProbe, r)
	}
	if out, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average at the end: %s", strings.TrimSpace(string(out)))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// TestSciFactResidualSweep logs, for the residual-code index, recall@10
// against exhaustive scoring and the search time per query as each knob of
// the staged search moves away from its default: centroids probed per
// query token, documents scored through centroids, through residual codes,
// and exactly. The measurements behind the defaults; opt-in
// (TANDEM_LATE_RESIDUAL_SWEEP=1).
func TestSciFactResidualSweep(t *testing.T) {
	if os.Getenv("TANDEM_LATE_RESIDUAL_SWEEP") == "" {
		t.Skip("skipping residual-code sweep; set TANDEM_LATE_RESIDUAL_SWEEP=1")
	}
	f := loadSciFact(t)
	if _, ok := f.x.mu.fam.(*residualFamily); !ok {
		t.Skip("the fixture's index is not the residual-code index")
	}
	s, _ := f.x.Stats()
	t.Logf("index: %s, %d tokens, %.1f bytes/token in memory, built in %v", s.Description, s.Tokens, s.BytesPerToken, f.build.Round(time.Millisecond))
	qs := f.recallQueries()
	ex := func(i int) []Hit { return f.exhaustiveTop10(t, i) }
	t.Logf("exhaustive nDCG@10 %.4f", f.ndcg10(t, qs, ex))
	run := func(name string, so SearchOptions) {
		start := time.Now()
		hits := f.searcher(t, so)
		for _, i := range qs {
			hits(i)
		}
		ms := float64(time.Since(start).Microseconds()) / 1000 / float64(len(qs))
		t.Logf("%-28s recall@10 %.4f  nDCG@10 %.4f  %.1f ms/query", name, f.recallAt10(t, qs, hits), f.ndcg10(t, qs, hits), ms)
	}
	run("defaults", SearchOptions{})
	// TANDEM_SWEEP_GRID lists whole settings,
	// "nprobe/candidates/exact" separated by ',', and
	// replaces the one-knob sweeps.
	if grid := sweepList("TANDEM_SWEEP_GRID", ",", nil); len(grid) > 0 {
		for _, g := range grid {
			var so SearchOptions
			if _, err := fmt.Sscanf(g, "%d/%d/%d", &so.NProbe, &so.CandidateCap, &so.ExactCap); err != nil {
				t.Fatalf("TANDEM_SWEEP_GRID: %q: %v", g, err)
			}
			run(g, so)
		}
		return
	}
	for _, v := range sweepInts("TANDEM_SWEEP_NPROBE", []int{1, 2, 8, 16}) {
		run(fmt.Sprintf("nprobe=%d", v), SearchOptions{NProbe: v})
	}
	for _, v := range sweepInts("TANDEM_SWEEP_CANDIDATES", []int{256, 512, 2048, 4096}) {
		run(fmt.Sprintf("centroid candidates=%d", v), SearchOptions{CandidateCap: v})
	}
	for _, v := range sweepInts("TANDEM_SWEEP_EXACT", []int{-1, 8, 32, 64}) {
		run(fmt.Sprintf("exact=%d", v), SearchOptions{ExactCap: v})
	}
}

// sweepInts reads a comma-separated list of integers from the environment
// variable name, or returns def.
func sweepInts(name string, def []int) []int {
	var out []int
	for _, s := range sweepList(name, ",", nil) {
		if v, err := strconv.Atoi(s); err == nil {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return def
	}
	return out
}
