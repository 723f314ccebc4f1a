package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/internal/native"
)

// readBody reads the whole body, answering 413 past --max-body and 408
// when the body has not arrived within --timeout (the server's read
// deadline).
func (s *Server) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, s.bodyError(err, int64(len(data)), s.cfg.MaxBody, "--max-body")
	}
	return data, nil
}

// bodyError is the answer to a failed read of a request body after n
// bytes: 413 past its limit (limit bytes, set by flag), 408 when the body
// has not arrived within --timeout (the server's read deadline), 400
// otherwise (a client that stopped sending).
func (s *Server) bodyError(err error, n, limit int64, flag string) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errorf(http.StatusRequestEntityTooLarge, "body_too_large", "request body over the limit of %d bytes (%s)", limit, flag)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errorf(http.StatusRequestTimeout, "request_timeout", "the request body did not arrive within the limit of %s (--timeout): %d bytes were read", s.cfg.Timeout, n)
	}
	return errorf(http.StatusBadRequest, "bad_body", "reading the request body: %v", err)
}

// bodyReader reads a request body, turning a failed read into its answer
// (Server.bodyError), so that whoever copies the body can tell the
// client's failures from its own.
type bodyReader struct {
	s     *Server
	r     io.Reader
	n     int64
	limit int64
	flag  string
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if err != nil && err != io.EOF {
		err = b.s.bodyError(err, b.n, b.limit, b.flag)
	}
	return n, err
}

// decodeJSON decodes a JSON object body into dst, refusing unknown keys
// and trailing data. An empty body leaves dst as it is when allowEmpty.
// The Content-Type is not checked: the body is JSON whatever a client
// such as curl -d calls it.
func (s *Server) decodeJSON(r *http.Request, dst any, allowEmpty bool) error {
	data, err := s.readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if allowEmpty {
			return nil
		}
		return errorf(http.StatusBadRequest, "invalid_json", "empty request body: want a JSON object")
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: want an object, got null")
	}
	if path, ok := nullPath(data); ok {
		return nullMember(path)
	}
	return decodeStrict(data, dst)
}

// decodeStrict decodes one JSON value into dst, refusing unknown keys and
// trailing data.
func decodeStrict(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: %s", jsonProblem(err, data))
	}
	// Token, not More: More is false before a '}', so {"k":1}} would pass.
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: trailing data after the object")
	}
	return nil
}

// nullMember refuses a null at path of a request body. A request's
// members are each of one type, as openapi.json says, and null is none of
// them: a member left out takes its default, and a null is refused rather
// than taken for it (docs/apifuzz.md, "null"). Documents are data, where a
// field's null means no value; they are not read here.
func nullMember(path string) error {
	return errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: field %q: null (leave the field out for its default)", path)
}

// nullPath returns the path of the first null in the JSON value data
// (schema.fields[0].name, depth.bm25; "" for data itself), and whether
// there is one. It reads data as tokens and stops at the first null or
// syntax error (decoding data afterwards reports the error).
func nullPath(data []byte) (string, bool) {
	type level struct {
		array   bool
		index   int    // the array's element being read
		key     string // the object's member being read
		wantKey bool
	}
	var stack []level
	path := func() string {
		var b strings.Builder
		for _, l := range stack {
			if l.array {
				fmt.Fprintf(&b, "[%d]", l.index)
			} else {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(l.key)
			}
		}
		return b.String()
	}
	done := func() { // a value of the innermost level was read
		if n := len(stack); n > 0 {
			if stack[n-1].array {
				stack[n-1].index++
			} else {
				stack[n-1].wantKey = true
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		n := len(stack)
		if n > 0 && !stack[n-1].array && stack[n-1].wantKey {
			if t == json.Delim('}') {
				stack = stack[:n-1]
				done()
			} else {
				stack[n-1].key, stack[n-1].wantKey = t.(string), false
			}
			continue
		}
		switch t {
		case nil:
			return path(), true
		case json.Delim('{'):
			stack = append(stack, level{wantKey: true})
		case json.Delim('['):
			stack = append(stack, level{array: true})
		case json.Delim(']'):
			stack = stack[:n-1]
			done()
		default:
			done()
		}
		if len(stack) == 0 && t != json.Delim('{') && t != json.Delim('[') {
			return "", false
		}
	}
}

// jsonProblem describes a decoding error with the field or the offset.
func jsonProblem(err error, data []byte) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %q: want %s, got a JSON %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("want %s, got a JSON %s", te.Type, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Sprintf("unexpected end of the body after %d bytes", len(data))
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// collectionSummary is an entry of the collection list.
type collectionSummary struct {
	Name       string   `json:"name"`
	Docs       uint64   `json:"docs"`
	Retrievers []string `json:"retrievers"`
}

// collectionInfo describes one collection.
type collectionInfo struct {
	Name       string         `json:"name"`
	Docs       uint64         `json:"docs"`
	Retrievers []string       `json:"retrievers"`
	Schema     *tandem.Schema `json:"schema"`
	Stats      engine.Stats   `json:"stats"`
	// Limits are the server's bounds on a search of the collection, so
	// that a client (the page) keeps its requests within them.
	Limits searchLimits `json:"limits"`
}

// searchLimits are the bounds a search is refused over, each named by
// its flag of tandem serve.
type searchLimits struct {
	// MaxK bounds k+offset (--max-k); MaxQuery the query text in bytes
	// of UTF-8 (--max-query, itself within engine.MaxQueryBytes).
	MaxK     int `json:"max_k"`
	MaxQuery int `json:"max_query"`
	// MaxFilterClauses and MaxFilterDepth bound the filter
	// (--max-filter-clauses, --max-filter-depth; filter.Limits).
	MaxFilterClauses int `json:"max_filter_clauses"`
	MaxFilterDepth   int `json:"max_filter_depth"`
	// MaxFacets bounds the facets of a search (engine.MaxFacets).
	MaxFacets int `json:"max_facets"`
}

// limits are the server's search limits, the filter's defaults filled in
// as the engine fills them.
func (s *Server) limits() searchLimits {
	fl := s.cfg.Engine.FilterLimits
	return searchLimits{
		MaxK:             s.cfg.MaxK,
		MaxQuery:         min(s.cfg.MaxQuery, engine.MaxQueryBytes),
		MaxFilterClauses: cmp.Or(fl.MaxClauses, filter.DefaultMaxClauses),
		MaxFilterDepth:   cmp.Or(fl.MaxDepth, filter.DefaultMaxDepth),
		MaxFacets:        engine.MaxFacets,
	}
}

func (s *Server) listCollections(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Collections []collectionSummary `json:"collections"`
	}{Collections: []collectionSummary{}}
	s.reg.each(func(c *collection) {
		out.Collections = append(out.Collections, collectionSummary{Name: c.name, Docs: c.e.Count(), Retrievers: c.e.Retrievers()})
	})
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) info(c *collection) (collectionInfo, error) {
	st, err := c.e.Stats()
	if err != nil {
		return collectionInfo{}, err
	}
	if st.Schema != nil && st.Schema.Fields == nil {
		// A schema of no fields lists none, as openapi.json's array
		// says, rather than null.
		st.Schema = st.Schema.Clone()
		st.Schema.Fields = []tandem.Field{}
	}
	return collectionInfo{Name: c.name, Docs: st.Docs, Retrievers: st.Retrievers, Schema: st.Schema, Stats: st, Limits: s.limits()}, nil
}

func (s *Server) getCollection(w http.ResponseWriter, r *http.Request) {
	c, err := s.reg.acquire(r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	defer c.release()
	ci, err := s.info(c)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ci)
}

// createRequest is the body of PUT /v1/collections/{name}.
type createRequest struct {
	Schema       *tandem.Schema `json:"schema"`
	Dense        []string       `json:"dense"`
	Late         []string       `json:"late"`
	LateIndex    string         `json:"late_index"`
	LateEncoding string         `json:"late_encoding"`
}

func (s *Server) createCollection(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := checkName(name); err != nil {
		s.fail(w, err)
		return
	}
	var req createRequest
	if err := s.decodeJSON(r, &req, true); err != nil {
		s.fail(w, err)
		return
	}
	if req.Schema != nil {
		sc := req.Schema.Clone()
		sc.Fill()
		if err := engine.CheckSchema(sc); err != nil {
			msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), engine.ErrBadRequest.Error()+": "), "tandem: ")
			s.fail(w, errorf(http.StatusBadRequest, "bad_schema", "%s", msg))
			return
		}
	}
	if err := checkModels(&req); err != nil {
		s.fail(w, err)
		return
	}
	opts := s.cfg.Engine
	opts.Schema, opts.Dense, opts.Late, opts.LateIndex, opts.LateEncoding, opts.MustExist = req.Schema, req.Dense, req.Late, req.LateIndex, req.LateEncoding, false
	c, err := s.reg.create(r.Context(), name, opts)
	if err != nil {
		s.fail(w, s.hidePaths(err, name))
		return
	}
	s.created(w, c)
}

// created answers a create or a restore of c: 201 with its description.
func (s *Server) created(w http.ResponseWriter, c *collection) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gone { // dropped already
		s.fail(w, notFound(c.name))
		return
	}
	ci, err := s.info(c)
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Location", "/v1/collections/"+c.name)
	writeJSON(w, http.StatusCreated, ci)
}

// restoreCollection creates a collection from the backup in the body (the
// format of GET .../backup and tandem backup), of any content type, up to
// --max-restore bytes. It answers as a create does; a body that is not a
// whole backup is 400 bad_backup saying what is wrong, and creates
// nothing (registry.restore).
func (s *Server) restoreCollection(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var body io.Reader = http.NoBody
	if r.Body != nil {
		body = &bodyReader{s: s, r: r.Body, limit: s.cfg.MaxRestore, flag: "--max-restore"}
	}
	opts := s.cfg.Engine
	opts.Schema, opts.Dense, opts.Late, opts.LateIndex, opts.LateEncoding, opts.MustExist = nil, nil, nil, "", "", true
	c, err := s.reg.restore(name, body, opts)
	if err != nil {
		s.fail(w, s.hidePaths(err, name))
		return
	}
	s.created(w, c)
}

// validModel is a model name a create may give: runs of letters and
// digits joined by single '.', '_' or '-' (bge-small-en-v1.5), so never a
// path, "..", or a name starting with a dot. openapi.json's ModelName has
// the same pattern and length.
var validModel = regexp.MustCompile(`^[A-Za-z0-9]+([._-][A-Za-z0-9]+)*$`)

const maxModelName = 128

// checkModels refuses a create that names a model Tandem would run which
// is not a plain name of a model installed in the server's models
// directory: dense, late, and the models of the schema that are not
// external. engine.Options takes a directory for a model too (for
// programs that embed the engine); through the API a client may only
// choose among the installed models, and is told which they are, never
// where they are.
func checkModels(req *createRequest) error {
	check, err := modelCheck()
	if err != nil {
		return err
	}
	for i, n := range req.Dense {
		if err := check(fmt.Sprintf("dense[%d]", i), n); err != nil {
			return err
		}
	}
	for i, n := range req.Late {
		if err := check(fmt.Sprintf("late[%d]", i), n); err != nil {
			return err
		}
	}
	if req.Schema != nil {
		for i, m := range req.Schema.Models {
			if !m.External {
				if err := check(fmt.Sprintf("schema.models[%d].name", i), m.Name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// modelCheck returns the check of a model name a client gives, field
// being where it gave it: a plain name of an installed model, or 400
// bad_model listing the installed ones.
func modelCheck() (func(field, name string) error, error) {
	installed, err := encoder.Installed()
	if err != nil {
		return nil, fmt.Errorf("server: installed models: %w", err)
	}
	have := strings.Join(installed, ", ")
	if have == "" {
		have = "none"
	}
	return func(field, name string) error {
		switch {
		case len(name) > maxModelName || !validModel.MatchString(name):
			return errorf(http.StatusBadRequest, "bad_model", "%s: model name %q: want the name of an installed model (letters and digits, in runs joined by single '.', '_' or '-', at most %d bytes; installed: %s)", field, name, maxModelName, have)
		case !slices.Contains(installed, name):
			return errorf(http.StatusBadRequest, "bad_model", "%s: model %q is not installed on this server (installed: %s)", field, name, have)
		}
		return nil
	}, nil
}

// checkRestoredModels refuses a restored collection whose schema names a
// model Tandem would run that is not a plain name of an installed model:
// a backup is a client's data like a create's body, and its schema could
// name a model by a path, which the engine would load.
func checkRestoredModels(sc *tandem.Schema) error {
	if sc == nil {
		return nil
	}
	check, err := modelCheck()
	if err != nil {
		return err
	}
	for i, m := range sc.Models {
		if !m.External {
			if err := check(fmt.Sprintf("the backup's schema.models[%d].name", i), m.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// hidePaths answers a failed create without the server's paths: the
// engine's errors name the collection's directory and a model's files, for
// the log (the cause is kept), not for the client.
func (s *Server) hidePaths(err error, name string) error {
	ae := *classify(err)
	if ae.err == nil {
		ae.err = err
	}
	msg := ae.message
	if s.reg.dir != "" {
		if abs, err := filepath.Abs(filepath.Join(s.reg.dir, name)); err == nil {
			msg = strings.ReplaceAll(msg, abs, "collection "+name)
		}
		msg = strings.ReplaceAll(msg, filepath.Join(s.reg.dir, name), "collection "+name)
	}
	if models := native.ModelsDir(); models != "" {
		msg = strings.ReplaceAll(msg, filepath.Clean(models)+string(filepath.Separator), "")
		msg = strings.ReplaceAll(msg, filepath.Clean(models), "the models directory")
	}
	ae.message = msg
	return &ae
}

func (s *Server) dropCollection(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if s.tasks != nil {
		// A task holds its collection while it runs: stop it first.
		if err := s.tasks.cancelCollection(r.Context(), name); err != nil {
			s.fail(w, err)
			return
		}
	}
	if err := s.reg.drop(r.Context(), name); err != nil {
		s.fail(w, err)
		return
	}
	s.metrics.forget(name)
	w.WriteHeader(http.StatusNoContent)
}

// backuper is a collection that writes backups: an engine on this
// server's disk (a cluster's collections do not yet).
type backuper interface {
	Backup(ctx context.Context, w io.Writer) (engine.BackupInfo, error)
}

// countingWriter counts what is written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// backupCollection streams a consistent copy of the collection, as of one
// committed batch while writes go on, in the format tandem restore and
// engine.Restore read; they check its length and SHA-256 (in its trailer)
// before they use a byte. A failure once the copy has begun cuts the
// connection, and the copy, without its trailer, is refused on restore.
func (s *Server) backupCollection(w http.ResponseWriter, r *http.Request) {
	c, err := s.reg.acquire(r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	defer c.release()
	b, ok := c.e.(backuper)
	if !ok {
		s.fail(w, fmt.Errorf("backups of a cluster's collections: %w (back each node up with tandem backup)", errors.ErrUnsupported))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", c.name+".tandembackup"))
	cw := &countingWriter{w: w}
	if _, err := b.Backup(r.Context(), cw); err != nil {
		if cw.n == 0 {
			w.Header().Del("Content-Disposition")
			s.fail(w, err)
			return
		}
		s.cfg.Logger.Error("backup stopped mid-stream", "collection", c.name, "bytes", cw.n, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// lineError is one refused line of an upsert.
type lineError struct {
	Line  int    `json:"line"`
	ID    string `json:"id,omitempty"`
	Error string `json:"error"`
}

// upsertResult is the answer to an upsert.
type upsertResult struct {
	Indexed int         `json:"indexed"`
	Failed  int         `json:"failed"`
	Errors  []lineError `json:"errors"`
}

// upsertSync stores documents given as NDJSON (one object per line) or as
// a JSON array, and answers once they are committed and indexed. The body
// is read whole first, so that a body or a line over its limit is refused
// before anything is stored. Each document is then decoded and checked on
// its own: the good ones are stored, the bad ones reported by line
// (1-based; for an array, the element's index + 1).
func (s *Server) upsertSync(w http.ResponseWriter, r *http.Request, c *collection) {
	data, err := s.readBody(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	form, err := bodyForm(r.Header.Get("Content-Type"), data)
	if err != nil {
		s.fail(w, err)
		return
	}
	var items [][]byte // raw documents, by line - 1
	switch form {
	case formObject:
		if len(data) > s.cfg.MaxLine {
			s.fail(w, errorf(http.StatusRequestEntityTooLarge, "line_too_large", "document of %d bytes over the limit of %d bytes (--max-line); nothing was stored", len(data), s.cfg.MaxLine))
			return
		}
		items = [][]byte{data}
	case formArray:
		var raws []json.RawMessage
		if err := json.Unmarshal(data, &raws); err != nil {
			s.fail(w, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: want an array of document objects: %s", jsonProblem(err, data)))
			return
		}
		for _, raw := range raws {
			if len(raw) > s.cfg.MaxLine {
				s.fail(w, errorf(http.StatusRequestEntityTooLarge, "line_too_large", "element %d: document of %d bytes over the limit of %d bytes (--max-line); nothing was stored", len(items)+1, len(raw), s.cfg.MaxLine))
				return
			}
			items = append(items, raw)
		}
	default:
		for i, line := range bytes.Split(data, []byte("\n")) {
			if len(line) > s.cfg.MaxLine {
				s.fail(w, errorf(http.StatusRequestEntityTooLarge, "line_too_large", "line %d: %d bytes over the limit of %d bytes (--max-line); nothing was stored", i+1, len(line), s.cfg.MaxLine))
				return
			}
			items = append(items, line)
		}
	}
	res := upsertResult{Errors: []lineError{}}
	idField := c.e.Schema().IDField
	var docs []tandem.Doc
	var lines []int // each document's line
	for i, item := range items {
		if len(bytes.Trim(item, jsonSpace)) == 0 {
			continue // blank lines, as in `tandem index`
		}
		d, err := tandem.DecodeJSON(item, idField)
		if err != nil {
			res.Errors = append(res.Errors, lineError{Line: i + 1, ID: d.ID, Error: err.Error()})
			continue
		}
		docs = append(docs, d)
		lines = append(lines, i+1)
	}
	if len(docs)+len(res.Errors) == 0 {
		s.fail(w, errorf(http.StatusBadRequest, "no_documents", "the body holds no documents"))
		return
	}
	if len(docs) > 0 {
		var mu sync.Mutex // OnSkip is called from the pipeline's stages
		next := 0
		p, err := c.e.IndexStream(r.Context(), func() (tandem.Doc, error) {
			if next == len(docs) {
				return tandem.Doc{}, io.EOF
			}
			next++
			return docs[next-1], nil
		}, engine.StreamOptions{SkipBad: true, OnSkip: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			var de *engine.DocError
			if errors.As(err, &de) && de.Index >= 0 && de.Index < len(lines) {
				res.Errors = append(res.Errors, lineError{Line: lines[de.Index], ID: de.ID, Error: de.Err.Error()})
				return
			}
			res.Errors = append(res.Errors, lineError{Error: err.Error()})
		}})
		res.Indexed = p.Docs
		s.metrics.ingested.WithLabelValues(c.name).Add(float64(p.Docs))
		if errors.Is(err, context.DeadlineExceeded) {
			s.fail(w, &apiError{status: http.StatusGatewayTimeout, code: "timeout", err: err,
				message: fmt.Sprintf("the upload took longer than the limit of %s (--timeout); %d documents were stored before it. Upload with wait=false to index it as a task (GET /v1/tasks/{id} follows it)", s.cfg.Timeout, p.Docs)})
			return
		}
		if err != nil {
			s.fail(w, fmt.Errorf("%w (%d documents were stored before the error)", err, p.Docs))
			return
		}
	}
	slices.SortFunc(res.Errors, func(a, b lineError) int { return a.Line - b.Line })
	res.Failed = len(res.Errors)
	s.metrics.failed.WithLabelValues(c.name).Add(float64(res.Failed))
	writeJSON(w, http.StatusOK, res)
}

// jsonSpace is JSON's whitespace: a line of nothing else is blank, as the
// spec's pattern for an NDJSON body says.
const jsonSpace = " \t\r\n"

// Forms of an upsert body.
const (
	formNDJSON = iota
	formArray
	formObject
)

// bodyForm tells the form of an upsert body from its Content-Type:
// application/x-ndjson (also application/ndjson, application/jsonl) is
// one document per line, application/json an array of documents or one
// document; without a Content-Type (or with curl's default, a form), a
// body starting with '[' is an array and any other NDJSON.
func bodyForm(contentType string, data []byte) (int, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	isArray := len(trimmed) > 0 && trimmed[0] == '['
	mt, _, _ := mime.ParseMediaType(contentType)
	if contentType == "" || mt == "application/x-www-form-urlencoded" { // curl --data-binary's default
		if isArray {
			return formArray, nil
		}
		return formNDJSON, nil
	}
	switch mt {
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines", "text/plain":
		return formNDJSON, nil
	case "application/json":
		if isArray {
			return formArray, nil
		}
		return formObject, nil
	}
	return 0, errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type %q: want application/x-ndjson (one document per line) or application/json (an array of documents)", contentType)
}

// documentBody is a stored document.
type documentBody struct {
	ID     string         `json:"id"`
	Fields map[string]any `json:"fields"`
}

func (s *Server) getDocument(w http.ResponseWriter, r *http.Request) {
	c, err := s.reg.acquire(r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	defer c.release()
	id := r.PathValue("id")
	if id == "" {
		s.fail(w, emptyID())
		return
	}
	doc, ok, err := c.e.Get(r.Context(), id)
	if err != nil {
		s.fail(w, err)
		return
	}
	if !ok {
		s.fail(w, errorf(http.StatusNotFound, "document_not_found", "collection %q has no document %q", c.name, id))
		return
	}
	if doc.Fields == nil {
		doc.Fields = map[string]any{}
	}
	writeJSON(w, http.StatusOK, documentBody{ID: doc.ID, Fields: doc.Fields})
}

type deletedBody struct {
	Deleted int `json:"deleted"`
}

func (s *Server) deleteDocument(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") == "" {
		s.fail(w, emptyID())
		return
	}
	s.delete(w, r, []string{r.PathValue("id")})
}

// emptyID answers a document route whose id is empty: the path ends in
// /documents/.
func emptyID() error {
	return errorf(http.StatusBadRequest, "bad_parameter", "id: empty document id (want /v1/collections/{name}/documents/{id})")
}

func (s *Server) deleteDocuments(w http.ResponseWriter, r *http.Request) {
	var req struct {
		IDs []string `json:"ids"`
	}
	if err := s.decodeJSON(r, &req, false); err != nil {
		s.fail(w, err)
		return
	}
	if len(req.IDs) == 0 {
		s.fail(w, errorf(http.StatusBadRequest, "bad_request", "ids: want a non-empty list of document ids"))
		return
	}
	for i, id := range req.IDs {
		if id == "" {
			s.fail(w, errorf(http.StatusBadRequest, "bad_request", "ids[%d]: empty id", i))
			return
		}
	}
	s.delete(w, r, req.IDs)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, ids []string) {
	c, err := s.reg.acquire(r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	defer c.release()
	res, err := c.e.Delete(r.Context(), ids)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.metrics.deleted.WithLabelValues(c.name).Add(float64(res.Deleted))
	writeJSON(w, http.StatusOK, deletedBody{Deleted: res.Deleted})
}
