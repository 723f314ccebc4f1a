package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/fusion"
)

// searchRequest is the body of POST /v1/collections/{name}/search: every
// field of engine.Request, named in snake case.
type searchRequest struct {
	Text   string          `json:"text"`
	Filter json.RawMessage `json:"filter"`
	// Retrievers lists the rankings to fuse ("bm25", "dense", "late",
	// "dense:<model>", ...); Mode is the alternative of `tandem search
	// --mode` ("hybrid" for every retriever, or kinds joined by '+').
	Retrievers  []string                  `json:"retrievers"`
	Mode        string                    `json:"mode"`
	Fusion      string                    `json:"fusion"`
	K           int                       `json:"k"`
	Offset      int                       `json:"offset"`
	Depth       map[string]int            `json:"depth"`
	Weight      map[string]float64        `json:"weight"`
	LateScoring string                    `json:"late_scoring"`
	Fields      map[string]float64        `json:"fields"`
	IDsOnly     bool                      `json:"ids_only"`
	Vectors     map[string]tandem.Vectors `json:"vectors"`
	Highlight   *engine.HighlightRequest  `json:"highlight"`
	Facets      []engine.FacetRequest     `json:"facets"`
	FacetScope  string                    `json:"facet_scope"`
	FacetWindow int                       `json:"facet_window"`

	// modeGiven and retrieversGiven say that the request gave each, empty
	// as it may be: the two are not given together.
	modeGiven, retrieversGiven bool
}

// fusionMethods are the names a search's fusion takes: fusion's methods,
// spelled as openapi.json's enum spells them (the engine also takes them
// in any case, as the CLI does).
var fusionMethods = func() []string {
	var out []string
	for _, m := range fusion.Methods() {
		out = append(out, m.String())
	}
	return out
}()

// searchResponse is the answer to a search.
type searchResponse struct {
	Hits       []tandem.Hit `json:"hits"`
	Retrievers []string     `json:"retrievers"`
	Fusion     string       `json:"fusion,omitempty"`
	// Facets are the request's facets, in its order.
	Facets []engine.Facet `json:"facets,omitempty"`
	TookMS float64        `json:"took_ms"`
	K      int            `json:"k"`
	Offset int            `json:"offset"`
}

func (s *Server) searchPost(w http.ResponseWriter, r *http.Request) {
	data, err := s.readBody(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	req, err := s.decodeSearch(data)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.search(w, r, req)
}

// decodeSearch decodes a search body as decodeJSON would (unknown keys
// and trailing data refused), but reads it as a stream of tokens and the
// filter with the collections' filter limits as it goes: a filter over
// them is refused at the cost of the part read, where decoding the body
// first would scan all of it (340 ms for issue 27's 28.8 MB filter).
func (s *Server) decodeSearch(data []byte) (searchRequest, error) {
	var req searchRequest
	if len(bytes.TrimSpace(data)) == 0 {
		return req, errorf(http.StatusBadRequest, "invalid_json", "empty request body: want a JSON object")
	}
	invalid := func(err error) error {
		return errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: %s", jsonProblem(err, data))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if t, err := dec.Token(); err != nil {
		return req, invalid(err)
	} else if t != json.Delim('{') {
		return req, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: want an object, got %v", t)
	}
	fields := map[string]any{
		"text": &req.Text, "retrievers": &req.Retrievers, "mode": &req.Mode, "fusion": &req.Fusion,
		"k": &req.K, "offset": &req.Offset, "depth": &req.Depth, "weight": &req.Weight,
		"late_scoring": &req.LateScoring, "fields": &req.Fields, "ids_only": &req.IDsOnly, "vectors": &req.Vectors,
		"highlight": &req.Highlight, "facets": &req.Facets, "facet_scope": &req.FacetScope, "facet_window": &req.FacetWindow,
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return req, invalid(err)
		}
		key := t.(string) // the decoder gives only keys here
		if key == "filter" {
			start := dec.InputOffset()
			e, err := s.cfg.Engine.FilterLimits.Decode(dec)
			if err != nil {
				return req, err
			}
			if e == nil {
				return req, nullMember(key)
			}
			// The filter's JSON, after the colon.
			raw := bytes.TrimLeft(data[start:dec.InputOffset()], " \t\r\n")
			req.Filter = bytes.TrimLeft(bytes.TrimPrefix(raw, []byte(":")), " \t\r\n")
			continue
		}
		dst, ok := fields[key]
		if !ok {
			return req, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: unknown field %q", key)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return req, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: field %q: %s", key, jsonProblem(err, data))
		}
		if path, ok := nullPath(raw); ok {
			if path != "" && path[0] != '[' {
				path = "." + path
			}
			return req, nullMember(key + path)
		}
		vd := json.NewDecoder(bytes.NewReader(raw))
		vd.DisallowUnknownFields()
		if err := vd.Decode(dst); err != nil {
			return req, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: field %q: %s", key, jsonProblem(err, raw))
		}
		req.modeGiven = req.modeGiven || key == "mode"
		req.retrieversGiven = req.retrieversGiven || key == "retrievers"
	}
	if _, err := dec.Token(); err != nil { // '}'
		return req, invalid(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: trailing data after the object")
	}
	return req, nil
}

// searchGet is the query-string form: q, mode or retrievers (comma
// separated), k, offset, fusion, filter (JSON), late_scoring, ids_only,
// highlight, facet (repeated, engine.ParseFacet's form), facet_scope and
// facet_window.
// With neither q nor filter, bm25 ranks every document, as the match-all
// filter would.
//
// A parameter given is used, an empty one too: k=, offset=, ids_only=
// and filter= are refused, as values the spec's types do not admit,
// rather than taken for absent. fusion= and late_scoring= are the
// default, as "" is in the POST form.
func (s *Server) searchGet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := searchRequest{Text: q.Get("q"), Mode: q.Get("mode"), Fusion: q.Get("fusion"), LateScoring: q.Get("late_scoring"), FacetScope: q.Get("facet_scope")}
	for _, v := range q["facet"] {
		f, err := engine.ParseFacet(v)
		if err != nil {
			s.fail(w, errorf(http.StatusBadRequest, "bad_parameter", "parameter facet=%q: %v", v, err))
			return
		}
		req.Facets = append(req.Facets, f)
	}
	if v := q.Get("retrievers"); v != "" {
		req.Retrievers = strings.Split(v, ",")
	}
	req.modeGiven, req.retrieversGiven = q.Has("mode"), q.Has("retrievers")
	if _, ok := q["filter"]; ok {
		v := q.Get("filter")
		switch t := strings.TrimSpace(v); t {
		case "":
			s.fail(w, errorf(http.StatusBadRequest, "bad_parameter", "parameter filter=%q: want a filter as JSON (leave the parameter out for none)", v))
			return
		case "null":
			s.fail(w, errorf(http.StatusBadRequest, "bad_parameter", "parameter filter=null: want a filter as JSON (leave the parameter out for none)"))
			return
		}
		req.Filter = json.RawMessage(v)
	}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"k", &req.K}, {"offset", &req.Offset}, {"facet_window", &req.FacetWindow}} {
		if _, ok := q[p.name]; ok {
			v := q.Get(p.name)
			n, err := strconv.Atoi(v)
			switch {
			case errors.Is(err, strconv.ErrRange) && p.name == "facet_window":
				s.fail(w, errorf(http.StatusBadRequest, "bad_parameter", "parameter %s=%q: out of range", p.name, v))
				return
			case errors.Is(err, strconv.ErrRange):
				s.fail(w, errorf(http.StatusBadRequest, "bad_parameter", "parameter %s=%q: out of range (at most --max-k, %d)", p.name, v, s.cfg.MaxK))
				return
			case err != nil || n < 0:
				s.fail(w, errorf(http.StatusBadRequest, "bad_parameter", "parameter %s=%q: want an integer, 0 or more", p.name, v))
				return
			}
			*p.dst = n
		}
	}
	for _, p := range []struct {
		name string
		set  func(bool)
	}{{"ids_only", func(b bool) { req.IDsOnly = b }}, {"highlight", func(b bool) {
		if b {
			req.Highlight = &engine.HighlightRequest{}
		}
	}}} {
		if _, ok := q[p.name]; ok {
			switch v := q.Get(p.name); v {
			case "true", "false":
				p.set(v == "true")
			default:
				s.fail(w, errorf(http.StatusBadRequest, "bad_parameter", "parameter %s=%q: want true or false", p.name, v))
				return
			}
		}
	}
	s.search(w, r, req)
}

func (s *Server) search(w http.ResponseWriter, r *http.Request, req searchRequest) {
	c, err := s.reg.acquire(r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	defer c.release()
	k := req.K
	if k == 0 {
		k = 10
	}
	if k < 0 || req.Offset < 0 {
		s.fail(w, errorf(http.StatusBadRequest, "bad_request", "k=%d offset=%d: each must be 0 or more", req.K, req.Offset))
		return
	}
	// Compared without adding, so that no k or offset overflows.
	if k > s.cfg.MaxK || req.Offset > s.cfg.MaxK-k {
		s.fail(w, errorf(http.StatusBadRequest, "k_too_large", "k=%d offset=%d: k+offset is over the limit of %d (--max-k)", k, req.Offset, s.cfg.MaxK))
		return
	}
	if len(req.Text) > s.cfg.MaxQuery {
		s.fail(w, errorf(http.StatusBadRequest, "query_too_long", "text: %d bytes, over the limit of %d bytes (--max-query)", len(req.Text), s.cfg.MaxQuery))
		return
	}
	if req.Fusion != "" && !slices.Contains(fusionMethods, req.Fusion) {
		s.fail(w, errorf(http.StatusBadRequest, "bad_request", "fusion %q: want one of %s", req.Fusion, strings.Join(fusionMethods, ", ")))
		return
	}
	if req.modeGiven && req.retrieversGiven {
		s.fail(w, errorf(http.StatusBadRequest, "bad_request", "give mode or retrievers, not both"))
		return
	}
	rets := req.Retrievers
	if req.Mode != "" {
		if rets, err = c.e.Mode(req.Mode); err != nil {
			s.fail(w, err)
			return
		}
	}
	res, err := c.e.Search(r.Context(), engine.Request{
		Text:        req.Text,
		Filter:      req.Filter,
		K:           req.K,
		Offset:      req.Offset,
		Retrievers:  rets,
		Fusion:      req.Fusion,
		Depth:       req.Depth,
		Weight:      req.Weight,
		LateScoring: req.LateScoring,
		IDsOnly:     req.IDsOnly,
		Fields:      req.Fields,
		Vectors:     req.Vectors,
		Highlight:   req.Highlight,
		Facets:      req.Facets,
		FacetScope:  req.FacetScope,
		FacetWindow: req.FacetWindow,
	})
	if err != nil {
		s.fail(w, err)
		return
	}
	s.metrics.search.WithLabelValues(c.name, mode(res.Retrievers)).Observe(res.Took.Seconds())
	for i, d := range res.RetrieverTook {
		s.metrics.retriever.WithLabelValues(c.name, res.Retrievers[i]).Observe(d.Seconds())
	}
	out := searchResponse{Hits: res.Hits, Retrievers: res.Retrievers, Fusion: res.Fusion, Facets: res.Facets, TookMS: float64(res.Took.Microseconds()) / 1000, K: k, Offset: req.Offset}
	if out.Hits == nil {
		out.Hits = []tandem.Hit{}
	}
	writeJSON(w, http.StatusOK, out)
}
