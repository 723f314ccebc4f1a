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
	mode := fs.String("mode", "bm25", "retriever: bm25")
	filterJSON := fs.String("filter", "", `JSON filter, e.g. {"term":{"lang":"en"}}`)
	k := fs.Int("k", 10, "number of hits")
	offset := fs.Int("offset", 0, "hits to skip")
	asJSON := fs.Bool("json", false, `print {"hits":[{"id","score","fields"}]}`)
	fieldsFlag := fs.String("fields", "", "search these text fields with boosts, e.g. title=2,text=1 (default: all text fields as one)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "usage: tandem search --dir DIR [--mode bm25] [--filter JSON] [-k N] [--json] \"query\"")
		return errUsage
	}
	fields, err := parseBoosts(*fieldsFlag)
	if err != nil {
		return err
	}
	e, err := engine.Open(*dir, nil)
	if err != nil {
		return err
	}
	defer e.Close()
	res, err := e.Search(context.Background(), engine.Request{
		Text:       strings.Join(fs.Args(), " "),
		Filter:     []byte(*filterJSON),
		K:          *k,
		Offset:     *offset,
		Retrievers: strings.Split(*mode, ","),
		Fields:     fields,
	})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(res)
	}
	for i, h := range res.Hits {
		title, _ := h.Fields["title"].(string)
		if title == "" {
			title, _ = h.Fields["text"].(string)
		}
		if len(title) > 80 {
			title = title[:80] + "..."
		}
		fmt.Fprintf(stdout, "%3d  %-12s %8.4f  %s\n", i+1+*offset, h.ID, h.Score, title)
	}
	return nil
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
