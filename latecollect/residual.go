package latecollect

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// The residual-code index (ColBERTv2's compression, WARP's layout): each
// document token is kept under its nearest centroid as its residual from
// that centroid, quantised to one bit per dimension with a per-dimension
// cut-off and two reconstruction values (the means of the training
// residuals below and above the cut-off). Each centroid's code list holds
// the docnum and code of every token there. The full-precision tokens are not
// copied: the final exact stage reads each candidate's blob from the store
// (Store.ReadBlobCRC: pread, never a memory map), and scores it only if it
// is the blob the document's codes were made from (blobStamp); otherwise
// the document is scored from its codes (codedScore).

const (
	// residualDesc is the description prefix of the residual-code index:
	// "Residual" chooses the number of centroids automatically,
	// "Residual<n>" fixes it (a power of two, at most maxCentroids).
	residualDesc = "Residual"
	// maxCentroids bounds the centroids: their ids are stored in 16 bits.
	maxCentroids = 1 << 16
	// trainPerCentroid is the fewest tokens per centroid the automatic
	// number of centroids leaves for training.
	trainPerCentroid = 32
	// kmeansIterations is the number of k-means iterations. PLAID runs
	// 4. On SciFact (the depth trace of a bulk build, K=100, 300
	// queries) 10, 6 and 4 iterations passed 0.8771, 0.8702 and 0.8643
	// of the exhaustive top 100 to the exact stage, with the same late
	// nDCG@10 and R@100 (0.7473, 0.9617); as built by tandem index,
	// hybrid nDCG@10 was 0.7562 with 6 and 0.7549 with 4, against
	// 0.7563 for bm25+dense+late-exact. 6 take 60% of 10's k-means CPU.
	kmeansIterations = 6
	// kmeansSeed makes training repeatable.
	kmeansSeed = 1234
	// RetrainGrowth is the growth in tokens since the centroids were
	// trained after which the index retrains them (when the automatic
	// number of centroids has changed).
	RetrainGrowth = 4
	// RetrainDrift is the rise of the mean residual norm, over its value
	// on the training sample, after which the centroids are said no
	// longer to fit the data and are retrained.
	RetrainDrift = 1.25
)

// kmeansPerCentroid is the number of tokens per centroid k-means trains
// on (trainPerCentroid), and kmeansIters its iterations
// (kmeansIterations); variables so that measurements can set them
// (TANDEM_KMEANS_PER_CENTROID, TANDEM_KMEANS_ITERATIONS).
var (
	kmeansPerCentroid = trainPerCentroid
	kmeansIters       = kmeansIterations
)

// isResidual reports whether desc names the residual-code index.
func isResidual(desc string) bool {
	_, ok := residualLists(desc)
	return ok
}

// residualLists parses "Residual" (n = 0: automatic) or "Residual<n>".
func residualLists(desc string) (int, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(desc), residualDesc)
	if !ok {
		return 0, false
	}
	if rest == "" {
		return 0, true
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n <= 0 || n > maxCentroids || n&(n-1) != 0 {
		return -1, true
	}
	return n, true
}

// autoCentroids is the automatic number of centroids for a token count:
// the least power of two ≥ 4·sqrt(tokens), at most maxCentroids and at
// most tokens/trainPerCentroid (so there is training data for each), at
// least 1. On SciFact's 1.24M MiniLM tokens, 8192 centroids found 0.973
// of the exhaustive top 10 with the default knobs where 2048 found 0.900
// (30 queries): the centroid-only stage ranks too coarsely with fewer.
func autoCentroids(tokens int64) int {
	n := 1
	for int64(n)*int64(n) < 16*tokens && n < maxCentroids {
		n *= 2
	}
	for n > 1 && int64(n)*trainPerCentroid > tokens {
		n /= 2
	}
	return n
}

// codebook is the trained part of the index: centroids and the one-bit
// residual quantiser.
type codebook struct {
	dim     int
	nlist   int
	cent    []float32 // nlist × dim
	cutoff  []float32 // per dimension
	lo, hi  []float32 // reconstruction values below and above the cut-off
	meanRes float32   // mean residual norm over the training sample
	trained int64     // tokens held when trained
	// provisional marks a codebook trained on the first documents of a
	// run of the log, replaced where the next run starts.
	provisional bool
	quant       assigner
	// i8 is the centroids in int8, made at the first search that scores
	// them so (int8) or shared with the assigner (assign).
	i8 atomic.Pointer[centI8]
}

// int8 returns the centroids in int8 (newCentI8), making them at the
// first call; it is safe for concurrent use.
func (cb *codebook) int8() *centI8 { return cb.int8From(nil) }

// int8From is int8, taking c (when not nil) as the int8 centroids if
// none are held yet, so that assignment and search share one copy.
func (cb *codebook) int8From(c *centI8) *centI8 {
	if h := cb.i8.Load(); h != nil {
		return h
	}
	if c == nil {
		c = newCentI8(cb.cent, cb.dim)
	}
	cb.i8.CompareAndSwap(nil, c)
	return cb.i8.Load()
}

func (cb *codebook) close() {
	if cb != nil && cb.quant != nil {
		cb.quant.Close()
		cb.quant = nil
	}
}

// assign sets out[i] to the nearest centroid of row i (see newAssigner),
// creating the assigner (its copy of the centroids) on first use: an index
// that only searches never holds it. Once the assigner is made (ready),
// assign is safe for concurrent use.
func (cb *codebook) assign(rows []float32, out []int32) error {
	if err := cb.ready(); err != nil {
		return err
	}
	return cb.quant.Assign(rows, out)
}

// ready makes the assigner if none is held.
func (cb *codebook) ready() error {
	if cb.quant == nil {
		q, err := newAssigner(cb.cent, cb.dim)
		if err != nil {
			return err
		}
		if ea, ok := q.(*exactAssigner); ok && ea.i8 != nil {
			ea.i8 = cb.int8From(ea.i8) // one int8 copy, the search's too
		}
		cb.quant = q
	}
	return nil
}

// codeBytes is the size of one token's residual code.
func (cb *codebook) codeBytes() int { return cb.dim / 8 }

// trainCodebook trains nlist centroids (spherical k-means: exactKMeans, or
// from twoLevelCentroids on twoLevelKMeans) and the residual quantiser on
// sample, rows of dim values.
func trainCodebook(ctx context.Context, sample []float32, dim, nlist int, trained int64) (*codebook, error) {
	if dim%8 != 0 {
		return nil, fmt.Errorf("%w: residual codes need a dimension divisible by 8, have %d", ErrBadOptions, dim)
	}
	n := len(sample) / dim
	nlist = min(nlist, n)
	if nlist < 1 {
		return nil, fmt.Errorf("train codebook: no tokens")
	}
	var cent []float32
	var err error
	if nlist >= twoLevelTrainFrom {
		cent, err = twoLevelKMeans(ctx, sample, dim, nlist, kmeansIters, kmeansSeed)
	} else {
		cent, err = exactKMeans(ctx, sample, dim, nlist, kmeansIters, kmeansSeed)
	}
	if err != nil {
		return nil, fmt.Errorf("train codebook: %w", err)
	}
	cb := &codebook{dim: dim, nlist: nlist, cent: cent, trained: trained}
	assign := make([]int32, n)
	if err := cb.assign(sample, assign); err != nil {
		cb.close()
		return nil, fmt.Errorf("train codebook: %w", err)
	}
	// Residuals, one dimension at a time: the cut-off is the median, the
	// reconstruction values the means on either side.
	res := make([]float32, len(sample))
	var normSum float64
	for i := range n {
		c := cent[int(assign[i])*dim : int(assign[i]+1)*dim]
		var ss float64
		for j := range dim {
			r := sample[i*dim+j] - c[j]
			res[i*dim+j] = r
			ss += float64(r) * float64(r)
		}
		normSum += math.Sqrt(ss)
	}
	cb.meanRes = float32(normSum / float64(n))
	cb.cutoff, cb.lo, cb.hi = make([]float32, dim), make([]float32, dim), make([]float32, dim)
	col := make([]float32, n)
	for j := range dim {
		for i := range n {
			col[i] = res[i*dim+j]
		}
		cut := nthSmallest(col, n/2)
		var loSum, hiSum float64
		var loN, hiN int
		for i := range n {
			r := res[i*dim+j]
			if r > cut {
				hiSum += float64(r)
				hiN++
			} else {
				loSum += float64(r)
				loN++
			}
		}
		cb.cutoff[j] = cut
		cb.lo[j], cb.hi[j] = cut, cut
		if loN > 0 {
			cb.lo[j] = float32(loSum / float64(loN))
		}
		if hiN > 0 {
			cb.hi[j] = float32(hiSum / float64(hiN))
		}
	}
	return cb, nil
}

// nthSmallest returns the k-th smallest value of v (from 0), which it
// reorders: quickselect, in linear time on average where sorting each
// dimension's residuals took 2% of a SciFact build. v holds no NaN.
func nthSmallest(v []float32, k int) float32 {
	lo, hi := 0, len(v)-1
	for lo < hi {
		// Median of three as the pivot; Hoare partition.
		mid := lo + (hi-lo)/2
		a, b, c := v[lo], v[mid], v[hi]
		p := b
		if (a < b) != (a < c) {
			p = a
		} else if (c < a) != (c < b) {
			p = c
		}
		i, j := lo, hi
		for i <= j {
			for v[i] < p {
				i++
			}
			for v[j] > p {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return v[k]
		}
	}
	return v[k]
}

// encode assigns rows (n × dim values) to centroids and quantises their
// residuals: cids gets n ids, codes n × dim/8 bytes and norms the n
// residual norms (before quantisation).
func (cb *codebook) encode(rows []float32, cids []uint16, codes []byte, norms []float32) error {
	dim := cb.dim
	n := len(rows) / dim
	assign := make([]int32, n)
	if err := cb.assign(rows, assign); err != nil {
		return err
	}
	cbytes := cb.codeBytes()
	for i := range n {
		a := int(assign[i])
		cids[i] = uint16(a)
		c := cb.cent[a*dim : (a+1)*dim]
		row := rows[i*dim : (i+1)*dim]
		code := codes[i*cbytes : (i+1)*cbytes]
		var ss float64
		for b := range code {
			// Branch-free: the bits are as unpredictable as coin tosses.
			// cut-r is negative exactly when r > cut (two different
			// floats never subtract to zero), and its sign is the bit.
			var byt byte
			var g float32
			for k := range 8 {
				j := 8*b + k
				r := row[j] - c[j]
				g += r * r
				byt |= byte(math.Float32bits(cb.cutoff[j]-r)>>31) << k
			}
			code[b] = byt
			ss += float64(g)
		}
		norms[i] = float32(math.Sqrt(ss))
	}
	return nil
}

// docCodes is one document's tokens as centroid ids and residual codes,
// as coded (put takes them apart into the code lists).
type docCodes struct {
	cids    []uint16
	codes   []byte
	normSum float32   // sum of the tokens' residual norms (before quantisation)
	blob    blobStamp // the blob the codes were made from
}

// docMeta is what the index keeps of a document beside its tokens, which
// are in the code lists of its centroids.
type docMeta struct {
	cents   []uint16 // the distinct centroids of its tokens, ascending
	count   int32    // its tokens
	normSum float32
	blob    blobStamp
}

// blobStamp identifies the blob a document's codes were made from by its
// length and CRC-32C (Castagnoli, as storage records it). The store holds
// a document's current blob only: when it is not the stamped one, the
// document has a change the index has not applied yet, and its exact
// score would come from tokens its codes were not made from. A zero
// stamp is unknown (a format-1 snapshot's document that had no copy in
// the token file): any blob with the document's token count passes.
type blobStamp struct {
	size, crc uint32
}

// stampOf is the stamp of e's blob; e.crc must be its CRC-32C.
func stampOf(e docEntry) blobStamp { return blobStamp{size: uint32(len(e.blob)), crc: e.crc} }

// matches reports whether a blob of the given length, CRC-32C and token
// count is the one d was coded from.
func (d docMeta) matches(size int, crc uint32, count int) bool {
	if d.blob.size == 0 {
		return count == int(d.count)
	}
	return d.blob.size == uint32(size) && d.blob.crc == crc && count == int(d.count)
}

// residualIndex holds the codes of every document, grouped by centroid:
// each centroid's code list holds every token coded to it. Invariants:
// a list's entries are in ascending docnum order, so a document's are
// contiguous, in the order put gave them; the lists of a document's
// cents hold exactly its count tokens, and no other list holds any.
type residualIndex struct {
	cb     *codebook
	docs   map[uint64]docMeta
	clists []codeList // per centroid
	tokens int64
	// normSum is the sum of the residual norms of the tokens held.
	normSum float64
	stamp   []uint32
	gen     uint32
	// maxNum is the largest docnum ever put (deletes leave it).
	maxNum uint32
	// cents counts the documents' distinct centroids.
	cents int64
}

func newResidualIndex(cb *codebook) *residualIndex {
	return &residualIndex{
		cb:     cb,
		docs:   map[uint64]docMeta{},
		clists: make([]codeList, cb.nlist),
		stamp:  make([]uint32, cb.nlist),
	}
}

// codeList is one centroid's tokens: entry i is a token of document
// docs[i] with code codes[i*codeBytes:(i+1)*codeBytes], in ascending
// docnum order (stage 2 walks a list a bucket of docnums at a time).
type codeList struct {
	docs  []uint32
	codes []byte
}

// reserve makes room for n more entries of codeBytes each. A full list
// grows by an eighth (at least 16 entries), not by append's doubling: the
// lists are most of the index's memory, and their slack stays within an
// eighth.
func (l *codeList) reserve(n, codeBytes int) {
	if len(l.docs)+n <= cap(l.docs) {
		return
	}
	size := max(len(l.docs)+n, len(l.docs)+max(16, len(l.docs)/8))
	docs := make([]uint32, len(l.docs), size)
	copy(docs, l.docs)
	codes := make([]byte, len(l.codes), size*codeBytes)
	copy(codes, l.codes)
	l.docs, l.codes = docs, codes
}

// add adds an entry after every entry of a docnum up to num's: at the end
// when num is the largest, as it is for every new document (docnums are
// assigned in ascending order); in place for an update of an older one.
func (l *codeList) add(num uint32, code []byte) {
	l.reserve(1, len(code))
	n := len(l.docs)
	if n == 0 || l.docs[n-1] <= num {
		l.docs = append(l.docs, num)
		l.codes = append(l.codes, code...)
		return
	}
	i, _ := slices.BinarySearch(l.docs, num+1)
	l.docs = slices.Insert(l.docs, i, num)
	l.codes = slices.Insert(l.codes, i*len(code), code...)
}

// addAll adds entries (docs, in ascending order, and their codes of
// codeBytes each) to a list that holds none of their documents, growing
// it as add does: appended when they all follow the list's last, else
// merged.
func (l *codeList) addAll(docs []uint32, codes []byte, codeBytes int) {
	if len(docs) == 0 {
		return
	}
	n := len(l.docs)
	if n == 0 || l.docs[n-1] <= docs[0] {
		l.reserve(len(docs), codeBytes)
		l.docs = append(l.docs, docs...)
		l.codes = append(l.codes, codes...)
		return
	}
	size := n + len(docs)
	merged := codeList{docs: make([]uint32, 0, size), codes: make([]byte, 0, size*codeBytes)}
	i, j := 0, 0
	for i < n || j < len(docs) {
		if j == len(docs) || i < n && l.docs[i] <= docs[j] {
			merged.docs = append(merged.docs, l.docs[i])
			merged.codes = append(merged.codes, l.codes[i*codeBytes:(i+1)*codeBytes]...)
			i++
		} else {
			merged.docs = append(merged.docs, docs[j])
			merged.codes = append(merged.codes, codes[j*codeBytes:(j+1)*codeBytes]...)
			j++
		}
	}
	*l = merged
}

// sortByDoc puts a list read from a snapshot written before lists were
// kept in docnum order into that order, keeping each document's entries
// in theirs. It reports whether the list was out of order.
func (l *codeList) sortByDoc(codeBytes int) bool {
	if slices.IsSorted(l.docs) {
		return false
	}
	idx := make([]int32, len(l.docs))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return cmp.Compare(l.docs[a], l.docs[b]) })
	docs := make([]uint32, len(l.docs))
	codes := make([]byte, len(l.codes))
	for i, e := range idx {
		docs[i] = l.docs[e]
		copy(codes[i*codeBytes:(i+1)*codeBytes], l.codes[int(e)*codeBytes:(int(e)+1)*codeBytes])
	}
	l.docs, l.codes = docs, codes
	return true
}

// find returns the entries [i, j) of document num (i == j when none).
func (l *codeList) find(num uint32) (int, int) {
	i, _ := slices.BinarySearch(l.docs, num)
	j := i
	for j < len(l.docs) && l.docs[j] == num {
		j++
	}
	return i, j
}

// remove drops document num's entries, keeping the order of the others.
// A list that shrinks to a quarter of its capacity is copied to release
// the larger arrays.
func (l *codeList) remove(num uint32, codeBytes int) {
	i, j := l.find(num)
	if i == j {
		return
	}
	l.docs = slices.Delete(l.docs, i, j)
	l.codes = slices.Delete(l.codes, i*codeBytes, j*codeBytes)
	if cap(l.docs) > 64 && len(l.docs) < cap(l.docs)/4 {
		l.docs = slices.Clone(l.docs)
		l.codes = slices.Clone(l.codes)
	}
}

func (r *residualIndex) close() {
	if r != nil {
		r.cb.close()
	}
}

// put adds (or replaces) a document's codes.
func (r *residualIndex) put(num uint64, d docCodes) {
	r.drop(num)
	cb := r.cb.codeBytes()
	// Tokens go to their lists centroid by centroid, so that a
	// document's entries in a list are contiguous.
	m := docMeta{count: int32(len(d.cids)), normSum: d.normSum, blob: d.blob}
	r.gen++
	if r.gen == 0 {
		clear(r.stamp)
		r.gen = 1
	}
	for _, c := range d.cids {
		if r.stamp[c] != r.gen {
			r.stamp[c] = r.gen
			m.cents = append(m.cents, c)
		}
	}
	slices.Sort(m.cents)
	m.cents = slices.Clip(m.cents)
	for t, c := range d.cids {
		r.clists[c].add(uint32(num), d.codes[t*cb:(t+1)*cb])
	}
	r.docs[num] = m
	r.maxNum = max(r.maxNum, uint32(num))
	r.tokens += int64(m.count)
	r.normSum += float64(d.normSum)
	r.cents += int64(len(m.cents))
}

// drop removes a document, if held (r may be nil: it holds none).
func (r *residualIndex) drop(num uint64) {
	if r == nil {
		return
	}
	d, ok := r.docs[num]
	if !ok {
		return
	}
	delete(r.docs, num)
	r.tokens -= int64(d.count)
	r.normSum -= float64(d.normSum)
	r.cents -= int64(len(d.cents))
	cb := r.cb.codeBytes()
	for _, c := range d.cents {
		r.clists[c].remove(uint32(num), cb)
	}
}

// held returns document num's entry, if r (which may be nil) holds it.
func (r *residualIndex) held(num uint64) (docMeta, bool) {
	if r == nil {
		return docMeta{}, false
	}
	d, ok := r.docs[num]
	return d, ok
}

// docCount is the number of documents r (which may be nil) holds.
func (r *residualIndex) docCount() int {
	if r == nil {
		return 0
	}
	return len(r.docs)
}

// absorb moves the documents of s, coded with r's codebook, into r,
// replacing r's codes of the same documents: as putting each again would,
// without splitting their codes by document. s (which may be nil) must
// not be used after.
func (r *residualIndex) absorb(s *residualIndex) {
	if s == nil || len(s.docs) == 0 {
		return
	}
	for num := range s.docs {
		r.drop(num)
	}
	cb := r.cb.codeBytes()
	for c := range s.clists {
		// s's list is in docnum order, and r's holds none of its
		// documents now: added whole, in order, the merge keeps each
		// document's entries contiguous.
		if l := &s.clists[c]; len(l.docs) > 0 {
			r.clists[c].addAll(l.docs, l.codes, cb)
		}
	}
	for num, m := range s.docs {
		r.docs[num] = m
		r.maxNum = max(r.maxNum, uint32(num))
		r.tokens += int64(m.count)
		r.normSum += float64(m.normSum)
		r.cents += int64(len(m.cents))
	}
}

// compact reallocates every list with spare capacity to its length,
// where a whole index was just put together.
func (r *residualIndex) compact() {
	for c := range r.clists {
		l := &r.clists[c]
		if cap(l.docs) > len(l.docs) {
			l.docs = slices.Clone(l.docs)
			l.codes = slices.Clone(l.codes)
		}
	}
}

// tokensOf appends document num's centroid ids and codes (meta d) to
// cids and codes, grouped by centroid.
func (r *residualIndex) tokensOf(num uint64, d docMeta, cids []uint16, codes []byte) ([]uint16, []byte) {
	cb := r.cb.codeBytes()
	for _, c := range d.cents {
		l := &r.clists[c]
		i, j := l.find(uint32(num))
		for range j - i {
			cids = append(cids, c)
		}
		codes = append(codes, l.codes[i*cb:j*cb]...)
	}
	return cids, codes
}

// drift is the mean residual norm of the tokens held over that of the
// training sample.
func (r *residualIndex) drift() float64 {
	if r.tokens == 0 || r.cb.meanRes == 0 {
		return 1
	}
	return r.normSum / float64(r.tokens) / float64(r.cb.meanRes)
}

// memoryBytes is the memory the index takes: code lists (docnum and
// code per token, by capacity), centroids, the
// quantiser's copy of them, and per document its distinct centroids and
// bookkeeping (map entry, slice header and blob stamp, estimated at 88
// bytes).
func (r *residualIndex) memoryBytes() int64 {
	cb := r.cb
	b := int64(len(cb.cent))*4 + int64(len(cb.cutoff)+len(cb.lo)+len(cb.hi))*4 + int64(len(r.stamp))*4
	if cb.quant != nil {
		b += int64(len(cb.cent)) * 4
	}
	if (cb.quant != nil && i8Assign(cb.dim)) || i8Centroids(cb.dim) {
		// The int8 copy that assignment and search share, with a scale
		// and an offset per centroid: counted once searches may make it.
		b += int64(len(cb.cent)) + 8*int64(cb.nlist)
	}
	for _, l := range r.clists {
		b += int64(cap(l.docs))*4 + int64(cap(l.codes)) + 48
	}
	return b + 88*int64(len(r.docs)) + 2*r.cents
}
