package tandem

// Highlights is what a search's query matched in one hit's document: the
// fragments of its text fields where BM25's terms occur, and, for each
// late-interaction retriever, the document token each query token matched.
// Dense retrieval matches one pooled vector against another and has
// nothing token-level to show, so it contributes none.
//
// Every offset is in characters, Unicode code points counted from 0, as
// a half-open range [Start, End): not bytes, not UTF-16 units. A client
// marks a range without parsing any markup (no tag is inserted in any
// text, so nothing in a document can inject any): JavaScript slices
// Array.from(text), Python slices the str, Go slices []rune(text).
type Highlights struct {
	// Fields holds, per highlighted text field, the fragments of its
	// value that hold the query's BM25 terms, in the order they appear
	// in the value. Set when bm25 ran with query text; a field without a
	// match has no entry.
	Fields map[string][]Fragment `json:"fields,omitempty"`
	// Late holds, per late-interaction retriever that ran, in the
	// request's order, what each of its query tokens matched in the
	// document.
	Late []LateMatches `json:"late,omitempty"`
}

// Fragment is a stretch of a text field's value with its matched words
// marked.
type Fragment struct {
	// Text is the stretch: the value's characters [Start, End), which
	// the fragment's size bounds and word boundaries end where they can.
	Text  string `json:"text"`
	Start int    `json:"start"`
	End   int    `json:"end"`
	// Marks are the matched words, ranges of Text's characters, in order
	// and not overlapping.
	Marks []Mark `json:"marks"`
}

// Mark is one matched word of a fragment.
type Mark struct {
	Start int `json:"start"`
	End   int `json:"end"`
	// Term is the analysed query term the word carries: "run" for
	// "runs" with the English analyzer.
	Term string `json:"term"`
}

// LateMatches is one late-interaction retriever's explanation of a
// document's score: for each query token, the document token whose
// vector gave its largest inner product. ReAtt's "retrieval is
// attention", made visible.
type LateMatches struct {
	// Retriever is the retriever's name ("late:<model>",
	// "late-exact:<model>") and Scoring how it combines the maxima
	// ("avg-max", "sum-max").
	Retriever string `json:"retriever"`
	Scoring   string `json:"scoring"`
	// Score is the maxima combined (their mean for avg-max, their sum for
	// sum-max): the document's exact late-interaction score, the Score
	// of the hit's Source for this retriever whenever the retriever
	// ranked the document.
	Score float64 `json:"score"`
	// Tokens has one entry per query token, in the order of the query's
	// token output (special tokens, prefix, text, augmentation).
	Tokens []TokenMatch `json:"tokens"`
}

// TokenMatch is one query token and the document token it matched.
type TokenMatch struct {
	Query TokenRef `json:"query"`
	// Doc is the document token whose vector gave the largest inner
	// product with the query token's (the first among equals); nil only
	// when the document has no token.
	Doc *TokenRef `json:"doc,omitempty"`
	// Score is that inner product: the query token's maximum, before the
	// maxima are combined; 0 without Doc, which is what it then adds to
	// the score.
	Score float64 `json:"score"`
}

// Kinds of TokenRef.
const (
	// TokenText is a piece of the query text or of a text field's value.
	TokenText = "text"
	// TokenPrefix is a piece of the text prefix the model puts before
	// every query or document (E5's "query: " and "passage: ").
	TokenPrefix = "prefix"
	// TokenSpecial is a special token of the model: [CLS], [SEP], </s>.
	TokenSpecial = "special"
	// TokenMarker is ColBERT's query or document marker ([Q], [D]).
	TokenMarker = "marker"
	// TokenMask is one of ColBERT's query augmentation tokens ([MASK]).
	TokenMask = "mask"
	// TokenUnknown is a token Tandem cannot place: the model is external
	// (Tandem has no tokenizer for it), the request brought query token
	// vectors that are not its text's, or the document's stored tokens
	// are not its text's (it brought its own vectors).
	TokenUnknown = "unknown"
)

// TokenRef places one token of a query or a document.
type TokenRef struct {
	// Index is the token's row in its token matrix: the query's token
	// output, or the document's stored token matrix.
	Index int `json:"index"`
	// Token is the model vocabulary's form of the token ("run",
	// "##ning", "[CLS]"), "" for TokenUnknown.
	Token string `json:"token,omitempty"`
	// Kind is one of the Token* kinds.
	Kind string `json:"kind"`
	// Field is the text field a document token of kind TokenText lies
	// in.
	Field string `json:"field,omitempty"`
	// Start and End are the characters the token covers, for kind
	// TokenText (0 otherwise): in the query text, or in Field's value. A
	// word the model's vocabulary cannot spell is one unknown token
	// covering the whole word.
	Start int `json:"start"`
	End   int `json:"end"`
	// Text is those characters.
	Text string `json:"text,omitempty"`
}

// Marked returns the fragment's text with open and close around each
// marked word, for a terminal or a log (a page should mark the ranges
// itself rather than insert markup).
func (f Fragment) Marked(open, close string) string {
	r := []rune(f.Text)
	var b []rune
	at := 0
	for _, m := range f.Marks {
		if m.Start < at || m.End > len(r) || m.Start > m.End {
			continue
		}
		b = append(append(append(append(b, r[at:m.Start]...), []rune(open)...), r[m.Start:m.End]...), []rune(close)...)
		at = m.End
	}
	return string(append(b, r[at:]...))
}
