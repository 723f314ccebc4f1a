package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// readQueryVectors reads --query-vector and --query-tokens for model
// (default: the collection's first external model, else its first model).
func readQueryVectors(e *engine.Engine, vectorFile, tokensFile, model string) (map[string]tandem.Vectors, string, error) {
	if vectorFile == "" && tokensFile == "" {
		if model != "" {
			return nil, "", fmt.Errorf("--vector-model %s: give --query-vector or --query-tokens too", model)
		}
		return nil, "", nil
	}
	models := e.Models()
	if model == "" {
		for _, m := range models {
			if m.External {
				model = m.Name
				break
			}
		}
		if model == "" && len(models) > 0 {
			model = models[0].Name
		}
		if model == "" {
			return nil, "", fmt.Errorf("--query-vector, --query-tokens: the collection has no models")
		}
	}
	var v tandem.Vectors
	read := func(flagName, file string, dst any) error {
		var data []byte
		var err error
		if file == "-" {
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(file)
		}
		if err != nil {
			return fmt.Errorf("--%s: %w", flagName, err)
		}
		if err := json.Unmarshal(data, dst); err != nil {
			return fmt.Errorf("--%s %s: %w", flagName, file, err)
		}
		return nil
	}
	if vectorFile != "" {
		if err := read("query-vector", vectorFile, &v.Dense); err != nil {
			return nil, "", err
		}
		if v.Dense == nil {
			return nil, "", fmt.Errorf("--query-vector %s: want a JSON array of numbers", vectorFile)
		}
	}
	if tokensFile != "" {
		if err := read("query-tokens", tokensFile, &v.Tokens); err != nil {
			return nil, "", err
		}
		if v.Tokens == nil {
			return nil, "", fmt.Errorf("--query-tokens %s: want a JSON array of arrays of numbers", tokensFile)
		}
	}
	return map[string]tandem.Vectors{model: v}, model, nil
}

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
	queryVector := fs.String("query-vector", "", "file ('-' for stdin) holding the query's pooled vector as a JSON array, used instead of encoding the text (required for an external model's dense retriever)")
	queryTokens := fs.String("query-tokens", "", "file ('-' for stdin) holding the query's token matrix as a JSON array of arrays, used instead of encoding the text (required for an external model's late retriever)")
	highlight := fs.Bool("highlight", false, "show what the query matched in each hit: BM25's terms marked in fragments of the text fields, and each query word's best document token for late interaction (in --json, each hit's \"highlights\")")
	facets := repeated(fs, "facet", "count the documents under each value or range of a field: FIELD[:size=N,min_count=N,interval=X,date_interval=UNIT,ranges=A..B|B..C,disjunctive] (engine.ParseFacet); repeatable", engine.ParseFacet)
	facetScope := fs.String("facet-scope", "", `documents the facets count: "filter" (every document the filter matches; the default) or "results" (the first --facet-window fused hits)`)
	facetWindow := fs.Int("facet-window", 0, fmt.Sprintf(`fused hits the "results" scope counts (default max(%d, k+offset))`, engine.DefaultFacetWindow))
	vectorModel := fs.String("vector-model", "", "model of --query-vector and --query-tokens (default: the collection's external model, else its first model)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	modeSet := false
	fs.Visit(func(f *flag.Flag) { modeSet = modeSet || f.Name == "mode" })
	if *dir == "" {
		fmt.Fprintln(stderr, "usage: tandem search --dir DIR [--mode bm25|dense|late|hybrid] [--fusion METHOD] [--filter JSON] [-k N] [--json] \"query\"")
		return errUsage
	}
	fields, weights, err := parseFieldsWeights(*fieldsFlag, *weightsFlag)
	if err != nil {
		return err
	}
	e, err := engine.Open(*dir, &engine.Options{MustExist: true})
	if err != nil {
		return err
	}
	defer e.Close()
	text := strings.Join(fs.Args(), " ")
	vectors, vmodel, err := readQueryVectors(e, *queryVector, *queryTokens, *vectorModel)
	if err != nil {
		return err
	}
	if vectors != nil && strings.TrimSpace(text) == "" && !modeSet {
		*mode = engine.VectorsMode(vmodel, vectors[vmodel]) // no text: what the vectors serve
	}
	rets, err := e.Mode(*mode)
	if err != nil {
		return err
	}
	req := engine.Request{
		Vectors:     vectors,
		Text:        text,
		Filter:      []byte(*filterJSON),
		K:           *k,
		Offset:      *offset,
		Retrievers:  rets,
		Fusion:      *fusionFlag,
		Weight:      weights,
		LateScoring: *late,
		Fields:      fields,
		Facets:      *facets,
		FacetScope:  *facetScope,
		FacetWindow: *facetWindow,
	}
	if *highlight {
		req.Highlight = &engine.HighlightRequest{}
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
	return res.WriteText(stdout, *offset)
}

// parseFieldsWeights reads --fields and --weights (engine.ParseFields,
// engine.ParseWeights).
func parseFieldsWeights(fieldsFlag, weightsFlag string) (fields, weights map[string]float64, err error) {
	if fields, err = engine.ParseFields(fieldsFlag); err != nil {
		return nil, nil, fmt.Errorf("--fields: %w", err)
	}
	if weights, err = engine.ParseWeights(weightsFlag); err != nil {
		return nil, nil, fmt.Errorf("--weights: %w", err)
	}
	return fields, weights, nil
}
