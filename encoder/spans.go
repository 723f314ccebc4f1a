package encoder

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/sugarme/tokenizer"
)

// ErrNoOffsets means the tokenizer cannot say where its tokens are in the
// text: a BertNormalizer in front of a model other than WordPiece (the
// library path then tokenizes text Tandem normalised itself).
var ErrNoOffsets = errors.New("encoder: tokenizer gives no offsets")

// TokenKind says where a token of a text's token output comes from.
type TokenKind string

const (
	// KindText is a piece of the text (an added token typed in the text
	// included); TokenSpan.Start and End say where.
	KindText TokenKind = "text"
	// KindPrefix is a piece of the side's prefix (SideConfig.Prefix,
	// E5's "passage: ").
	KindPrefix TokenKind = "prefix"
	// KindSpecial is a special token of the template: [CLS], [SEP], </s>.
	KindSpecial TokenKind = "special"
	// KindMarker is the side's marker (ColBERT's [Q] or [D]).
	KindMarker TokenKind = "marker"
	// KindMask is an augmentation token (ColBERT's query [MASK]s).
	KindMask TokenKind = "mask"
)

// TokenSpan is one token of a text's token output and where it came from.
type TokenSpan struct {
	ID int32
	// Token is the vocabulary's form of the token: "run", "##ning",
	// "[CLS]", "▁cat".
	Token string
	Kind  TokenKind
	// Start and End are the token's byte range [Start, End) in the text,
	// on rune boundaries, for KindText; 0 otherwise. A word the
	// vocabulary cannot spell is one unknown token covering the word.
	// Where a tokenizer cannot align a piece (see wordPiece.segmentSpans)
	// the range covers the stretch of text the piece is in.
	Start, End int
}

// Spans tokenizes text as Encode does for side, without running the model,
// and returns one TokenSpan per token of the token output Encode would
// give for it (Tokens.IDs, in order: lead special tokens, the marker,
// the prefix, the text truncated to the side's maximum length, trail
// special tokens, augmentation; skipped tokens left out). The IDs are
// Tokens.IDs exactly: a caller maps a stored token row to the text by
// position. It is meant for highlighting, for a few texts at a time.
func (e *Encoder) Spans(side Side, text string) ([]TokenSpan, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return nil, ErrClosed
	}
	if side != Query && side != Document {
		return nil, fmt.Errorf("encoder: unknown side %d", side)
	}
	if len(text) > e.opts.MaxTextBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrBadText, len(text), e.opts.MaxTextBytes)
	}
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("%w: invalid UTF-8 at byte %d", ErrBadText, firstInvalid(text))
	}
	spec := e.sides[side]
	prefix := spec.cfg.Prefix
	content, offs, err := e.tok.contentOffsets(prefix + text)
	if err != nil {
		return nil, err
	}
	seq := spec.build(content)
	// The layout build makes: lead, marker, content, trail, augmentation.
	first := len(spec.lead) // position of the first content token
	if spec.marker >= 0 {
		first++
	}
	last := first + min(len(content), spec.budget()) // one past the last
	trail := last + len(spec.trail)
	out := make([]TokenSpan, 0, len(seq.ids))
	for p, id := range seq.ids {
		if !seq.keep[p] {
			continue
		}
		s := TokenSpan{ID: int32(id), Token: e.tok.idToken(id)}
		switch {
		case p < len(spec.lead) || (p >= last && p < trail):
			s.Kind = KindSpecial
		case p < first:
			s.Kind = KindMarker
		case p >= trail:
			s.Kind = KindMask
		default:
			o := offs[p-first]
			if len(prefix) > 0 && o[1] <= len(prefix) {
				s.Kind = KindPrefix
				break
			}
			// A piece that straddles the prefix's end is the text's.
			s.Kind, s.Start, s.End = KindText, max(0, o[0]-len(prefix)), o[1]-len(prefix)
		}
		out = append(out, s)
	}
	return out, nil
}

// idToken is the vocabulary's form of id, "" when it has none.
func (w *wordTokenizer) idToken(id int64) string {
	t, _ := w.tk.IdToToken(int(id))
	return t
}

// contentOffsets is content with each id's byte range [start, end) in
// text, on rune boundaries.
func (w *wordTokenizer) contentOffsets(text string) (ids []int64, offs [][2]int, err error) {
	if !utf8.ValidString(text) {
		return nil, nil, errors.New("invalid UTF-8")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tokenizer library failed: %v", r)
		}
	}()
	if w.fast != nil {
		ids = w.fast.encodeSpans(text, &offs)
		return ids, offs, nil
	}
	if w.bert != nil {
		return nil, nil, ErrNoOffsets
	}
	enc, err := w.tk.EncodeSingleSequence(tokenizer.NewInputSequence(text), 0, tokenizer.Byte)
	if err != nil {
		return nil, nil, err
	}
	ids = make([]int64, len(enc.Ids))
	offs = make([][2]int, len(enc.Ids))
	for i, id := range enc.Ids {
		ids[i] = int64(id)
		if i < len(enc.Offsets) && len(enc.Offsets[i]) == 2 {
			offs[i] = runeRange(text, enc.Offsets[i][0], enc.Offsets[i][1])
		}
	}
	return ids, offs, nil
}

// runeRange clamps [start, end) into text and widens it to rune
// boundaries.
func runeRange(text string, start, end int) [2]int {
	start, end = max(0, min(start, len(text))), max(0, min(end, len(text)))
	end = max(start, end)
	for start > 0 && !utf8.RuneStart(text[start]) {
		start--
	}
	for end < len(text) && !utf8.RuneStart(text[end]) {
		end++
	}
	return [2]int{start, end}
}
