package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/netaddr"
)

// Defaults of the Config limits, which are also the defaults of
// `tandem serve`'s flags.
const (
	DefaultAddr     = "127.0.0.1:7700"
	DefaultMaxBody  = 64 << 20
	DefaultMaxLine  = 1 << 20
	DefaultMaxK     = 1000
	DefaultMaxQuery = 4096
	DefaultTimeout  = 30 * time.Second
	// DefaultMaxCollections bounds the collections of a server: room for
	// a collection per corpus or per tenant, while a client that creates
	// collections in a loop takes about 1 GB and 800 open files at most
	// (100 small collections of the default dense model, its one load
	// aside; docs/server.md, Memory), not the host.
	DefaultMaxCollections = 100
	// DefaultMaxRestore bounds the body of a restore, a backup: beyond
	// the collections one server holds, so that it only stops a client
	// that would send without end. A restore keeps the backup and the
	// collection made of it on disk until it is done, so it needs about
	// twice the backup's size free.
	DefaultMaxRestore = 256 << 30
)

// Config configures a Server. Zero fields mean defaults.
type Config struct {
	// DataDir holds one collection per subdirectory; it is created if
	// absent.
	DataDir string
	// AdminKeys may do everything; ReadKeys may list, read and search.
	// With no key at all every request is allowed; CheckExposure then
	// permits only a loopback address.
	AdminKeys, ReadKeys []string
	// MaxBody bounds a request body in bytes (flag --max-body), MaxLine
	// one NDJSON line (--max-line), MaxK a search's k+offset (--max-k),
	// MaxQuery its text in bytes (--max-query), and Timeout the time of a
	// request (--timeout).
	MaxBody  int64
	MaxLine  int
	MaxK     int
	MaxQuery int
	Timeout  time.Duration
	// MaxCollections bounds the collections the server holds (flag
	// --max-collections; default DefaultMaxCollections): a create beyond
	// it answers 409 too_many_collections and creates nothing. A
	// collection costs memory and open files however little it holds,
	// even with its model shared (Badger's memtables and block cache,
	// Bleve, FAISS). Collections found in DataDir at start count; the
	// server still opens them all when they are more. In a cluster
	// (Catalog) it counts the cluster's collections, checked by the node
	// the create goes through.
	MaxCollections int
	// MaxRestore bounds the body of a restore (POST
	// /v1/collections/{name}/restore), a backup, in bytes (flag
	// --max-restore; default DefaultMaxRestore): a larger one answers 413
	// and creates nothing. MaxBody does not apply to it; Timeout does, as
	// to every body (408 for one not received within it).
	MaxRestore int64
	// Logger receives one line per request; nil means slog.Default().
	Logger *slog.Logger
	// Engine is the options every collection is opened with (for example
	// NoSync, EncoderThreads, or FilterLimits, which --max-filter-clauses
	// and --max-filter-depth set); Schema, Dense, Late, LateIndex and
	// MustExist are set per collection.
	Engine engine.Options
	// Catalog, when set, holds the collections instead of DataDir: a
	// cluster's (tandem serve --cluster). The HTTP API is the same.
	Catalog Catalog
	// Routes are served beside the API, behind the same keys, log and
	// metrics: tandem serve --cluster adds the cluster's status for an
	// operator with the admin key.
	Routes []Route
	// Collectors are registered on /metrics beside the server's own (a
	// cluster node's).
	Collectors []prometheus.Collector
	// ReleaseAfterTimeout makes the server return the memory a request
	// that ran out of time took to the operating system once it has
	// answered 504 (debug.FreeOSMemory, at most once a second; requests
	// meanwhile share the next): such a request's work stopped early, so
	// what it allocated is garbage, which Go would otherwise keep until a
	// later collection and give back slowly. It acts on the whole
	// process, so it is for a process that is the server: `tandem serve`
	// sets it.
	ReleaseAfterTimeout bool
	// AsyncAbove is the body size in bytes above which an upsert without
	// wait= runs as a task (flag --async-above; default
	// DefaultAsyncAbove); MaxQueued bounds the bytes of the bodies of
	// unfinished tasks (--max-queued; default DefaultMaxQueued).
	AsyncAbove int64
	MaxQueued  int64
	// TaskDir holds the tasks' bodies and records; "" means DataDir's
	// .tasks directory. A server with neither keeps no tasks (a task
	// upload answers 501).
	TaskDir string
}

// Route is an extra route of Config.Routes.
type Route struct {
	Pattern string // as http.ServeMux takes it, e.g. "GET /_cluster/status"
	Admin   bool   // needs the admin key; else a read key is enough
	Handler http.HandlerFunc
}

func (c *Config) fill() error {
	if c.DataDir == "" && c.Catalog == nil {
		return errors.New("server: no data directory")
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxLine == 0 {
		c.MaxLine = DefaultMaxLine
	}
	if c.MaxK == 0 {
		c.MaxK = DefaultMaxK
	}
	if c.MaxQuery == 0 {
		c.MaxQuery = DefaultMaxQuery
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxCollections == 0 {
		c.MaxCollections = DefaultMaxCollections
	}
	if c.MaxRestore == 0 {
		c.MaxRestore = DefaultMaxRestore
	}
	if c.AsyncAbove == 0 {
		c.AsyncAbove = DefaultAsyncAbove
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxBody < 0 || c.MaxLine < 0 || c.MaxK < 0 || c.MaxQuery < 0 || c.Timeout < 0 || c.MaxCollections < 0 || c.MaxRestore < 0 || c.AsyncAbove < 0 || c.MaxQueued < 0 {
		return errors.New("server: negative limit")
	}
	for _, k := range append(append([]string(nil), c.AdminKeys...), c.ReadKeys...) {
		if strings.TrimSpace(k) == "" {
			return errors.New("server: empty API key")
		}
	}
	return nil
}

// role is what a request may do.
type role int

const (
	roleNone  role = iota // healthz, readyz, the page
	roleRead              // list, get, search, metrics, the spec
	roleAdmin             // create, drop, write, delete
)

// Server serves the collections of a data directory over HTTP. Create it
// with New, serve Handler (or call Serve), and Close it to close every
// collection.
type Server struct {
	cfg     Config
	reg     *registry
	tasks   *taskQueue // nil without a data directory
	metrics *metrics
	mux     *http.ServeMux
	keys    map[[32]byte]role // SHA-256 of each key
	ready   atomic.Bool
	// patterns lists the registered routes, for the test that holds them
	// to openapi.json.
	patterns []string
	// release asks releaseLoop, with ReleaseAfterTimeout, to return
	// memory to the OS; stop ends the loop, which closes released.
	release, stop, released chan struct{}
	closeOnce               sync.Once
}

//go:embed openapi.json
var openAPISpec []byte

//go:embed ui
var uiFiles embed.FS

// New opens every collection under cfg.DataDir.
func New(cfg *Config) (*Server, error) {
	c := *cfg
	if err := c.fill(); err != nil {
		return nil, err
	}
	c.AdminKeys = append([]string(nil), c.AdminKeys...)
	c.ReadKeys = append([]string(nil), c.ReadKeys...)
	var reg *registry
	if c.Catalog != nil {
		reg = &registry{catalog: c.Catalog, max: c.MaxCollections}
		reg.mu.open, reg.mu.busy = map[string]*collection{}, map[string]bool{}
	} else {
		var err error
		if reg, err = openRegistry(c.DataDir, c.MaxCollections, c.Engine); err != nil {
			return nil, err
		}
		if n := len(reg.mu.open); n > c.MaxCollections {
			c.Logger.Warn("the data directory holds more collections than the limit: every one is served, and creating one answers 409 until enough are dropped",
				"collections", n, "max_collections", c.MaxCollections, "flag", "--max-collections")
		}
	}
	s := &Server{cfg: c, reg: reg, keys: map[[32]byte]role{}}
	for _, k := range c.ReadKeys {
		s.keys[sha256.Sum256([]byte(k))] = roleRead
	}
	for _, k := range c.AdminKeys {
		s.keys[sha256.Sum256([]byte(k))] = roleAdmin
	}
	s.metrics = newMetrics(reg)
	for _, col := range c.Collectors {
		if err := s.metrics.reg.Register(col); err != nil {
			return nil, errors.Join(fmt.Errorf("server: metrics: %w", err), reg.closeAll())
		}
	}
	s.routes()
	if c.TaskDir == "" && c.DataDir != "" {
		c.TaskDir = filepath.Join(c.DataDir, taskDirName)
		s.cfg.TaskDir = c.TaskDir
	}
	if c.TaskDir != "" {
		q, err := openTaskQueue(c.TaskDir, s)
		if err != nil {
			return nil, errors.Join(err, reg.closeAll())
		}
		s.tasks = q
		s.metrics.reg.MustRegister(taskCollector{q})
	}
	s.release, s.stop, s.released = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	if c.ReleaseAfterTimeout {
		go s.releaseLoop()
	} else {
		close(s.released)
	}
	s.ready.Store(true)
	return s, nil
}

// releaseLoop returns memory to the OS when asked, at most once a second,
// until stop is closed.
func (s *Server) releaseLoop() {
	defer close(s.released)
	for {
		select {
		case <-s.stop:
			return
		case <-s.release:
		}
		debug.FreeOSMemory()
		select {
		case <-s.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	s.handle("GET /healthz", roleNone, s.healthz)
	s.handle("GET /readyz", roleNone, s.readyz)
	s.handle("GET /metrics", roleRead, promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP)
	s.handle("GET /openapi.json", roleRead, s.openapi)
	ui, _ := fs.Sub(uiFiles, "ui")
	s.handle("GET /{$}", roleNone, func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, ui, "index.html")
	})
	s.handle("GET /ui/", roleNone, http.StripPrefix("/ui/", http.FileServerFS(ui)).ServeHTTP)

	s.handle("GET /v1/collections", roleRead, s.listCollections)
	s.handle("PUT /v1/collections/{name}", roleAdmin, s.createCollection)
	s.handle("GET /v1/collections/{name}", roleRead, s.getCollection)
	s.handle("DELETE /v1/collections/{name}", roleAdmin, s.dropCollection)
	s.handleLimit("POST /v1/collections/{name}/documents", roleAdmin, -1, s.upsert) // upsert applies --max-body or --max-queued
	s.handle("GET /v1/collections/{name}/documents/{id...}", roleRead, s.getDocument)
	s.handle("DELETE /v1/collections/{name}/documents/{id...}", roleAdmin, s.deleteDocument)
	s.handle("POST /v1/collections/{name}/delete", roleAdmin, s.deleteDocuments)
	s.handle("GET /v1/collections/{name}/backup", roleAdmin, s.backupCollection)
	s.handleLimit("POST /v1/collections/{name}/restore", roleAdmin, s.cfg.MaxRestore, s.restoreCollection)
	s.handle("POST /v1/collections/{name}/search", roleRead, s.searchPost)
	s.handle("GET /v1/collections/{name}/search", roleRead, s.searchGet)
	s.handle("GET /v1/tasks", roleRead, s.listTasks)
	s.handle("GET /v1/tasks/{id}", roleRead, s.getTask)
	s.handle("DELETE /v1/tasks/{id}", roleAdmin, s.cancelTask)
	for _, r := range s.cfg.Routes {
		need := roleRead
		if r.Admin {
			need = roleAdmin
		}
		s.handle(r.Pattern, need, r.Handler)
	}
}

// handle registers h for pattern behind authentication for role and the
// body limit (--max-body).
func (s *Server) handle(pattern string, need role, h http.HandlerFunc) {
	s.handleLimit(pattern, need, s.cfg.MaxBody, h)
}

// handleLimit is handle with a body limit of limit bytes in place of
// --max-body: a restore's, whose body is a backup (--max-restore).
func (s *Server) handleLimit(pattern string, need role, limit int64, h http.HandlerFunc) {
	s.patterns = append(s.patterns, pattern)
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if err := s.authorize(r, need); err != nil {
			if ae := classify(err); ae.status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tandem"`)
			}
			s.fail(w, err)
			return
		}
		if r.Body != nil && limit >= 0 {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		h(w, r)
	})
}

// authorize checks the request's key: "Authorization: Bearer KEY" or
// "X-API-Key: KEY". With no keys configured every request passes.
func (s *Server) authorize(r *http.Request, need role) error {
	if need == roleNone || len(s.keys) == 0 {
		return nil
	}
	key := r.Header.Get("X-API-Key")
	if a := r.Header.Get("Authorization"); a != "" {
		scheme, tok, ok := strings.Cut(a, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return errorf(http.StatusUnauthorized, "unauthorized", "the Authorization header must be \"Bearer <key>\"")
		}
		key = strings.TrimSpace(tok)
	}
	if key == "" {
		return errorf(http.StatusUnauthorized, "unauthorized", "an API key is required (Authorization: Bearer <key>, or X-API-Key)")
	}
	sum := sha256.Sum256([]byte(key))
	got := roleNone
	for k, r := range s.keys { // every key compared, in constant time
		if subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
			got = r
		}
	}
	switch {
	case got == roleNone:
		return errorf(http.StatusUnauthorized, "unauthorized", "unknown API key")
	case got < need:
		return errorf(http.StatusForbidden, "forbidden", "a read-only key cannot %s %s: it needs an admin key", r.Method, r.URL.Path)
	}
	return nil
}

// statusWriter records what a handler answered, for the log and the
// metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	err    error // a server error's cause, for the log
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Handler returns the server's HTTP handler: routing, a per-request
// timeout, one log line and the metrics of each request.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	_, route := s.mux.Handler(r)
	if route != "" && !pathMatches(patternPath(route), r.URL.EscapedPath()) {
		// The mux would redirect to a route's path (.../documents to
		// .../documents/, the empty id): no route serves this path.
		route = ""
	}
	label := route
	if label == "" {
		label = "unmatched"
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			sw.err = fmt.Errorf("panic: %v", v)
			if sw.status == 0 {
				writeError(sw, errorf(http.StatusInternalServerError, "internal", "internal error"))
			}
		}
		d := time.Since(start)
		if sw.status == http.StatusGatewayTimeout && s.cfg.ReleaseAfterTimeout {
			select {
			case s.release <- struct{}{}:
			default: // a release is pending already
			}
		}
		s.metrics.requests.WithLabelValues(label, strconv.Itoa(sw.status)).Inc()
		s.metrics.latency.WithLabelValues(label).Observe(d.Seconds())
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("route", label),
			slog.String("path", r.URL.Path),
			slog.Int("status", sw.status),
			slog.Int64("bytes", sw.bytes),
			slog.Float64("duration_ms", float64(d.Microseconds())/1000),
			slog.String("collection", r.PathValue("name")),
			slog.String("remote", r.RemoteAddr),
		}
		level := slog.LevelInfo
		if sw.err != nil {
			attrs = append(attrs, slog.String("error", sw.err.Error()))
			level = slog.LevelError
		}
		s.cfg.Logger.LogAttrs(r.Context(), level, "request", attrs...)
	}()
	if route == "" {
		s.unmatched(sw, r)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	r = r.WithContext(ctx)
	s.mux.ServeHTTP(sw, r)
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
}

// unmatched answers a request no route takes, as JSON: 405 when routes
// serve the path with other methods, listing them in Allow as the spec
// does (GET without the HEAD the mux adds), a redirect to the clean form
// of an unclean path, 404 otherwise.
func (s *Server) unmatched(w *statusWriter, r *http.Request) {
	if allow := s.allowed(r.URL.EscapedPath()); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	h, _ := s.mux.Handler(r)
	probe := &headerProbe{header: http.Header{}}
	h.ServeHTTP(probe, r)
	switch probe.status {
	case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		http.Redirect(w, r, probe.header.Get("Location"), probe.status)
	default:
		writeError(w, errorf(http.StatusNotFound, "not_found", "no route for %s %s", r.Method, r.URL.Path))
	}
}

// allowed lists, sorted, the methods of the routes whose pattern matches
// path exactly.
func (s *Server) allowed(path string) []string {
	var out []string
	for _, p := range s.patterns {
		method, pat, _ := strings.Cut(p, " ")
		if pathMatches(pat, path) && !slices.Contains(out, method) {
			out = append(out, method)
		}
	}
	slices.Sort(out)
	return out
}

// patternPath is the path of a ServeMux pattern ("GET /a/{b}" -> "/a/{b}").
func patternPath(pattern string) string {
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		return pattern[i:]
	}
	return pattern
}

// pathMatches reports whether an escaped request path matches a route's
// pattern path segment by segment, as ServeMux matches it without
// redirecting: "{x}" matches a non-empty segment, "{x...}" the rest of the
// path (empty too), "{$}" the end after a trailing slash, and a pattern
// ending in "/" every path below it.
func pathMatches(pattern, path string) bool {
	ps := strings.Split(strings.TrimPrefix(pattern, "/"), "/")
	xs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, p := range ps {
		switch {
		case p == "{$}":
			return i == len(xs)-1 && xs[i] == ""
		case p == "" && i == len(ps)-1: // a trailing slash: a subtree
			return i < len(xs)
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "...}"):
			return i < len(xs)
		case i >= len(xs):
			return false
		case strings.HasPrefix(p, "{"):
			if xs[i] == "" {
				return false
			}
		default:
			if seg, err := url.PathUnescape(xs[i]); err != nil || seg != p {
				return false
			}
		}
	}
	return len(ps) == len(xs)
}

// headerProbe records the status and headers the mux's own 404, 405 or
// redirect handler would answer, and drops its plain-text body.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header { return p.header }
func (p *headerProbe) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}
func (p *headerProbe) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPISpec)
}

// Close closes every collection, waiting for the requests using each one.
// Serve calls it after shutting down.
func (s *Server) Close() error {
	s.ready.Store(false)
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.released
	if s.tasks != nil {
		s.tasks.close()
	}
	return s.reg.closeAll()
}

// ShutdownTimeout bounds how long Serve waits for in-flight requests once
// its context is done; the per-request Timeout usually ends them sooner.
const ShutdownTimeout = time.Minute

// Serve serves on ln until ctx is done, then shuts down gracefully:
// readiness answers 503, the listener closes, in-flight requests finish
// (within ShutdownTimeout), and every collection is closed. It returns nil
// after a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.cfg.Timeout,
		WriteTimeout:      s.cfg.Timeout + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
		s.ready.Store(false)
		s.cfg.Logger.Info("shutting down", "addr", ln.Addr().String())
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
		serveErr = hs.Shutdown(sctx)
		cancel()
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			serveErr = errors.Join(serveErr, err)
		}
	}
	return errors.Join(serveErr, s.Close())
}

// IsLoopback reports whether addr (host:port) binds only loopback
// interfaces; "localhost" counts, an empty host (every interface) does not.
func IsLoopback(addr string) bool { return netaddr.IsLoopback(addr) }

// CheckExposure refuses a non-loopback address when no API key is
// configured: an open server must not be reachable from other machines.
func CheckExposure(addr string, cfg *Config) error {
	if IsLoopback(addr) || len(cfg.AdminKeys)+len(cfg.ReadKeys) > 0 {
		return nil
	}
	return fmt.Errorf("server: refusing to listen on %s without an API key: it is not a loopback address; configure --api-key or --read-key (or TANDEM_API_KEYS / TANDEM_READ_KEYS), or bind 127.0.0.1", addr)
}
