package ingest

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tandemsearch/tandem/internal/bench"
)

// WriteMarkdown writes the report as three Markdown tables: the run's
// figures (sizes, times, rates), each phase's peak memory, and the
// searches of each phase that searched.
func (r *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	what := fmt.Sprintf("%d to %d words, %d-d vectors supplied, %d categories", r.Corpus.MinWords, r.Corpus.MaxWords, r.Corpus.Dim, r.Corpus.Categories)
	if r.TextModel != "" {
		what = fmt.Sprintf("text drawn from %s, queries its own; %d-d vectors supplied, %d categories", r.TextModel, r.Corpus.Dim, r.Corpus.Categories)
	}
	if r.SearchOnly {
		what = "an existing collection, searched only"
	}
	fmt.Fprintf(w, "| documents | %d (%s) |\n", r.Docs, what)
	for _, p := range r.Phases {
		fmt.Fprintf(w, "| %s | %s |\n", strings.TrimSuffix(p.Name, searchesSuffix), r.took(p))
		if p.Name == PhaseClose {
			fmt.Fprintf(w, "| disk after the close | %s |\n", r.disk())
		}
		if d := p.Dense; d.Model != "" {
			fmt.Fprintf(w, "| dense index, %s | %s over %d vectors, %s of native memory (%s bytes/vector) |\n", searchedLabel[p.Name],
				d.Description, d.Vectors, bench.Size(int64(d.MemoryBytes)), perItem(int64(d.MemoryBytes), d.Vectors))
		}
	}

	fmt.Fprintf(w, "\n| phase | peak RSS (bytes/document) | peak anonymous (bytes/document) | Go heap at the anonymous peak | peak mapped files (bytes/document) |\n|---|---|---|---|---|\n")
	for _, p := range r.Phases {
		m := p.Memory
		fmt.Fprintf(w, "| %s | %s (%s) | %s (%s) | %s | %s (%s) |\n", p.Name,
			bench.Size(m.RSS), perItem(m.RSS, r.Docs), bench.Size(m.Anon), perItem(m.Anon, r.Docs),
			bench.Size(m.GoHeap), bench.Size(m.File), perItem(m.File, r.Docs))
	}
	r.writeLoad(w)

	fmt.Fprintf(w, "\nPeak RSS is the kernel's (VmHWM, reset at each phase); anonymous and mapped-file memory are read every %s, so their peaks need not coincide; the Go heap is the heap in use (HeapInuse), which counts pages not touched yet and can exceed the anonymous memory.\n", SampleInterval)

	var searched []Phase
	for _, p := range r.Phases {
		if len(p.Searches) > 0 {
			searched = append(searched, p)
		}
	}
	if len(searched) == 0 {
		return
	}
	fmt.Fprintf(w, "\n| search, top 10 |")
	for _, p := range searched {
		fmt.Fprintf(w, " %s: p50 / p95 (hits a query) | recall@10 against exact |", searchedLabel[p.Name])
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|---|", len(searched)))
	for ci, cf := range configs {
		fmt.Fprintf(w, "| %s |", cf.name)
		for _, p := range searched {
			s := p.Searches[ci]
			recall := "–"
			if s.Recall >= 0 {
				recall = strconv.FormatFloat(s.Recall, 'f', 3, 64)
			}
			fmt.Fprintf(w, " %.1f / %.1f ms (%.1f) | %s |", bench.Ms(s.P50), bench.Ms(s.P95), s.Hits, recall)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "| dense p50: 1%% filter ÷ unfiltered |")
	for _, p := range searched {
		fmt.Fprintf(w, " %.2f | |", float64(p.Searches[3].P50)/float64(max(1, p.Searches[2].P50)))
	}
	fmt.Fprintf(w, "\n\nSearches: %d queries per configuration, alternating, after %d unmeasured; recall over the first %d (the exact top 10 by brute force took %s).\n",
		r.Queries, warmUp, r.RecallQueries, r.Exact.Round(time.Millisecond))
}

// searchesSuffix ends the name of a phase that searched.
const searchesSuffix = ", then the searches"

// searchedLabel names the searching phases in the search table's header.
var searchedLabel = map[string]string{
	PhaseOpen:       "from snapshot",
	PhaseOpenNoSnap: "without a snapshot",
	PhaseRebuild:    "rebuilt",
}

// took is a phase's time in the first table, with a rate where a user
// plans with one.
func (r *Report) took(p Phase) string {
	s := round(p.Took)
	switch p.Name {
	case PhaseIngest:
		s += fmt.Sprintf(", %s documents/s (%d atomic batches", group(int64(float64(r.Docs)/p.Took.Seconds())), r.Batches)
		if r.RetrainWait >= time.Millisecond {
			s += fmt.Sprintf("; of which %s waiting at the end for the retraining it left running", round(r.RetrainWait))
		}
		s += ")"
	case PhaseRebuild, PhaseOpenNoSnap:
		s += fmt.Sprintf(", %s documents/s", group(int64(float64(r.Docs)/p.Took.Seconds())))
	}
	return s
}

// disk is the disk row: in all, per document, and per entry of the
// collection directory.
func (r *Report) disk() string {
	var parts []string
	for _, p := range r.DiskParts {
		parts = append(parts, fmt.Sprintf("%s %s", p.Name, perItem(p.Bytes, r.Docs)))
	}
	return fmt.Sprintf("%s, %s bytes/document (%s)", bench.Size(r.Disk), perItem(r.Disk, r.Docs), strings.Join(parts, ", "))
}

// round rounds a duration for the tables: to the millisecond below a
// minute, to the second above.
func round(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// perItem is n/items, rounded, with its thousands grouped.
func perItem(n int64, items int) string {
	if items <= 0 {
		return "–"
	}
	return group((n + int64(items)/2) / int64(items))
}

// group writes n with its thousands separated by commas.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + group(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// writeLoad writes the search load beside the ingest: its searches outside
// any dense retraining, and during each.
func (r *Report) writeLoad(w io.Writer) {
	l := r.Load
	if l == nil {
		return
	}
	fmt.Fprintf(w, "\n| searches beside the ingest (%.0f/s: dense, dense 1%% filter, bm25 in turn) | from – to | searches | p50 | p99 | max | p99 ÷ p99 outside |\n|---|---|---|---|---|---|---|\n", l.Rate)
	o := l.Outside
	fmt.Fprintf(w, "| outside retrainings | | %d | %.1f ms | %.1f ms | %.1f ms | |\n", o.Searches, bench.Ms(o.P50), bench.Ms(o.P99), bench.Ms(o.Max))
	for i, d := range l.Retrainings {
		ratio := "–"
		if o.P99 > 0 && d.Searches > 0 {
			ratio = fmt.Sprintf("%.2f", float64(d.P99)/float64(o.P99))
		}
		fmt.Fprintf(w, "| dense retraining %d | %s – %s | %d | %.1f ms | %.1f ms | %.1f ms | %s |\n", i+1, round(d.Start), round(d.End), d.Searches, bench.Ms(d.P50), bench.Ms(d.P99), bench.Ms(d.Max), ratio)
	}
	fmt.Fprintf(w, "\nSearch errors beside the ingest: %d", l.Errors)
	if l.FirstError != "" {
		fmt.Fprintf(w, " (first: %s)", l.FirstError)
	}
	fmt.Fprintf(w, "; not started (%d already waiting): %d. Latency counts from the time a search was due (open loop); a search belongs to each retraining it overlapped.\n", maxInFlight, l.Dropped)
	if len(l.StallDumps) > 0 {
		fmt.Fprintf(w, "\nGoroutine dumps of searches waiting over %s: %s\n", stallAfter, strings.Join(l.StallDumps, ", "))
	}
}
