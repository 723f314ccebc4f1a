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
				ids = w.segment(ids, text[start:i])
				ids = append(ids, a.id)
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
	return w.segment(ids, text[start:])
}

// segment normalises, pre-tokenises and word-pieces one stretch of text
// between added tokens.
func (w *wordPiece) segment(ids []int64, s string) []int64 {
	if s == "" {
		return ids
	}
	s = w.norm.normalize(s)
	wordStart := -1
	for i, r := range s {
		switch {
		case unicode.IsSpace(r):
			if wordStart >= 0 {
				ids = w.word(ids, s[wordStart:i])
				wordStart = -1
			}
		case isBertPunct(r):
			if wordStart >= 0 {
				ids = w.word(ids, s[wordStart:i])
				wordStart = -1
			}
			ids = w.word(ids, s[i:i+utf8.RuneLen(r)])
		default:
			if wordStart < 0 {
				wordStart = i
			}
		}
	}
	if wordStart >= 0 {
		ids = w.word(ids, s[wordStart:])
	}
	return ids
}

// word appends the word pieces of one word: greedy longest match from the
// left, continuations prefixed; a word with a piece not in the vocabulary,
// or longer than maxChars characters, is one unknown token.
func (w *wordPiece) word(ids []int64, word string) []int64 {
	if utf8.RuneCountInString(word) > w.maxChars {
		return append(ids, w.unk)
	}
	n := len(ids)
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
				found = true
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if !found {
			return append(ids[:n], w.unk)
		}
		start = end
	}
	return ids
}

// isBertPunct is BertPreTokenizer's punctuation: ASCII punctuation (which
// includes symbols such as $ + < = > ^ ` | ~) or a Unicode P category.
func isBertPunct(r rune) bool {
	if r < 128 {
		return (r >= 33 && r <= 47) || (r >= 58 && r <= 64) || (r >= 91 && r <= 96) || (r >= 123 && r <= 126)
	}
	return unicode.IsPunct(r)
}
