package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"unicode/utf8"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/latecollect"
	"github.com/tandemsearch/tandem/storage"
)

// ErrModel reports a model the collection needs that cannot serve it: not
// installed, not loadable, or of another dimension than the collection's
// vectors.
var ErrModel = errors.New("engine: model")

// model is one encoder of the collection and the retrievers it feeds.
type model struct {
	spec  tandem.Model
	enc   *encoder.Encoder   // nil for an external model
	dense *dense.Index       // nil unless spec.Dense
	late  *latecollect.Index // nil unless spec.Late

	// Sequences at the last snapshot, so that Close snapshots only an
	// index that changed.
	denseSnap, lateSnap uint64
}

// tokenEncoding is how the model's token vectors are stored: its
// schema's LateEncoding, checked when the collection was opened, or
// float16 for collections made before it was recorded.
func (m *model) tokenEncoding() latecollect.Encoding {
	if e, err := latecollect.ParseEncoding(m.spec.LateEncoding); err == nil {
		return e
	}
	return latecollect.F16
}

// defaultEncoderThreads caps the ONNX Runtime threads of one model run
// when Options.EncoderThreads is 0: a library must not take every core of
// its host, and beyond 4 threads a small BERT gains little per run.
func defaultEncoderThreads() int { return max(1, min(runtime.NumCPU(), 4)) }

// encoders is the process's cache of loaded models (see the package doc,
// Models): a model takes about 210 MB (bge-small-en-v1.5, float32), once
// per process rather than once per collection or shard replica.
var encoders encoder.Cache

// LoadedModels reports the process's loaded models: loads since start,
// models loaded now and the encoders (one per model of each open engine)
// sharing them.
func LoadedModels() encoder.CacheStats { return encoders.Stats() }

// loadEncoder loads an installed model by name, with the thread budgets and
// query options of o (EncoderThreads, DocumentThreads, QueryCacheBytes,
// QueryBatch, QueryBatchWait), or takes it from the process's cache when an
// open engine loaded it with the same options already.
func loadEncoder(name string, o *Options) (*encoder.Encoder, error) {
	dir, err := encoder.Find(name)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrModel, name, err)
	}
	enc, err := encoders.Load(dir, &encoder.Options{IntraOpThreads: o.EncoderThreads, DocumentThreads: o.DocumentThreads,
		QueryCacheBytes: o.QueryCacheBytes, QueryBatch: o.QueryBatch, QueryBatchWait: o.QueryBatchWait})
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrModel, name, err)
	}
	return enc, nil
}

// requestedModels loads the encoders Options.Dense and Options.Late name
// and describes them for the schema of a new collection. The caller closes
// the returned encoders.
func requestedModels(o *Options) ([]tandem.Model, map[string]*encoder.Encoder, error) {
	encs := map[string]*encoder.Encoder{}
	var specs []tandem.Model
	closeAll := func() {
		for _, e := range encs {
			e.Close()
		}
	}
	index := map[string]int{}
	add := func(name string, late bool) error {
		name = strings.TrimSpace(name)
		if name == "" {
			return fmt.Errorf("%w: empty model name", ErrBadRequest)
		}
		enc, ok := encs[name]
		if !ok {
			var err error
			if enc, err = loadEncoder(name, o); err != nil {
				return err
			}
			encs[name] = enc
		}
		i, ok := index[enc.Name()]
		if !ok {
			i = len(specs)
			index[enc.Name()] = i
			specs = append(specs, tandem.Model{Name: enc.Name(), Similarity: similarity(enc)})
			encs[enc.Name()] = enc
		}
		if late {
			if enc.TokenDim() == 0 {
				return fmt.Errorf("%w %q: cannot serve late interaction: %w", ErrModel, name, encoder.ErrNoTokens)
			}
			if err := latecollect.CheckDescription(o.LateIndex, enc.TokenDim()); err != nil {
				return fmt.Errorf("%w: late-interaction index %q for %q: %w", ErrBadRequest, o.LateIndex, name, err)
			}
			if o.LateEncoding != "" {
				if _, err := latecollect.ParseEncoding(o.LateEncoding); err != nil {
					return fmt.Errorf("%w: late-interaction encoding for %q: %w", ErrBadRequest, name, err)
				}
			}
			specs[i].Late, specs[i].TokenDim, specs[i].LateIndex, specs[i].LateEncoding = true, enc.TokenDim(), o.LateIndex, o.LateEncoding
		} else {
			if enc.Dim() == 0 {
				return fmt.Errorf("%w %q: pools no vector (pooling %s), so cannot serve dense retrieval (request it for late interaction only, e.g. late:%s)", ErrModel, name, enc.Pooling(), name)
			}
			specs[i].Dense, specs[i].Dim = true, enc.Dim()
		}
		return nil
	}
	for _, n := range o.Dense {
		if err := add(n, false); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	for _, n := range o.Late {
		if err := add(n, true); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	// encs may hold one encoder under two keys (the requested name and
	// its own); keep one per model name.
	byName := map[string]*encoder.Encoder{}
	for _, e := range encs {
		byName[e.Name()] = e
	}
	return specs, byName, nil
}

// similarity is the tandem.Model similarity of an installed model.
func similarity(enc *encoder.Encoder) string {
	if enc.Similarity() == encoder.Dot {
		return tandem.Dot
	}
	return tandem.Cosine
}

// openModels loads (or takes from loaded) the encoder of every model the
// stored schema lists, checks its dimensions against the collection's,
// and opens its dense and late indexes, which catch up with the log.
func openModels(ctx context.Context, st *storage.Store, specs []tandem.Model, loaded map[string]*encoder.Encoder, o *Options) ([]*model, error) {
	var out []*model
	fail := func(err error) ([]*model, error) {
		closeModels(out)
		return nil, err
	}
	for _, spec := range specs {
		if spec.External {
			m, err := openIndexes(ctx, st, &model{spec: spec})
			if m != nil {
				out = append(out, m)
			}
			if err != nil {
				return fail(err)
			}
			continue
		}
		enc, ok := loaded[spec.Name]
		if ok {
			delete(loaded, spec.Name)
		} else {
			var err error
			if enc, err = loadEncoder(spec.Name, o); err != nil {
				return fail(fmt.Errorf("%w (the collection was indexed with it)", err))
			}
		}
		if spec.Similarity == "" {
			spec.Similarity = similarity(enc)
		}
		m := &model{spec: spec, enc: enc}
		out = append(out, m)
		if spec.Dense {
			if err := enc.CheckDim(spec.Dim); err != nil {
				return fail(fmt.Errorf("%w %q: dense vectors: %w", ErrModel, spec.Name, err))
			}
		}
		if spec.Late {
			if err := enc.CheckTokenDim(spec.TokenDim); err != nil {
				return fail(fmt.Errorf("%w %q: token vectors: %w", ErrModel, spec.Name, err))
			}
		}
		if _, err := openIndexes(ctx, st, m); err != nil {
			return fail(err)
		}
	}
	return out, nil
}

// openIndexes opens m's dense and late indexes, as its spec asks. On
// error, the indexes it opened stay in m, for the caller to close.
func openIndexes(ctx context.Context, st *storage.Store, m *model) (*model, error) {
	spec := m.spec
	if spec.Dense {
		x, err := dense.Open(ctx, st, &dense.Options{Model: spec.Name, Dim: spec.Dim})
		if err != nil {
			return m, fmt.Errorf("engine: open dense index of %q: %w", spec.Name, err)
		}
		// 0 when Open rebuilt it: its snapshot was missing or damaged,
		// and Close saves a new one.
		m.dense, m.denseSnap = x, x.Stats().SnapshotSeq
	}
	if spec.Late {
		x, err := latecollect.Open(ctx, st, &latecollect.Options{Model: spec.Name, Dim: spec.TokenDim, Description: spec.LateIndex})
		if err != nil {
			return m, fmt.Errorf("engine: open late-interaction index of %q: %w", spec.Name, err)
		}
		m.late, m.lateSnap = x, snapshotSeq(st, "late-"+spec.Name)
		if !x.LoadedSnapshot() {
			m.lateSnap = math.MaxUint64 // rebuilt: save it at the next snapshot point
		}
	}
	return m, nil
}

// snapshotSeq is the sequence of the named snapshot, 0 when there is none:
// an index rebuilt at Open (after a crash, say) then differs from its
// snapshot, and Close saves one.
func snapshotSeq(st *storage.Store, name string) uint64 {
	seq, err := st.SnapshotSeq(name)
	if err != nil {
		return 0
	}
	return seq
}

// closeModels closes encoders only; the indexes are derived indexes,
// closed with the others.
func closeModels(ms []*model) error {
	var errs []error
	for _, m := range ms {
		if m.dense != nil {
			errs = append(errs, m.dense.Close())
		}
		if m.late != nil {
			errs = append(errs, m.late.Close())
		}
		if m.enc != nil {
			errs = append(errs, m.enc.Close())
		}
	}
	return errors.Join(errs...)
}

// snapshotModels saves the snapshot of every model index that applied
// changes since its last one (or, for late interaction, swapped in the
// codes of a background retraining), so that the next Open loads it instead of
// rebuilding (for late interaction, a rebuild retrains the token index).
func snapshotModels(ctx context.Context, ms []*model) error {
	var errs []error
	for _, m := range ms {
		if m.dense != nil && m.dense.AppliedSeq() != m.denseSnap {
			if err := m.dense.Snapshot(ctx); err != nil {
				errs = append(errs, fmt.Errorf("engine: snapshot %s: %w", m.dense.Name(), err))
			} else {
				m.denseSnap = m.dense.AppliedSeq()
			}
		}
		if m.late != nil && (m.late.AppliedSeq() != m.lateSnap || m.late.Unsaved()) {
			if err := m.late.Snapshot(ctx); err != nil {
				errs = append(errs, fmt.Errorf("engine: snapshot %s: %w", m.late.Name(), err))
			} else {
				m.lateSnap = m.late.AppliedSeq()
			}
		}
	}
	return errors.Join(errs...)
}

// docText is the text a model encodes for a document: its text fields'
// values in schema order, joined by a space (title + " " + text for BEIR).
func docText(fields []tandem.Field, doc tandem.Doc) string {
	s, _ := docTextParts(fields, doc.Fields)
	return s
}

// docTextParts is docText of a document's field values, with where each
// value lies in the text (a highlight maps the model's tokens back to
// fields through them): in schema order, the last one cut where the text
// reaches maxEncodeBytes.
func docTextParts(fields []tandem.Field, values map[string]any) (string, []textPart) {
	var b strings.Builder
	var parts []textPart
	for _, f := range fields {
		s, ok := values[f.Name].(string)
		if !ok || s == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		parts = append(parts, textPart{field: f.Name, start: b.Len(), end: b.Len() + len(s)})
		b.WriteString(s)
		if b.Len() >= maxEncodeBytes {
			break
		}
	}
	s := b.String()
	if len(s) > maxEncodeBytes {
		cut := maxEncodeBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
		last := &parts[len(parts)-1]
		last.end = min(last.end, cut)
	}
	return s, parts
}

// maxEncodeBytes bounds the text given to an encoder per document: models
// read at most a few hundred tokens (bge-small 512, about 3 KB of English),
// so a longer text only costs tokenization.
const maxEncodeBytes = 64 << 10

// DefaultLateEncoding is how a new collection stores a late model's token
// vectors when Options.LateEncoding and its schema say nothing: "i8" for
// an installed model, int8 with a scale per token, half the disk of
// float16, which the exact stage scores in int8 and which ranks SciFact
// and Cranfield as float16 does (latecollect/README.md, "An int8 exact
// stage"); "f16" for an external model, whose vectors the documents
// bring and get back (export) within float16's rounding, whatever their
// distribution.
func DefaultLateEncoding(m tandem.Model) string {
	if m.External {
		return "f16"
	}
	return "i8"
}

// DefaultLateIndex is the late-interaction index a new collection records
// for a model of tokenDim-value tokens when desc (Options.LateIndex, a
// schema model's LateIndex) is empty: residual codes ("Residual") when
// tokenDim is a multiple of 8, which they need, else FAISS token keys
// ("FAISS"). A collection keeps what it recorded, so one created before
// residual codes were the default (its LateIndex is empty) keeps FAISS.
func DefaultLateIndex(desc string, tokenDim int) string {
	switch {
	case desc != "":
		return desc
	case tokenDim > 0 && tokenDim%8 == 0:
		return "Residual"
	default:
		return "FAISS"
	}
}
