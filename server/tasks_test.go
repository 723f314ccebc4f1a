package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/internal/testtime"
)

// taskBody is n documents t0000.. as NDJSON lines, each with its version v.
func taskLines(n, v int) []string {
	lines := make([]string, n)
	for i := range n {
		d, _ := json.Marshal(map[string]any{"_id": fmt.Sprintf("t%04d", i), "title": fmt.Sprintf("task doc %d", i),
			"text": fmt.Sprintf("common words of document %d %s", i, strings.Repeat("filler ", i%7)), "v": v})
		lines[i] = string(d)
	}
	return lines
}

// waitTask polls a task until it has ended and returns it.
func (a *apiServer) waitTask(id int64) taskView {
	a.t.Helper()
	var v taskView
	ctx, cancel := context.WithTimeout(testtime.Context(a.t), testtime.D(2*time.Minute))
	defer cancel()
	for {
		a.must(http.StatusOK, "GET", fmt.Sprintf("/v1/tasks/%d", id), nil, &v)
		if v.State == taskSucceeded || v.State == taskFailed || v.State == taskCancelled {
			return v
		}
		select {
		case <-ctx.Done():
			a.t.Fatalf("task %d did not end: %+v", id, v)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// postTask posts lines with wait=false and returns the 202's task.
func (a *apiServer) postTask(coll string, lines ...string) taskView {
	a.t.Helper()
	var v taskView
	a.must(http.StatusAccepted, "POST", "/v1/collections/"+coll+"/documents?wait=false", ndjson(lines...), &v)
	if v.ID <= 0 || v.Collection != coll || v.State != taskEnqueued {
		a.t.Fatalf("202 answered %+v", v)
	}
	return v
}

// blockTasks makes every task stop after its first committed batch until
// release is called (or the task's context ends); reached receives the
// task's id each time one stops.
func blockTasks(t *testing.T) (reached chan int64, release func()) {
	reached = make(chan int64, 16)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	taskBatchHook = func(ctx context.Context, id int64) {
		select {
		case reached <- id:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	t.Cleanup(func() {
		release()
		taskBatchHook = nil
	})
	return reached, release
}

func TestTaskUpload(t *testing.T) {
	cfg := &Config{AsyncAbove: 4 << 10}
	cfg.Engine.BatchSize = 50
	a := newAPIServer(t, cfg)
	a.must(http.StatusCreated, "PUT", "/v1/collections/c", map[string]any{}, nil)
	lines := taskLines(400, 1)

	// wait=false: 202 with the task, and a Location naming it.
	code, data := a.do("POST", "/v1/collections/c/documents?wait=false", ndjson(lines...))
	var v taskView
	if code != http.StatusAccepted || json.Unmarshal(data, &v) != nil || v.Received != 400 {
		t.Fatalf("wait=false: %d %s", code, data)
	}
	done := a.waitTask(v.ID)
	if done.State != taskSucceeded || done.Indexed != 400 || done.Refused != 0 || done.CommittedLines != 400 || done.FinishedAt == nil || len(done.Errors) != 0 {
		t.Fatalf("task ended %+v", done)
	}
	var info struct{ Docs int }
	a.must(http.StatusOK, "GET", "/v1/collections/c", nil, &info)
	if info.Docs != 400 {
		t.Fatalf("collection holds %d documents, want 400", info.Docs)
	}
	if res := a.search("c", map[string]any{"text": "document 17", "k": 1}); len(res.Hits) != 1 || res.Hits[0].ID != "t0017" {
		t.Fatalf("search after the task: %+v", res.Hits)
	}

	// No wait=: a body over --async-above is a task, a smaller one is not.
	a.must(http.StatusAccepted, "POST", "/v1/collections/c/documents", ndjson(taskLines(100, 2)...), &v)
	a.waitTask(v.ID)
	var res upsertResult
	a.must(http.StatusOK, "POST", "/v1/collections/c/documents", ndjson(taskLines(3, 3)...), &res)
	if res.Indexed != 3 {
		t.Fatalf("a small body: %+v", res)
	}
	// wait=true keeps a large body synchronous.
	a.must(http.StatusOK, "POST", "/v1/collections/c/documents?wait=true", ndjson(taskLines(100, 4)...), &res)
	if res.Indexed != 100 {
		t.Fatalf("wait=true: %+v", res)
	}
	// A body of unknown length (chunked) over the bound is a task too.
	req, _ := http.NewRequest("POST", a.ts.URL+"/v1/collections/c/documents", struct{ *strings.Reader }{strings.NewReader(string(ndjson(taskLines(100, 5)...)))})
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := a.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Location") != fmt.Sprintf("/v1/tasks/%d", v.ID) {
		t.Fatalf("chunked body: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	a.waitTask(v.ID)
	var doc documentBody
	a.must(http.StatusOK, "GET", "/v1/collections/c/documents/t0050", nil, &doc)
	if doc.Fields["v"] != 5.0 {
		t.Fatalf("t0050 after the chunked task: %+v", doc)
	}

	// A JSON array is a task too.
	var arr []json.RawMessage
	for _, l := range taskLines(30, 6) {
		arr = append(arr, json.RawMessage(l))
	}
	body, _ := json.Marshal(arr)
	code, data = a.do("POST", "/v1/collections/c/documents?wait=false", body, "Content-Type", "application/json")
	if code != http.StatusAccepted || json.Unmarshal(data, &v) != nil {
		t.Fatalf("array: %d %s", code, data)
	}
	if done := a.waitTask(v.ID); done.Indexed != 30 || done.Received != 30 {
		t.Fatalf("array task: %+v", done)
	}

	// The list, newest first, filtered.
	var list struct{ Tasks []taskView }
	a.must(http.StatusOK, "GET", "/v1/tasks?collection=c&state=succeeded&limit=2", nil, &list)
	if len(list.Tasks) != 2 || list.Tasks[0].ID != v.ID || list.Tasks[1].ID != v.ID-1 || list.Tasks[0].Errors != nil {
		t.Fatalf("list: %+v", list.Tasks)
	}
	a.must(http.StatusOK, "GET", "/v1/tasks?state=failed", nil, &list)
	if len(list.Tasks) != 0 {
		t.Fatalf("failed tasks: %+v", list.Tasks)
	}
	a.fails(http.StatusBadRequest, "bad_parameter", "GET", "/v1/tasks?state=done", nil, "state")
	a.fails(http.StatusBadRequest, "bad_parameter", "GET", "/v1/tasks?limit=0", nil, "limit")
	a.fails(http.StatusNotFound, "task_not_found", "GET", "/v1/tasks/999", nil, "999")
	a.fails(http.StatusBadRequest, "bad_parameter", "GET", "/v1/tasks/x1", nil, "x1")
	a.fails(http.StatusConflict, "task_finished", "DELETE", fmt.Sprintf("/v1/tasks/%d", v.ID), nil, "succeeded")
	a.fails(http.StatusBadRequest, "bad_parameter", "POST", "/v1/collections/c/documents?wait=maybe", ndjson(lines[0]), "wait")
	a.fails(http.StatusBadRequest, "no_documents", "POST", "/v1/collections/c/documents?wait=false", ndjsonBody("\n \n"), "no documents")
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/c/documents?wait=false", `[{"_id":"a"},`, "invalid JSON")
	a.fails(http.StatusNotFound, "collection_not_found", "POST", "/v1/collections/nope/documents?wait=false", ndjson(lines[0]), "nope")

	// The bodies are gone once their tasks ended; the records stay.
	entries, _ := os.ReadDir(filepath.Join(a.dir, taskDirName))
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			t.Errorf("task directory holds %s after every task ended", e.Name())
		}
	}
	_, metrics := a.do("GET", "/metrics", nil)
	if !strings.Contains(string(metrics), `tandem_tasks{state="succeeded"} 4`) || !strings.Contains(string(metrics), "tandem_tasks_queued_bytes 0") {
		t.Errorf("/metrics lacks the tasks' gauges:\n%s", grepLines(string(metrics), "tandem_tasks"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestTaskBadLines: a task refuses each bad line with its number and
// reason, and indexes the rest.
func TestTaskBadLines(t *testing.T) {
	cfg := &Config{MaxLine: 300}
	cfg.Engine.BatchSize = 4
	a := newAPIServer(t, cfg)
	a.must(http.StatusCreated, "PUT", "/v1/collections/strict", map[string]any{"schema": map[string]any{"strict": true,
		"fields": []map[string]any{{"name": "title", "type": "text"}, {"name": "text", "type": "text"}, {"name": "v", "type": "number"}}}}, nil)
	lines := taskLines(12, 1)
	lines[2] = `{"_id":"bad-json",`
	lines[5] = `{"_id":"unknown","text":"x","colour":"red"}`
	lines[7] = `{"_id":"long","text":"` + strings.Repeat("y", 400) + `"}`
	lines[9] = ""
	lines[10] = `{"_id":"wrong-type","text":"x","v":"seven"}`
	v := a.postTask("strict", lines...)
	if v.Received != 11 {
		t.Fatalf("received %d, want 11 (12 lines, one blank)", v.Received)
	}
	done := a.waitTask(v.ID)
	if done.State != taskSucceeded || done.Indexed != 7 || done.Refused != 4 || len(done.Errors) != 4 {
		t.Fatalf("task: %+v", done)
	}
	want := []struct {
		line int
		says string
	}{{3, "JSON"}, {6, "colour"}, {8, "--max-line"}, {11, "v"}}
	for i, w := range want {
		e := done.Errors[i]
		if e.Line != w.line || !strings.Contains(e.Error, w.says) {
			t.Errorf("refused line %d: %+v, want line %d naming %q", i, e, w.line, w.says)
		}
	}
	var info struct{ Docs int }
	a.must(http.StatusOK, "GET", "/v1/collections/strict", nil, &info)
	if info.Docs != 7 {
		t.Errorf("the collection holds %d documents, want 7", info.Docs)
	}
}

// TestTaskCancel: DELETE cancels an enqueued task at once and a running
// one after its batch; the batches committed stay, and the task says how
// far it got. A drop cancels the collection's tasks.
func TestTaskCancel(t *testing.T) {
	cfg := &Config{}
	cfg.Engine.BatchSize = 10
	a := newAPIServer(t, cfg)
	a.must(http.StatusCreated, "PUT", "/v1/collections/c", map[string]any{}, nil)
	reached, release := blockTasks(t)
	first := a.postTask("c", taskLines(100, 1)...)
	<-reached
	second := a.postTask("c", taskLines(50, 2)...)
	var v taskView
	a.must(http.StatusOK, "DELETE", fmt.Sprintf("/v1/tasks/%d", second.ID), nil, &v)
	if v.State != taskCancelled || v.Indexed != 0 || v.Error != fmt.Sprintf("cancelled by DELETE /v1/tasks/%d", second.ID) {
		t.Fatalf("enqueued task cancelled: %+v", v)
	}
	if _, err := os.Stat(filepath.Join(a.dir, taskDirName, fmt.Sprint(second.ID)+".body")); !os.IsNotExist(err) {
		t.Errorf("a cancelled task's body is still there: %v", err)
	}
	// The running task: the DELETE waits for it to stop.
	a.must(http.StatusOK, "DELETE", fmt.Sprintf("/v1/tasks/%d", first.ID), nil, &v)
	if v.State != taskCancelled || v.Indexed < 10 || v.Indexed >= 100 || v.CommittedLines != v.Indexed {
		t.Fatalf("running task cancelled: %+v", v)
	}
	var info struct{ Docs int }
	a.must(http.StatusOK, "GET", "/v1/collections/c", nil, &info)
	if info.Docs != v.Indexed {
		t.Errorf("the collection holds %d documents, the cancelled task says %d were indexed", info.Docs, v.Indexed)
	}

	// A drop cancels the tasks of its collection and does not wait for
	// them to finish.
	third := a.postTask("c", taskLines(100, 3)...)
	<-reached
	a.must(http.StatusNoContent, "DELETE", "/v1/collections/c", nil, nil)
	if v := a.waitTask(third.ID); v.State != taskCancelled || !strings.Contains(v.Error, "dropped") {
		t.Fatalf("a task of a dropped collection: %+v", v)
	}
	release()
}

// TestTaskResume: a server closed during a task resumes it when it opens
// again, after its last committed batch, and every document ends at the
// version of its last line.
func TestTaskResume(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{DataDir: dir}
	cfg.Engine.BatchSize = 20
	a := newAPIServer(t, cfg)
	a.must(http.StatusCreated, "PUT", "/v1/collections/c", map[string]any{}, nil)
	// 150 documents, then new versions of the first 50.
	lines := append(taskLines(150, 1), taskLines(50, 2)...)
	reached, release := blockTasks(t)
	v := a.postTask("c", lines...)
	<-reached
	a.ts.Close()
	if err := a.s.Close(); err != nil { // stops the task after its batch
		t.Fatal(err)
	}
	var rec taskRecord
	data, err := os.ReadFile(filepath.Join(dir, taskDirName, fmt.Sprint(v.ID)+".json"))
	if err != nil || json.Unmarshal(data, &rec) != nil {
		t.Fatalf("the task's record: %v", err)
	}
	if rec.State != taskProcessing || rec.CommittedLines < 20 || rec.CommittedLines >= 200 {
		t.Fatalf("the record of a task stopped by a close: %+v", rec)
	}
	release()

	b := newAPIServer(t, &Config{DataDir: dir})
	done := b.waitTask(v.ID)
	if done.State != taskSucceeded || done.Received != 200 || done.CommittedLines != 200 {
		t.Fatalf("resumed task: %+v", done)
	}
	var info struct{ Docs int }
	b.must(http.StatusOK, "GET", "/v1/collections/c", nil, &info)
	if info.Docs != 150 {
		t.Fatalf("%d documents, want 150", info.Docs)
	}
	for i := 0; i < 150; i += 7 {
		var doc documentBody
		b.must(http.StatusOK, "GET", fmt.Sprintf("/v1/collections/c/documents/t%04d", i), nil, &doc)
		want := 1.0
		if i < 50 {
			want = 2
		}
		if doc.Fields["v"] != want {
			t.Errorf("t%04d: version %v, want %v", i, doc.Fields["v"], want)
		}
	}
}

// TestTaskQueueBound: --max-queued refuses a body that alone is over it
// (413) and one that does not fit beside the queued ones (429), storing
// nothing of either.
func TestTaskQueueBound(t *testing.T) {
	cfg := &Config{MaxQueued: 20 << 10}
	cfg.Engine.BatchSize = 10
	a := newAPIServer(t, cfg)
	a.must(http.StatusCreated, "PUT", "/v1/collections/c", map[string]any{}, nil)
	reached, _ := blockTasks(t)
	big := ndjson(taskLines(300, 1)...)
	a.fails(http.StatusRequestEntityTooLarge, "body_too_large", "POST", "/v1/collections/c/documents?wait=false", big, "--max-queued")
	first := a.postTask("c", taskLines(60, 1)...) // about 6 KB
	<-reached
	a.postTask("c", taskLines(60, 2)...)
	code, data := a.do("POST", "/v1/collections/c/documents?wait=false", ndjson(taskLines(120, 3)...))
	if code != http.StatusTooManyRequests || !strings.Contains(string(data), "queue_full") {
		t.Fatalf("a body beyond the queue's room: %d %s", code, data)
	}
	var list struct{ Tasks []taskView }
	a.must(http.StatusOK, "GET", "/v1/tasks", nil, &list)
	if len(list.Tasks) != 2 {
		t.Fatalf("tasks after the refusals: %+v", list.Tasks)
	}
	entries, _ := os.ReadDir(filepath.Join(a.dir, taskDirName))
	if len(entries) != 4 {
		t.Errorf("task directory: %d entries, want the 2 tasks' records and bodies", len(entries))
	}
	a.must(http.StatusOK, "DELETE", fmt.Sprintf("/v1/tasks/%d", first.ID), nil, nil)
}

// TestTaskCancelSlowBatch: a DELETE whose task's batch outlasts most of
// --timeout answers 202 with the task still processing, not 504, and the
// task stops after that batch all the same.
func TestTaskCancelSlowBatch(t *testing.T) {
	cfg := &Config{Timeout: testtime.D(3 * time.Second)}
	cfg.Engine.BatchSize = 10
	a := newAPIServer(t, cfg)
	a.must(http.StatusCreated, "PUT", "/v1/collections/c", map[string]any{}, nil)
	reached := make(chan int64, 1)
	gate := make(chan struct{})
	taskBatchHook = func(ctx context.Context, id int64) {
		select {
		case reached <- id:
		default:
		}
		<-gate // a batch that does not look at its context
	}
	t.Cleanup(func() { taskBatchHook = nil })
	v := a.postTask("c", taskLines(100, 1)...)
	<-reached
	var got taskView
	a.must(http.StatusAccepted, "DELETE", fmt.Sprintf("/v1/tasks/%d", v.ID), nil, &got)
	if got.State != taskProcessing {
		t.Fatalf("a cancel that outlasts its wait: %+v", got)
	}
	close(gate)
	if done := a.waitTask(v.ID); done.State != taskCancelled || done.Indexed >= 100 {
		t.Fatalf("the task after its slow batch: %+v", done)
	}
}
