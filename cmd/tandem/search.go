package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tandemsearch/tandem/engine"
)

func runSearch(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("search", stderr)
	dir := fs.String("dir", "", "collection directory")
	mode := fs.String("mode", "hybrid", "bm25, dense, late, hybrid (every retriever of the collection), or retrievers joined by '+'")
	fusionFlag := fs.String("fusion", "", "fusion method when several retrievers run: rrf, wrrf, minmax, zscore, max, dbsf, combsum, combmnz (default "+engine.DefaultFusion+")")
	filterJSON := fs.String("filter", "", `JSON filter, e.g. {"term":{"lang":"en"}}`)
	k := fs.Int("k", 10, "number of hits")
	offset := fs.Int("offset", 0, "hits to skip")
	depth := fs.Int("depth", 0, fmt.Sprintf("hits each retriever contributes to fusion (default %d)", engine.DefaultDepth))
	weightsFlag := fs.String("weights", "", "fusion weights per retriever, e.g. bm25=1,dense=2,late=1 (wrrf, minmax, zscore, max, dbsf)")
	late := fs.String("late-scoring", "", "late-interaction score: avg-max (default) or sum-max")
	asJSON := fs.Bool("json", false, `print {"hits":[{"id","score","fields","sources":[{"retriever","rank","score","contribution"}]}],"retrievers","fusion"}`)
	fieldsFlag := fs.String("fields", "", "search these text fields with boosts, e.g. title=2,text=1 (default: all text fields as one)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "usage: tandem search --dir DIR [--mode bm25|dense|late|hybrid] [--fusion METHOD] [--filter JSON] [-k N] [--json] \"query\"")
		return errUsage
	}
	fields, err := parseBoosts(*fieldsFlag)
	if err != nil {
		return err
	}
	weights, err := parseWeights(*weightsFlag)
	if err != nil {
		return err
	}
	e, err := engine.Open(*dir, nil)
	if err != nil {
		return err
	}
	defer e.Close()
	rets, err := e.Mode(*mode)
	if err != nil {
		return err
	}
	req := engine.Request{
		Text:        strings.Join(fs.Args(), " "),
		Filter:      []byte(*filterJSON),
		K:           *k,
		Offset:      *offset,
		Retrievers:  rets,
		Fusion:      *fusionFlag,
		Weight:      weights,
		LateScoring: *late,
		Fields:      fields,
	}
	if *depth != 0 {
		req.Depth = map[string]int{}
		for _, r := range rets {
			req.Depth[r] = *depth
		}
	}
	res, err := e.Search(context.Background(), req)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(res)
	}
	if res.Fusion != "" {
		fmt.Fprintf(stdout, "%s fused with %s\n", strings.Join(res.Retrievers, " + "), res.Fusion)
	}
	width := 0
	for _, r := range res.Retrievers {
		width = max(width, len(r))
	}
	for i, h := range res.Hits {
		title, _ := h.Fields["title"].(string)
		if title == "" {
			title, _ = h.Fields["text"].(string)
		}
		if r := []rune(title); len(r) > 80 {
			title = string(r[:80]) + "..."
		}
		fmt.Fprintf(stdout, "%3d  %-12s %8.4f  %s\n", i+1+*offset, h.ID, h.Score, title)
		if len(h.Sources) > 1 {
			for _, s := range h.Sources {
				if s.Rank == 0 {
					fmt.Fprintf(stdout, "       %-*s      -\n", width, s.Retriever)
					continue
				}
				fmt.Fprintf(stdout, "       %-*s rank %3d  score %8.4f  contribution %.4f\n", width, s.Retriever, s.Rank, s.Score, s.Contribution)
			}
		}
	}
	return nil
}

// parseWeights parses "bm25=1,dense=2" into fusion weights.
func parseWeights(s string) (map[string]float64, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		v, err := strconv.ParseFloat(w, 64)
		if !ok || name == "" || err != nil || v < 0 {
			return nil, fmt.Errorf("--weights: want retriever=weight with a weight >= 0, got %q", part)
		}
		out[name] = v
	}
	return out, nil
}

// parseBoosts parses "title=2,text" into field boosts (no "=" means the
// schema's boost).
func parseBoosts(s string) (map[string]float64, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		name, boost, ok := strings.Cut(strings.TrimSpace(part), "=")
		if name == "" {
			return nil, fmt.Errorf("--fields: empty field name in %q", s)
		}
		out[name] = 0
		if ok {
			b, err := strconv.ParseFloat(boost, 64)
			if err != nil || b <= 0 {
				return nil, fmt.Errorf("--fields: field %q: boost %q is not a positive number", name, boost)
			}
			out[name] = b
		}
	}
	return out, nil
}
