package encoder

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// keptIDs is the token output's ids Encode would give for text: the ids
// of the prepared sequence that tokenOutput keeps.
func keptIDs(t *testing.T, e *Encoder, side Side, text string) []int32 {
	t.Helper()
	p, err := e.Prepare(Request{Side: side, Texts: []string{text}, Tokens: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for i, id := range p.seqs[0].ids {
		if p.seqs[0].keep[i] {
			out = append(out, int32(id))
		}
	}
	return out
}

// checkSpans checks Spans against the token output's ids and, for
// WordPiece, that each text token's range normalises to the token's
// characters (or, for one rune, to characters that hold them).
func checkSpans(t *testing.T, e *Encoder, side Side, text string) []TokenSpan {
	t.Helper()
	spans, err := e.Spans(side, text)
	if err != nil {
		t.Fatalf("%s %.40q: %v", side, text, err)
	}
	want := keptIDs(t, e, side, text)
	got := make([]int32, len(spans))
	for i, s := range spans {
		got[i] = s.ID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s %.40q: span ids %v, token output ids %v", side, text, got, want)
	}
	prev := 0
	for i, s := range spans {
		if s.Kind != KindText {
			if s.Start != 0 || s.End != 0 {
				t.Errorf("%s %.40q: token %d (%s %q) has range [%d,%d)", side, text, i, s.Kind, s.Token, s.Start, s.End)
			}
			continue
		}
		if s.Start < prev || s.End < s.Start || s.End > len(text) || !utf8.ValidString(text[s.Start:s.End]) {
			t.Fatalf("%s %.40q: token %d %q: range [%d,%d) out of order or off rune boundaries (previous start %d)", side, text, i, s.Token, s.Start, s.End, prev)
		}
		prev = s.Start
		w := e.tok.fast
		if w == nil || s.ID == int32(w.unk) {
			continue
		}
		piece := text[s.Start:s.End]
		if !isAdded(w, piece) {
			piece = strings.TrimSpace(w.norm.normalize(piece))
		}
		// A rune may normalise to several tokens (Hangul syllables to
		// jamo), which all cover it.
		if tok := strings.TrimPrefix(s.Token, w.prefix); !strings.Contains(piece, tok) || (utf8.RuneCountInString(text[s.Start:s.End]) > 1 && piece != tok) {
			t.Errorf("%s %.40q: token %d %q covers %q (normalised %q)", side, text, i, s.Token, text[s.Start:s.End], piece)
		}
	}
	return spans
}

func isAdded(w *wordPiece, s string) bool {
	for _, a := range w.added {
		if a.content == s {
			return true
		}
	}
	return false
}

// TestSpansMatchTokenOutput checks, for every installed default model and
// the tiny test models, that Spans lists exactly the token output's ids
// and that each text token's range holds that token's characters, on the
// parity texts (many scripts, accents, CJK, control characters, texts
// longer than the maximum length) and on SciFact abstracts when present.
func TestSpansMatchTokenOutput(t *testing.T) {
	extra := []string{"", "Running runners ran; the run-off RUNS.", "naïve café Ångström ﬁ", "[SEP] typed [MASK] in text", "x\u0301\u0323y", "a\u0000b\u200bc", "東京 is 東京",
		strings.Repeat("word ", 600), strings.Repeat("é", 150)}
	for _, name := range []string{"bge-small-en-v1.5", "e5-small-v2", "all-MiniLM-L6-v2"} {
		t.Run(name, func(t *testing.T) {
			e := load(t, installedModel(t, name), nil)
			texts := append(parityTexts(t, name), extra...)
			texts = append(texts, sciFactTexts(300)...)
			for _, text := range texts {
				for _, side := range []Side{Query, Document} {
					checkSpans(t, e, side, text)
				}
			}
		})
	}
	for _, dir := range []string{"testdata/tiny-bert", "testdata/tiny-colbert", "testdata/tiny-t5"} {
		t.Run(dir, func(t *testing.T) {
			e := load(t, dir, nil)
			for _, text := range extra {
				for _, side := range []Side{Query, Document} {
					checkSpans(t, e, side, text)
				}
			}
		})
	}
}

// TestSpanKinds checks the kinds of a layout with every part: E5's
// prefix, ColBERT's markers and query augmentation, the template's
// special tokens, truncation.
func TestSpanKinds(t *testing.T) {
	kinds := func(spans []TokenSpan) string {
		var b strings.Builder
		for _, s := range spans {
			b.WriteString(string(s.Kind)[:1])
		}
		return b.String()
	}
	t.Run("colbert", func(t *testing.T) {
		e := load(t, "testdata/tiny-colbert", nil)
		// Query: [CLS] [Q] two words [SEP], then [MASK]s up to 8.
		q := checkSpans(t, e, Query, "cat dog")
		if got := kinds(q); got != "smttsmmm" {
			t.Errorf("query kinds %s (%+v), want smttsmmm", got, q)
		}
		// Document: max length 16 keeps 13 text tokens; punctuation is
		// skipped from the output.
		d := checkSpans(t, e, Document, "a, cat sat on the mat dog run the cat sat on the mat")
		if got := kinds(d); got != "sm"+strings.Repeat("t", 12)+"s" {
			t.Errorf("document kinds %s, want sm, 12 text tokens (the comma skipped), s", got)
		}
		if last := d[len(d)-2]; last.Token != "on" || last.Start != 42 {
			t.Errorf("last kept text token %+v, want on at 42 (truncated at the maximum length)", last)
		}
	})
	t.Run("e5", func(t *testing.T) {
		e := load(t, installedModel(t, "e5-small-v2"), nil)
		text := "Cats purr."
		d := checkSpans(t, e, Document, text)
		// [CLS] passage : cats pu ##rr . [SEP]
		if got := kinds(d); !strings.HasPrefix(got, "sppt") || !strings.HasSuffix(got, "ts") {
			t.Fatalf("kinds %s (%+v), want s, the prefix's two tokens, text..., s", got, d)
		}
		if d[3].Token != "cats" || text[d[3].Start:d[3].End] != "Cats" {
			t.Errorf("first text token %+v, want cats at Cats", d[3])
		}
	})
}

// TestSpansWhereNormalisingRunesDiffers: two combining marks of classes
// 226 and 216 that strip_accents keeps (they are Mc, not Mn) are
// reordered by NFD across runes, so rune-by-rune normalisation differs
// from the stretch's. The ids must still be encode's, and each token of
// the stretch covers the whole stretch.
func TestSpansWhereNormalisingRunesDiffers(t *testing.T) {
	w, err := loadTokenizer("testdata/tiny-bert/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if w.fast == nil {
		t.Fatal("tiny-bert has no fast tokenizer")
	}
	text := "cat \U0001D16D\U0001D165 dog [SEP] cat"
	aligned, _, _ := w.bert.normalizeAligned("cat \U0001D16D\U0001D165 dog ")
	if aligned == w.bert.normalize("cat \U0001D16D\U0001D165 dog ") {
		t.Fatal("the marks were not reordered: the test does not reach the fallback")
	}
	var spans [][2]int
	ids := w.fast.encodeSpans(text, &spans)
	if want := w.fast.encode(text); !slices.Equal(ids, want) {
		t.Fatalf("ids %v, encode %v", ids, want)
	}
	sep := strings.Index(text, "[SEP]")
	for i, s := range spans {
		switch {
		case s[0] < sep && s != [2]int{0, sep}:
			t.Errorf("token %d: %v, want the stretch before [SEP], [0,%d)", i, s, sep)
		case s[0] == sep && s != [2]int{sep, sep + 5}:
			t.Errorf("[SEP]: %v", s)
		case s[0] > sep && text[s[0]:s[1]] != "cat":
			t.Errorf("token %d after [SEP]: %v %q, want cat (aligned again)", i, s, text[s[0]:s[1]])
		}
	}
}

// BenchmarkSpansSciFact is the cost of Spans for one SciFact abstract
// (title and text), the tokenization a late-interaction highlight redoes
// per hit returned.
func BenchmarkSpansSciFact(b *testing.B) {
	texts := sciFactTexts(200)
	if len(texts) == 0 {
		b.Skip("SciFact not found in ../../shared/data")
	}
	e := load(b, installedModel(b, "bge-small-en-v1.5"), nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Spans(Document, texts[i%len(texts)]); err != nil {
			b.Fatal(err)
		}
	}
}
