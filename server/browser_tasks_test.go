package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// pageTaskGate holds every task after each batch it commits, while the
// gate is shut, so that the page's test sees a task processing for as
// long as it needs; a task's cancellation lets it go too.
type pageTaskGate struct {
	mu      sync.Mutex
	shut    chan struct{} // closed when the gate opens
	reached chan int64    // a task's id each time one is held
}

// newPageTaskGate sets taskBatchHook for the test's duration, the gate
// shut.
func newPageTaskGate(t *testing.T) *pageTaskGate {
	g := &pageTaskGate{shut: make(chan struct{}), reached: make(chan int64, 64)}
	taskBatchHook = func(ctx context.Context, id int64) {
		g.mu.Lock()
		shut := g.shut
		g.mu.Unlock()
		select {
		case <-shut:
			return
		default:
		}
		select {
		case g.reached <- id:
		default:
		}
		select {
		case <-shut:
		case <-ctx.Done():
		}
	}
	t.Cleanup(func() {
		g.open()
		taskBatchHook = nil
	})
	return g
}

// open lets the held tasks go on; shutAgain holds them again.
func (g *pageTaskGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.shut:
	default:
		close(g.shut)
	}
}

func (g *pageTaskGate) shutAgain() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = make(chan struct{})
}

// waitHeld waits until task id is held after a batch.
func (g *pageTaskGate) waitHeld(t *testing.T, id int64) {
	t.Helper()
	deadline := time.After(testtime.D(60 * time.Second))
	for {
		select {
		case got := <-g.reached:
			if got == id {
				return
			}
		case <-deadline:
			t.Fatalf("task %d has not committed a batch within %v", id, testtime.D(60*time.Second))
		}
	}
}

// pageShownTask is a task as the page's panel shows it.
type pageShownTask struct {
	ID         int64   `json:"id"`
	Collection string  `json:"collection"`
	State      string  `json:"state"`
	Value      float64 `json:"value"`
	Max        float64 `json:"max"`
	Label      string  `json:"label"` // the text the bar is labelled by
	Detail     string  `json:"detail"`
	Error      string  `json:"error"`
	Cancel     bool    `json:"cancel"` // a cancel button shows
}

const pageReadTasksJS = `Array.from(document.querySelectorAll('#tasks:not([hidden]) #task-list .task')).map(li => {
	const bar = li.querySelector('progress');
	const label = document.getElementById(bar.getAttribute('aria-labelledby'));
	const err = li.querySelector('.task-error');
	return {
		id: Number(li.dataset.id), collection: li.querySelector('.task-collection').textContent,
		state: li.querySelector('.task-state').textContent, value: bar.value, max: bar.max,
		label: label ? label.textContent : '', detail: li.querySelector('.task-detail').textContent,
		error: err.hidden ? '' : err.textContent, cancel: !li.querySelector('.task-cancel').hidden,
	};
})`

// pageTasksDocs is n small documents as NDJSON.
func pageTasksDocs(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		line, _ := json.Marshal(map[string]any{"_id": fmt.Sprintf("u%05d", i), "title": fmt.Sprintf("upload %d", i), "text": "a small document of the upload " + strings.Repeat("word ", i%5)})
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// TestPageTasksInBrowser drives the page's tasks panel: an upload posted
// with wait=false shows, while it runs, as its collection, its state and
// a bar of the API's indexed+refused over received; a cancel button only
// for an admin key; its end, the bar full; and the page's cancel of an
// enqueued and of a running task.
func TestPageTasksInBrowser(t *testing.T) {
	chrome := pageBrowser()
	if chrome == "" {
		t.Skip("no chromium on PATH (chromium, chromium-browser or google-chrome): run scripts/setup-browser.sh, which make test runs")
	}
	const (
		admin = "admin-secret"
		read  = "read-secret"
		docs  = 1000
		batch = 100
	)
	gate := newPageTaskGate(t)
	s, err := New(&Config{DataDir: t.TempDir(), AdminKeys: []string{admin}, ReadKeys: []string{read},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Engine: engine.Options{NoSync: true, BatchSize: batch}})
	if err != nil {
		t.Fatal(err)
	}
	// polls counts the page's GET /v1/tasks.
	var polls atomic.Int64
	h := s.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" && r.URL.Path == "/v1/tasks" {
			polls.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	defer func() {
		gate.open()
		srv.Close()
		if err := s.Close(); err != nil {
			t.Errorf("close server: %v", err)
		}
	}()
	base := srv.URL
	if status, msg := pageCallKey(t, admin, "PUT", base+"/v1/collections/uploads", map[string]any{}, nil); status != http.StatusCreated {
		t.Fatalf("create collection: status %d: %s", status, msg)
	}
	post := func() taskView {
		t.Helper()
		var v taskView
		if status, msg := pageCallKey(t, admin, "POST", base+"/v1/collections/uploads/documents?wait=false", pageTasksDocs(docs), &v); status != http.StatusAccepted {
			t.Fatalf("upload with wait=false: status %d: %s", status, msg)
		}
		return v
	}
	apiTask := func(id int64) taskView {
		t.Helper()
		var v taskView
		if status, msg := pageCallKey(t, read, "GET", fmt.Sprintf("%s/v1/tasks/%d", base, id), nil, &v); status != http.StatusOK {
			t.Fatalf("GET task %d: status %d: %s", id, status, msg)
		}
		return v
	}

	first := post()
	gate.waitHeld(t, first.ID)
	held := apiTask(first.ID)
	if held.State != taskProcessing || held.Indexed+held.Refused <= 0 || held.Indexed+held.Refused >= docs || held.Received != docs {
		t.Fatalf("the held task: %+v, want it processing, part of its %d documents settled", held, docs)
	}

	d, stop := pageOpen(t, chrome)
	defer stop()
	shown := func() []pageShownTask {
		t.Helper()
		return pageRun(t, d.ctx, "read the tasks", chromedp.Evaluate[[]pageShownTask](pageReadTasksJS))
	}
	// waitShown waits until the panel shows task id in state.
	waitShown := func(what string, id int64, state string) pageShownTask {
		t.Helper()
		d.do(what, 60*time.Second, chromedp.Poll[chromedp.Void](fmt.Sprintf(
			`document.querySelector('#tasks:not([hidden]) .task[data-id="%d"][data-state="%s"]')`, id, state)))
		for _, st := range shown() {
			if st.ID == id {
				return st
			}
		}
		t.Fatalf("%s: task %d is gone from the panel", what, id)
		return pageShownTask{}
	}

	// Without a key the server refuses the list: no panel, and no
	// message of its own (the page's error box names the key problem).
	d.do("open the page", 30*time.Second,
		chromedp.Navigate(base+"/"),
		chromedp.Poll[chromedp.Void](`!document.querySelector('#error').hidden || null`),
	)
	if got := shown(); len(got) != 0 {
		t.Errorf("no key: the panel shows %+v", got)
	}

	// A read key: the task shows, as the API has it, without a cancel
	// button.
	d.set("#api-key", read)
	d.do("save the read key", 10*time.Second, chromedp.Click(chromedp.CSS("#api-key-save")))
	st := waitShown("the task shown to a read key", first.ID, taskProcessing)
	checkBar := func(what string, st pageShownTask, v taskView) {
		t.Helper()
		if st.Collection != "uploads" || st.State != v.State || st.Value != float64(v.Indexed+v.Refused) || st.Max != float64(v.Received) {
			t.Errorf("%s: the page shows %+v; the API's task: %s, bar %d of %d", what, st, v.State, v.Indexed+v.Refused, v.Received)
		}
		if want := fmt.Sprintf("Upload %d to uploads", v.ID); st.Label != want {
			t.Errorf("%s: the bar is labelled %q, want %q", what, st.Label, want)
		}
	}
	checkBar("held, read key", st, apiTask(first.ID))
	if st.Cancel {
		t.Error("a read key: the page offers to cancel")
	}
	if !strings.Contains(st.Detail, "of 1,000 documents") || !strings.Contains(st.Detail, "docs/s") || !strings.Contains(st.Detail, "left") {
		t.Errorf("held task's detail %q: want documents, docs/s and time left", st.Detail)
	}

	// The admin key: a cancel button.
	d.set("#api-key", admin)
	d.do("save the admin key", 10*time.Second,
		chromedp.Click(chromedp.CSS("#api-key-save")),
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelector('.task[data-id="%d"] .task-cancel:not([hidden])')`, first.ID)),
	)
	d.screenshot("tasks.png")

	// Let it run: the page shows it succeeded, its bar full, and the
	// collection's new count; then it stops asking.
	gate.open()
	st = waitShown("the task shown succeeded", first.ID, taskSucceeded)
	done := apiTask(first.ID)
	if done.State != taskSucceeded || done.Indexed != docs {
		t.Fatalf("the task ended %+v", done)
	}
	checkBar("succeeded", st, done)
	if st.Value != st.Max || st.Cancel || st.Error != "" {
		t.Errorf("succeeded: the page shows %+v, want a full bar, no cancel button, no error", st)
	}
	d.do("the collection's new count", 30*time.Second, chromedp.Poll[chromedp.Void](
		fmt.Sprintf(`document.querySelector('#collection option[value="uploads"]').textContent === 'uploads (%d docs)' || null`, docs)))
	n := polls.Load()
	time.Sleep(5 * time.Second) // the page polls every 2 s while a task is unfinished
	if extra := polls.Load() - n; extra != 0 {
		t.Errorf("no task unfinished: the page asked for the tasks %d more times in 5 s", extra)
	}

	// Two more: one held processing, one enqueued behind it. The page
	// learns of them when it loads; it cancels the enqueued one, then the
	// running one, whose committed batches stay.
	gate.shutAgain()
	running := post()
	gate.waitHeld(t, running.ID)
	queued := post()
	d.do("reload", 30*time.Second, chromedp.Navigate(base+"/"))
	waitShown("the running task shown", running.ID, taskProcessing)
	st = waitShown("the enqueued task shown", queued.ID, taskEnqueued)
	checkBar("enqueued", st, apiTask(queued.ID))
	if st.Value != 0 || !st.Cancel {
		t.Errorf("enqueued: the page shows %+v, want an empty bar and a cancel button", st)
	}
	if ids := []int64{shown()[0].ID, shown()[1].ID}; !slices.Equal(ids, []int64{running.ID, queued.ID}) {
		t.Errorf("the panel lists tasks %v, want %v (in the order they run)", ids, []int64{running.ID, queued.ID})
	}
	for _, id := range []int64{queued.ID, running.ID} {
		d.do(fmt.Sprintf("cancel task %d", id), 10*time.Second, chromedp.Click(chromedp.CSS(fmt.Sprintf(`.task[data-id="%d"] .task-cancel`, id))))
		st = waitShown(fmt.Sprintf("task %d shown cancelled", id), id, taskCancelled)
		v := apiTask(id)
		if v.State != taskCancelled || st.Error != v.Error || !strings.Contains(st.Error, "cancelled") {
			t.Errorf("task %d: the API has %s (%q), the page shows %+v", id, v.State, v.Error, st)
		}
		checkBar(fmt.Sprintf("task %d cancelled", id), st, v)
		if st.Cancel {
			t.Errorf("task %d cancelled: the page still offers to cancel it", id)
		}
	}
	if v := apiTask(running.ID); v.Indexed == 0 {
		t.Errorf("the running task cancelled after a batch: %+v, want its batch kept", v)
	}
	d.screenshot("tasks-cancelled.png")
}
