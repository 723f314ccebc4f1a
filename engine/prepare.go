package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/latecollect"
	"github.com/tandemsearch/tandem/storage"
)

// checked is a document that passed the schema check and whose supplied
// vectors passed their model's check: what the encode stage needs.
type checked struct {
	doc tandem.Doc
	// text is what the collection's encoders read, "" when no model has to
	// encode the document.
	text string
	// vectors holds, per e.models index, the checked supplied parts (ready
	// to store); zero when none were supplied.
	vectors []tandem.Vectors
	// encode lists the e.models indexes that must encode the document:
	// those indexing a part it did not bring.
	encode []int
}

// check validates d against schema and the collection's models. The error
// names the field (a *tandem.FieldError) or the model (a
// *tandem.VectorError).
func (e *Engine) check(schema *tandem.Schema, d tandem.Doc) (checked, error) {
	norm, added, err := schema.Check(d)
	if err != nil {
		return checked{}, err
	}
	c := checked{doc: d}
	if len(d.Vectors) > 0 {
		c.vectors = make([]tandem.Vectors, len(e.models))
		for name, v := range d.Vectors {
			i := e.modelIndex(name)
			if i < 0 {
				return checked{}, &tandem.VectorError{Model: name, Err: fmt.Errorf("%w: the collection has no model %q (it has: %s)", tandem.ErrBadVectors, name, e.modelNames())}
			}
			if c.vectors[i], err = e.models[i].spec.CheckVectors(v); err != nil {
				return checked{}, err
			}
			if err := checkF16(name, c.vectors[i].Tokens); err != nil {
				return checked{}, err
			}
		}
	}
	for i, m := range e.models {
		var v tandem.Vectors
		if c.vectors != nil {
			v = c.vectors[i]
		}
		var missing []string
		if m.spec.Dense && v.Dense == nil {
			missing = append(missing, "dense")
		}
		if m.spec.Late && v.Tokens == nil {
			missing = append(missing, "tokens")
		}
		if len(missing) == 0 {
			continue
		}
		if m.spec.External {
			return checked{}, &tandem.VectorError{Model: m.spec.Name, Err: fmt.Errorf("%w: missing %s: %s is an external model, so every document brings its vectors under %q",
				tandem.ErrBadVectors, strings.Join(missing, " and "), m.spec.Name, tandem.VectorsKey)}
		}
		c.encode = append(c.encode, i)
	}
	if len(c.encode) > 0 {
		fields := schema.TextFields()
		for _, f := range added {
			if f.Type == tandem.Text {
				fields = append(fields, f)
			}
		}
		c.text = docText(fields, norm)
	}
	return c, nil
}

// checkF16 refuses supplied token vectors that the F16 token blobs cannot
// hold: a value beyond latecollect.MaxF16 would be stored as an infinity,
// which no late-interaction index can take.
func checkF16(model string, tokens [][]float32) error {
	for i, row := range tokens {
		if latecollect.FitsF16(row) {
			continue
		}
		for j, v := range row {
			if math.Abs(float64(v)) > latecollect.MaxF16 {
				return &tandem.VectorError{Model: model, Part: fmt.Sprintf("tokens[%d]", i), Err: fmt.Errorf("%w: value %d is %v, beyond the float16 range (±%d) token vectors are stored in", tandem.ErrBadVectors, j, v, latecollect.MaxF16)}
			}
		}
	}
	return nil
}

// modelIndex is the index in e.models of the named model, -1 if none.
func (e *Engine) modelIndex(name string) int {
	for i, m := range e.models {
		if m.spec.Name == name {
			return i
		}
	}
	return -1
}

func (e *Engine) modelNames() string {
	if len(e.models) == 0 {
		return "no models"
	}
	names := make([]string, len(e.models))
	for i, m := range e.models {
		names[i] = m.spec.Name
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// modelInput is what one model encodes of a batch: the positions of the
// documents that need it and their texts, tokenized.
type modelInput struct {
	idx      []int
	prepared *encoder.Prepared
}

// tokenize prepares, per model, the texts of the documents that need
// encoding, so that the next batch is tokenized while the model runs on
// this one. A model with nothing to encode gets a zero modelInput.
func (e *Engine) tokenize(docs []checked) ([]modelInput, error) {
	in := make([]modelInput, len(e.models))
	for mi, m := range e.models {
		var texts []string
		for i, d := range docs {
			if slices.Contains(d.encode, mi) {
				in[mi].idx = append(in[mi].idx, i)
				texts = append(texts, d.text)
			}
		}
		if len(texts) == 0 {
			continue
		}
		p, err := m.enc.Prepare(encoder.Request{Side: encoder.Document, Texts: texts, Tokens: m.spec.Late})
		if err != nil {
			return nil, fmt.Errorf("engine: tokenize %d documents (from %q) for %s: %w", len(texts), docs[in[mi].idx[0]].doc.ID, m.spec.Name, err)
		}
		in[mi].prepared = p
	}
	return in, nil
}

// encodeChecked computes the blobs of checked documents: supplied vectors
// as given, the rest encoded from their tokenized input (one model run per
// model; the encoder sorts texts by length, so batches carry little
// padding). It returns nil blobs when the collection has no models, and
// the number of input tokens the encoders read. A document's error is a
// *docError naming its position in docs.
func (e *Engine) encodeChecked(ctx context.Context, docs []checked, in []modelInput) ([]map[string][]byte, int, error) {
	if len(e.models) == 0 || len(docs) == 0 {
		return nil, 0, nil
	}
	blobs := make([]map[string][]byte, len(docs))
	for i := range blobs {
		blobs[i] = make(map[string][]byte, 2*len(e.models))
	}
	tokens := 0
	for mi, m := range e.models {
		idx := in[mi].idx
		var out *encoder.Batch
		if in[mi].prepared != nil {
			var err error
			out, err = m.enc.Run(ctx, in[mi].prepared)
			if err != nil {
				if ctx.Err() != nil {
					return nil, 0, ctx.Err()
				}
				return nil, 0, fmt.Errorf("engine: encode %d documents (from %q) with %s: %w", len(idx), docs[idx[0]].doc.ID, m.spec.Name, err)
			}
			tokens += out.InputTokens
		}
		k := 0 // position in out of the next encoded document
		for i, d := range docs {
			var v tandem.Vectors
			if d.vectors != nil {
				v = d.vectors[mi]
			}
			var vec []float32
			var toks []float32
			var tokDim int
			if k < len(idx) && idx[k] == i {
				if m.spec.Dense {
					vec = out.Vectors[k]
				}
				if m.spec.Late {
					toks, tokDim = out.Tokens[k].Vectors, out.Tokens[k].Dim
				}
				k++
			}
			if v.Dense != nil {
				vec = v.Dense
			}
			if v.Tokens != nil {
				toks, tokDim = v.Flatten(m.spec.TokenDim), m.spec.TokenDim
			}
			if m.spec.Dense {
				if err := dense.CheckVector(vec, m.spec.Dim); err != nil {
					return nil, 0, &docError{pos: i, id: d.doc.ID, err: fmt.Errorf("%s vector: %w", m.spec.Name, err)}
				}
				blobs[i][dense.BlobName(m.spec.Name)] = dense.EncodeVector(vec)
			}
			if m.spec.Late {
				b, err := latecollect.EncodeTokens(toks, tokDim, m.tokenEncoding())
				if err != nil {
					return nil, 0, &docError{pos: i, id: d.doc.ID, err: fmt.Errorf("%s tokens: %w", m.spec.Name, err)}
				}
				blobs[i][latecollect.BlobName(m.spec.Name)] = b
			}
		}
	}
	return blobs, tokens, nil
}

// DocError reports a document a call refused: where it was in the call's
// input, its id when it had one, and the cause, which wraps a
// *tandem.FieldError or a *tandem.VectorError when a field or a supplied
// vector is at fault. Every call that takes documents reports a
// document's failure as one: Index, IndexStream, IndexJSONL, Shard.Prepare
// and Shard.Write.
type DocError struct {
	// Index is the document's position in the call's input, from 0: in
	// the docs of Index or Shard.Prepare, the stream of IndexStream, the
	// batch of Shard.Write. It is -1 for IndexJSONL, whose Line says where.
	Index int
	// Line is the line of IndexJSONL's input the document was on, from
	// 1; 0 for the other calls.
	Line int
	// ID is the document's id, "" when it had none or its line could not
	// be read.
	ID  string
	Err error
}

func (e *DocError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("document %d (id %q): %v", e.Index, e.ID, e.Err)
}

func (e *DocError) Unwrap() error { return e.Err }

// docError is a document's error inside the write pipeline, at its
// position in the input (a line of JSONL input, or an index); public
// makes the DocError a call returns of it.
type docError struct {
	pos int
	id  string
	err error
}

func (e *docError) Error() string { return fmt.Sprintf("document %d (id %q): %v", e.pos, e.id, e.err) }
func (e *docError) Unwrap() error { return e.err }

// public is the DocError of e; lines says the position is a line of
// JSONL input.
func (e *docError) public(lines bool) *DocError {
	if lines {
		return &DocError{Index: -1, Line: e.pos, ID: e.id, Err: e.err}
	}
	return &DocError{Index: e.pos, ID: e.id, Err: e.err}
}

// docFailure is where a document's failure becomes what the API returns:
// the pipeline's *docError, or the store's *storage.BatchError (a
// document Badger refused, at its position in the storage batch), becomes
// a *DocError; lines says positions are lines of JSONL input. Other
// errors, nil included, pass unchanged.
func docFailure(err error, lines bool) error {
	var de *docError
	if errors.As(err, &de) {
		return de.public(lines)
	}
	var be *storage.BatchError
	if errors.As(err, &be) {
		return (&docError{pos: be.Index, id: be.ID, err: be.Err}).public(lines)
	}
	return err
}
