package latecollect

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/faiss"
	"github.com/tandemsearch/tandem/storage"
)

// PositionBits is the number of low bits of a FAISS token id that hold the
// token's row in its document's matrix: id = docnum<<PositionBits | row.
// The map from token id to (document, row) is therefore implicit, needs no
// storage, and a document filter becomes token-id ranges. Limits: a
// document has at most 4096 token keys (rows beyond are still scored when
// the document is a candidate, but cannot make it one), and docnums must be
// below 2^51 for ids to stay positive int64.
const PositionBits = 12

// maxKeysPerDoc is the number of rows of a document that get a token key.
const maxKeysPerDoc = 1 << PositionBits

// maxFilterDoc bounds the document numbers a filter can hand to FAISS:
// internal/faiss turns an allow-list into a bitmap of maxID/8 bytes and
// refuses ids beyond MaxInt32*8. Past it, the filter is applied to the
// documents during collection instead.
const maxFilterDoc = math.MaxInt32 * 8

// Defaults, measured on SciFact (5,183 documents, 1.24M MiniLM tokens);
// see the README for the sweeps behind them.
const (
	// DefaultKPrime is the number of document tokens each query token
	// collects from FAISS. At k'=16 and 32 recall@10 stayed below 0.97
	// whatever the cap.
	DefaultKPrime = 64
	// DefaultCandidateCap bounds the documents rescored exactly per query;
	// rescoring cost grows linearly with it. With k'=64, recall@10
	// against exhaustive was 0.967 at 64, 0.977 at 128 and 0.993 at 256.
	DefaultCandidateCap = 256
	// DefaultNProbe is the number of IVF lists visited per query token.
	// With the automatic description (IVF2048 on SciFact), recall@10
	// against exhaustive over the 300 test queries was 0.989 at 8, 16
	// and 32 (it is bounded by k' and the cap, not by the scan), while
	// the FAISS time doubles with each step.
	DefaultNProbe = 8
	// autoFlatTokens is the token count up to which the automatic
	// description is an exact flat index; above it, an exact scan per query
	// token costs more than the rescoring it feeds.
	autoFlatTokens = 100_000
)

// legacyAuto is the description of the FAISS index with an automatic
// description (see targetDescription).
const legacyAuto = "FAISS"

// checkFAISSDescription fails early on a FAISS description FAISS cannot
// build.
func checkFAISSDescription(o Options) error {
	if o.Description == "" || o.Description == legacyAuto || isResidual(o.Description) {
		return nil
	}
	fx, err := faiss.New(o.Dim, o.Description, faiss.InnerProduct)
	if err != nil {
		return fmt.Errorf("%w: Options.Description: %w", ErrBadOptions, err)
	}
	return fx.Close()
}

// faissFamily keeps every document token as a key in a FAISS index, with
// the id docnum<<PositionBits | row, and every document's stored token
// matrix in memory (in its stored encoding) for exact rescoring.
//
// Invariants: docs holds the token matrix of every document the family
// holds, and tokens and bytes are its rows and blob bytes; keys[doc] is the
// number of token ids doc<<PositionBits|0..n-1 present in fx, and fx holds
// no other ids.
type faissFamily struct {
	source

	// filterAtCollection forces the filter onto the documents during
	// collection instead of translating it to token ids (benchmarks
	// compare the two).
	filterAtCollection bool

	fx      *faiss.Index
	desc    string // description fx was built from (before IDMap2)
	docs    map[uint64]docEntry
	keys    map[uint64]int
	tokens  int64   // rows in docs
	bytes   int64   // blob bytes in docs
	skipped []error // bad blobs met while loading, newest last
}

// newFAISSFamily loads the token matrix of every document from the store;
// load or build then makes the FAISS index.
func newFAISSFamily(ctx context.Context, s source) (*faissFamily, error) {
	f := &faissFamily{source: s, docs: map[uint64]docEntry{}, keys: map[uint64]int{}}
	err := f.st.ScanBlobs(ctx, f.blob, func(num uint64, value []byte) error {
		e, err := f.entry(num, value)
		if err != nil {
			f.skipped = append(f.skipped, err)
			return nil
		}
		f.putDocLocked(num, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load token matrices: %w", err)
	}
	return f, nil
}

// build makes the FAISS index from the matrices in memory.
func (f *faissFamily) build(context.Context) error {
	return f.rebuildLocked(f.targetDescription())
}

func (f *faissFamily) has(num uint64) bool {
	_, ok := f.docs[num]
	return ok
}

func (f *faissFamily) docNums() *roaring64.Bitmap {
	bm := roaring64.New()
	for num := range f.keys {
		bm.Add(num)
	}
	return bm
}

func (f *faissFamily) stats(s *Stats) {
	s.Docs, s.Tokens, s.TokenKeys = len(f.docs), f.tokens, f.fx.Len()
	s.StoredBytes, s.IndexBytes = f.bytes, f.fx.MemoryBytes()
	s.Description, s.Skipped = f.desc, len(f.skipped)
}

func (f *faissFamily) close() error {
	f.docs, f.keys = nil, nil
	if f.fx != nil {
		return f.fx.Close()
	}
	return nil
}

// keys is the number of token keys the document has in FAISS.
func (d docEntry) keys() int { return min(d.h.count, maxKeysPerDoc) }

// entry checks a stored blob and copies it.
func (f *faissFamily) entry(num uint64, value []byte) (docEntry, error) {
	e, err := f.entryNoCopy(num, value)
	e.blob = slices.Clone(e.blob)
	return e, err
}

func (f *faissFamily) putDocLocked(num uint64, e docEntry) {
	f.dropDocLocked(num)
	f.docs[num] = e
	f.tokens += int64(e.h.count)
	f.bytes += int64(len(e.blob))
}

func (f *faissFamily) dropDocLocked(num uint64) {
	if old, ok := f.docs[num]; ok {
		f.tokens -= int64(old.h.count)
		f.bytes -= int64(len(old.blob))
		delete(f.docs, num)
	}
}

// apply applies one run of changes (see family).
func (f *faissFamily) apply(ctx context.Context, final []storage.Change, newRun bool) ([]error, error) {
	// Decide on a rebuild when a new run of the log starts, from the
	// documents of every run before it: that state does not depend on how
	// the caller cut the log.
	if newRun {
		if target := f.targetDescription(); target != f.desc && trainable(target, f.tokens) {
			if err := f.rebuildLocked(target); err != nil {
				return nil, fmt.Errorf("latecollect: apply: %w", err)
			}
		}
	}
	var (
		removeIDs []int64
		addIDs    []int64
		addVecs   []float32
		bad       []error
	)
	for _, c := range final {
		num := c.DocNum
		if n := f.keys[num]; n > 0 {
			removeIDs = appendIDs(removeIDs, num, n)
			delete(f.keys, num)
		}
		f.dropDocLocked(num)
		e, ok, err := f.changedEntry(c, &bad)
		if err != nil {
			return nil, err
		}
		if ok {
			f.putDocLocked(num, e)
		}
	}
	if _, err := f.fx.Remove(removeIDs); err != nil {
		return nil, fmt.Errorf("latecollect: apply: remove %d token keys: %w", len(removeIDs), err)
	}
	for _, c := range final {
		num := c.DocNum
		e, ok := f.docs[num]
		if !ok {
			continue
		}
		n := e.keys()
		addIDs = appendIDs(addIDs, num, n)
		addVecs = appendRows(addVecs, e, n)
		f.keys[num] = n
	}
	if err := f.fx.Add(addIDs, addVecs); err != nil {
		return nil, fmt.Errorf("latecollect: apply: add %d token keys: %w", len(addIDs), err)
	}
	return bad, nil
}

// appendIDs appends the token ids of a document's first n rows.
func appendIDs(ids []int64, num uint64, n int) []int64 {
	base := int64(num << PositionBits)
	for i := range n {
		ids = append(ids, base|int64(i))
	}
	return ids
}

// targetDescription is the description the index should have now: the
// configured one, or automatically Flat up to autoFlatTokens tokens, then
// "IVF<n>,SQ8" with n the least power of two ≥ sqrt(tokens), at most 8192.
//
// Why, measured on SciFact's 1.24M MiniLM tokens with k'=64, cap 256 (see
// the README): the cost of a candidate search is the IVF scan, about
// nprobe × tokens/n codes per query token, and Debian's generic FAISS
// build scans SQ8 codes without AVX2 (its ScalarQuantizer has no FMA
// and next to no 256-bit instructions). Going from n = sqrt(tokens)/4
// (512 lists) to sqrt(tokens) (2048) cut the FAISS time per query from
// 385 to 59 ms (nprobe 16 then, 8 now) with recall@10 against exhaustive
// unchanged (0.988 → 0.989, 300 queries); training and filling took 54 s
// instead of 10 s. 4096 lists saved another 14 ms but took 2m15s to
// build. Flat codes scan no faster than SQ8 there and take 4× the memory;
// PQ48 scans about 5× faster but took 5 minutes to train. The IVF lists hold
// about sqrt(tokens) keys each, so the share of keys scanned falls as
// the collection grows.
func (f *faissFamily) targetDescription() string {
	if f.opts.Description != "" && f.opts.Description != legacyAuto {
		return f.opts.Description
	}
	if f.tokens <= autoFlatTokens {
		return "Flat"
	}
	nlist := 64
	for nlist*nlist < int(f.tokens) && nlist < 8192 {
		nlist *= 2
	}
	return fmt.Sprintf("IVF%d,SQ8", nlist)
}

// trainable reports whether tokens suffice to train desc: FAISS wants about
// 39 training points per IVF list.
func trainable(desc string, tokens int64) bool {
	n := ivfLists(desc)
	return n == 0 || tokens >= int64(40*n)
}

// ivfLists returns the number of IVF lists in desc, 0 if it is not IVF.
func ivfLists(desc string) int {
	for _, part := range strings.Split(strings.ToUpper(desc), ",") {
		part = strings.TrimSpace(part)
		if rest, ok := strings.CutPrefix(part, "IVF"); ok {
			n := 0
			for _, r := range rest {
				if r < '0' || r > '9' {
					break
				}
				n = n*10 + int(r-'0')
			}
			return n
		}
	}
	return 0
}

// rebuildLocked replaces the token index by one built with desc from the
// matrices in memory. Until desc is trainable, a Flat index stands in.
func (f *faissFamily) rebuildLocked(desc string) error {
	if !trainable(desc, f.tokens) {
		desc = "Flat"
	}
	fx, err := faiss.New(f.opts.Dim, desc, faiss.InnerProduct)
	if err != nil {
		return fmt.Errorf("build %q: %w", desc, err)
	}
	if !fx.IsTrained() {
		if err := fx.Train(f.trainingSampleLocked(64 * ivfLists(desc))); err != nil {
			fx.Close()
			return fmt.Errorf("train %q: %w", desc, err)
		}
	}
	keys := make(map[uint64]int, len(f.docs))
	var (
		ids  []int64
		vecs []float32
	)
	flush := func() error {
		if err := fx.Add(ids, vecs); err != nil {
			return fmt.Errorf("build %q: %w", desc, err)
		}
		ids, vecs = ids[:0], vecs[:0]
		return nil
	}
	for _, num := range sortedDocs(f.docs) {
		e := f.docs[num]
		n := e.keys()
		ids = appendIDs(ids, num, n)
		vecs = appendRows(vecs, e, n)
		keys[num] = n
		if len(ids) >= 65536 {
			if err := flush(); err != nil {
				fx.Close()
				return err
			}
		}
	}
	if err := flush(); err != nil {
		fx.Close()
		return err
	}
	if f.fx != nil {
		f.fx.Close()
	}
	f.fx, f.desc, f.keys = fx, desc, keys
	return nil
}

// trainingSampleLocked returns about n token rows spread evenly over the
// documents in docnum order (deterministic, so rebuilds are repeatable).
func (f *faissFamily) trainingSampleLocked(n int) []float32 {
	total := f.tokens
	stride := max(int64(1), total/int64(max(n, 1)))
	var out []float32
	var row int64
	buf := make([]float32, f.opts.Dim)
	for _, num := range sortedDocs(f.docs) {
		e := f.docs[num]
		for r := range e.h.count {
			if row%stride == 0 {
				decodeRows(e.blob, e.h, r, r+1, buf)
				out = append(out, buf...)
			}
			row++
		}
	}
	return out
}
