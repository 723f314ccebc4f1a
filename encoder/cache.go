package encoder

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
)

// Cache shares loaded models: Load returns Encoders that share one loaded
// model (its ONNX Runtime sessions, tokenizer and thread budgets) per
// model directory and Options, so that a process holds one copy of a
// model however many collections use it. A model is loaded at the first
// Load of its key and released when the last Encoder of it closes; the
// next Load reads it from disk again.
//
// What Encoders of one model share, beyond the memory: the thread budgets
// are the model's, not each Encoder's. Runs of all its Encoders together
// take at most IntraOpThreads × MaxConcurrentRuns threads, and document
// runs at most DocumentThreads, so concurrent callers queue where separate
// loads would have oversubscribed the cores; a query still never waits
// for documents when DocumentThreads is set. EncodeQuery's cache and
// batches are the model's too: a query of one Encoder may be answered from
// another's encoding of the same text, or share its run.
//
// The zero Cache is ready to use. It is safe for concurrent use;
// concurrent Loads of one key load the model once.
type Cache struct {
	mu struct {
		sync.Mutex
		entries map[cacheKey]*cacheEntry
		loads   int64
	}
}

// cacheKey is what makes two loads of a model differ: its directory and
// every option (the configuration by value).
type cacheKey struct {
	dir    string
	opts   Options // Config cleared
	config string  // Options.Config as JSON, "" when nil
}

// cacheEntry is one loaded model and the Encoders open on it.
type cacheEntry struct {
	ready chan struct{} // closed once l or err is set
	l     *loaded
	err   error
	refs  int // open Encoders, guarded by Cache.mu
}

// CacheStats counts what a Cache holds.
type CacheStats struct {
	// Loads is the number of models the Cache has loaded from disk.
	Loads int64
	// Models is the number of models loaded now, Encoders the number
	// of open Encoders sharing them.
	Models, Encoders int
}

// Stats reports the Cache's counts.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := CacheStats{Loads: c.mu.loads}
	for _, ent := range c.mu.entries {
		select {
		case <-ent.ready: // loaded: a failed load leaves the map first
			s.Models++
			s.Encoders += ent.refs
		default: // loading
		}
	}
	return s
}

// Load returns an Encoder of the model in dir with opts, loading it (as
// the package's Load does) unless an open Encoder of the same directory
// and options has already. Close the Encoder when done with it.
func (c *Cache) Load(dir string, opts *Options) (*Encoder, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	key, err := keyOf(dir, o)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.mu.entries == nil {
		c.mu.entries = map[cacheKey]*cacheEntry{}
	}
	if ent := c.mu.entries[key]; ent != nil {
		ent.refs++
		c.mu.Unlock()
		<-ent.ready
		if ent.err != nil {
			return nil, ent.err
		}
		return c.handle(key, ent), nil
	}
	ent := &cacheEntry{ready: make(chan struct{}), refs: 1}
	c.mu.entries[key] = ent
	c.mu.loads++
	c.mu.Unlock()

	ent.l, ent.err = loadModel(dir, o)
	if ent.err != nil {
		// Forget the failure, so that the next Load tries again; those
		// waiting for this load get its error.
		c.mu.Lock()
		delete(c.mu.entries, key)
		c.mu.Unlock()
		close(ent.ready)
		return nil, ent.err
	}
	close(ent.ready)
	return c.handle(key, ent), nil
}

// handle returns an Encoder holding one of ent's references.
func (c *Cache) handle(key cacheKey, ent *cacheEntry) *Encoder {
	return ent.l.handle(func() error {
		c.mu.Lock()
		ent.refs--
		last := ent.refs == 0
		if last {
			delete(c.mu.entries, key)
		}
		c.mu.Unlock()
		if !last {
			return nil
		}
		return ent.l.close()
	})
}

// keyOf is the cache key of dir and o: the directory absolute, with
// symbolic links resolved, so that two spellings of one model share it.
func keyOf(dir string, o Options) (cacheKey, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return cacheKey{}, fmt.Errorf("encoder: %w", err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	k := cacheKey{dir: abs, opts: o}
	if o.Config != nil {
		b, err := json.Marshal(o.Config)
		if err != nil {
			return cacheKey{}, fmt.Errorf("encoder: %w", err)
		}
		k.config = string(b)
		k.opts.Config = nil
	}
	return k, nil
}
