package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/storage"
)

// validName is a collection name: it is a directory of the data directory,
// so it cannot hold a separator, start with a dot or be "..".
var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`)

// trashPrefix names a dropped collection's directory while it is removed;
// it is not a valid name, so such a directory is never opened.
const trashPrefix = ".dropped-"

// restorePrefix names the working directory of a restore: the backup as
// it arrives, then the collection engine.Restore makes of it, renamed to
// the collection's name only once whole. It is not a valid name either,
// so a restore cut short by a crash leaves nothing that opens as a
// collection, and the next start removes it.
const restorePrefix = ".restoring-"

func checkName(name string) error {
	if !validName.MatchString(name) {
		return errorf(http.StatusBadRequest, "invalid_name", "collection name %q: want 1 to 64 letters, digits, '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// collection is one open engine. Requests hold mu for reading while they
// use e; drop and shutdown take it for writing, so an engine is closed
// only once no request uses it, and a request that finds it gone answers
// 404.
type collection struct {
	name string
	dir  string // "" for a Catalog's
	e    Collection

	mu   sync.RWMutex
	gone bool // guarded by mu
}

// registry holds the open collections of the data directory.
type registry struct {
	dir string
	// catalog, when set, holds the collections instead of dir.
	catalog Catalog
	// max bounds the collections create makes (Config.MaxCollections).
	max int
	// createMu serialises a catalog's creates, so that two creates
	// through this server cannot both pass the bound.
	createMu sync.Mutex
	mu       struct {
		sync.Mutex
		open map[string]*collection
		// busy names a collection being created, restored or dropped:
		// its name is taken, and it is not yet (or no longer) served.
		busy map[string]bool
	}
}

// openRegistry opens every collection under dir (creating dir if needed)
// and removes what earlier drops left half removed and earlier restores
// left half done. A collection that fails to open is an error naming it:
// a server does not start with part of its data silently missing.
func openRegistry(dir string, max int, opts engine.Options) (*registry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("server: data directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("server: data directory: %w", err)
	}
	reg := &registry{dir: dir, max: max}
	reg.mu.open = map[string]*collection{}
	reg.mu.busy = map[string]bool{}
	for _, de := range entries {
		name := de.Name()
		if !de.IsDir() {
			continue
		}
		if strings.HasPrefix(name, trashPrefix) || strings.HasPrefix(name, restorePrefix) {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				reg.closeAll()
				return nil, fmt.Errorf("server: remove what a drop or a restore left: %w", err)
			}
			continue
		}
		if !validName.MatchString(name) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, name, "badger")); err != nil {
			continue // not a collection
		}
		o := opts
		o.MustExist = true
		e, err := engine.Open(filepath.Join(dir, name), &o)
		if err != nil {
			reg.closeAll()
			return nil, fmt.Errorf("server: open collection %q: %w", name, err)
		}
		reg.mu.open[name] = &collection{name: name, dir: filepath.Join(dir, name), e: e}
	}
	return reg, nil
}

// acquire returns the named collection, held for reading: the caller must
// call release.
func (r *registry) acquire(name string) (*collection, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if r.catalog != nil {
		e, err := r.catalog.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, notFound(name)
		}
		if err != nil {
			return nil, err
		}
		c := &collection{name: name, e: e}
		c.mu.RLock()
		return c, nil
	}
	r.mu.Lock()
	c := r.mu.open[name]
	r.mu.Unlock()
	if c == nil {
		return nil, notFound(name)
	}
	c.mu.RLock()
	if c.gone {
		c.mu.RUnlock()
		return nil, notFound(name)
	}
	return c, nil
}

func (c *collection) release() { c.mu.RUnlock() }

func notFound(name string) error {
	return errorf(http.StatusNotFound, "collection_not_found", "collection %q does not exist", name)
}

// each calls fn with every open collection, by name, each held for
// reading during its call only.
func (r *registry) each(fn func(*collection)) {
	if r.catalog != nil {
		for _, name := range r.catalog.List() {
			if c, err := r.acquire(name); err == nil {
				fn(c)
				c.release()
			}
		}
		return
	}
	r.mu.Lock()
	cs := make([]*collection, 0, len(r.mu.open))
	for _, c := range r.mu.open {
		cs = append(cs, c)
	}
	r.mu.Unlock()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		c.mu.RLock()
		if !c.gone {
			fn(c)
		}
		c.mu.RUnlock()
	}
}

// tooMany is the answer to a create beyond the bound on collections.
func (r *registry) tooMany(name string, have int) error {
	return errorf(http.StatusConflict, "too_many_collections",
		"collection %q: the server holds %d collections, and its limit is %d (--max-collections); drop one, or restart the server with a higher --max-collections",
		name, have, r.max)
}

// create makes a new collection. Its name is reserved while the engine
// opens (loading models may take seconds), so that a concurrent create or
// drop of the same name answers 409. Beyond the bound on collections
// (r.max), counting those being created or dropped, it answers 409 and
// creates nothing.
func (r *registry) create(ctx context.Context, name string, opts engine.Options) (*collection, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if r.catalog != nil {
		// The cluster's list counts collections any node made; a create
		// through another node at the same moment may pass the bound by
		// one.
		r.createMu.Lock()
		defer r.createMu.Unlock()
		if names := r.catalog.List(); len(names) >= r.max && !slices.Contains(names, name) {
			return nil, r.tooMany(name, len(names))
		}
		e, err := r.catalog.Create(ctx, name, opts)
		if errors.Is(err, fs.ErrExist) {
			return nil, errorf(http.StatusConflict, "collection_exists", "collection %q already exists", name)
		}
		if err != nil {
			return nil, err
		}
		return &collection{name: name, e: e}, nil
	}
	dir := filepath.Join(r.dir, name)
	if err := r.reserve(name, dir); err != nil {
		return nil, err
	}
	defer r.done(name)
	e, err := engine.Open(dir, &opts)
	if err != nil {
		// The name was free and reserved: whatever Open left is ours.
		os.RemoveAll(dir)
		return nil, err
	}
	c := &collection{name: name, dir: dir, e: e}
	r.mu.Lock()
	r.mu.open[name] = c
	r.mu.Unlock()
	return c, nil
}

// reserve marks name busy for a create or a restore into dir, or answers
// 409: the name is open or busy, dir exists, or the server holds as many
// collections as it may (r.max, counting those being created or dropped).
func (r *registry) reserve(name, dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.open[name] != nil || r.mu.busy[name] {
		return errorf(http.StatusConflict, "collection_exists", "collection %q already exists", name)
	}
	if _, err := os.Lstat(dir); err == nil {
		return errorf(http.StatusConflict, "collection_exists", "collection %q: the data directory already holds %s, which is not an open collection", name, name)
	}
	if have := len(r.mu.open) + len(r.mu.busy); have >= r.max {
		return r.tooMany(name, have)
	}
	r.mu.busy[name] = true
	return nil
}

// restore creates collection name from the backup read from body. The
// name is checked and reserved as create reserves it before a byte is
// read. The backup is written to a working directory in the data
// directory (restorePrefix); engine.Restore checks its length and SHA-256
// and makes the collection in that directory; the collection's models
// must be installed ones (checkRestoredModels); only then is it renamed
// to the collection's name and opened with opts. The working directory is
// removed whatever happens, and nothing else is left on failure: a
// damaged backup, or a client that stops sending, creates nothing. A
// crash leaves the working directory, which the next start removes, or
// the whole restored collection.
func (r *registry) restore(name string, body io.Reader, opts engine.Options) (*collection, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if r.catalog != nil {
		return nil, fmt.Errorf("restoring a backup into a cluster: %w (a backup holds one node's collection; create the collection and upsert its documents)", errors.ErrUnsupported)
	}
	dir := filepath.Join(r.dir, name)
	if err := r.reserve(name, dir); err != nil {
		return nil, err
	}
	defer r.done(name)
	work, err := os.MkdirTemp(r.dir, restorePrefix+name+"-")
	if err != nil {
		return nil, fmt.Errorf("server: restore %q: %w", name, err)
	}
	defer os.RemoveAll(work)
	backup, restored := filepath.Join(work, "backup"), filepath.Join(work, "collection")
	// The engine's errors name these paths: the client sees what they
	// are, not where.
	hide := func(err error) error {
		ae := *classify(err)
		if ae.err == nil {
			ae.err = err
		}
		ae.message = strings.NewReplacer(backup, "the request body", restored, "collection "+name, work, "the restore's working directory").Replace(ae.message)
		return &ae
	}
	if err := receive(backup, body); err != nil {
		return nil, hide(fmt.Errorf("server: restore %q: %w", name, err))
	}
	if _, err := engine.Restore(backup, restored); err != nil {
		if (errors.Is(err, storage.ErrCorruption) || errors.Is(err, io.ErrUnexpectedEOF)) && !errors.Is(err, engine.ErrBadBackup) {
			// Whole by its length and checksum, but not a store's
			// backup: the file ends inside a record, or a record is
			// not one.
			err = fmt.Errorf("%w: %w", engine.ErrBadBackup, err)
		}
		return nil, hide(err)
	}
	if err := os.Remove(backup); err != nil { // its room, before the indexes are rebuilt
		return nil, hide(fmt.Errorf("server: restore %q: %w", name, err))
	}
	if err := checkRestored(restored); err != nil {
		return nil, hide(err)
	}
	if err := os.Rename(restored, dir); err != nil {
		return nil, hide(fmt.Errorf("server: restore %q: %w", name, err))
	}
	if !opts.NoSync {
		syncDir(r.dir)
	}
	e, err := engine.Open(dir, &opts)
	if err != nil {
		// The name was free and reserved: dir is ours. Renamed into the
		// working directory first, so that a crash while it is removed
		// leaves no half collection.
		if rerr := os.Rename(dir, restored); rerr != nil {
			os.RemoveAll(dir)
		}
		return nil, hide(err)
	}
	c := &collection{name: name, dir: dir, e: e}
	r.mu.Lock()
	r.mu.open[name] = c
	r.mu.Unlock()
	return c, nil
}

// receive writes what body holds to a new file at path.
func receive(path string, body io.Reader) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return fmt.Errorf("receive the backup: %w", err)
	}
	return f.Close()
}

// checkRestored checks the models of the collection restored in dir
// (checkRestoredModels) before the engine would load them.
func checkRestored(dir string) error {
	st, err := storage.Open(dir, &storage.Options{NoSync: true})
	if err != nil {
		return fmt.Errorf("server: restored collection: %w", err)
	}
	sc := st.Schema()
	if err := st.Close(); err != nil {
		return fmt.Errorf("server: restored collection: %w", err)
	}
	return checkRestoredModels(sc)
}

// syncDir makes the entries of dir durable, as far as the system allows.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// done clears the mark that a create, a restore or a drop of name is
// under way.
func (r *registry) done(name string) {
	r.mu.Lock()
	delete(r.mu.busy, name)
	r.mu.Unlock()
}

// drop closes the collection once no request uses it, then removes its
// directory: first renamed, so that a crash during the removal never
// leaves a half collection that the next start would open.
func (r *registry) drop(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if r.catalog != nil {
		err := r.catalog.Drop(ctx, name)
		if errors.Is(err, fs.ErrNotExist) {
			return notFound(name)
		}
		return err
	}
	r.mu.Lock()
	c := r.mu.open[name]
	if c == nil {
		busy := r.mu.busy[name]
		r.mu.Unlock()
		if busy {
			return errorf(http.StatusConflict, "collection_busy", "collection %q is being created or dropped", name)
		}
		return notFound(name)
	}
	delete(r.mu.open, name)
	r.mu.busy[name] = true
	r.mu.Unlock()
	defer r.done(name)
	c.mu.Lock()
	c.gone = true
	cerr := c.e.Close()
	c.mu.Unlock()
	trash := filepath.Join(r.dir, fmt.Sprintf("%s%s-%d", trashPrefix, name, time.Now().UnixNano()))
	if err := os.Rename(c.dir, trash); err != nil {
		return errors.Join(cerr, fmt.Errorf("server: drop %q: %w", name, err))
	}
	if err := os.RemoveAll(trash); err != nil {
		return errors.Join(cerr, fmt.Errorf("server: drop %q: %w", name, err))
	}
	if cerr != nil {
		return fmt.Errorf("server: drop %q: close: %w", name, cerr)
	}
	return nil
}

// closeAll closes every collection once no request uses it. Engine.Close
// writes the vector indexes' snapshots; every acknowledged write is
// already durable.
func (r *registry) closeAll() error {
	r.mu.Lock()
	cs := make([]*collection, 0, len(r.mu.open))
	for _, c := range r.mu.open {
		cs = append(cs, c)
	}
	r.mu.open = map[string]*collection{}
	r.mu.Unlock()
	var errs []error
	for _, c := range cs {
		c.mu.Lock()
		c.gone = true
		if err := c.e.Close(); err != nil {
			errs = append(errs, fmt.Errorf("server: close %q: %w", c.name, err))
		}
		c.mu.Unlock()
	}
	return errors.Join(errs...)
}
