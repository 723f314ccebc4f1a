package encoder

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// wordPiece is the BERT tokenizer pipeline of Hugging Face tokenizers
// (added tokens, then BertNormalizer, BertPreTokenizer and WordPiece),
// written out for the case that every BERT-family model has. It replaces
// sugarme/tokenizer there because that library's per-character alignment
// bookkeeping made a 330-token SciFact abstract cost about 1.7 ms, which
// was 5% of an int8 model's encoding time. The steps follow
// tokenizers/src/{tokenizer/added_vocabulary.rs, pre_tokenizers/bert.rs,
// models/wordpiece/mod.rs}; the parity fixtures pin the result to Hugging
// Face's on texts in many scripts.
type wordPiece struct {
	vocab    map[string]int64
	unk      int64
	prefix   string // continuing_subword_prefix, "##"
	maxChars int    // max_input_chars_per_word
	// added are the added tokens matched in the raw text before
	// normalisation (those with normalized: false), longest first.
	added []addedToken
	first [256]bool // first bytes of the added tokens
	norm  *bertNormalizer
}

type addedToken struct {
	content string
	id      int64
}

// wordPieceConfig is the part of tokenizer.json that decides whether the
// fast path applies, and configures it.
type wordPieceConfig struct {
	Model struct {
		Type                    string           `json:"type"`
		UnkToken                string           `json:"unk_token"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		MaxInputCharsPerWord    int              `json:"max_input_chars_per_word"`
		Vocab                   map[string]int64 `json:"vocab"`
	} `json:"model"`
	PreTokenizer *struct {
		Type string `json:"type"`
	} `json:"pre_tokenizer"`
	AddedTokens []struct {
		ID         int64  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
}

// newWordPiece returns the fast tokenizer for a tokenizer.json that is
// exactly BertNormalizer + BertPreTokenizer + WordPiece, with added tokens
// that match plainly; nil otherwise, and the general library is used.
func newWordPiece(data []byte, norm *bertNormalizer) *wordPiece {
	if norm == nil {
		return nil
	}
	var c wordPieceConfig
	if json.Unmarshal(data, &c) != nil || c.Model.Type != "WordPiece" || c.PreTokenizer == nil || c.PreTokenizer.Type != "BertPreTokenizer" {
		return nil
	}
	unk, ok := c.Model.Vocab[c.Model.UnkToken]
	if !ok || len(c.Model.Vocab) == 0 {
		return nil
	}
	w := &wordPiece{vocab: c.Model.Vocab, unk: unk, prefix: "##", maxChars: c.Model.MaxInputCharsPerWord, norm: norm}
	if c.Model.ContinuingSubwordPrefix != nil {
		w.prefix = *c.Model.ContinuingSubwordPrefix
	}
	if w.maxChars == 0 {
		w.maxChars = 100
	}
	for _, a := range c.AddedTokens {
		if a.SingleWord || a.LStrip || a.RStrip || a.Normalized || a.Content == "" {
			return nil // matching rules this path does not implement
		}
		w.added = append(w.added, addedToken{a.Content, a.ID})
		w.first[a.Content[0]] = true
	}
	// Leftmost-longest: at a position, the longest added token wins.
	for i := 1; i < len(w.added); i++ {
		for j := i; j > 0 && len(w.added[j].content) > len(w.added[j-1].content); j-- {
			w.added[j], w.added[j-1] = w.added[j-1], w.added[j]
		}
	}
	return w
}

// encode returns the ids of text, without the template's special tokens.
func (w *wordPiece) encode(text string) []int64 {
	return w.encodeSpans(text, nil)
}

// encodeSpans is encode that also appends, when spans is not nil, each
// id's byte range in text (see encodeOffsets).
func (w *wordPiece) encodeSpans(text string, spans *[][2]int) []int64 {
	ids := make([]int64, 0, len(text)/4+2)
	// Split out added tokens, which the raw text matches exactly.
	start := 0
	for i := 0; i < len(text); {
		if !w.first[text[i]] {
			i++
			continue
		}
		matched := false
		for _, a := range w.added {
			if strings.HasPrefix(text[i:], a.content) {
				ids = w.segmentSpans(ids, text[start:i], start, spans)
				ids = append(ids, a.id)
				if spans != nil {
					*spans = append(*spans, [2]int{i, i + len(a.content)})
				}
				i += len(a.content)
				start = i
				matched = true
				break
			}
		}
		if !matched {
			i++
		}
	}
	return w.segmentSpans(ids, text[start:], start, spans)
}

// segmentSpans is segment for a stretch of text at byte base of the whole
// text, appending, when spans is not nil, each id's byte range in the
// whole text. The ranges come from normalising rune by rune
// (bertNormalizer.normalizeAligned); where that differs from normalising
// the stretch at once (combining marks reordered across runes, which
// never happens in practice), the ids still come from the stretch
// normalised at once, as encode's, and each gets the whole stretch's
// range.
func (w *wordPiece) segmentSpans(ids []int64, s string, base int, spans *[][2]int) []int64 {
	if spans == nil || s == "" {
		return w.segment(ids, s)
	}
	aligned, from, to := w.norm.normalizeAligned(s)
	normal := aligned
	if !isASCII(s) {
		// Only canonical reordering of combining marks can differ.
		normal = w.norm.normalize(s)
	}
	n := len(ids)
	if aligned != normal {
		ids = w.pretokenize(ids, normal, nil)
		for range ids[n:] {
			*spans = append(*spans, [2]int{base, base + len(s)})
		}
		return ids
	}
	var local [][2]int
	ids = w.pretokenize(ids, normal, &local)
	for _, r := range local {
		*spans = append(*spans, [2]int{base + from[r[0]], base + to[r[1]-1]})
	}
	return ids
}

// segment normalises, pre-tokenises and word-pieces one stretch of text
// between added tokens.
func (w *wordPiece) segment(ids []int64, s string) []int64 {
	if s == "" {
		return ids
	}
	return w.pretokenize(ids, w.norm.normalize(s), nil)
}

// pretokenize splits normalised text into words at whitespace and
// punctuation and word-pieces each, appending, when spans is not nil,
// each id's byte range in s.
func (w *wordPiece) pretokenize(ids []int64, s string, spans *[][2]int) []int64 {
	wordStart := -1
	for i, r := range s {
		switch {
		case unicode.IsSpace(r):
			if wordStart >= 0 {
				ids = w.word(ids, s[wordStart:i], wordStart, spans)
				wordStart = -1
			}
		case isBertPunct(r):
			if wordStart >= 0 {
				ids = w.word(ids, s[wordStart:i], wordStart, spans)
				wordStart = -1
			}
			ids = w.word(ids, s[i:i+utf8.RuneLen(r)], i, spans)
		default:
			if wordStart < 0 {
				wordStart = i
			}
		}
	}
	if wordStart >= 0 {
		ids = w.word(ids, s[wordStart:], wordStart, spans)
	}
	return ids
}

// word appends the word pieces of one word: greedy longest match from the
// left, continuations prefixed; a word with a piece not in the vocabulary,
// or longer than maxChars characters, is one unknown token. When spans is
// not nil it appends each piece's byte range, the word being at byte
// base.
func (w *wordPiece) word(ids []int64, word string, base int, spans *[][2]int) []int64 {
	if utf8.RuneCountInString(word) > w.maxChars {
		return w.unknown(ids, len(ids), len(word), base, spans)
	}
	n := len(ids)
	ns := 0
	if spans != nil {
		ns = len(*spans)
	}
	var buf []byte
	for start := 0; start < len(word); {
		end := len(word)
		found := false
		for start < end {
			var id int64
			var ok bool
			if start == 0 {
				id, ok = w.vocab[word[start:end]]
			} else {
				buf = append(append(buf[:0], w.prefix...), word[start:end]...)
				id, ok = w.vocab[string(buf)]
			}
			if ok {
				ids = append(ids, id)
				if spans != nil {
					*spans = append(*spans, [2]int{base + start, base + end})
				}
				found = true
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if !found {
			if spans != nil {
				*spans = (*spans)[:ns]
			}
			return w.unknown(ids, n, len(word), base, spans)
		}
		start = end
	}
	return ids
}

// unknown replaces the pieces from n on with the unknown token, which
// covers the whole word.
func (w *wordPiece) unknown(ids []int64, n, wordLen, base int, spans *[][2]int) []int64 {
	if spans != nil {
		*spans = append(*spans, [2]int{base, base + wordLen})
	}
	return append(ids[:n], w.unk)
}

// isBertPunct is BertPreTokenizer's punctuation: ASCII punctuation (which
// includes symbols such as $ + < = > ^ ` | ~) or a Unicode P category.
func isBertPunct(r rune) bool {
	if r < 128 {
		return (r >= 33 && r <= 47) || (r >= 58 && r <= 64) || (r >= 91 && r <= 96) || (r >= 123 && r <= 126)
	}
	return unicode.IsPunct(r)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
