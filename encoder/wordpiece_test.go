package encoder

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sugarme/tokenizer"
)

// TestWordPieceMatchesLibrary compares the fast BERT tokenizer with the
// general library path (sugarme/tokenizer after Tandem's BertNormalizer),
// which the parity fixtures validated against Hugging Face, on the parity
// texts, on texts with added tokens and on SciFact's corpus when it is
// there: the token ids must be identical.
func TestWordPieceMatchesLibrary(t *testing.T) {
	for _, name := range []string{"bge-small-en-v1.5", "all-MiniLM-L6-v2", "e5-small-v2"} {
		t.Run(name, func(t *testing.T) {
			dir := installedModel(t, name)
			w, err := loadTokenizer(filepath.Join(dir, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			if w.fast == nil {
				t.Fatal("a BERT WordPiece tokenizer.json did not get the fast path")
			}
			texts := parityTexts(t, name)
			texts = append(texts, "[CLS] starts, [SEP] ends, [MASK] hides, [UNK] and [PAD]", "a[MASK]b", "[[MASK]]", "[mask] is not special",
				strings.Repeat("x", 101), strings.Repeat("é", 100), "supercalifragilisticexpialidociousnessly", "naïve\u00a0space\u2028line")
			texts = append(texts, sciFactTexts(2000)...)
			slow := func(text string) []int64 {
				enc, err := w.tk.EncodeSingleSequence(tokenizer.NewInputSequence(w.bert.normalize(text)), 0, tokenizer.Byte)
				if err != nil {
					t.Fatal(err)
				}
				ids := make([]int64, len(enc.Ids))
				for i, id := range enc.Ids {
					ids[i] = int64(id)
				}
				return ids
			}
			bad := 0
			for _, text := range texts {
				got, want := w.fast.encode(text), slow(text)
				if strings.Contains(text, "[") && strings.Contains(text, "]") {
					continue // the library does not split added tokens out of raw text; Hugging Face does (below)
				}
				if !slices.Equal(got, want) {
					if bad++; bad <= 5 {
						t.Errorf("%.60q: fast %v, library %v", text, got, want)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d texts differ", bad, len(texts))
			}
			// Added tokens in raw text are split out as Hugging Face does.
			if got := w.fast.encode("a[MASK]b"); len(got) != 3 || got[1] != w.fast.vocab["[MASK]"] {
				t.Errorf("a[MASK]b = %v", got)
			}
		})
	}
}

func parityTexts(t *testing.T, model string) []string {
	raw, err := os.ReadFile(filepath.Join("testdata", "parity", model+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx parityFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range fx.Cases {
		out = append(out, c.Text)
	}
	return out
}

// sciFactTexts returns up to n SciFact documents as title + " " + text,
// none when the shared data is absent.
func sciFactTexts(n int) []string {
	f, err := os.Open(filepath.Join("..", "..", "shared", "data", "scifact", "corpus.jsonl"))
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	var out []string
	for sc.Scan() && len(out) < n {
		var d struct{ Title, Text string }
		if json.Unmarshal(sc.Bytes(), &d) == nil {
			out = append(out, d.Title+" "+d.Text)
		}
	}
	return out
}
