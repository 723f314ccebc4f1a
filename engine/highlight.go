package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/latecollect"
	"github.com/tandemsearch/tandem/sparse"
	"github.com/tandemsearch/tandem/storage"
)

// HighlightRequest asks a search to show, on each hit it returns, what its
// query matched (tandem.Hit.Highlights): the fragments of text fields that
// hold BM25's terms, when bm25 runs with query text, and for each
// late-interaction retriever the document token each query token matched.
// Dense retrieval has nothing token-level to show and adds nothing. Zero
// fields mean defaults.
type HighlightRequest struct {
	// Fields lists the text fields to make fragments of; empty means the
	// fields the search restricts BM25 to (Request.Fields), or every
	// text field of the schema when it does not.
	Fields []string `json:"fields,omitempty"`
	// FragmentSize is the most characters of a fragment, 0 meaning
	// DefaultFragmentSize; a value no longer is one fragment. A word
	// matched is never cut, so a fragment is longer only when one word
	// is.
	FragmentSize int `json:"fragment_size,omitempty"`
	// Fragments is the most fragments per field, 0 meaning
	// DefaultFragments.
	Fragments int `json:"fragments,omitempty"`
}

// Highlight defaults and limits.
const (
	// DefaultFragmentSize is about two lines of a result page, the
	// length of a web search snippet.
	DefaultFragmentSize = 160
	DefaultFragments    = 3
	// MaxFragmentSize lets a fragment hold a whole text field (its
	// default limit, tandem.DefaultMaxTextBytes, is at least as many
	// characters).
	MaxFragmentSize = tandem.DefaultMaxTextBytes
	MaxFragments    = 100
	// MaxHighlightHits bounds K for a search that highlights: each hit
	// highlighted costs an analysis of its fields and, per
	// late-interaction retriever, a tokenization and an exact scoring of
	// its tokens (about 0.25 ms for a SciFact abstract).
	MaxHighlightHits = 1000
)

// highlightPlan is a HighlightRequest checked against the schema.
type highlightPlan struct {
	fields      []tandem.Field
	size, frags int
}

// planHighlight checks a search's HighlightRequest (nil: none) against
// schema, naming the parameter or field at fault. searched are the fields
// the search restricts BM25 to (Request.Fields, checked).
func planHighlight(schema *tandem.Schema, h *HighlightRequest, k int, searched map[string]float64) (*highlightPlan, error) {
	if h == nil {
		return nil, nil
	}
	hp := &highlightPlan{size: h.FragmentSize, frags: h.Fragments}
	switch {
	case h.FragmentSize < 0 || h.FragmentSize > MaxFragmentSize:
		return nil, fmt.Errorf("%w: highlight.fragment_size %d: want 1 to %d characters, or 0 for %d", ErrBadRequest, h.FragmentSize, MaxFragmentSize, DefaultFragmentSize)
	case h.Fragments < 0 || h.Fragments > MaxFragments:
		return nil, fmt.Errorf("%w: highlight.fragments %d: want 1 to %d, or 0 for %d", ErrBadRequest, h.Fragments, MaxFragments, DefaultFragments)
	case k > MaxHighlightHits:
		return nil, fmt.Errorf("%w: highlight: k=%d: a search highlights at most %d hits", ErrBadRequest, k, MaxHighlightHits)
	}
	if hp.size == 0 {
		hp.size = DefaultFragmentSize
	}
	if hp.frags == 0 {
		hp.frags = DefaultFragments
	}
	if len(h.Fields) == 0 {
		hp.fields = schema.TextFields()
		if len(searched) > 0 {
			hp.fields = slices.DeleteFunc(hp.fields, func(f tandem.Field) bool { _, ok := searched[f.Name]; return !ok })
		}
		return hp, nil
	}
	for _, name := range h.Fields {
		f, ok := schema.Field(name)
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: highlight.fields: %w", ErrBadRequest, &tandem.FieldError{Field: name, Err: tandem.ErrUnknownField})
		case f.Type != tandem.Text:
			return nil, fmt.Errorf("%w: highlight.fields: %w", ErrBadRequest, &tandem.FieldError{Field: name, Err: fmt.Errorf("%w: a %s field; only text fields are highlighted", tandem.ErrWrongType, f.Type)})
		case slices.ContainsFunc(hp.fields, func(g tandem.Field) bool { return g.Name == name }):
			return nil, fmt.Errorf("%w: highlight.fields: field %q listed twice", ErrBadRequest, name)
		}
		hp.fields = append(hp.fields, f)
	}
	return hp, nil
}

// highlighter computes the highlights of one search's hits. It is not
// safe for concurrent use (its explainers keep scratch buffers).
type highlighter struct {
	e    *Engine
	p    *Plan
	bm25 []fieldMarker      // empty unless bm25 ran with text
	late []*lateHighlighter // one per late-interaction retriever
}

// fieldMarker marks one text field.
type fieldMarker struct {
	field tandem.Field
	h     *sparse.Highlighter
}

// lateHighlighter explains one late-interaction retriever's scores.
type lateHighlighter struct {
	name    string
	m       *model
	scoring latecollect.Scoring
	x       *latecollect.Explainer
	query   []tandem.TokenRef // one per query token
	blob    []byte            // scratch for the blobs read
}

// newHighlighter prepares p's highlights. qtokens(i) is the row-major
// query token matrix late-interaction retriever p.rets[i] searched with.
func (e *Engine) newHighlighter(p *Plan, qtokens func(i int) []float32) (*highlighter, error) {
	h := &highlighter{e: e, p: p}
	text := p.req.Text
	bm25 := slices.ContainsFunc(p.rets, func(r retriever) bool { return r.kind == "bm25" })
	if bm25 && text != "" {
		byAnalyzer := map[string]*sparse.Highlighter{}
		for _, f := range p.hl.fields {
			sh, ok := byAnalyzer[f.Analyzer]
			if !ok {
				var err error
				if sh, err = e.sparse.Highlighter(f.Analyzer, text); err != nil {
					return nil, fmt.Errorf("engine: highlight field %q: %w", f.Name, err)
				}
				byAnalyzer[f.Analyzer] = sh
			}
			h.bm25 = append(h.bm25, fieldMarker{f, sh})
		}
	}
	for i, r := range p.rets {
		if r.kind != "late" {
			continue
		}
		q := qtokens(i)
		dim := r.model.spec.TokenDim
		mode := latecollect.Candidates
		if r.exact {
			mode = latecollect.Reference
		}
		x, err := latecollect.NewExplainer(q, dim, p.scoring, mode)
		if err != nil {
			return nil, fmt.Errorf("engine: highlight %s: %w", r.name, err)
		}
		lh := &lateHighlighter{name: r.name, m: r.model, scoring: p.scoring, x: x}
		lh.query, err = queryTokenRefs(r.model.enc, text, len(q)/dim)
		if err != nil {
			return nil, fmt.Errorf("engine: highlight %s: %w", r.name, err)
		}
		h.late = append(h.late, lh)
	}
	return h, nil
}

// queryTokenRefs places the n query tokens of a query text: the model's
// tokenization of the text when it has as many tokens (always so when
// the search encoded the text itself), else every token TokenUnknown (and
// so without text: the request brought the vectors).
func queryTokenRefs(enc *encoder.Encoder, text string, n int) ([]tandem.TokenRef, error) {
	out := make([]tandem.TokenRef, n)
	for i := range out {
		out[i] = tandem.TokenRef{Index: i, Kind: tandem.TokenUnknown}
	}
	if enc == nil || text == "" {
		return out, nil
	}
	spans, err := enc.Spans(encoder.Query, text)
	if err != nil && !errors.Is(err, encoder.ErrNoOffsets) {
		return nil, err
	}
	if len(spans) != n {
		return out, nil
	}
	t := newCharText(text)
	for i, s := range spans {
		out[i] = tokenRef(i, s, t, "")
	}
	return out, nil
}

// tokenRef is the TokenRef of token i, a piece of t (when of kind text)
// in field (empty for the query).
func tokenRef(i int, s encoder.TokenSpan, t charText, field string) tandem.TokenRef {
	ref := tandem.TokenRef{Index: i, Token: s.Token, Kind: string(s.Kind)}
	if s.Kind == encoder.KindText {
		ref.Field = field
		ref.Start, ref.End, ref.Text = t.char(s.Start), t.char(s.End), t.s[s.Start:s.End]
	}
	return ref
}

// hit computes the highlights of document num, whose fields are fields.
func (h *highlighter) hit(num uint64, fields map[string]any) (*tandem.Highlights, error) {
	out := &tandem.Highlights{}
	for _, fm := range h.bm25 {
		v, _ := fields[fm.field.Name].(string)
		marks := fm.h.Marks(v)
		if len(marks) == 0 {
			continue
		}
		if out.Fields == nil {
			out.Fields = map[string][]tandem.Fragment{}
		}
		out.Fields[fm.field.Name] = fragments(newCharText(v), marks, h.p.hl.size, h.p.hl.frags)
	}
	if len(h.late) > 0 {
		// The text the models encoded: the text fields in schema order
		// (docText), and where each lies in it.
		text, parts := docTextParts(h.p.schema.TextFields(), fields)
		for _, lh := range h.late {
			lm, err := lh.explain(h.e.st, num, text, parts, fields)
			if err != nil {
				return nil, err
			}
			if lm != nil {
				out.Late = append(out.Late, *lm)
			}
		}
	}
	return out, nil
}

// explain is the late-interaction retriever's explanation of document
// num's score, nil when the document has no stored tokens (or they are
// damaged: a search does not fail on one document's highlight).
func (lh *lateHighlighter) explain(st *storage.Store, num uint64, text string, parts []textPart, fields map[string]any) (*tandem.LateMatches, error) {
	blob, ok, err := st.ReadBlob(num, latecollect.BlobName(lh.m.spec.Name), lh.blob[:0])
	switch {
	case errors.Is(err, storage.ErrCorruption):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("engine: highlight %s: read tokens of document %d: %w", lh.name, num, err)
	case !ok:
		return nil, nil
	}
	lh.blob = blob
	ex, err := lh.x.Explain(blob)
	if errors.Is(err, latecollect.ErrCorruption) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engine: highlight %s: document %d: %w", lh.name, num, err)
	}
	_, _, count, err := latecollect.BlobInfo(blob)
	if err != nil {
		return nil, nil // Explain checked it
	}
	doc, err := lh.docTokens(count, text, parts, fields)
	if err != nil {
		return nil, err
	}
	lm := &tandem.LateMatches{Retriever: lh.name, Scoring: string(lh.scoring), Score: float64(ex.Score), Tokens: make([]tandem.TokenMatch, len(ex.Max))}
	for i := range ex.Max {
		tm := tandem.TokenMatch{Query: lh.query[i]}
		if r := ex.Row[i]; r >= 0 { // else no token: it adds 0 to the score
			ref := doc(r)
			tm.Doc, tm.Score = &ref, float64(ex.Max[i])
		}
		lm.Tokens[i] = tm
	}
	return lm, nil
}

// docTokens returns the TokenRef of each row of a document's stored token
// matrix: the model's tokenization of the document's text when it has as
// many tokens as the blob rows (a document the model encoded), else
// TokenUnknown.
func (lh *lateHighlighter) docTokens(count int, text string, parts []textPart, fields map[string]any) (func(int) tandem.TokenRef, error) {
	unknown := func(r int) tandem.TokenRef { return tandem.TokenRef{Index: r, Kind: tandem.TokenUnknown} }
	if lh.m.enc == nil {
		return unknown, nil
	}
	spans, err := lh.m.enc.Spans(encoder.Document, text)
	if err != nil && !errors.Is(err, encoder.ErrNoOffsets) {
		return nil, fmt.Errorf("engine: highlight %s: %w", lh.name, err)
	}
	if len(spans) != count {
		return unknown, nil
	}
	texts := map[string]charText{}
	return func(r int) tandem.TokenRef {
		s := spans[r]
		if s.Kind != encoder.KindText {
			return tokenRef(r, s, charText{}, "")
		}
		// The part (field) holding the token's last byte; a token may
		// begin on the space that joins two values (a Metaspace "▁").
		i, _ := slices.BinarySearchFunc(parts, s.End-1, func(p textPart, b int) int {
			if p.end <= b {
				return -1
			}
			if p.start > b {
				return 1
			}
			return 0
		})
		if i >= len(parts) || s.End-1 < parts[i].start {
			return tandem.TokenRef{Index: r, Token: s.Token, Kind: tandem.TokenUnknown}
		}
		p := parts[i]
		t, ok := texts[p.field]
		if !ok {
			v, _ := fields[p.field].(string)
			t = newCharText(v)
			texts[p.field] = t
		}
		s.Start, s.End = max(s.Start, p.start)-p.start, s.End-p.start
		return tokenRef(r, s, t, p.field)
	}, nil
}

// textPart is where one field's value lies in the text a model encoded
// for a document: bytes [start, end) of it.
type textPart struct {
	field      string
	start, end int
}

// charText converts a string's byte offsets to character offsets and
// back.
type charText struct {
	s string
	// starts holds the byte offset of each character, then len(s); nil
	// when s is ASCII and the offsets are the same.
	starts []int32
}

func newCharText(s string) charText {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			starts := make([]int32, 0, len(s)+1)
			for b := range s {
				starts = append(starts, int32(b))
			}
			return charText{s: s, starts: append(starts, int32(len(s)))}
		}
	}
	return charText{s: s}
}

// len is the number of characters.
func (t charText) len() int {
	if t.starts == nil {
		return len(t.s)
	}
	return len(t.starts) - 1
}

// char is the character offset of byte offset b, a character's start or
// len(s).
func (t charText) char(b int) int {
	if t.starts == nil {
		return b
	}
	i, _ := slices.BinarySearch(t.starts, int32(b))
	return i
}

// byteAt is the byte offset of character c.
func (t charText) byteAt(c int) int {
	if t.starts == nil {
		return c
	}
	return int(t.starts[c])
}

// space reports whether character c is white space.
func (t charText) space(c int) bool {
	r, _ := utf8.DecodeRuneInString(t.s[t.byteAt(c):])
	return unicode.IsSpace(r)
}

// mark is a matched word, in characters.
type mark struct {
	start, end int
	term       string
}

// maxAnchors bounds the windows fragments considers, and maxCounted the
// marks it counts in each, so that a value with many matches costs at
// most about a million steps.
const (
	maxAnchors = 1000
	maxCounted = 1000
)

// maxWordBack is how far back a fragment's start moves to begin a word
// (beyond, it moves forward to the next word).
const maxWordBack = 16

// fragments chooses up to n fragments of at most size characters of t
// (longer only to hold a matched word whole), holding the most distinct
// terms, then the most marks, the earliest first among equals; they do
// not overlap and come in the order of t. A fragment begins a little
// before its first mark, and both ends move to word boundaries where
// they can. A value of at most size characters is one fragment.
func fragments(t charText, byteMarks []sparse.Mark, size, n int) []tandem.Fragment {
	if len(byteMarks) == 0 {
		return nil
	}
	marks := make([]mark, len(byteMarks))
	for i, m := range byteMarks {
		marks[i] = mark{t.char(m.Start), t.char(m.End), m.Term}
	}
	total := t.len()
	if total <= size {
		return []tandem.Fragment{fragment(t, 0, total, marks)}
	}
	type window struct{ start, end, terms, count int }
	var cands []window
	seen := map[string]int{}
	for i, m := range marks[:min(len(marks), maxAnchors)] {
		// Some context before the mark, as the size leaves room for.
		start := min(m.start, max(0, m.start-size/8, m.end-size))
		// To the start of the word it falls in, or of the next one
		// when that word is long or would not leave room.
		back := start
		for back > 0 && start-back < maxWordBack && !t.space(back-1) {
			back--
		}
		if (back == 0 || t.space(back-1)) && m.end-back <= size {
			start = back
		}
		for start < m.start && start > 0 && !t.space(start-1) {
			start++
		}
		for start < m.start && t.space(start) {
			start++
		}
		end := min(total, start+size)
		for end > m.end && end < total && !t.space(end) {
			end-- // to a word's end
		}
		end = max(end, m.end)
		// No mark is cut: one that would be is left out.
		for j := i + 1; j < len(marks) && marks[j].start < end; j++ {
			if marks[j].end > end {
				end = marks[j].start
				break
			}
		}
		for end > m.end && t.space(end-1) {
			end--
		}
		w := window{start: start, end: end}
		clear(seen)
		first, _ := slices.BinarySearchFunc(marks, start, func(m mark, s int) int { return cmp.Compare(m.start, s) })
		for j := first; j < len(marks) && marks[j].end <= end && w.count < maxCounted; j++ {
			w.count++
			if seen[marks[j].term] == 0 {
				w.terms++
			}
			seen[marks[j].term]++
		}
		cands = append(cands, w)
	}
	slices.SortStableFunc(cands, func(a, b window) int {
		if c := cmp.Compare(b.terms, a.terms); c != 0 {
			return c
		}
		return cmp.Compare(b.count, a.count)
	})
	var chosen []window
	for _, w := range cands {
		if len(chosen) == n {
			break
		}
		if !slices.ContainsFunc(chosen, func(c window) bool { return w.start < c.end && c.start < w.end }) {
			chosen = append(chosen, w)
		}
	}
	slices.SortFunc(chosen, func(a, b window) int { return cmp.Compare(a.start, b.start) })
	out := make([]tandem.Fragment, len(chosen))
	for i, w := range chosen {
		out[i] = fragment(t, w.start, w.end, marks)
	}
	return out
}

// fragment is characters [start, end) of t with the marks inside.
func fragment(t charText, start, end int, marks []mark) tandem.Fragment {
	f := tandem.Fragment{Text: t.s[t.byteAt(start):t.byteAt(end)], Start: start, End: end, Marks: []tandem.Mark{}}
	first, _ := slices.BinarySearchFunc(marks, start, func(m mark, s int) int { return cmp.Compare(m.start, s) })
	for _, m := range marks[first:] {
		if m.start >= end {
			break
		}
		if m.end <= end {
			f.Marks = append(f.Marks, tandem.Mark{Start: m.start - start, End: m.end - start, Term: m.term})
		}
	}
	return f
}

// highlightHits sets the highlights of res's hits (Plan.hl), from the
// fields they carry, or from their stored documents when they carry none
// (IDsOnly). rets are the retrievers as they ran.
func (e *Engine) highlightHits(ctx context.Context, p *Plan, rets []retriever, res *Result) error {
	if len(res.Hits) == 0 {
		return nil
	}
	h, err := e.newHighlighter(p, func(i int) []float32 { return rets[i].tokens })
	if err != nil {
		return err
	}
	var docs map[uint64]tandem.Doc
	if p.req.IDsOnly {
		nums := make([]uint64, len(res.Hits))
		for i, hit := range res.Hits {
			nums[i] = hit.DocNum
		}
		if docs, err = e.st.GetMany(nums); err != nil {
			return fmt.Errorf("engine: highlight: load hits: %w", err)
		}
	}
	for i := range res.Hits {
		if err := ctx.Err(); err != nil {
			return err
		}
		hit := &res.Hits[i]
		fields := hit.Fields
		if docs != nil {
			d, ok := docs[hit.DocNum]
			if !ok {
				continue // deleted since it was ranked
			}
			fields = d.Fields
		}
		if hit.Highlights, err = h.hit(hit.DocNum, fields); err != nil {
			return err
		}
	}
	return nil
}

// Highlight computes req's highlights (req.Highlight must be set) of the
// documents with the given ids that this engine holds, by id: what a
// coordinator asks of the shard holding each document of a sharded
// search's page, where the hits are fused. Late-interaction query tokens
// come from req.Vectors (EncodeQuery put them there), else the text is
// encoded; a document's late-interaction score is explained from its
// stored tokens, exactly as one engine holding every document scores it.
// An id this engine does not hold is left out.
func (s *Shard) Highlight(ctx context.Context, req Request, ids []string) (map[string]*tandem.Highlights, error) {
	e := s.e
	p, err := e.enterPlan(req)
	if err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	if p.hl == nil {
		return nil, fmt.Errorf("%w: highlight: the request asks for no highlights", ErrBadRequest)
	}
	if len(ids) > MaxHighlightHits {
		return nil, fmt.Errorf("%w: highlight: %d documents (at most %d)", ErrBadRequest, len(ids), MaxHighlightHits)
	}
	q := newQueries(p)
	tokens := make([][]float32, len(p.rets))
	for i := range p.rets {
		if r := &p.rets[i]; r.kind == "late" {
			if tokens[i], err = q.tokens(ctx, r); err != nil {
				return nil, err
			}
		}
	}
	h, err := e.newHighlighter(p, func(i int) []float32 { return tokens[i] })
	if err != nil {
		return nil, err
	}
	nums := make([]uint64, 0, len(ids))
	for _, id := range ids {
		n, ok, err := e.st.Lookup(id)
		if err != nil {
			return nil, fmt.Errorf("engine: highlight %q: %w", id, err)
		}
		if ok {
			nums = append(nums, n)
		}
	}
	docs, err := e.st.GetMany(nums)
	if err != nil {
		return nil, fmt.Errorf("engine: highlight: %w", err)
	}
	out := make(map[string]*tandem.Highlights, len(docs))
	for num, d := range docs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if out[d.ID], err = h.hit(num, d.Fields); err != nil {
			return nil, err
		}
	}
	return out, nil
}
