package encoder

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// bertNormalizer is Hugging Face's BertNormalizer, reimplemented because
// sugarme/tokenizer v0.3.0 differs from it on accents, CJK characters and
// control characters (the parity test caught all three). Its steps and
// their order follow tokenizers/src/normalizers/bert.rs.
type bertNormalizer struct {
	CleanText          bool  `json:"clean_text"`
	HandleChineseChars bool  `json:"handle_chinese_chars"`
	StripAccents       *bool `json:"strip_accents"` // null: follow Lowercase
	Lowercase          bool  `json:"lowercase"`
}

func (n *bertNormalizer) normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if n.CleanText {
			if r == 0 || r == 0xFFFD || isControl(r) {
				continue
			}
			if isWhitespace(r) {
				r = ' '
			}
		}
		if n.HandleChineseChars && isChinese(r) {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(r)
	}
	out := b.String()
	strip := n.Lowercase
	if n.StripAccents != nil {
		strip = *n.StripAccents
	}
	if strip {
		out = norm.NFD.String(out)
		out = strings.Map(func(r rune) rune {
			if unicode.Is(unicode.Mn, r) {
				return -1
			}
			return r
		}, out)
	}
	if n.Lowercase {
		out = strings.ToLower(out)
	}
	return out
}

// normalizeAligned normalises s rune by rune, with the steps of
// normalize, and returns for each byte of the result the byte range in s
// of the rune it came from: from[k] and to[k]. It equals normalize(s)
// unless canonical reordering moves a combining mark that survives
// across a rune boundary; the caller compares the two.
func (n *bertNormalizer) normalizeAligned(s string) (out string, from, to []int) {
	var b strings.Builder
	b.Grow(len(s))
	from, to = make([]int, 0, len(s)), make([]int, 0, len(s))
	strip := n.Lowercase
	if n.StripAccents != nil {
		strip = *n.StripAccents
	}
	var piece []byte
	for i, r := range s {
		size := utf8.RuneLen(r)
		if r == utf8.RuneError {
			_, size = utf8.DecodeRuneInString(s[i:])
		}
		piece = piece[:0]
		switch {
		case n.CleanText && (r == 0 || r == 0xFFFD || isControl(r)):
		case n.HandleChineseChars && isChinese(r):
			piece = append(append(append(piece, ' '), string(r)...), ' ')
		case n.CleanText && isWhitespace(r):
			piece = append(piece, ' ')
		default:
			piece = utf8.AppendRune(piece, r)
		}
		if len(piece) > 0 && (strip || n.Lowercase) && (r >= utf8.RuneSelf || (n.Lowercase && r >= 'A' && r <= 'Z')) {
			p := string(piece)
			if strip {
				p = strings.Map(func(r rune) rune {
					if unicode.Is(unicode.Mn, r) {
						return -1
					}
					return r
				}, norm.NFD.String(p))
			}
			if n.Lowercase {
				p = strings.ToLower(p)
			}
			piece = append(piece[:0], p...)
		}
		b.Write(piece)
		for range piece {
			from = append(from, i)
			to = append(to, i+size)
		}
	}
	return b.String(), from, to
}

// isWhitespace is the Unicode White_Space property, as Rust's
// char::is_whitespace that the Rust crate calls (not only Zs: U+2028 and
// U+2029 are whitespace too).
func isWhitespace(r rune) bool {
	return unicode.IsSpace(r)
}

func isControl(r rune) bool {
	switch r {
	case '\t', '\n', '\r':
		return false
	}
	if r < utf8.RuneSelf {
		// Every ASCII character is assigned; Cc is 0-31 and 127.
		return r < 0x20 || r == 0x7f
	}
	// Cc, Cf, Cn (unassigned) and Co, as the Rust crate checks.
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co) || !unicode.In(r, assigned...)
}

// assigned lists every assigned general category, to detect Cn.
var assigned = func() []*unicode.RangeTable {
	var ts []*unicode.RangeTable
	for _, cat := range []string{"L", "M", "N", "P", "S", "Z", "Cc", "Cf", "Co", "Cs"} {
		ts = append(ts, unicode.Categories[cat])
	}
	return ts
}()

func isChinese(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) ||
		(r >= 0x20000 && r <= 0x2A6DF) || (r >= 0x2A700 && r <= 0x2B73F) ||
		(r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B820 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}
