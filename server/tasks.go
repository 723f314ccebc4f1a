package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// Ingest tasks: a document upload spooled to disk and indexed in the
// background (docs/server.md, Tasks). The invariants:
//
//   - A task is acknowledged (202) only once its body and its record are
//     fsynced in the task directory, so an acknowledged task survives a
//     crash.
//   - Its record's committed_lines only moves forward, and only once every
//     document at or before that line is committed (or refused). A
//     restarted server resumes each unfinished task after that line, so a
//     document after it may be written a second time, in the body's order:
//     an upsert of the same document, which changes nothing.
//   - One task runs at a time, in the order of their ids; synchronous
//     upserts run beside it.
//   - A body is removed once its task ends; finished tasks' records are
//     kept, the last keepTasks of them.

// Defaults of the task limits, also those of `tandem serve`'s flags.
const (
	// DefaultAsyncAbove is the body size above which an upsert without
	// wait= runs as a task (--async-above): a body that a slow machine
	// still encodes within the default --timeout.
	DefaultAsyncAbove = 64 << 10
	// DefaultMaxQueued bounds the bytes of the bodies of unfinished tasks
	// (--max-queued).
	DefaultMaxQueued = 16 << 30
)

const (
	// taskDirName is the task directory's name in the data directory: a
	// name no collection can have.
	taskDirName = ".tasks"
	// keepTasks is how many finished tasks' records are kept.
	keepTasks = 1000
	// maxTaskErrors bounds the refused lines a task lists; it counts them
	// all.
	maxTaskErrors = 1000
)

// Task states.
const (
	taskEnqueued   = "enqueued"
	taskProcessing = "processing"
	taskSucceeded  = "succeeded"
	taskFailed     = "failed"
	taskCancelled  = "cancelled"
)

// Body forms of a task, as its record names them.
const (
	taskNDJSON = "ndjson"
	taskArray  = "array" // a JSON array, or one JSON object
)

// errTaskCancelled and errCollectionDropped end a running task as
// cancelled.
var (
	errTaskCancelled     = errors.New("cancelled by DELETE /v1/tasks/") // the id follows
	errCollectionDropped = errors.New("the collection was dropped")
)

// taskBatchHook, when set (by tests), is called after each batch a task
// commits and records, with the task's context.
var taskBatchHook func(ctx context.Context, id int64)

// taskRecord is a task as its file holds it.
type taskRecord struct {
	ID         int64  `json:"id"`
	Collection string `json:"collection"`
	State      string `json:"state"`
	Form       string `json:"form"`
	Bytes      int64  `json:"bytes"`
	// Received counts the body's documents (its non-blank lines or its
	// elements); Lines its lines or elements, blank ones included.
	Received int `json:"received"`
	Lines    int `json:"lines"`
	// CommittedLines: every document at or before this line (or element)
	// is committed or refused; Indexed and Refused count them, and Errors
	// lists the first maxTaskErrors refused.
	CommittedLines int         `json:"committed_lines"`
	Indexed        int         `json:"indexed"`
	Refused        int         `json:"refused"`
	Errors         []lineError `json:"errors"`
	// Offset is the body's byte offset after CommittedLines (NDJSON).
	Offset     int64      `json:"offset"`
	EnqueuedAt time.Time  `json:"enqueued_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Error says why a task failed or was cancelled.
	Error string `json:"error,omitempty"`
}

// task is a taskRecord with what a running one adds; q.mu guards it.
type task struct {
	taskRecord
	// pending are refused lines after CommittedLines: shown, not yet
	// saved (a restart reads them again).
	pending []lineError
	// runStart and runIndexed are when this process started the task and
	// its Indexed then: the rate is this run's.
	runStart   time.Time
	runIndexed int
	// finished is closed when the task ends.
	finished chan struct{}
}

func (t *task) done() bool {
	return t.State == taskSucceeded || t.State == taskFailed || t.State == taskCancelled
}

// taskView is a task as the API answers it (openapi.json, Task).
type taskView struct {
	ID             int64       `json:"id"`
	Collection     string      `json:"collection"`
	State          string      `json:"state"`
	Bytes          int64       `json:"bytes"`
	Received       int         `json:"received"`
	Indexed        int         `json:"indexed"`
	Refused        int         `json:"refused"`
	CommittedLines int         `json:"committed_lines"`
	Errors         []lineError `json:"errors,omitempty"`
	DocsPerSecond  *float64    `json:"docs_per_second,omitempty"`
	ETASeconds     *float64    `json:"eta_seconds,omitempty"`
	EnqueuedAt     time.Time   `json:"enqueued_at"`
	StartedAt      *time.Time  `json:"started_at,omitempty"`
	FinishedAt     *time.Time  `json:"finished_at,omitempty"`
	Error          string      `json:"error,omitempty"`
}

// view is t's answer; errors lists its refused lines. q.mu is held.
func (t *task) view(errs bool) taskView {
	v := taskView{
		ID: t.ID, Collection: t.Collection, State: t.State, Bytes: t.Bytes,
		Received: t.Received, Indexed: t.Indexed, Refused: t.Refused + len(t.pending),
		CommittedLines: t.CommittedLines, EnqueuedAt: t.EnqueuedAt,
		StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, Error: t.Error,
	}
	if errs {
		v.Errors = append(slices.Clone(t.Errors), t.pending...)
		slices.SortStableFunc(v.Errors, func(a, b lineError) int { return a.Line - b.Line })
		if len(v.Errors) > maxTaskErrors {
			v.Errors = v.Errors[:maxTaskErrors]
		}
		if v.Errors == nil {
			v.Errors = []lineError{}
		}
	}
	if t.State == taskProcessing && !t.runStart.IsZero() {
		if secs := time.Since(t.runStart).Seconds(); secs > 0 && t.Indexed > t.runIndexed {
			rate := float64(t.Indexed-t.runIndexed) / secs
			left := float64(max(0, t.Received-t.Indexed-v.Refused))
			eta := left / rate
			v.DocsPerSecond, v.ETASeconds = &rate, &eta
		}
	}
	return v
}

// taskQueue holds the tasks of a task directory and runs them one at a
// time.
type taskQueue struct {
	dir string
	s   *Server
	log *slog.Logger

	mu struct {
		sync.Mutex
		tasks  map[int64]*task
		next   int64
		queued int64 // bytes of unfinished tasks' bodies and of uploads being spooled
		// running is the task being processed, cancel its cancellation.
		running *task
		cancel  context.CancelCauseFunc
	}
	wake chan struct{}
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}
}

// openTaskQueue loads the tasks of dir (made by the first upload), removes
// what an unacknowledged upload left, and starts the worker.
func openTaskQueue(dir string, s *Server) (*taskQueue, error) {
	q := &taskQueue{dir: dir, s: s, log: s.cfg.Logger, wake: make(chan struct{}, 1), done: make(chan struct{})}
	q.mu.tasks = map[int64]*task{}
	q.mu.next = 1
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("server: task directory: %w", err)
	}
	bodies := map[int64]bool{}
	for _, de := range entries {
		name := de.Name()
		switch {
		case strings.HasPrefix(name, "upload-"), strings.HasSuffix(name, ".tmp"):
			// An upload never acknowledged, or a record never renamed.
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("server: task directory: %w", err)
			}
		case strings.HasSuffix(name, ".body"):
			if id, err := strconv.ParseInt(strings.TrimSuffix(name, ".body"), 10, 64); err == nil {
				bodies[id] = true
			}
		case strings.HasSuffix(name, ".json"):
			id, err := strconv.ParseInt(strings.TrimSuffix(name, ".json"), 10, 64)
			if err != nil {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return nil, fmt.Errorf("server: task %d: %w", id, err)
			}
			t := &task{finished: make(chan struct{})}
			if err := json.Unmarshal(data, &t.taskRecord); err != nil || t.ID != id {
				return nil, fmt.Errorf("server: task %d: damaged record %s", id, filepath.Join(dir, name))
			}
			if t.done() {
				close(t.finished)
			} else {
				q.mu.queued += t.Bytes
			}
			q.mu.tasks[id] = t
			q.mu.next = max(q.mu.next, id+1)
		}
	}
	for id := range bodies {
		if t := q.mu.tasks[id]; t == nil || t.done() {
			os.Remove(q.bodyPath(id)) // its task ended before the body was removed
		}
	}
	for _, t := range q.mu.tasks {
		if !t.done() && !bodies[t.ID] {
			// Cannot happen unless the directory was tampered with.
			t.State, t.Error = taskFailed, "the task's body is missing from the task directory"
			now := time.Now().UTC()
			t.FinishedAt = &now
			q.mu.queued -= t.Bytes
			close(t.finished)
			if err := q.save(t.taskRecord); err != nil {
				return nil, err
			}
		}
	}
	q.ctx, q.stop = context.WithCancel(context.Background())
	go q.loop()
	q.signal()
	return q, nil
}

func (q *taskQueue) bodyPath(id int64) string {
	return filepath.Join(q.dir, strconv.FormatInt(id, 10)+".body")
}

func (q *taskQueue) recordPath(id int64) string {
	return filepath.Join(q.dir, strconv.FormatInt(id, 10)+".json")
}

// save writes r's record durably: a new file, fsynced, renamed over the
// old one, and the directory fsynced.
func (q *taskQueue) save(r taskRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	path := q.recordPath(r.ID)
	tmp := path + ".tmp"
	if err := writeFileSync(tmp, data); err != nil {
		return fmt.Errorf("task %d: save: %w", r.ID, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("task %d: save: %w", r.ID, err)
	}
	syncDir(q.dir)
	return nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (q *taskQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// close stops the worker: a running task stops after its batch in
// progress and stays unfinished, to resume at the next start.
func (q *taskQueue) close() {
	q.stop()
	<-q.done
}

// reserve claims n bytes of the queue's bound for an upload; false when
// they do not fit.
func (q *taskQueue) reserve(n int64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.queued+n > q.s.cfg.MaxQueued {
		return false
	}
	q.mu.queued += n
	return true
}

func (q *taskQueue) unreserve(n int64) {
	q.mu.Lock()
	q.mu.queued -= n
	q.mu.Unlock()
}

// add makes an enqueued task of a spooled body (the file at spool, whose
// bytes are reserved already) and saves it: on return it is acknowledged.
func (q *taskQueue) add(rec taskRecord, spool string) (taskView, error) {
	q.mu.Lock()
	rec.ID = q.mu.next
	q.mu.next++
	q.mu.Unlock()
	rec.State = taskEnqueued
	rec.EnqueuedAt = time.Now().UTC()
	if err := os.Rename(spool, q.bodyPath(rec.ID)); err != nil {
		return taskView{}, fmt.Errorf("task %d: %w", rec.ID, err)
	}
	if err := q.save(rec); err != nil {
		os.Remove(q.bodyPath(rec.ID))
		return taskView{}, err
	}
	t := &task{taskRecord: rec, finished: make(chan struct{})}
	q.mu.Lock()
	q.mu.tasks[rec.ID] = t
	v := t.view(false)
	q.mu.Unlock()
	q.signal()
	return v, nil
}

// get returns a task's view.
func (q *taskQueue) get(id int64) (taskView, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.mu.tasks[id]
	if t == nil {
		return taskView{}, false
	}
	return t.view(true), true
}

// list returns the tasks, newest first, that match collection and state
// ("" for any), at most limit.
func (q *taskQueue) list(collection, state string, limit int) []taskView {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := make([]int64, 0, len(q.mu.tasks))
	for id := range q.mu.tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := []taskView{}
	for i := len(ids) - 1; i >= 0 && len(out) < limit; i-- {
		t := q.mu.tasks[ids[i]]
		if (collection == "" || t.Collection == collection) && (state == "" || t.State == state) {
			out = append(out, t.view(false))
		}
	}
	return out
}

// counts returns the unfinished tasks by state, and the documents and
// bytes they have yet to index.
func (q *taskQueue) counts() (states map[string]int, docs int, bytes int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	states = map[string]int{taskEnqueued: 0, taskProcessing: 0, taskSucceeded: 0, taskFailed: 0, taskCancelled: 0}
	for _, t := range q.mu.tasks {
		states[t.State]++
		if !t.done() {
			docs += max(0, t.Received-t.Indexed-t.Refused)
		}
	}
	return states, docs, q.mu.queued
}

// cancel cancels a task: an enqueued one at once, a running one once its
// batch in progress is committed. It waits for that within ctx, and
// returns errCancelPending with the view of a task still running when ctx
// ends. It returns false when there is no such task.
func (q *taskQueue) cancel(ctx context.Context, id int64, cause error) (taskView, bool, error) {
	q.mu.Lock()
	t := q.mu.tasks[id]
	if t == nil {
		q.mu.Unlock()
		return taskView{}, false, nil
	}
	if t.done() {
		v := t.view(true)
		q.mu.Unlock()
		return v, true, errorf(409, "task_finished", "task %d has already %s", id, t.State)
	}
	if q.mu.running != t {
		q.endLocked(t, taskCancelled, cause.Error())
		v := t.view(true)
		q.mu.Unlock()
		return v, true, nil
	}
	q.mu.cancel(cause)
	q.mu.Unlock()
	select {
	case <-t.finished:
	case <-ctx.Done():
		// The batch in progress outlasts the caller: the task stops
		// after it all the same.
		v, _ := q.get(id)
		return v, true, errCancelPending
	}
	v, _ := q.get(id)
	return v, true, nil
}

// errCancelPending: a running task was told to stop, and has not yet.
var errCancelPending = errors.New("cancel pending")

// cancelCollection cancels every unfinished task of a collection that is
// being dropped, and waits for a running one to stop.
func (q *taskQueue) cancelCollection(ctx context.Context, name string) error {
	q.mu.Lock()
	var ids []int64
	for id, t := range q.mu.tasks {
		if t.Collection == name && !t.done() {
			ids = append(ids, id)
		}
	}
	q.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		if _, _, err := q.cancel(ctx, id, errCollectionDropped); errors.Is(err, errCancelPending) {
			return ctx.Err()
		} else if err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.code == "task_finished" {
				continue
			}
			return err
		}
	}
	return nil
}

// endLocked finishes t in state with message: saved, its body removed, its
// bytes released. q.mu is held.
func (q *taskQueue) endLocked(t *task, state, message string) {
	now := time.Now().UTC()
	t.State, t.Error, t.FinishedAt = state, message, &now
	if state == taskSucceeded {
		t.Errors = append(t.Errors, t.pending...)
		t.Refused += len(t.pending)
		t.pending = nil
		t.CommittedLines = t.Lines
	}
	slices.SortStableFunc(t.Errors, func(a, b lineError) int { return a.Line - b.Line })
	if len(t.Errors) > maxTaskErrors {
		t.Errors = t.Errors[:maxTaskErrors]
	}
	q.mu.queued -= t.Bytes
	if err := q.save(t.taskRecord); err != nil {
		q.log.Error("task: saving its end", "task", t.ID, "error", err)
	}
	os.Remove(q.bodyPath(t.ID))
	close(t.finished)
	q.pruneLocked()
}

// pruneLocked removes the oldest finished tasks beyond keepTasks.
func (q *taskQueue) pruneLocked() {
	var ids []int64
	for id, t := range q.mu.tasks {
		if t.done() {
			ids = append(ids, id)
		}
	}
	if len(ids) <= keepTasks {
		return
	}
	slices.Sort(ids)
	for _, id := range ids[:len(ids)-keepTasks] {
		delete(q.mu.tasks, id)
		os.Remove(q.recordPath(id))
	}
}

// loop runs the unfinished tasks in the order of their ids until close.
func (q *taskQueue) loop() {
	defer close(q.done)
	for {
		if q.ctx.Err() != nil {
			return
		}
		q.mu.Lock()
		var t *task
		for _, c := range q.mu.tasks {
			if !c.done() && (t == nil || c.ID < t.ID) {
				t = c
			}
		}
		q.mu.Unlock()
		if t == nil {
			select {
			case <-q.wake:
				continue
			case <-q.ctx.Done():
				return
			}
		}
		q.run(t)
	}
}

// run processes t until it ends or the queue closes.
func (q *taskQueue) run(t *task) {
	ctx, cancel := context.WithCancelCause(q.ctx)
	defer cancel(nil)
	q.mu.Lock()
	if t.done() { // cancelled meanwhile
		q.mu.Unlock()
		return
	}
	q.mu.running, q.mu.cancel = t, cancel
	now := time.Now().UTC()
	if t.StartedAt == nil {
		t.StartedAt = &now
	}
	t.State = taskProcessing
	t.runStart, t.runIndexed = time.Now(), t.Indexed
	rec := t.taskRecord
	q.mu.Unlock()
	if err := q.save(rec); err != nil {
		q.log.Error("task: saving its start", "task", t.ID, "error", err)
	}
	err := q.ingest(ctx, t)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.running, q.mu.cancel = nil, nil
	switch cause := context.Cause(ctx); {
	case err == nil:
		q.endLocked(t, taskSucceeded, "")
	case q.ctx.Err() != nil:
		// The server is closing: the task resumes at the next start.
	case errors.Is(cause, errTaskCancelled) || errors.Is(cause, errCollectionDropped):
		q.endLocked(t, taskCancelled, cause.Error())
	default:
		q.endLocked(t, taskFailed, publicError(err))
	}
	if t.done() {
		q.log.Info("task ended", "task", t.ID, "collection", t.Collection, "state", t.State,
			"indexed", t.Indexed, "refused", t.Refused, "error", t.Error)
	}
}

// publicError is what a failed task says of err: an API error's message,
// or the error.
func publicError(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.message
	}
	return err.Error()
}

// ingest indexes t's body from its committed line on.
func (q *taskQueue) ingest(ctx context.Context, t *task) error {
	c, err := q.s.reg.acquire(t.Collection)
	if err != nil {
		return err
	}
	defer c.release()
	f, err := os.Open(q.bodyPath(t.ID))
	if err != nil {
		return fmt.Errorf("task %d: open its body: %w", t.ID, err)
	}
	defer f.Close()
	q.mu.Lock()
	from, offset := t.CommittedLines, t.Offset
	indexed := t.Indexed
	q.mu.Unlock()
	rd, err := newItemReader(f, t.Form, from, offset, q.s.cfg.MaxLine)
	if err != nil {
		return fmt.Errorf("task %d: %w", t.ID, err)
	}
	refuse := func(e lineError) {
		q.mu.Lock()
		t.pending = append(t.pending, e)
		q.mu.Unlock()
	}
	idField := c.e.Schema().IDField
	// Each document given to the engine, by stream position from base:
	// its line and the body's offset after it.
	var (
		posMu   sync.Mutex
		posLine []int
		posOff  []int64
		base    int
	)
	lineOf := func(pos int) (int, int64, bool) {
		posMu.Lock()
		defer posMu.Unlock()
		if i := pos - base; i >= 0 && i < len(posLine) {
			return posLine[i], posOff[i], true
		}
		return 0, 0, false
	}
	next := func() (tandem.Doc, error) {
		for {
			it, err := rd.next()
			if err != nil {
				return tandem.Doc{}, err
			}
			if it.blank {
				continue
			}
			if it.tooLong > 0 {
				refuse(lineError{Line: it.line, Error: fmt.Sprintf("%d bytes over the limit of %d bytes (--max-line)", it.tooLong, q.s.cfg.MaxLine)})
				continue
			}
			d, err := tandem.DecodeJSON(it.data, idField)
			if err != nil {
				refuse(lineError{Line: it.line, ID: d.ID, Error: err.Error()})
				continue
			}
			posMu.Lock()
			posLine, posOff = append(posLine, it.line), append(posOff, it.end)
			posMu.Unlock()
			return d, nil
		}
	}
	progress := func(p engine.Progress) {
		line, off, ok := lineOf(p.Lines - 1)
		posMu.Lock()
		if n := p.Lines - base; n > 0 && n <= len(posLine) {
			posLine, posOff = posLine[n:], posOff[n:]
			base = p.Lines
		}
		posMu.Unlock()
		q.mu.Lock()
		t.Indexed = indexed + p.Docs
		// The record moves forward first; the task shows the new
		// committed line only once the record holding it is saved, so
		// that what a client has seen survives a crash.
		rec := t.taskRecord
		rec.Errors = slices.Clone(t.Errors)
		if ok && line > rec.CommittedLines {
			rec.CommittedLines, rec.Offset = line, off
		}
		// Refused lines at or before the committed one are settled.
		seen := len(t.pending)
		var keep []lineError
		for _, e := range t.pending {
			if e.Line <= rec.CommittedLines {
				rec.Refused++
				if len(rec.Errors) < maxTaskErrors {
					rec.Errors = append(rec.Errors, e)
				}
			} else {
				keep = append(keep, e)
			}
		}
		q.mu.Unlock()
		if err := q.save(rec); err != nil {
			q.log.Error("task: saving its progress", "task", t.ID, "error", err)
		} else {
			q.mu.Lock()
			t.CommittedLines, t.Offset = rec.CommittedLines, rec.Offset
			t.Refused, t.Errors = rec.Refused, rec.Errors
			// Lines refused while the record was saved stay pending.
			t.pending = append(keep, t.pending[seen:]...)
			q.mu.Unlock()
		}
		if taskBatchHook != nil {
			taskBatchHook(ctx, t.ID)
		}
	}
	var lastDocs int
	p, err := c.e.IndexStream(ctx, next, engine.StreamOptions{
		SkipBad: true,
		OnSkip: func(err error) {
			var de *engine.DocError
			if errors.As(err, &de) {
				if line, _, ok := lineOf(de.Index); ok {
					refuse(lineError{Line: line, ID: de.ID, Error: de.Err.Error()})
					return
				}
			}
			refuse(lineError{Error: err.Error()})
		},
		Progress: func(p engine.Progress) {
			q.s.metrics.ingested.WithLabelValues(t.Collection).Add(float64(p.Docs - lastDocs))
			lastDocs = p.Docs
			progress(p)
		},
	})
	q.mu.Lock()
	t.Indexed = indexed + p.Docs
	t.Lines = max(t.Lines, rd.line)
	failed := len(t.pending)
	q.mu.Unlock()
	if err == nil {
		q.s.metrics.failed.WithLabelValues(t.Collection).Add(float64(failed))
	}
	if err != nil {
		return fmt.Errorf("%w (the documents through line %d are committed)", err, t.CommittedLines)
	}
	return nil
}

// item is one line (NDJSON) or element (array) of a body.
type item struct {
	data  []byte
	line  int   // 1-based
	end   int64 // the body's offset after it (NDJSON)
	blank bool
	// tooLong is the length of a line over the limit, which is not read.
	tooLong int
}

// itemReader reads a task's body item by item.
type itemReader struct {
	form    string
	br      *bufio.Reader
	dec     *json.Decoder
	array   bool // dec is inside '['
	single  bool // dec holds one object, not an array
	line    int
	off     int64
	maxLine int
	buf     []byte
}

// newItemReader reads f's items after the first from (at byte offset
// offset for NDJSON; an array's are read and skipped).
func newItemReader(f *os.File, form string, from int, offset int64, maxLine int) (*itemReader, error) {
	r := &itemReader{form: form, line: from, off: offset, maxLine: maxLine}
	if form == taskNDJSON {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return nil, err
		}
		r.br = bufio.NewReaderSize(f, 1<<20)
		return r, nil
	}
	r.dec = json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	tok, err := r.dec.Token()
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	if d, ok := tok.(json.Delim); ok && d == '[' {
		r.array = true
	} else {
		// One object: read it again whole.
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		r.dec = json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
		r.single = true
	}
	for i := 0; i < from; i++ {
		var raw json.RawMessage
		if err := r.dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("skipping to element %d: %w", from, err)
		}
	}
	r.line = from
	return r, nil
}

func (r *itemReader) next() (item, error) {
	if r.form == taskNDJSON {
		return r.nextLine()
	}
	if (r.single && r.line > 0) || (r.array && !r.dec.More()) {
		return item{}, io.EOF
	}
	var raw json.RawMessage
	if err := r.dec.Decode(&raw); err != nil {
		return item{}, fmt.Errorf("reading element %d: %w", r.line+1, err)
	}
	r.line++
	it := item{data: raw, line: r.line}
	if len(raw) > r.maxLine {
		it.tooLong, it.data = len(raw), nil
	}
	return it, nil
}

// nextLine reads a line, keeping at most about maxLine bytes of it.
func (r *itemReader) nextLine() (item, error) {
	r.buf = r.buf[:0]
	n, newline := 0, false
	for {
		chunk, err := r.br.ReadSlice('\n')
		n += len(chunk)
		if len(r.buf) <= r.maxLine {
			r.buf = append(r.buf, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			if n == 0 {
				return item{}, io.EOF
			}
			break
		}
		if err != nil {
			return item{}, err
		}
		newline = true
		break
	}
	length := n
	if newline {
		length--
	}
	r.line++
	r.off += int64(n)
	it := item{line: r.line, end: r.off}
	switch data := r.buf[:min(length, len(r.buf))]; {
	case length > r.maxLine:
		it.tooLong = length
	case len(bytes.Trim(data, jsonSpace)) == 0:
		it.blank = true
	default:
		it.data = bytes.Clone(data)
	}
	return it, nil
}
