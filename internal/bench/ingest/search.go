package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/bench"
	"github.com/tandemsearch/tandem/internal/synth"
)

// FilterCategory is the category the 1% filter keeps (one of the corpus's
// 100).
const FilterCategory = 7

// searchConfig is one measured search configuration.
type searchConfig struct {
	name      string
	retriever string // "bm25" or "dense"
	filtered  bool   // keep only category FilterCategory
}

// configs are the search configurations every searching phase measures,
// in the order the tables print them.
var configs = []searchConfig{
	{"bm25", "bm25", false},
	{"bm25, 1% filter", "bm25", true},
	{"dense", "dense", false},
	{"dense, 1% filter", "dense", true},
}

// warmUp is the number of queries each phase runs unmeasured first.
const warmUp = 10

// queryNumber is the generator's number of the qi-th measured query: the
// warm-up's queries come first.
func queryNumber(qi int) int { return qi + warmUp }

// search runs the measured searches on e: the configurations alternate
// query by query, so that the machine's load falls on all alike, after
// warmUp queries unmeasured. It returns each configuration's figures
// (Recall -1 for now) and, for each, the ids of the top 10 of the first
// RecallQueries queries.
func (r *run) search(ctx context.Context, e *engine.Engine, profile string) ([]Search, [][][]string, error) {
	filter := []byte(fmt.Sprintf(`{"term":{"cat":%q}}`, synth.Category(FilterCategory)))
	lat := make([][]time.Duration, len(configs))
	hits := make([]int, len(configs))
	found := make([][][]string, len(configs))
	stopProfile, err := bench.StartCPUProfile(profile)
	if err != nil {
		return nil, nil, err
	}
	defer stopProfile()
	for qi := -warmUp; qi < r.c.Queries; qi++ {
		text, vec := r.gen.Query(queryNumber(qi))
		for ci, cf := range configs {
			req := engine.Request{Text: text, K: 10, Retrievers: []string{cf.retriever}}
			if cf.filtered {
				req.Filter = filter
			}
			if cf.retriever == "dense" {
				req.Vectors = map[string]tandem.Vectors{r.rep.Corpus.Model: {Dense: vec}}
			}
			start := time.Now()
			res, err := e.Search(ctx, req)
			took := time.Since(start)
			if err != nil {
				return nil, nil, fmt.Errorf("search %s, query %d: %w", cf.name, queryNumber(qi), err)
			}
			if qi < 0 {
				continue
			}
			lat[ci] = append(lat[ci], took)
			hits[ci] += len(res.Hits)
			if qi < r.c.RecallQueries {
				ids := make([]string, len(res.Hits))
				for i, h := range res.Hits {
					ids[i] = h.ID
				}
				found[ci] = append(found[ci], ids)
			}
		}
	}
	stopProfile()
	out := make([]Search, len(configs))
	for ci, cf := range configs {
		out[ci] = Search{Searches: bench.Measure(cf.name, lat[ci], hits[ci]), Recall: -1}
	}
	return out, found, nil
}
