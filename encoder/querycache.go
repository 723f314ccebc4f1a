package encoder

import (
	"container/list"
	"slices"
	"sync"
)

// DefaultQueryCacheBytes is the memory bound of a model's query cache when
// Options.QueryCacheBytes is 0: about 37,000 queries' pooled 384-dim
// vectors, or, with their token vectors for late interaction, SciFact's
// 1,109 queries one and a half times over (they take 40 MB with
// bge-small-en-v1.5).
const DefaultQueryCacheBytes = 64 << 20

// queryEntryOverhead is what an entry costs beyond its text and vectors:
// the list element, the map slot and the entry's headers, rounded up.
const queryEntryOverhead = 160

// queryCache holds the encodings of recent query texts for one loaded
// model, least recently used first out, within a bound in bytes that
// counts each entry's text, vectors, token vectors, ids and positions.
//
// The key is the text alone: the model, its configuration (prefix,
// marker, maximum length, pooling, projection) and its options are the
// same for every entry, since each loaded model has a cache of its own.
// An entry holds the pooled vector and, when a caller asked for them, the
// token output; it serves a request for tokens only if it has them, and a
// run that brings them replaces an entry without.
//
// Entries are never changed once stored: get and put copy, so that the
// callers own what they receive, as with every Batch. Safe for concurrent
// use.
type queryCache struct {
	capacity int64
	mu       struct {
		sync.Mutex
		entries map[string]*list.Element // of *queryEntry
		lru     list.List                // most recently used at the front
		bytes   int64
		hits    int64
		misses  int64
		evicted int64
	}
}

// queryEntry is one text's encoding; tokens is nil when it has none.
type queryEntry struct {
	text   string
	vector []float32
	tokens *Tokens
	bytes  int64
}

// newQueryCache returns a cache bounded to capacity bytes, nil (no cache)
// when capacity is not positive.
func newQueryCache(capacity int64) *queryCache {
	if capacity <= 0 {
		return nil
	}
	c := &queryCache{capacity: capacity}
	c.mu.entries = map[string]*list.Element{}
	return c
}

// get returns copies of text's pooled vector (nil when the model pools
// none) and, if tokens, its token output, and whether the cache had them.
// It counts a hit or a miss. A nil cache has nothing.
func (c *queryCache) get(text string, tokens bool) ([]float32, *Tokens, bool) {
	if c == nil {
		return nil, nil, false
	}
	c.mu.Lock()
	el, ok := c.mu.entries[text]
	var ent *queryEntry
	if ok {
		ent = el.Value.(*queryEntry)
		ok = !tokens || ent.tokens != nil
	}
	if !ok {
		c.mu.misses++
		c.mu.Unlock()
		return nil, nil, false
	}
	c.mu.hits++
	c.mu.lru.MoveToFront(el)
	c.mu.Unlock()
	// ent is immutable: copy outside the lock.
	var t *Tokens
	if tokens {
		t = cloneTokens(ent.tokens)
	}
	return slices.Clone(ent.vector), t, true
}

// put stores copies of text's encoding, evicting the least recently used
// entries to stay within capacity. An entry larger than an eighth of the
// capacity is not stored, so that one long query cannot flush the cache;
// nor does an entry without tokens replace one with them. A nil cache
// stores nothing.
func (c *queryCache) put(text string, vector []float32, tokens *Tokens) {
	if c == nil {
		return
	}
	size := int64(queryEntryOverhead + len(text) + 4*len(vector))
	if tokens != nil {
		size += int64(4 * (len(tokens.Vectors) + len(tokens.IDs) + len(tokens.Positions)))
	}
	if size > c.capacity/8 {
		return
	}
	ent := &queryEntry{text: text, vector: slices.Clone(vector), tokens: cloneTokens(tokens), bytes: size}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.mu.entries[text]; ok {
		old := el.Value.(*queryEntry)
		if old.tokens != nil && tokens == nil {
			c.mu.lru.MoveToFront(el)
			return
		}
		c.removeLocked(el)
	}
	c.mu.entries[text] = c.mu.lru.PushFront(ent)
	c.mu.bytes += size
	for c.mu.bytes > c.capacity {
		c.removeLocked(c.mu.lru.Back())
		c.mu.evicted++
	}
}

func (c *queryCache) removeLocked(el *list.Element) {
	ent := c.mu.lru.Remove(el).(*queryEntry)
	delete(c.mu.entries, ent.text)
	c.mu.bytes -= ent.bytes
}

// stats fills the cache's part of QueryStats.
func (c *queryCache) stats(s *QueryStats) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.CacheHits, s.CacheMisses, s.CacheEvictions = c.mu.hits, c.mu.misses, c.mu.evicted
	s.CacheEntries, s.CacheBytes, s.CacheCapacity = len(c.mu.entries), c.mu.bytes, c.capacity
}

func cloneTokens(t *Tokens) *Tokens {
	if t == nil {
		return nil
	}
	return &Tokens{Dim: t.Dim, Vectors: slices.Clone(t.Vectors), IDs: slices.Clone(t.IDs), Positions: slices.Clone(t.Positions)}
}
