package encoder

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"unicode/utf8"

	"github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/pretrained"
)

// wordTokenizer turns text into model input ids. It reads a Hugging Face
// tokenizer.json (WordPiece, Unigram, BPE) through sugarme/tokenizer for
// the normalizer, pre-tokenizer and model, and applies the single-sequence
// template of the post-processor itself, so that truncation keeps the
// special tokens and the marker, exactly as transformers does.
type wordTokenizer struct {
	tk *tokenizer.Tokenizer
	// lead and trail are the special token ids around a single sequence:
	// [CLS] … [SEP] for BERT, … </s> for T5.
	lead, trail []int64
	padID       int64
	// bert replaces sugarme's BertNormalizer when tokenizer.json uses one.
	bert *bertNormalizer
	// fast replaces the whole library for BERT WordPiece tokenizers.
	fast *wordPiece
}

// template is the subset of tokenizer.json we interpret ourselves.
type template struct {
	PostProcessor *struct {
		Type   string `json:"type"`
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int64 `json:"ids"`
		} `json:"special_tokens"`
		CLS []any `json:"cls"` // BertProcessing, RobertaProcessing: ["[CLS]", 101]
		SEP []any `json:"sep"`
	} `json:"post_processor"`
	Normalizer json.RawMessage `json:"normalizer"`
	Padding    *struct {
		PadID int64 `json:"pad_id"`
	} `json:"padding"`
}

func loadTokenizer(path string) (*wordTokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: tokenizer %s", ErrMissingFile, path)
		}
		return nil, fmt.Errorf("encoder: read tokenizer: %w", err)
	}
	var tpl template
	if err := json.Unmarshal(data, &tpl); err != nil {
		return nil, fmt.Errorf("%w: tokenizer %s: %v", ErrBadConfig, path, err)
	}
	tk, err := fromFileSafe(path)
	if err != nil {
		return nil, fmt.Errorf("%w: tokenizer %s: %v", ErrBadConfig, path, err)
	}
	// We truncate and pad ourselves, per batch.
	tk.WithTruncation(nil)
	tk.WithPadding(nil)
	w := &wordTokenizer{tk: tk}
	var kind struct {
		Type string `json:"type"`
	}
	if len(tpl.Normalizer) > 0 && json.Unmarshal(tpl.Normalizer, &kind) == nil && kind.Type == "BertNormalizer" {
		w.bert = &bertNormalizer{}
		if err := json.Unmarshal(tpl.Normalizer, w.bert); err != nil {
			return nil, fmt.Errorf("%w: tokenizer %s: normalizer: %v", ErrBadConfig, path, err)
		}
		tk.WithNormalizer(nil)
		w.fast = newWordPiece(data, w.bert)
	}
	if tpl.Padding != nil {
		w.padID = tpl.Padding.PadID
	} else {
		for _, name := range []string{"[PAD]", "<pad>"} {
			if id, ok := tk.TokenToId(name); ok {
				w.padID = int64(id)
				break
			}
		}
	}
	if pp := tpl.PostProcessor; pp != nil {
		switch pp.Type {
		case "TemplateProcessing":
			seen := false
			for _, piece := range pp.Single {
				switch {
				case piece.Sequence != nil:
					seen = true
				case piece.SpecialToken != nil:
					st, ok := pp.SpecialTokens[piece.SpecialToken.ID]
					if !ok {
						return nil, fmt.Errorf("%w: tokenizer %s: template token %q has no id", ErrBadConfig, path, piece.SpecialToken.ID)
					}
					if seen {
						w.trail = append(w.trail, st.IDs...)
					} else {
						w.lead = append(w.lead, st.IDs...)
					}
				}
			}
		case "BertProcessing", "RobertaProcessing":
			cls, err1 := tokenPairID(pp.CLS)
			sep, err2 := tokenPairID(pp.SEP)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("%w: tokenizer %s: %v", ErrBadConfig, path, err)
			}
			w.lead, w.trail = []int64{cls}, []int64{sep}
		default:
			return nil, fmt.Errorf("%w: tokenizer %s: post_processor %q is not supported (want TemplateProcessing, BertProcessing or RobertaProcessing)",
				ErrBadConfig, path, pp.Type)
		}
	}
	return w, nil
}

func tokenPairID(pair []any) (int64, error) {
	if len(pair) != 2 {
		return 0, fmt.Errorf("post_processor token %v is not [token, id]", pair)
	}
	id, ok := pair[1].(float64)
	if !ok {
		return 0, fmt.Errorf("post_processor token %v has no numeric id", pair)
	}
	return int64(id), nil
}

// fromFileSafe turns a panic inside the tokenizer library into an error:
// a malformed tokenizer.json must not take the caller's process down.
func fromFileSafe(path string) (tk *tokenizer.Tokenizer, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tokenizer library failed: %v", r)
		}
	}()
	return pretrained.FromFile(path)
}

// tokenID returns the id of a vocabulary token.
func (w *wordTokenizer) tokenID(tok string) (int64, bool) {
	id, ok := w.tk.TokenToId(tok)
	return int64(id), ok
}

// content returns the ids of text without special tokens.
func (w *wordTokenizer) content(text string) (ids []int64, err error) {
	if !utf8.ValidString(text) {
		return nil, errors.New("invalid UTF-8")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tokenizer library failed: %v", r)
		}
	}()
	if w.fast != nil {
		return w.fast.encode(text), nil
	}
	if w.bert != nil {
		text = w.bert.normalize(text)
	}
	enc, err := w.tk.EncodeSingleSequence(tokenizer.NewInputSequence(text), 0, tokenizer.Byte)
	if err != nil {
		return nil, err
	}
	ids = make([]int64, len(enc.Ids))
	for i, id := range enc.Ids {
		ids[i] = int64(id)
	}
	return ids, nil
}
