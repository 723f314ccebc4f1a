package engine

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseFacet reads a facet request written as text, the form of `tandem
// search --facet` and of the facet parameter of the server's query-string
// search: a field name, then optionally a colon and options separated by
// commas:
//
//	lang                          the field's 10 most frequent values
//	lang:size=20,disjunctive      20 values, counted without lang's own conditions
//	tags:min_count=5
//	year:interval=10              a number histogram
//	published:date_interval=month a date histogram
//	year:ranges=..2000|2000..2010|2010..
//	published:ranges=2020-01-01..2021-01-01
//
// A range is FROM..TO with either side left empty for an open bound;
// ranges are separated by '|'. Values are checked against the field when
// the search plans, as a FacetRequest's are.
func ParseFacet(s string) (FacetRequest, error) {
	field, opts, _ := strings.Cut(s, ":")
	r := FacetRequest{Field: strings.TrimSpace(field)}
	if r.Field == "" {
		return r, fmt.Errorf("facet %q: want FIELD or FIELD:OPTION,...", s)
	}
	if strings.TrimSpace(opts) == "" {
		return r, nil
	}
	for _, opt := range strings.Split(opts, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(opt), "=")
		var err error
		switch k {
		case "size":
			r.Size, err = strconv.Atoi(v)
		case "min_count":
			r.MinCount, err = strconv.Atoi(v)
		case "interval":
			r.Interval, err = strconv.ParseFloat(v, 64)
		case "date_interval":
			r.DateInterval = v
		case "disjunctive":
			r.Disjunctive = true
			if v != "" {
				r.Disjunctive, err = strconv.ParseBool(v)
			}
		case "ranges":
			for _, rg := range strings.Split(v, "|") {
				from, to, ok := strings.Cut(rg, "..")
				if !ok {
					return r, fmt.Errorf("facet %q: range %q: want FROM..TO (either may be empty)", s, rg)
				}
				r.Ranges = append(r.Ranges, FacetRange{From: bound(from), To: bound(to)})
			}
		default:
			return r, fmt.Errorf("facet %q: unknown option %q (want size, min_count, interval, date_interval, ranges or disjunctive)", s, k)
		}
		if err != nil {
			return r, fmt.Errorf("facet %q: %s=%q: %w", s, k, v, err)
		}
	}
	return r, nil
}

// bound is one side of a range as text: nil when empty, a number when it
// reads as one, else the text (a date).
func bound(s string) any {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f
	}
	return s
}

// ParseWeights reads fusion weights written "bm25=1,dense=2" (the form of
// `tandem search --weights`) into Request.Weight: each retriever's name,
// full name or kind, and a weight of 0 or more.
func ParseWeights(s string) (map[string]float64, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		v, err := strconv.ParseFloat(w, 64)
		if !ok || name == "" || err != nil || v < 0 {
			return nil, fmt.Errorf("want retriever=weight with a weight >= 0, got %q", part)
		}
		out[name] = v
	}
	return out, nil
}

// ParseFields reads BM25's fields written "title=2,text" (the form of
// `tandem search --fields`) into Request.Fields: a field without "=" has
// the schema's boost (0), one with it a positive boost.
func ParseFields(s string) (map[string]float64, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		name, boost, ok := strings.Cut(strings.TrimSpace(part), "=")
		if name == "" {
			return nil, fmt.Errorf("empty field name in %q", s)
		}
		out[name] = 0
		if ok {
			b, err := strconv.ParseFloat(boost, 64)
			if err != nil || b <= 0 {
				return nil, fmt.Errorf("field %q: boost %q is not a positive number", name, boost)
			}
			out[name] = b
		}
	}
	return out, nil
}
