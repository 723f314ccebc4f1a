package torture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/latecollect"
	"github.com/tandemsearch/tandem/storage"
)

// docState is a document's acknowledged state: live at version ver, or
// deleted (or never written).
type docState struct {
	live bool
	ver  int64
}

// ledgerOp is one operation of the ledger.
type ledgerOp struct {
	op     int64
	kind   string // put, del
	method string // index, jsonl, stream, delete
	seq    uint64 // the store's last sequence before the call
	ids    []string
}

// ledger follows the writer's ledger file: the state of every document
// the acknowledged operations imply, and the operation in flight, if any.
type ledger struct {
	path    string
	parsed  int64
	state   map[string]docState
	pending *ledgerOp
	nextOp  int64
	// Acknowledged calls by method, and documents by effect.
	calls                             map[string]int
	added, updated, deleted, noDelete int
}

func newLedger(path string) *ledger {
	return &ledger{path: path, state: map[string]docState{}, nextOp: 1, calls: map[string]int{}}
}

// read parses the lines the writer appended since the last read, then cuts
// off a line it was killed in the middle of, so the next writer appends
// after a whole line.
func (l *ledger) read() error {
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(l.parsed, io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	whole := bytes.LastIndexByte(data, '\n') + 1
	for _, line := range strings.Split(string(data[:whole]), "\n") {
		if line == "" {
			continue
		}
		if err := l.line(line); err != nil {
			return fmt.Errorf("ledger %s, offset %d: %w", l.path, l.parsed, err)
		}
	}
	l.parsed += int64(whole)
	if whole < len(data) {
		if err := f.Truncate(l.parsed); err != nil {
			return err
		}
		return f.Sync()
	}
	return nil
}

func (l *ledger) line(line string) error {
	f := strings.Fields(line)
	switch {
	case len(f) >= 5 && f[0] == "I":
		if l.pending != nil {
			return fmt.Errorf("intent %q while op %d is unresolved", line, l.pending.op)
		}
		op, err1 := strconv.ParseInt(f[1], 10, 64)
		seq, err2 := strconv.ParseUint(f[4], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("intent %q: %w", line, err)
		}
		l.pending = &ledgerOp{op: op, kind: f[2], method: f[3], seq: seq, ids: f[5:]}
		l.nextOp = max(l.nextOp, op+1)
	case len(f) == 2 && f[0] == "A":
		op, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || l.pending == nil || l.pending.op != op {
			return fmt.Errorf("acknowledgement %q does not match the operation in flight", line)
		}
		l.acknowledge(*l.pending)
		l.pending = nil
	default:
		return fmt.Errorf("malformed line %q", line)
	}
	return nil
}

func (l *ledger) acknowledge(o ledgerOp) {
	l.calls[o.method]++
	for _, id := range o.ids {
		was := l.state[id].live
		if o.kind == "put" {
			if was {
				l.updated++
			} else {
				l.added++
			}
			l.state[id] = docState{live: true, ver: o.op}
		} else {
			if was {
				l.deleted++
			} else {
				l.noDelete++
			}
			l.state[id] = docState{}
		}
	}
}

func (l *ledger) acknowledged() int {
	n := 0
	for _, c := range l.calls {
		n += c
	}
	return n
}

// checkResult is what one check after a kill found.
type checkResult struct {
	open time.Duration
	live int
	// lost are acknowledged operations not reflected in storage (a
	// document missing or at an older version, a deleted one back);
	// problems are disagreements (indexes, blobs, searches, batches).
	lost, problems []string
	// inFlight reports whether an operation was in flight, and committed
	// whether it committed at least one batch.
	inFlight, committed bool
	// snapshotsCurrent is true when every model snapshot is at the last
	// sequence: a kill in Close came after its snapshots.
	snapshotsCurrent bool
	lateDesc         string
	// logFloor is the change log's floor: above 0 once it was truncated.
	logFloor uint64
}

// checker checks a collection against the ledger.
type checker struct {
	model, lateIndex string
	rand             *rand.Rand
}

func (c *checker) external() bool { return c.model == "" }

// check opens the collection in dir (a copy of the killed writer's), and
// checks it against l, learning the outcome of the operation in flight.
func (c *checker) check(ctx context.Context, dir string, l *ledger) (res checkResult, err error) {
	lost := func(format string, a ...any) { res.lost = append(res.lost, fmt.Sprintf(format, a...)) }
	bad := func(format string, a ...any) { res.problems = append(res.problems, fmt.Sprintf(format, a...)) }

	start := time.Now()
	e, err := engine.Open(dir, tortureOptions(c.model, c.lateIndex))
	res.open = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("reopen after kill: %w", err)
	}
	defer func() {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close after check: %w", cerr)
		}
	}()
	st := e.Shard().Store()

	// The change log: exactly the entries after its floor, contiguous to
	// the last sequence, and an error (never a silent gap) below it.
	ls := st.LogStats()
	res.logFloor = ls.Floor
	if ls.Entries != ls.Last-ls.Floor {
		bad("change log: %d entries for sequences %d to %d", ls.Entries, ls.Floor+1, ls.Last)
	}
	if changes, err := st.Changes(ctx, ls.Floor, int(ls.Entries)+1); err != nil {
		bad("change log: changes after the floor %d: %v", ls.Floor, err)
	} else {
		for i, ch := range changes {
			if ch.Seq != ls.Floor+uint64(i)+1 {
				bad("change log: entry %d after the floor %d has sequence %d", i+1, ls.Floor, ch.Seq)
				break
			}
		}
		if uint64(len(changes)) != ls.Entries {
			bad("change log: %d changes after the floor %d, want %d", len(changes), ls.Floor, ls.Entries)
		}
	}
	if ls.Floor > 0 {
		if _, err := st.Changes(ctx, ls.Floor-1, 1); !errors.Is(err, storage.ErrTruncated) {
			bad("change log: changes below the floor %d: %v, want storage.ErrTruncated", ls.Floor, err)
		}
	}

	// Storage: every document once, and what the ledger implies.
	type stored struct {
		num uint64
		doc tandem.Doc
	}
	inStore := map[string]stored{}
	if err := st.ScanDocs(ctx, func(num uint64, d tandem.Doc) error {
		if _, dup := inStore[d.ID]; dup {
			bad("badger: id %s stored twice", d.ID)
		}
		inStore[d.ID] = stored{num, d}
		return nil
	}); err != nil {
		return res, fmt.Errorf("scan badger: %w", err)
	}
	verOf := func(s stored) int64 {
		v, _ := s.doc.Fields["ver"].(float64)
		return int64(v)
	}
	// The operation in flight may have committed all, some or none of
	// its batches; per document, either outcome is accepted, then
	// adopted. Batches commit in order and each is atomic, so the
	// documents it changed must be a prefix of its ids.
	var inFlight map[string]bool
	if p := l.pending; p != nil {
		res.inFlight = true
		res.committed = st.LastSeq() > p.seq
		inFlight = map[string]bool{}
		changed := make([]bool, len(p.ids))
		wasLive := make([]bool, len(p.ids))
		for i, id := range p.ids {
			inFlight[id] = true
			old := l.state[id]
			wasLive[i] = old.live
			s, ok := inStore[id]
			switch {
			case p.kind == "put" && ok && verOf(s) == p.op:
				changed[i] = true
				l.state[id] = docState{live: true, ver: p.op}
			case p.kind == "del" && !ok && old.live:
				changed[i] = true
				l.state[id] = docState{}
			case ok == old.live && (!ok || verOf(s) == old.ver):
				// unchanged
			default:
				lost(`%s: in flight (op %d %s), found %s, acknowledged state %s`, id, p.op, p.kind, describe(ok, verOf(s)), describe(old.live, old.ver))
			}
		}
		if p.kind == "put" {
			k := 0
			for k < len(changed) && changed[k] {
				k++
			}
			if slices.Contains(changed[k:], true) {
				bad("op %d (%s of %d): the documents it wrote are not a prefix of the call: %v", p.op, p.method, len(p.ids), changed)
			} else if k%tortureBatchSize != 0 && k != len(changed) {
				bad("op %d (%s of %d): %d documents committed, not a whole number of batches of %d", p.op, p.method, len(p.ids), k, tortureBatchSize)
			}
		} else {
			// One atomic batch: the documents live before it are all
			// gone, or all still there.
			var gone, kept int
			for i := range p.ids {
				if wasLive[i] {
					if changed[i] {
						gone++
					} else {
						kept++
					}
				}
			}
			if gone > 0 && kept > 0 {
				bad("op %d (delete of %d): deleted %d of its %d live documents", p.op, len(p.ids), gone, gone+kept)
			}
		}
		if slices.Contains(changed, true) && !res.committed {
			bad("op %d: documents changed but the last sequence %d did not move past %d", p.op, st.LastSeq(), p.seq)
		}
		l.pending = nil
	}
	liveNums := roaring64.New()
	numOf := map[uint64]string{}
	for id, s := range l.state {
		got, ok := inStore[id]
		switch {
		case s.live && !ok:
			lost("%s: acknowledged at version %d, missing from badger", id, s.ver)
		case !s.live && ok:
			lost("%s: acknowledged deleted, in badger at version %d", id, verOf(got))
		case s.live && verOf(got) != s.ver:
			lost("%s: acknowledged at version %d, badger has version %d", id, s.ver, verOf(got))
		}
	}
	for id, s := range inStore {
		if !l.state[id].live {
			if _, known := l.state[id]; !known && !inFlight[id] {
				bad("%s: in badger but never written", id)
			}
			continue
		}
		liveNums.Add(s.num)
		numOf[s.num] = id
		if want := tortureFields(id, verOf(s)); !reflect.DeepEqual(s.doc.Fields, want) {
			bad("%s: badger fields %v, want %v", id, s.doc.Fields, want)
		}
	}
	res.live = int(liveNums.GetCardinality())
	if n := st.Count(); n != uint64(len(inStore)) {
		bad("badger: count %d, scan found %d", n, len(inStore))
	}

	// Blobs: exactly the live documents have them, with their version's
	// vectors.
	modelName := tortureModel
	if !c.external() {
		modelName = e.Models()[0].Name
	}
	for _, blob := range []string{dense.BlobName(modelName), latecollect.BlobName(modelName)} {
		have := roaring64.New()
		if err := st.ScanBlobs(ctx, blob, func(num uint64, value []byte) error {
			have.Add(num)
			id, ok := numOf[num]
			if !ok {
				bad("badger: blob %s of docnum %d, which is not a live document", blob, num)
				return nil
			}
			if want := c.wantBlob(blob, id, l.state[id].ver); want != nil && !bytes.Equal(value, want) {
				bad("%s: blob %s is not version %d's", id, blob, l.state[id].ver)
			}
			return nil
		}); err != nil {
			return res, fmt.Errorf("scan blobs %s: %w", blob, err)
		}
		if missing := roaring64.AndNot(liveNums, have); !missing.IsEmpty() {
			bad("badger: %d live documents without blob %s, e.g. %s", missing.GetCardinality(), blob, numOf[missing.Minimum()])
		}
	}

	// Every index holds exactly the live documents.
	sets, err := e.Shard().IndexedDocs(ctx)
	if err != nil {
		return res, err
	}
	for _, name := range e.Retrievers() {
		set, ok := sets[name]
		if !ok {
			bad("index %s: no document set", name)
			continue
		}
		if extra := roaring64.AndNot(set, liveNums); !extra.IsEmpty() {
			bad("index %s holds %d documents that are not live (docnums %v)", name, extra.GetCardinality(), firstNums(extra))
		}
		if missing := roaring64.AndNot(liveNums, set); !missing.IsEmpty() {
			bad("index %s lacks %d live documents, e.g. %s", name, missing.GetCardinality(), numOf[missing.Minimum()])
		}
	}
	stats, err := e.Stats()
	if err != nil {
		return res, err
	}
	if stats.Docs != uint64(res.live) || stats.BleveDocs != uint64(res.live) {
		bad("stats: badger %d, bleve %d, live %d", stats.Docs, stats.BleveDocs, res.live)
	}
	if len(stats.Late) > 0 {
		res.lateDesc = stats.Late[0].Description
		if res.live > 0 && c.lateIndex == "Residual" && stats.Late[0].Centroids == 0 {
			bad("late index: %d live documents but no trained residual codes", res.live)
		}
	}
	res.snapshotsCurrent = true
	for _, name := range []string{dense.SnapshotName(modelName), "late-" + modelName} {
		rc, seq, err := st.OpenSnapshot(name)
		if err == nil {
			rc.Close()
		}
		if err != nil || seq != st.LastSeq() {
			res.snapshotsCurrent = false
		}
	}

	c.checkSearches(ctx, e, l, numOf, res.live, bad)
	return res, nil
}

func describe(live bool, ver int64) string {
	if !live {
		return "absent"
	}
	return fmt.Sprintf("version %d", ver)
}

func firstNums(bm *roaring64.Bitmap) []uint64 {
	var out []uint64
	it := bm.Iterator()
	for it.HasNext() && len(out) < 5 {
		out = append(out, it.Next())
	}
	return out
}

// wantBlob is the blob the engine must have stored for version ver of
// id: the encodings it applies to supplied vectors. nil when an installed
// model computed the vectors.
func (c *checker) wantBlob(blob, id string, ver int64) []byte {
	if !c.external() {
		return nil
	}
	v := tortureVectors(id, ver)
	if blob == dense.BlobName(tortureModel) {
		return dense.EncodeVector(v.Dense)
	}
	b, err := latecollect.EncodeTokens(v.Flatten(tortureDim), tortureDim, latecollect.F16)
	if err != nil {
		panic(err) // unit vectors always encode
	}
	return b
}

// checkSearches runs every mode, with and without filters: each hit must
// be a live document at its acknowledged version that satisfies the
// filter; exhaustive retrievers (BM25 on a term every document has, dense
// Flat, late-exact) must find every live document, and with supplied
// vectors their scores must be those of the acknowledged version.
func (c *checker) checkSearches(ctx context.Context, e *engine.Engine, l *ledger, numOf map[uint64]string, live int, bad func(string, ...any)) {
	var vectors map[string]tandem.Vectors
	var q tandem.Vectors
	if c.external() {
		q = tandem.Vectors{Dense: unitVector(c.rand)}
		for range 3 {
			q.Tokens = append(q.Tokens, unitVector(c.rand))
		}
		vectors = map[string]tandem.Vectors{tortureModel: q}
	}
	kw := tortureKeywords[c.rand.IntN(len(tortureKeywords))]
	minVer := l.nextOp / 2
	type search struct {
		name       string
		retrievers []string
		filter     string
		keep       func(f map[string]any) bool // the documents the filter keeps
		all        bool                        // must find every kept live document
		score      func(id string, ver int64) float64
	}
	all := func(map[string]any) bool { return true }
	byKw := func(f map[string]any) bool { return f["kw"] == kw }
	searches := []search{
		{name: "bm25", retrievers: []string{"bm25"}, keep: all, all: true},
		{name: "dense", retrievers: []string{"dense"}, keep: all, all: true},
		{name: "late", retrievers: []string{"late"}, keep: all},
		{name: "late-exact", retrievers: []string{"late-exact"}, keep: all, all: true},
		{name: "hybrid", retrievers: e.Retrievers(), keep: all},
		{name: "dense+filter", retrievers: []string{"dense"}, filter: fmt.Sprintf(`{"term":{"kw":%q}}`, kw), keep: byKw, all: true},
		{name: "hybrid+filter", retrievers: e.Retrievers(), filter: fmt.Sprintf(`{"term":{"kw":%q}}`, kw), keep: byKw},
		{name: "hybrid+range", retrievers: e.Retrievers(), filter: fmt.Sprintf(`{"range":{"ver":{"gte":%d}}}`, minVer),
			keep: func(f map[string]any) bool { v, _ := f["ver"].(float64); return v >= float64(minVer) }},
	}
	if c.external() {
		searches[1].score = func(id string, ver int64) float64 {
			var s float64
			for i, x := range tortureVectors(id, ver).Dense {
				s += float64(x) * float64(q.Dense[i])
			}
			return s
		}
		searches[3].score = func(id string, ver int64) float64 {
			blob := c.wantBlob(latecollect.BlobName(tortureModel), id, ver)
			d, dim, _ := latecollect.DecodeTokens(blob)
			s, _ := latecollect.AvgMax(q.Flatten(tortureDim), d, dim, nil, nil)
			return float64(s)
		}
	}
	if live >= dense.DefaultExactBelow {
		// The dense index is IVF from this size on: approximate, so it
		// need not find every document.
		searches[1].all, searches[5].all = false, false
	}
	for _, s := range searches {
		req := engine.Request{Text: "common", K: live + 10, Retrievers: s.retrievers, Vectors: vectors, Filter: []byte(s.filter)}
		if !s.all {
			req.K = 50
		}
		r, err := e.Search(ctx, req)
		if err != nil {
			bad("search %s: %v", s.name, err)
			continue
		}
		seen := map[string]bool{}
		for _, h := range r.Hits {
			st := l.state[h.ID]
			switch {
			case seen[h.ID]:
				bad("search %s: %s returned twice", s.name, h.ID)
			case !st.live:
				bad("search %s: returned %s, which is not live", s.name, h.ID)
			case h.Fields["ver"] != float64(st.ver):
				bad("search %s: %s has version %v, acknowledged %d", s.name, h.ID, h.Fields["ver"], st.ver)
			case !s.keep(h.Fields):
				bad("search %s: %s breaks the filter %s (fields %v)", s.name, h.ID, s.filter, h.Fields)
			case s.score != nil && math.Abs(h.Score-s.score(h.ID, st.ver)) > 1e-3:
				bad("search %s: %s scored %v, version %d scores %v", s.name, h.ID, h.Score, st.ver, s.score(h.ID, st.ver))
			}
			seen[h.ID] = true
		}
		if s.all {
			want := 0
			for _, id := range numOf {
				if s.keep(tortureFields(id, l.state[id].ver)) {
					want++
				}
			}
			if len(r.Hits) != want {
				bad("search %s: %d hits, %d live documents match", s.name, len(r.Hits), want)
			}
		}
	}
}

// copyTree copies the directory src to dst, keeping holes: Badger's value
// log and memtable files are large and mostly sparse. A missing src (a
// writer killed before its first Open made the collection) copies as an
// empty directory.
func copyTree(src, dst string) error {
	if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
		return os.MkdirAll(dst, 0o755)
	}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			return copySparse(path, target)
		}
		return nil
	})
}

// Linux lseek whences for sparse files.
const (
	seekData = 3
	seekHole = 4
)

func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return err
	}
	size := info.Size()
	for off := int64(0); off < size; {
		data, err := in.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			out.Close()
			return err
		}
		hole, err := in.Seek(data, seekHole)
		if err != nil {
			out.Close()
			return err
		}
		if _, err := io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data)); err != nil {
			out.Close()
			return err
		}
		off = hole
	}
	if err := out.Truncate(size); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
