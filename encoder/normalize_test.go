package encoder

import (
	"testing"

	"golang.org/x/text/unicode/norm"
)

func TestBertNormalizer(t *testing.T) {
	lower := &bertNormalizer{CleanText: true, HandleChineseChars: true, Lowercase: true}
	keep := false
	cased := &bertNormalizer{CleanText: true, HandleChineseChars: true, StripAccents: &keep}
	cases := []struct {
		n        *bertNormalizer
		in, want string
	}{
		{lower, "Naïve Café", "naive cafe"},
		{lower, "Größe", "große"},
		{lower, "Ångström Łódź", "angstrom łodz"},
		{lower, "한국어", norm.NFD.String("한국어")}, // NFD splits Hangul into jamo (not Mn), which stay
		{lower, "日本語", " 日  本  語 "},
		{lower, "a\u0007b\u00a0c\td\u200be", "ab c de"},
		{lower, "\x00x\ufffd", "x"},
		{cased, "Naïve", "Naïve"},
	}
	for _, tc := range cases {
		if got := tc.n.normalize(tc.in); got != tc.want {
			t.Errorf("normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
