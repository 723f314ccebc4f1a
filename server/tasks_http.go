package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// waitParam is an upsert's wait= ("true", "false", or "" when absent);
// every value given must be the same one of those.
func waitParam(r *http.Request) (string, error) {
	wait := ""
	for _, v := range r.URL.Query()["wait"] {
		if (v != "true" && v != "false") || (wait != "" && v != wait) {
			return "", errorf(http.StatusBadRequest, "bad_parameter", "parameter wait=%q: want wait=true (answer once the documents are committed and indexed) or wait=false (answer 202 with a task at once)", v)
		}
		wait = v
	}
	return wait, nil
}

// upsert stores documents given as NDJSON (one object per line) or as a
// JSON array, synchronously (upsertSync) or as a task (enqueueUpload):
// a task with wait=false, or without wait= when the body is over
// --async-above.
func (s *Server) upsert(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	c, err := s.reg.acquire(name)
	if err != nil {
		s.fail(w, err)
		return
	}
	wait, err := waitParam(r)
	if err != nil {
		c.release()
		s.fail(w, err)
		return
	}
	async := wait == "false"
	var prefix []byte
	if wait == "" && s.tasks != nil && r.Body != nil {
		switch {
		case r.ContentLength > s.cfg.AsyncAbove:
			async = true
		case r.ContentLength < 0: // unknown: read up to the bound to tell
			prefix, err = io.ReadAll(io.LimitReader(r.Body, s.cfg.AsyncAbove+1))
			if err != nil {
				c.release()
				s.fail(w, s.bodyError(err, int64(len(prefix)), s.cfg.MaxBody, "--max-body"))
				return
			}
			async = int64(len(prefix)) > s.cfg.AsyncAbove
		}
	}
	if !async {
		defer c.release()
		body := r.Body
		if body == nil {
			body = http.NoBody
		}
		r.Body = http.MaxBytesReader(w, io.NopCloser(io.MultiReader(bytes.NewReader(prefix), body)), s.cfg.MaxBody)
		s.upsertSync(w, r, c)
		return
	}
	// The task takes the collection when it runs; a drop meanwhile
	// cancels it.
	c.release()
	if s.tasks == nil {
		s.fail(w, errorf(http.StatusNotImplemented, "tasks_unavailable", "this server keeps no task directory (it has no data directory): upload with wait=true"))
		return
	}
	s.enqueueUpload(w, r, name, prefix)
}

// enqueueUpload spools an upload's body to the task directory, checks its
// form, and answers 202 with the task once the body and the task's record
// are fsynced. The body may take longer than --timeout as long as it keeps
// arriving: each read gets --timeout. Its bytes count against
// --max-queued until the task ends.
func (s *Server) enqueueUpload(w http.ResponseWriter, r *http.Request, name string, prefix []byte) {
	q := s.tasks
	rc := http.NewResponseController(w)
	var body io.Reader = bytes.NewReader(prefix)
	if r.Body != nil {
		body = io.MultiReader(body, r.Body)
	}
	var reserved int64
	fail := func(err error) {
		q.unreserve(reserved)
		s.fail(w, err)
	}
	full := func(n int64) error {
		if n > s.cfg.MaxQueued {
			return errorf(http.StatusRequestEntityTooLarge, "body_too_large", "request body over the limit of %d bytes for queued uploads (--max-queued); nothing was queued", s.cfg.MaxQueued)
		}
		w.Header().Set("Retry-After", "60")
		return errorf(http.StatusTooManyRequests, "queue_full", "the queued uploads hold their limit of %d bytes (--max-queued): retry once running tasks have finished (GET /v1/tasks); nothing was queued", s.cfg.MaxQueued)
	}
	if r.ContentLength >= 0 {
		if !q.reserve(r.ContentLength) {
			fail(full(r.ContentLength))
			return
		}
		reserved = r.ContentLength
	}
	if err := os.MkdirAll(q.dir, 0o755); err != nil {
		fail(spoolError(err))
		return
	}
	f, err := os.CreateTemp(q.dir, "upload-*")
	if err != nil {
		fail(err)
		return
	}
	defer func() {
		f.Close()
		os.Remove(f.Name()) // gone already once the task is added
	}()

	var (
		n       int64
		form    = ""
		counter lineCounter
		buf     = make([]byte, 1<<20)
	)
	for {
		rc.SetReadDeadline(time.Now().Add(s.cfg.Timeout))
		m, rerr := body.Read(buf)
		if m > 0 {
			if form == "" {
				bf, err := bodyForm(r.Header.Get("Content-Type"), buf[:m])
				if err != nil {
					fail(err)
					return
				}
				form = taskNDJSON
				if bf != formNDJSON {
					form = taskArray
				}
			}
			if n+int64(m) > reserved {
				if r.ContentLength >= 0 {
					fail(errorf(http.StatusBadRequest, "bad_body", "the body is longer than its Content-Length of %d bytes", r.ContentLength))
					return
				}
				if !q.reserve(int64(m)) {
					fail(full(n + int64(m)))
					return
				}
				reserved += int64(m)
			}
			if _, err := f.Write(buf[:m]); err != nil {
				fail(spoolError(err))
				return
			}
			n += int64(m)
			if form == taskNDJSON {
				counter.add(buf[:m])
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			fail(s.bodyError(rerr, n, s.cfg.MaxQueued, "--max-queued"))
			return
		}
	}
	rec := taskRecord{Collection: name, Form: form, Bytes: n}
	switch form {
	case taskNDJSON:
		rec.Lines, rec.Received = counter.end()
	case taskArray:
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			fail(err)
			return
		}
		count, err := countElements(f)
		if err != nil {
			fail(err)
			return
		}
		rec.Lines, rec.Received = count, count
	}
	if rec.Received == 0 {
		fail(errorf(http.StatusBadRequest, "no_documents", "the body holds no documents"))
		return
	}
	if err := f.Sync(); err != nil {
		fail(spoolError(err))
		return
	}
	view, err := q.add(rec, f.Name())
	if err != nil {
		fail(spoolError(err))
		return
	}
	rc.SetWriteDeadline(time.Now().Add(s.cfg.Timeout))
	w.Header().Set("Location", "/v1/tasks/"+strconv.FormatInt(view.ID, 10))
	writeJSON(w, http.StatusAccepted, view)
}

// spoolError is the answer to a failed write of the task directory: 507
// when the disk is full.
func spoolError(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return &apiError{status: http.StatusInsufficientStorage, code: "insufficient_storage",
			message: "the disk of the task directory is full; nothing was queued", err: err}
	}
	return err
}

// lineCounter counts an NDJSON body's lines and its non-blank ones as they
// pass, the way itemReader numbers them.
type lineCounter struct {
	lines, docs int
	partial     bool // the current line has bytes
	content     bool // ... other than JSON whitespace
}

func (c *lineCounter) add(p []byte) {
	for _, b := range p {
		switch b {
		case '\n':
			c.lines++
			if c.content {
				c.docs++
			}
			c.partial, c.content = false, false
		case ' ', '\t', '\r':
			c.partial = true
		default:
			c.partial, c.content = true, true
		}
	}
}

func (c *lineCounter) end() (lines, docs int) {
	if c.partial {
		c.lines++
		if c.content {
			c.docs++
		}
	}
	return c.lines, c.docs
}

// countElements checks that r is a JSON array (or one JSON value) and
// counts its elements.
func countElements(r io.Reader) (int, error) {
	dec := json.NewDecoder(r)
	tok, err := dec.Token()
	if err != nil {
		return 0, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: %v", err)
	}
	count := 0
	if d, ok := tok.(json.Delim); ok && d == '[' {
		for dec.More() {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return 0, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: element %d: %v", count+1, err)
			}
			count++
		}
		if _, err := dec.Token(); err != nil {
			return 0, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: after element %d: %v", count, err)
		}
	} else if d, ok := tok.(json.Delim); ok && d == '{' {
		// One document: the decoder is past its '{'; read the rest.
		depth := 1
		for depth > 0 {
			tok, err := dec.Token()
			if err != nil {
				return 0, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: %v", err)
			}
			if d, ok := tok.(json.Delim); ok {
				if d == '{' || d == '[' {
					depth++
				} else {
					depth--
				}
			}
		}
		count = 1
	} else {
		return 0, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: want an array of document objects or one document object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return 0, errorf(http.StatusBadRequest, "invalid_json", "invalid JSON body: data after its end")
	}
	return count, nil
}

// taskID parses the {id} of a task route.
func taskID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, errorf(http.StatusBadRequest, "bad_parameter", "task id %q: want a positive integer", r.PathValue("id"))
	}
	return id, nil
}

func taskNotFound(id int64) error {
	return errorf(http.StatusNotFound, "task_not_found", "task %d does not exist (finished tasks are kept, the last %d of them)", id, keepTasks)
}

func (s *Server) noTasks(w http.ResponseWriter) bool {
	if s.tasks == nil {
		s.fail(w, errorf(http.StatusNotImplemented, "tasks_unavailable", "this server keeps no task directory (it has no data directory)"))
		return true
	}
	return false
}

// getTask answers GET /v1/tasks/{id}.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request) {
	id, err := taskID(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	if s.noTasks(w) {
		return
	}
	v, ok := s.tasks.get(id)
	if !ok {
		s.fail(w, taskNotFound(id))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// taskStates are the states a list may ask for.
var taskStates = map[string]bool{taskEnqueued: true, taskProcessing: true, taskSucceeded: true, taskFailed: true, taskCancelled: true}

// listTasks answers GET /v1/tasks: newest first, filtered by collection=
// and state=, at most limit= (default 100, at most keepTasks).
func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()
	limit := 100
	if vs, ok := query["limit"]; ok {
		n, err := strconv.Atoi(vs[0])
		if err != nil || n < 1 || n > keepTasks || len(vs) > 1 {
			s.fail(w, errorf(http.StatusBadRequest, "bad_parameter", "parameter limit=%q: want one integer from 1 to %d", vs[0], keepTasks))
			return
		}
		limit = n
	}
	state := query.Get("state")
	if _, ok := query["state"]; ok && !taskStates[state] {
		s.fail(w, errorf(http.StatusBadRequest, "bad_parameter", "parameter state=%q: want enqueued, processing, succeeded, failed or cancelled", state))
		return
	}
	collection := query.Get("collection")
	if _, ok := query["collection"]; ok {
		if err := checkName(collection); err != nil {
			s.fail(w, err)
			return
		}
	}
	if s.noTasks(w) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tasks": s.tasks.list(collection, state, limit)})
}

// cancelTask answers DELETE /v1/tasks/{id}: an enqueued task is cancelled
// at once; a running one stops after the batch it is committing, which
// stays committed, and the answer (200) waits for that within nine tenths
// of --timeout, after which it is 202 with the task still processing.
func (s *Server) cancelTask(w http.ResponseWriter, r *http.Request) {
	id, err := taskID(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	if s.noTasks(w) {
		return
	}
	// Wait for a running task to stop within most of --timeout; past
	// that, answer 202: it stops after its batch all the same.
	ctx := r.Context()
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-time.Until(dl)/10))
		defer cancel()
	}
	v, ok, err := s.tasks.cancel(ctx, id, fmt.Errorf("%w%d", errTaskCancelled, id))
	if !ok {
		s.fail(w, taskNotFound(id))
		return
	}
	if errors.Is(err, errCancelPending) {
		writeJSON(w, http.StatusAccepted, v)
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// taskCollector exports the task queue's gauges on /metrics.
type taskCollector struct{ q *taskQueue }

var (
	taskStateDesc  = prometheus.NewDesc("tandem_tasks", "Ingest tasks by state (finished ones are those kept).", []string{"state"}, nil)
	taskDocsDesc   = prometheus.NewDesc("tandem_tasks_queued_documents", "Documents of unfinished ingest tasks not yet indexed or refused.", nil, nil)
	taskBytesDesc  = prometheus.NewDesc("tandem_tasks_queued_bytes", "Bytes of unfinished ingest tasks' bodies and of uploads being received (bounded by --max-queued).", nil, nil)
	taskLimitsDesc = prometheus.NewDesc("tandem_tasks_queued_bytes_limit", "The bound on queued bytes (--max-queued).", nil, nil)
)

func (c taskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- taskStateDesc
	ch <- taskDocsDesc
	ch <- taskBytesDesc
	ch <- taskLimitsDesc
}

func (c taskCollector) Collect(ch chan<- prometheus.Metric) {
	states, docs, queued := c.q.counts()
	for state, n := range states {
		ch <- prometheus.MustNewConstMetric(taskStateDesc, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(taskDocsDesc, prometheus.GaugeValue, float64(docs))
	ch <- prometheus.MustNewConstMetric(taskBytesDesc, prometheus.GaugeValue, float64(queued))
	ch <- prometheus.MustNewConstMetric(taskLimitsDesc, prometheus.GaugeValue, float64(c.q.s.cfg.MaxQueued))
}
