package engine

import (
	"bufio"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/registry"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/evaluate"
	"github.com/tandemsearch/tandem/fusion"
	"github.com/tandemsearch/tandem/latecollect"
	"github.com/tandemsearch/tandem/sparse"
)

// chars returns the characters [start, end) of s.
func chars(s string, start, end int) string { return string([]rune(s)[start:end]) }

// TestFragments pins the choice of fragments on a long value: the windows
// with most distinct terms first, then most marks, never overlapping,
// returned in text order, starting a little before their first mark at a
// word's start and ending at a word's end, with no mark cut.
func TestFragments(t *testing.T) {
	value := "Alpha beta gamma delta. Epsilon cat zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon dog phi chi psi cat omega, alpha beta gamma dog delta cat epsilon."
	var marks []sparse.Mark
	for _, w := range []string{"cat", "dog"} {
		for i := 0; ; {
			j := strings.Index(value[i:], w)
			if j < 0 {
				break
			}
			marks = append(marks, sparse.Mark{Start: i + j, End: i + j + len(w), Term: w})
			i += j + len(w)
		}
	}
	slices.SortFunc(marks, func(a, b sparse.Mark) int { return a.Start - b.Start })
	got := fragments(newCharText(value), marks, 40, 2)
	want := []tandem.Fragment{
		{Text: "upsilon dog phi chi psi cat omega, alpha", Start: 103, End: 143, Marks: []tandem.Mark{{Start: 8, End: 11, Term: "dog"}, {Start: 24, End: 27, Term: "cat"}}},
		{Text: "gamma dog delta cat epsilon.", Start: 149, End: 177, Marks: []tandem.Mark{{Start: 6, End: 9, Term: "dog"}, {Start: 16, End: 19, Term: "cat"}}},
	}
	if !slices.EqualFunc(got, want, fragmentEqual) {
		t.Fatalf("fragments\n got %+v\nwant %+v", got, want)
	}
	for _, f := range got {
		if len([]rune(f.Text)) > 40 || chars(value, f.Start, f.End) != f.Text {
			t.Errorf("fragment %+v: longer than 40 or not the value's characters", f)
		}
	}
	// A value no longer than the size is one fragment, all of it.
	short := "A cat and a dog."
	got = fragments(newCharText(short), []sparse.Mark{{Start: 2, End: 5, Term: "cat"}, {Start: 12, End: 15, Term: "dog"}}, 40, 3)
	if len(got) != 1 || got[0].Text != short || len(got[0].Marks) != 2 {
		t.Errorf("short value: %+v", got)
	}
	// A mark longer than the size is kept whole; offsets count
	// characters, not bytes.
	long := "ééé " + strings.Repeat("x", 30) + " ééé"
	got = fragments(newCharText(long), []sparse.Mark{{Start: len("ééé "), End: len("ééé ") + 30, Term: "x"}}, 10, 1)
	if len(got) != 1 || got[0].Start != 4 || got[0].End != 34 || got[0].Marks[0] != (tandem.Mark{Start: 0, End: 30, Term: "x"}) {
		t.Errorf("long mark: %+v", got)
	}
	if fragments(newCharText(value), nil, 40, 2) != nil {
		t.Error("fragments without marks")
	}
}

func fragmentEqual(a, b tandem.Fragment) bool {
	return a.Text == b.Text && a.Start == b.Start && a.End == b.End && slices.Equal(a.Marks, b.Marks)
}

// highlightSchema has two English text fields and one of the standard
// analyzer, which does not stem.
func highlightSchema() *tandem.Schema {
	return &tandem.Schema{IDField: "_id", Fields: []tandem.Field{
		{Name: "title", Type: tandem.Text},
		{Name: "text", Type: tandem.Text},
		{Name: "notes", Type: tandem.Text, Analyzer: "standard"},
		{Name: "lang", Type: tandem.Keyword},
	}}
}

var highlightDocs = []tandem.Doc{
	{ID: "run", Fields: map[string]any{"title": "Running with cats", "text": "Naïve runners run; the cat runs and the cats ran. Café owners' dogs are running too, and a dog's run is the runner's.", "notes": "Runs of cats, running dogs", "lang": "en"}},
	{ID: "long", Fields: map[string]any{"title": "A long one", "text": strings.Repeat("Nothing to see here at all. ", 20) + "Then a cat runs. " + strings.Repeat("Filler words and more filler. ", 20) + "A dog runs at the end.", "lang": "en"}},
	{ID: "none", Fields: map[string]any{"title": "Weather", "text": "Rain is expected.", "lang": "en"}},
}

// TestHighlightBM25 checks that BM25 fragments mark exactly the analysed
// query terms in each field, with the field's analyzer: stemmed forms
// with "en" ("running" marks "runs" and "run", not "runners", which
// Porter stems to "runner"), the same word only with "standard", never a
// stop word, every token inside a fragment that carries a query term
// marked, offsets in characters of the value.
func TestHighlightBM25(t *testing.T) {
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{Schema: highlightSchema(), NoSync: true})
	if _, err := e.Index(ctx, highlightDocs); err != nil {
		t.Fatal(err)
	}
	const query = "the running cats and a dog"
	res, err := e.Search(ctx, Request{Text: query, K: 3, Highlight: &HighlightRequest{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) != 2 {
		t.Fatalf("hits %v, want run and long", ids(res.Hits))
	}
	analyzers := map[string]string{"title": "en", "text": "en", "notes": "standard"}
	cache := registry.NewCache()
	queryTerms := func(a analysis.Analyzer) map[string]bool {
		m := map[string]bool{}
		for _, tok := range a.Analyze([]byte(query)) {
			m[string(tok.Term)] = true
		}
		return m
	}
	for _, h := range res.Hits {
		if h.Highlights == nil || h.Highlights.Late != nil {
			t.Fatalf("%s: highlights %+v", h.ID, h.Highlights)
		}
		for field, frags := range h.Highlights.Fields {
			value := h.Fields[field].(string)
			a, err := cache.AnalyzerNamed(analyzers[field])
			if err != nil {
				t.Fatal(err)
			}
			terms := queryTerms(a)
			// Every marked word carries a query term, and every token
			// of the value inside a fragment that carries one is
			// marked.
			var marked [][2]int
			for _, f := range frags {
				if chars(value, f.Start, f.End) != f.Text {
					t.Errorf("%s %s: fragment %+v is not the value's characters [%d,%d)", h.ID, field, f, f.Start, f.End)
				}
				for _, m := range f.Marks {
					word := chars(f.Text, m.Start, m.End)
					toks := a.Analyze([]byte(word))
					if len(toks) != 1 || string(toks[0].Term) != m.Term || !terms[m.Term] {
						t.Errorf("%s %s: marked %q (%v) as %q, query terms %v", h.ID, field, word, toks, m.Term, terms)
					}
					marked = append(marked, [2]int{f.Start + m.Start, f.Start + m.End})
				}
			}
			ct := newCharText(value)
			for _, tok := range a.Analyze([]byte(value)) {
				s, end := ct.char(tok.Start), ct.char(tok.End)
				inside := slices.ContainsFunc(frags, func(f tandem.Fragment) bool { return f.Start <= s && end <= f.End })
				if isMarked := slices.Contains(marked, [2]int{s, end}); inside && terms[string(tok.Term)] != isMarked {
					t.Errorf("%s %s: token %q (term %q) marked %v, a query term %v", h.ID, field, chars(value, s, end), tok.Term, isMarked, terms[string(tok.Term)])
				}
			}
		}
	}
	// The document "run" in detail: what is marked in each field.
	run := res.Hits[slices.IndexFunc(res.Hits, func(h tandem.Hit) bool { return h.ID == "run" })]
	words := func(field string) []string {
		var out []string
		for _, f := range run.Highlights.Fields[field] {
			for _, m := range f.Marks {
				out = append(out, chars(f.Text, m.Start, m.End))
			}
		}
		return out
	}
	for field, want := range map[string][]string{
		"title": {"Running", "cats"},
		// "runners" and "runner's" stem to "runner", "ran" is not
		// stemmed to "run": neither is marked; "the", "and" and "a"
		// are stop words.
		"text":  {"run", "cat", "runs", "cats", "dogs", "running", "dog's", "run"},
		"notes": {"cats", "running"},
	} {
		if got := words(field); !slices.Equal(got, want) {
			t.Errorf("run %s: marked %q, want %q", field, got, want)
		}
	}
	// Offsets are characters: "Café" and "Naïve" come before "dogs".
	text := run.Fields["text"].(string)
	f := run.Highlights.Fields["text"][0]
	if f.Start != 0 || f.Text != text {
		t.Fatalf("text fragment %+v, want the whole value", f)
	}
	b := strings.Index(text, "dogs")
	if i := slices.IndexFunc(f.Marks, func(m tandem.Mark) bool { return m.Term == "dog" }); i < 0 || f.Marks[i].Start != utf8.RuneCountInString(text[:b]) || f.Marks[i].Start == b {
		t.Errorf("the mark of dogs %+v, want its character offset %d (byte offset %d)", f.Marks, utf8.RuneCountInString(text[:b]), b)
	}
	// The long document's text gets fragments around its two matches.
	long := res.Hits[slices.IndexFunc(res.Hits, func(h tandem.Hit) bool { return h.ID == "long" })]
	lf := long.Highlights.Fields["text"]
	if len(lf) != 2 || !strings.Contains(lf[0].Text, "cat runs") || !strings.Contains(lf[1].Text, "dog runs") || len([]rune(lf[0].Text)) > DefaultFragmentSize {
		t.Errorf("long text's fragments %+v", lf)
	}
	// Fields, size and number are the request's; IDsOnly still
	// highlights, from the stored document.
	res, err = e.Search(ctx, Request{Text: query, K: 3, IDsOnly: true, Highlight: &HighlightRequest{Fields: []string{"text"}, FragmentSize: 30, Fragments: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range res.Hits {
		if h.Fields != nil || len(h.Highlights.Fields) != 1 || len(h.Highlights.Fields["text"]) != 1 || len([]rune(h.Highlights.Fields["text"][0].Text)) > 30 {
			t.Errorf("%s: fields %v, highlights %+v", h.ID, h.Fields, h.Highlights)
		}
	}
	// A search restricted to fields highlights those by default.
	res, err = e.Search(ctx, Request{Text: query, Fields: map[string]float64{"notes": 0}, Highlight: &HighlightRequest{}})
	if err != nil || len(res.Hits) != 1 {
		t.Fatal(err, ids(res.Hits))
	}
	if hl := res.Hits[0].Highlights; len(hl.Fields) != 1 || len(hl.Fields["notes"]) != 1 {
		t.Errorf("search of notes: highlights %+v, want notes' only", hl)
	}
	// Without text, or without bm25, nothing is marked.
	res, err = e.Search(ctx, Request{Filter: []byte(`{"term":{"lang":"en"}}`), Highlight: &HighlightRequest{}})
	if err != nil || len(res.Hits) != 3 {
		t.Fatal(err, ids(res.Hits))
	}
	for _, h := range res.Hits {
		if h.Highlights == nil || h.Highlights.Fields != nil {
			t.Errorf("%s without text: %+v", h.ID, h.Highlights)
		}
	}
	// Without a highlight request, hits carry none.
	res, err = e.Search(ctx, Request{Text: query})
	if err != nil || res.Hits[0].Highlights != nil {
		t.Errorf("no request: %+v, %v", res.Hits[0].Highlights, err)
	}
}

// TestHighlightBadRequests: each bad highlight request is a bad request
// naming its parameter or field.
func TestHighlightBadRequests(t *testing.T) {
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{Schema: highlightSchema(), NoSync: true})
	if _, err := e.Index(ctx, highlightDocs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{Text: "cat", Highlight: &HighlightRequest{Fields: []string{"nope"}}}, `highlight.fields: field "nope"`},
		{Request{Text: "cat", Highlight: &HighlightRequest{Fields: []string{"lang"}}}, `highlight.fields: field "lang": tandem: wrong type: a keyword field`},
		{Request{Text: "cat", Highlight: &HighlightRequest{Fields: []string{"text", "text"}}}, `highlight.fields: field "text" listed twice`},
		{Request{Text: "cat", Highlight: &HighlightRequest{FragmentSize: -1}}, "highlight.fragment_size -1"},
		{Request{Text: "cat", Highlight: &HighlightRequest{FragmentSize: MaxFragmentSize + 1}}, "highlight.fragment_size 1048577"},
		{Request{Text: "cat", Highlight: &HighlightRequest{Fragments: -2}}, "highlight.fragments -2"},
		{Request{Text: "cat", Highlight: &HighlightRequest{Fragments: MaxFragments + 1}}, "highlight.fragments 101"},
		{Request{Text: "cat", K: MaxHighlightHits + 1, Highlight: &HighlightRequest{}}, "highlight: k=1001"},
	} {
		_, err := e.Search(ctx, tc.req)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a bad request naming %s", *tc.req.Highlight, err, tc.want)
		}
	}
}

// lateEngine indexes animals and highlightDocs with the default model for
// late interaction (and dense), skipping when it is not installed.
func lateEngine(t *testing.T) *Engine {
	t.Helper()
	needModel(t)
	e := openT(t, t.TempDir(), &Options{Dense: []string{encoder.DefaultModel}, Late: []string{encoder.DefaultModel}, NoSync: true})
	if _, err := e.Index(context.Background(), append(slices.Clone(animals), highlightDocs...)); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestHighlightLate checks each late-interaction match: its score is the
// maximum the scorer used for that query token (the hit's late score is
// their mean, bit for bit the score the retriever ranked with), the
// document token it names is the one whose vector gives that maximum,
// and its span covers that token's characters in its field.
func TestHighlightLate(t *testing.T) {
	ctx := context.Background()
	e := lateEngine(t)
	late := "late:" + encoder.DefaultModel
	m := e.models[e.modelIndex(encoder.DefaultModel)]
	ranked, placed := 0, 0
	for _, tc := range []struct {
		query   string
		rets    []string
		scoring string
	}{
		{"Do cats purr?", []string{"bm25", late}, ""},
		{"heart attack", []string{late}, "sum-max"},
		{"naïve café runners", []string{"dense", "late-exact"}, ""},
	} {
		res, err := e.Search(ctx, Request{Text: tc.query, Retrievers: tc.rets, LateScoring: tc.scoring, K: 5, Highlight: &HighlightRequest{}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Hits) == 0 {
			t.Fatalf("%q: no hits", tc.query)
		}
		// The query's token vectors, as the search encoded them.
		qb, err := m.enc.Encode(ctx, encoder.Request{Side: encoder.Query, Texts: []string{tc.query}, Tokens: true})
		if err != nil {
			t.Fatal(err)
		}
		q := qb.Tokens[0]
		qspans, err := m.enc.Spans(encoder.Query, tc.query)
		if err != nil {
			t.Fatal(err)
		}
		li := slices.IndexFunc(res.Retrievers, func(r string) bool { return strings.HasPrefix(r, "late") })
		for _, h := range res.Hits {
			if len(h.Highlights.Late) != 1 {
				t.Fatalf("%q %s: late highlights %+v", tc.query, h.ID, h.Highlights.Late)
			}
			lm := h.Highlights.Late[0]
			if lm.Retriever != res.Retrievers[li] || lm.Scoring != map[string]string{"": "avg-max", "sum-max": "sum-max"}[tc.scoring] {
				t.Errorf("%s: retriever %q scoring %q", h.ID, lm.Retriever, lm.Scoring)
			}
			// The hit's late score is the maxima combined, bit for bit.
			if src := h.Sources[li]; src.Rank > 0 {
				ranked++
				if src.Score != lm.Score {
					t.Errorf("%q %s: late source score %v, highlights' %v", tc.query, h.ID, src.Score, lm.Score)
				}
			}
			for _, tm := range lm.Tokens {
				if tm.Doc != nil && tm.Doc.Kind == tandem.TokenText {
					placed++
				}
			}
			var sum float32
			for _, tm := range lm.Tokens {
				sum += float32(tm.Score)
			}
			if tc.scoring == "" {
				sum /= float32(len(lm.Tokens))
			}
			if float64(sum) != lm.Score {
				t.Errorf("%q %s: maxima combine to %v, score %v", tc.query, h.ID, sum, lm.Score)
			}
			checkLateTokens(t, e, tc.query, h, lm, q, qspans)
		}
	}
	if ranked < 10 || placed < 20 {
		t.Errorf("%d hits ranked by late interaction, %d query tokens matched to text: too few to test", ranked, placed)
	}
}

// checkLateTokens checks one hit's token matches against the stored
// token vectors, recomputed in float64, and the document's text. Over
// int8 tokens the late retriever (not late-exact) scores with the query
// rounded to int8 too, so its products may stand from float64's by up to
// half the query token's int8 step times the row's sum of magnitudes.
func checkLateTokens(t *testing.T, e *Engine, query string, h tandem.Hit, lm tandem.LateMatches, q encoder.Tokens, qspans []encoder.TokenSpan) {
	t.Helper()
	m := e.models[e.modelIndex(encoder.DefaultModel)]
	blob, ok, err := e.st.ReadBlob(h.DocNum, latecollect.BlobName(m.spec.Name), nil)
	if err != nil || !ok {
		t.Fatalf("blob of %s: %v %v", h.ID, ok, err)
	}
	d, dim, err := latecollect.DecodeTokens(blob)
	if err != nil {
		t.Fatal(err)
	}
	if len(lm.Tokens) != q.Len() {
		t.Fatalf("%s: %d token matches for %d query tokens", h.ID, len(lm.Tokens), q.Len())
	}
	dot := func(i, j int) float64 {
		var s float64
		for k := range dim {
			s += float64(q.Vectors[i*dim+k]) * float64(d[j*dim+k])
		}
		return s
	}
	enc, _, _, _ := latecollect.BlobInfo(blob)
	int8Query := enc == latecollect.I8 && !strings.HasPrefix(lm.Retriever, "late-exact")
	var l1 float64 // the largest sum of magnitudes of a row
	for j := range len(d) / dim {
		var s float64
		for _, x := range d[j*dim : (j+1)*dim] {
			s += math.Abs(float64(x))
		}
		l1 = max(l1, s)
	}
	tol := func(i int) float64 {
		if !int8Query {
			return 1e-5
		}
		var m float64
		for _, x := range q.Vectors[i*dim : (i+1)*dim] {
			m = max(m, math.Abs(float64(x)))
		}
		return m/127/2*l1 + 1e-5
	}
	for i, tm := range lm.Tokens {
		// The query token: its place in the query.
		qs := qspans[i]
		if tm.Query.Index != i || tm.Query.Token != qs.Token || tm.Query.Kind != string(qs.Kind) {
			t.Errorf("%s: query token %d is %+v, want %+v", h.ID, i, tm.Query, qs)
		}
		if qs.Kind == encoder.KindText && tm.Query.Text != query[qs.Start:qs.End] {
			t.Errorf("%s: query token %d covers %q, want %q", h.ID, i, tm.Query.Text, query[qs.Start:qs.End])
		}
		// Its maximum, and the document token that gives it.
		best := math.Inf(-1)
		for j := range len(d) / dim {
			best = max(best, dot(i, j))
		}
		if tm.Doc == nil || math.Abs(tm.Score-best) > 2*tol(i) || math.Abs(dot(i, tm.Doc.Index)-tm.Score) > tol(i) {
			t.Fatalf("%s: query token %d %q: score %v, doc %+v; the maximum is %v", h.ID, i, tm.Query.Token, tm.Score, tm.Doc, best)
		}
		// The span covers that token's characters in its field.
		dt := tm.Doc
		switch dt.Kind {
		case tandem.TokenText:
			value, _ := h.Fields[dt.Field].(string)
			piece := chars(value, dt.Start, dt.End)
			if piece != dt.Text || !strings.Contains(strings.ToLower(stripAccents(piece)), strings.TrimPrefix(dt.Token, "##")) {
				t.Errorf("%s: query token %d matched %+v: field %s's characters [%d,%d) are %q", h.ID, i, dt, dt.Field, dt.Start, dt.End, piece)
			}
		case tandem.TokenSpecial:
			if dt.Index != 0 && dt.Index != len(d)/dim-1 {
				t.Errorf("%s: special token at row %d of %d", h.ID, dt.Index, len(d)/dim)
			}
		default:
			t.Errorf("%s: document token %+v", h.ID, dt)
		}
	}
}

// stripAccents drops combining marks after decomposing the few accented
// letters of the test documents.
func stripAccents(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case 'ï':
			return 'i'
		case 'é':
			return 'e'
		}
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s)
}

// TestHighlightLateUnknownTokens: a document that brought its own token
// vectors, fewer than its text's tokens, is explained without placing
// its tokens; so are query tokens the request brought. Scores still
// equal the retriever's.
func TestHighlightLateUnknownTokens(t *testing.T) {
	ctx := context.Background()
	e := lateEngine(t)
	m := e.models[e.modelIndex(encoder.DefaultModel)]
	b, err := m.enc.Encode(ctx, encoder.Request{Side: encoder.Document, Texts: []string{"Cats purr"}, Tokens: true})
	if err != nil {
		t.Fatal(err)
	}
	tok := b.Tokens[0]
	rows := make([][]float32, tok.Len())
	for i := range rows {
		rows[i] = tok.Vector(i)
	}
	own := tandem.Doc{ID: "own", Fields: map[string]any{"title": "Own vectors", "text": "A text much longer than the two words whose vectors it brought."},
		Vectors: map[string]tandem.Vectors{encoder.DefaultModel: {Dense: b.Vectors[0], Tokens: rows}}}
	if _, err := e.Index(ctx, []tandem.Doc{own}); err != nil {
		t.Fatal(err)
	}
	qb, err := m.enc.Encode(ctx, encoder.Request{Side: encoder.Query, Texts: []string{"purring cats"}, Tokens: true})
	if err != nil {
		t.Fatal(err)
	}
	var qrows [][]float32
	for i := range qb.Tokens[0].Len() - 1 { // not the text's tokens: one fewer
		qrows = append(qrows, qb.Tokens[0].Vector(i))
	}
	late := "late:" + encoder.DefaultModel
	res, err := e.Search(ctx, Request{Text: "purring cats", Retrievers: []string{late}, K: 3, Vectors: map[string]tandem.Vectors{encoder.DefaultModel: {Tokens: qrows}}, Highlight: &HighlightRequest{}})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res.Hits, func(h tandem.Hit) bool { return h.ID == "own" })
	if i < 0 {
		t.Fatalf("hits %v, want own among them", ids(res.Hits))
	}
	for _, h := range res.Hits {
		lm := h.Highlights.Late[0]
		if lm.Score != h.Sources[0].Score || len(lm.Tokens) != len(qrows) {
			t.Errorf("%s: score %v (source %v), %d tokens", h.ID, lm.Score, h.Sources[0].Score, len(lm.Tokens))
		}
		for _, tm := range lm.Tokens {
			if tm.Query.Kind != tandem.TokenUnknown || tm.Query.Token != "" {
				t.Errorf("%s: query token %+v, want unknown", h.ID, tm.Query)
			}
			if known := tm.Doc.Kind != tandem.TokenUnknown; known == (h.ID == "own") {
				t.Errorf("%s: document token %+v", h.ID, tm.Doc)
			}
		}
	}
}

// TestEvaluateHighlightLatency: given a highlight request, Evaluate ranks
// as without it and times pages of EvalHighlightHits hits both ways.
func TestEvaluateHighlightLatency(t *testing.T) {
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{Schema: highlightSchema(), NoSync: true})
	if _, err := e.Index(ctx, highlightDocs); err != nil {
		t.Fatal(err)
	}
	queries := []evaluate.Query{{ID: "q1", Text: "running cats"}, {ID: "q2", Text: "a dog"}, {ID: "q3", Text: "rain"}, {ID: "q4", Text: ""}}
	qrels := evaluate.Qrels{"q1": {"run": 1}, "q2": {"long": 1}, "q3": {"none": 1}, "q4": {"none": 1}}
	plain, err := e.Evaluate(ctx, queries, qrels, Request{})
	if err != nil {
		t.Fatal(err)
	}
	lit, err := e.Evaluate(ctx, queries, qrels, Request{Highlight: &HighlightRequest{}})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Highlight != nil || lit.Highlight == nil || lit.Highlight.Hits != EvalHighlightHits || lit.Highlight.P50 <= 0 || lit.Highlight.P50Highlight <= 0 || lit.Highlight.P95Highlight < lit.Highlight.P50Highlight {
		t.Fatalf("highlight latency: without a request %+v, with %+v", plain.Highlight, lit.Highlight)
	}
	if plain.Report.Mean != lit.Report.Mean || lit.Queries != 4 {
		t.Errorf("metrics with highlights timed %+v (%d queries), without %+v", lit.Report.Mean, lit.Queries, plain.Report.Mean)
	}
}

// TestSciFactHighlight measures what highlights cost on SciFact, with
// TestSciFact's collection and gates (TANDEM_SCIFACT=1, and
// TANDEM_SCIFACT_DIR to keep the collection): for each mode, Evaluate's
// latency of a page of EvalHighlightHits hits without and with highlights,
// over the 300 test queries. On every hit of the first 30 queries, each
// late-interaction highlight's score is the late source's, and each BM25
// fragment's marks carry query terms.
func TestSciFactHighlight(t *testing.T) {
	if testing.Short() || os.Getenv("TANDEM_SCIFACT") == "" {
		t.Skip("skipping the SciFact highlight run: set TANDEM_SCIFACT=1 (and TANDEM_SCIFACT_DIR to an indexed collection, see TestSciFact)")
	}
	e, data, _, _ := openSciFact(t)
	ctx := context.Background()
	queries, qrels := beirTest(t, data)
	for _, mode := range []string{"bm25", "late", "hybrid"} {
		rets, err := e.Mode(mode)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Evaluate(ctx, queries, qrels, Request{Retrievers: rets, Highlight: &HighlightRequest{}})
		if err != nil {
			t.Fatal(err)
		}
		hl := res.Highlight
		t.Logf("%-7s nDCG@10 %.4f  p50 %6.2f ms (k=100, ids)  page of %d: p50 %6.2f ms, highlighted %6.2f ms (+%.2f ms); p95 %6.2f, highlighted %6.2f ms",
			mode, res.Report.Mean.NDCG10, ms(res.P50), hl.Hits, ms(hl.P50), ms(hl.P50Highlight), ms(hl.P50Highlight-hl.P50), ms(hl.P95), ms(hl.P95Highlight))
		checked := 0
		for _, q := range queries[:30] {
			r, err := e.Search(ctx, Request{Text: q.Text, Retrievers: rets, Highlight: &HighlightRequest{}})
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range r.Hits {
				for i, name := range r.Retrievers {
					src := h.Sources[i]
					switch {
					case strings.HasPrefix(name, "late") && src.Rank > 0:
						if len(h.Highlights.Late) != 1 || h.Highlights.Late[0].Score != src.Score {
							t.Fatalf("%s %s: late source %v, highlights %+v", q.ID, h.ID, src.Score, h.Highlights.Late)
						}
						checked++
					case name == "bm25" && src.Rank > 0:
						if len(h.Highlights.Fields) == 0 {
							t.Errorf("%s %s: ranked by bm25, no fragment", q.ID, h.ID)
						}
						for _, frags := range h.Highlights.Fields {
							for _, f := range frags {
								for _, m := range f.Marks {
									if m.Term == "" || m.End <= m.Start {
										t.Errorf("%s %s: mark %+v", q.ID, h.ID, m)
									}
								}
							}
						}
						checked++
					}
				}
			}
		}
		if checked == 0 {
			t.Errorf("%s: no hit checked", mode)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkHighlight is the cost of highlighting a page of 10 hits, per
// hit, apart from the search: BM25 fragments (analysing title and text),
// late-interaction matches (reading the stored tokens, explaining the
// score, tokenizing the text again with offsets), and both. It indexes the
// first 60 SciFact abstracts with the default model.
func BenchmarkHighlight(b *testing.B) {
	needModel(b)
	docs := sciFactDocs(b, 60)
	ctx := context.Background()
	e := openT(b, b.TempDir(), &Options{Late: []string{encoder.DefaultModel}, NoSync: true})
	if _, err := e.Index(ctx, docs); err != nil {
		b.Fatal(err)
	}
	late := "late:" + encoder.DefaultModel
	for _, rets := range [][]string{{"bm25"}, {late}, {"bm25", late}} {
		b.Run(strings.Join(rets, "+"), func(b *testing.B) {
			req := Request{Text: "cancer cells respond to chemotherapy treatment", Retrievers: rets, K: 10, Highlight: &HighlightRequest{}}
			p, err := e.enterPlan(req)
			if err != nil {
				b.Fatal(err)
			}
			e.mu.RUnlock()
			ran, err := e.run(ctx, p, nil)
			if err != nil {
				b.Fatal(err)
			}
			lists := make([][]fusion.Item, len(ran))
			for i, r := range ran {
				lists[i] = r.hits
			}
			fused, err := p.Fuse(lists)
			if err != nil {
				b.Fatal(err)
			}
			res := &Result{}
			if err := e.materialise(ctx, p, false, res, fused); err != nil || len(res.Hits) != 10 {
				b.Fatalf("%d hits, %v", len(res.Hits), err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := e.highlightHits(ctx, p, ran, res); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(res.Hits)), "us/hit")
		})
	}
}

// sciFactDocs reads the first n SciFact documents, skipping the benchmark
// when SciFact is not beside the repository.
func sciFactDocs(b *testing.B, n int) []tandem.Doc {
	f, err := os.Open(filepath.Join("..", "..", "shared", "data", "scifact", "corpus.jsonl"))
	if err != nil {
		b.Skipf("SciFact not found: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	var docs []tandem.Doc
	for len(docs) < n && sc.Scan() {
		d, err := tandem.DecodeJSON(sc.Bytes(), "_id")
		if err != nil {
			b.Fatal(err)
		}
		docs = append(docs, d)
	}
	return docs
}

// TestShardHighlightEqualsSearch: a coordinator's request (its query
// encoded by EncodeQuery) highlights each document on its shard exactly
// as the engine's own search does.
func TestShardHighlightEqualsSearch(t *testing.T) {
	ctx := context.Background()
	e := lateEngine(t)
	req := Request{Text: "Do running cats purr?", Retrievers: e.Retrievers(), K: 5, Highlight: &HighlightRequest{FragmentSize: 40}}
	res, err := e.Search(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	sreq, _, err := e.Shard().EncodeQuery(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Shard().Highlight(ctx, sreq, append(ids(res.Hits), "no-such-id"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(res.Hits) {
		t.Fatalf("%d documents highlighted, want %d", len(got), len(res.Hits))
	}
	for _, h := range res.Hits {
		if !reflect.DeepEqual(got[h.ID], h.Highlights) {
			t.Errorf("%s: shard highlights %+v, search's %+v", h.ID, got[h.ID], h.Highlights)
		}
		if len(h.Highlights.Late) != 1 {
			t.Errorf("%s: late highlights %+v", h.ID, h.Highlights.Late)
		}
	}
	req.Highlight = nil
	if _, err := e.Shard().Highlight(ctx, req, ids(res.Hits)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("no highlight request: %v", err)
	}
}

// TestHighlightExternalLate: an external model's late-interaction matches
// cannot be placed in any text (Tandem has no tokenizer for it), but each
// still names the row of the document's stored tokens that gave the query
// token's maximum, and the scores are the retriever's. It needs no
// installed model.
func TestHighlightExternalLate(t *testing.T) {
	ctx := context.Background()
	const tokDim = 4
	schema := tandem.DefaultSchema()
	schema.Models = []tandem.Model{{Name: "ext", Late: true, TokenDim: tokDim, Similarity: tandem.Dot, External: true}}
	e := openT(t, t.TempDir(), &Options{Schema: schema, NoSync: true})
	docs := map[string][][]float32{
		"a": {{1, 0, 0, 0}, {0, 1, 0, 0}, {0.6, 0.8, 0, 0}},
		"b": {{0, 0, 1, 0}, {0, 0.6, 0.8, 0}},
		"c": {{0, 0, 0, 1}, {0.8, 0, 0, 0.6}, {0, 0, 0, 1}},
	}
	for id, rows := range docs {
		d := tandem.Doc{ID: id, Fields: map[string]any{"text": "document " + id}, Vectors: map[string]tandem.Vectors{"ext": {Tokens: rows}}}
		if _, err := e.Index(ctx, []tandem.Doc{d}); err != nil {
			t.Fatal(err)
		}
	}
	q := [][]float32{{1, 0, 0, 0}, {0, 0, 0, 1}, {0, 0.6, 0.8, 0}}
	res, err := e.Search(ctx, Request{Retrievers: []string{"late"}, Vectors: map[string]tandem.Vectors{"ext": {Tokens: q}}, K: 3, Highlight: &HighlightRequest{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) != 3 {
		t.Fatalf("hits %v", ids(res.Hits))
	}
	for _, h := range res.Hits {
		lm := h.Highlights.Late[0]
		if lm.Retriever != "late:ext" || lm.Score != h.Sources[0].Score || len(lm.Tokens) != len(q) {
			t.Fatalf("%s: %+v, source %+v", h.ID, lm, h.Sources[0])
		}
		rows := docs[h.ID]
		for i, tm := range lm.Tokens {
			best, arg := math.Inf(-1), -1
			for j, r := range rows {
				var s float64
				for k := range tokDim {
					s += float64(q[i][k]) * float64(r[k])
				}
				if s > best+1e-6 {
					best, arg = s, j
				}
			}
			if tm.Query.Kind != tandem.TokenUnknown || tm.Doc == nil || tm.Doc.Kind != tandem.TokenUnknown || tm.Doc.Index != arg || math.Abs(tm.Score-best) > 1e-3 {
				t.Errorf("%s: query token %d: %+v (doc %+v), want row %d scoring %v", h.ID, i, tm, tm.Doc, arg, best)
			}
		}
	}
}
