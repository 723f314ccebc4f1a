package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
)

// upload is `tandem index --server`: a corpus sent through the server's
// API as an ingest task (POST .../documents?wait=false), then followed
// (GET /v1/tasks/{id}) with the progress line and the summary of a local
// index.
type upload struct {
	server, collection, key string
	corpus                  string
	noWait, skipBad, quiet  bool
	// create is the PUT body of a collection that does not exist;
	// creating says flags chose it (a note says they are ignored when
	// the collection exists).
	create struct {
		Schema       *tandem.Schema `json:"schema"`
		Dense        []string       `json:"dense,omitempty"`
		Late         []string       `json:"late,omitempty"`
		LateIndex    string         `json:"late_index,omitempty"`
		LateEncoding string         `json:"late_encoding,omitempty"`
	}
	creating bool
	client   http.Client
}

// uploadTask is what the client reads of a task (server/openapi.json, Task).
type uploadTask struct {
	ID             int64    `json:"id"`
	State          string   `json:"state"`
	Received       int      `json:"received"`
	Indexed        int      `json:"indexed"`
	Refused        int      `json:"refused"`
	CommittedLines int      `json:"committed_lines"`
	DocsPerSecond  *float64 `json:"docs_per_second"`
	ETASeconds     *float64 `json:"eta_seconds"`
	Error          string   `json:"error"`
	Errors         []struct {
		Line  int    `json:"line"`
		ID    string `json:"id"`
		Error string `json:"error"`
	} `json:"errors"`
}

// serverModels is --models for a collection the server creates: "" is the
// default model for dense and late retrieval (the server refuses it,
// naming the installed ones, if it lacks it).
func serverModels(flag string) (dense, late []string, err error) {
	if strings.TrimSpace(flag) == "" {
		return []string{encoder.DefaultModel}, []string{encoder.DefaultModel}, nil
	}
	if dense, late, err = encoder.ParseModels(flag); err != nil {
		return nil, nil, fmt.Errorf("--models: %w", err)
	}
	return dense, late, nil
}

// apiError is the server's error answer.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (HTTP %d %s)", e.message, e.status, e.code)
}

// maxAnswer bounds an answer the client reads: a task lists at most 1000
// refused lines, well within it.
const maxAnswer = 16 << 20

// call sends a request to the server and decodes a 2xx answer into out;
// any other is an *apiError with the server's message, or, when the
// answer is not the API's (a proxy's page), an error naming its status
// and type, never its body.
func (u *upload) call(ctx context.Context, method, path string, body io.Reader, size int64, contentType string, out any) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.base()+path, body)
	if err != nil {
		return nil, fmt.Errorf("--server %q: %w", u.server, err)
	}
	if body != nil {
		req.ContentLength = size // -1: chunked
		req.Header.Set("Content-Type", contentType)
	}
	if u.key != "" {
		req.Header.Set("Authorization", "Bearer "+u.key)
	}
	resp, err := u.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the URL
		}
		return nil, fmt.Errorf("%s %s: %w (is tandem serve running at %s?)", method, path, err, u.server)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb struct {
			Error struct{ Code, Message string }
		}
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			return resp, fmt.Errorf("%s %s: HTTP %s, an answer that is not the Tandem API's (Content-Type %q): is %s the URL of tandem serve?", method, path, resp.Status, resp.Header.Get("Content-Type"), u.server)
		}
		return resp, &apiError{status: resp.StatusCode, code: eb.Error.Code, message: fmt.Sprintf("%s %s: %s", method, path, eb.Error.Message)}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp, fmt.Errorf("%s %s: the answer is not what the API documents: %w", method, path, err)
		}
	}
	return resp, nil
}

func (u *upload) base() string { return strings.TrimRight(u.server, "/") }

// curlCancel is the command that cancels the task at taskURL, with the
// key by its variable, never its value.
func (u *upload) curlCancel(taskURL string) string {
	if u.key == "" {
		return "curl -X DELETE " + taskURL
	}
	return `curl -X DELETE -H "Authorization: Bearer $TANDEM_API_KEY" ` + taskURL
}

// pollInterval is how often a followed task is asked for.
const pollInterval = 500 * time.Millisecond

// run uploads and follows the task until it ends or ctx is done (Ctrl-C),
// which stops following, never the task.
func (u *upload) run(ctx context.Context, stdout, stderr io.Writer) error {
	if _, err := url.ParseRequestURI(u.server); err != nil || !strings.HasPrefix(u.server, "http") {
		return fmt.Errorf("--server %q: want a URL such as http://127.0.0.1:7700", u.server)
	}
	interrupted := func(err error, what string) error {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return fmt.Errorf("interrupted %s", what)
		}
		return err
	}
	coll := "/v1/collections/" + url.PathEscape(u.collection)

	// The collection: used as it is, or created.
	var info struct{ Retrievers []string }
	_, err := u.call(ctx, "GET", coll, nil, 0, "", &info)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.code == "collection_not_found":
		body, err := json.Marshal(u.create)
		if err != nil {
			return err
		}
		if _, err := u.call(ctx, "PUT", coll, strings.NewReader(string(body)), int64(len(body)), "application/json", &info); err != nil {
			return interrupted(err, "while creating the collection: it may exist now")
		}
		if !u.quiet {
			fmt.Fprintf(stderr, "created collection %s on %s\n", u.collection, u.server)
		}
	case err != nil:
		return interrupted(err, "before the upload: nothing was sent")
	case u.creating:
		fmt.Fprintf(stderr, "note: collection %s exists on %s; its schema and models are used and --schema, --id-field, --strict, --field, --models, --external and --late-index are ignored\n", u.collection, u.server)
	}
	if !u.quiet {
		fmt.Fprintf(stderr, "retrievers: %s\n", strings.Join(info.Retrievers, ", "))
	}

	// The upload: streamed, with its length when it is a file.
	// The client closes a request's body: hide os.Stdin's Close, it is
	// not ours.
	var in io.Reader = struct{ io.Reader }{os.Stdin}
	size := int64(-1)
	if u.corpus != "-" {
		f, err := os.Open(u.corpus)
		if err != nil {
			return err
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
		in = f
	}
	start := time.Now()
	var task uploadTask
	if _, err := u.call(ctx, "POST", coll+"/documents?wait=false", in, size, "application/x-ndjson", &task); err != nil {
		return interrupted(err, fmt.Sprintf("during the upload: a task exists only if the server had the whole file (GET %s/v1/tasks?collection=%s lists them)", u.base(), u.collection))
	}
	// The task's URL from the one given, which may hold a proxy's prefix
	// that the server's Location lacks.
	taskPath := fmt.Sprintf("/v1/tasks/%d", task.ID)
	taskURL := u.base() + taskPath
	if u.noWait {
		fmt.Fprintf(stdout, "task %d enqueued: %d documents; follow it at %s\n", task.ID, task.Received, taskURL)
		return nil
	}
	if !u.quiet {
		fmt.Fprintf(stderr, "task %d: %d documents received in %s; following %s\n", task.ID, task.Received, time.Since(start).Round(time.Millisecond), taskURL)
	}

	// Follow it: a line per committed batch, as a local index prints, and
	// one every 10 s while a batch is being encoded; each refused line
	// once, as the task lists it.
	var last time.Time
	shown := -1
	fails := 0
	listed := map[string]bool{}
	list := func(t uploadTask) {
		for _, e := range t.Errors {
			key := fmt.Sprintf("%d\x00%s\x00%s", e.Line, e.ID, e.Error)
			if listed[key] {
				continue
			}
			listed[key] = true
			id := ""
			if e.ID != "" {
				id = fmt.Sprintf(" (id %q)", e.ID)
			}
			fmt.Fprintf(stderr, "skipped: line %d%s: %s\n", e.Line, id, e.Error)
		}
	}
	for task.State == "enqueued" || task.State == "processing" {
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted: stopped following task %d, which goes on on the server (%s); cancel it with: %s", task.ID, taskURL, u.curlCancel(taskURL))
		case <-time.After(pollInterval):
		}
		var next uploadTask // fresh: fields absent from an answer are not kept
		if _, err := u.call(ctx, "GET", taskPath, nil, 0, "", &next); err != nil {
			if ctx.Err() != nil {
				continue
			}
			// A server restarting resumes the task: keep asking a while,
			// unless it answered that the request is wrong.
			if errors.As(err, &ae) && ae.status/100 == 4 {
				return fmt.Errorf("following task %d (%s): %w", task.ID, taskURL, err)
			}
			if fails++; fails >= 20 {
				return fmt.Errorf("following task %d (%s): %w", task.ID, taskURL, err)
			}
			continue
		}
		fails = 0
		task = next
		list(task)
		settled := task.Indexed + task.Refused
		if !u.quiet && (task.State == "enqueued" || task.State == "processing") && (settled != shown && time.Since(last) >= time.Second || time.Since(last) >= 10*time.Second) {
			last, shown = time.Now(), settled
			fmt.Fprintln(stderr, taskLine(task, time.Since(start)))
		}
	}
	if !u.quiet {
		fmt.Fprintln(stderr, taskLine(task, time.Since(start)))
	}
	list(task)
	if len(listed) < task.Refused {
		fmt.Fprintf(stderr, "skipped: %d more lines (the task lists the first %d)\n", task.Refused-len(listed), len(listed))
	}
	switch task.State {
	case "succeeded":
	case "cancelled":
		return fmt.Errorf("task %d was cancelled (%s): %d documents were indexed, through line %d", task.ID, task.Error, task.Indexed, task.CommittedLines)
	default:
		return fmt.Errorf("task %d failed: %s (%d documents were indexed, through line %d)", task.ID, task.Error, task.Indexed, task.CommittedLines)
	}
	fmt.Fprintf(stdout, "indexed %d documents (%d lines, %d skipped) in %s\n", task.Indexed, task.CommittedLines, task.Refused, time.Since(start).Round(time.Millisecond))
	if task.Refused > 0 && !u.skipBad {
		return fmt.Errorf("%s: the server refused %d lines (listed above); the other documents are stored (--skip-bad accepts that)", u.corpus, task.Refused)
	}
	return nil
}

// taskLine is a local index's progress line (progressLine) for a task.
func taskLine(t uploadTask, elapsed time.Duration) string {
	rate := 0.0
	if t.DocsPerSecond != nil {
		rate = *t.DocsPerSecond
	} else if secs := elapsed.Seconds(); secs > 0 {
		rate = float64(t.Indexed) / secs
	}
	s := fmt.Sprintf("%d docs, %.1f docs/s", t.Indexed, rate)
	if t.Received > 0 {
		s += fmt.Sprintf(", %.0f%%", 100*float64(t.Indexed+t.Refused)/float64(t.Received))
		if t.ETASeconds != nil {
			s += fmt.Sprintf(", ETA %s", (time.Duration(*t.ETASeconds) * time.Second).Round(time.Second))
		}
	}
	if t.Refused > 0 {
		s += fmt.Sprintf(", %d skipped", t.Refused)
	}
	if t.State != "processing" {
		s += ", " + t.State
	}
	return s
}
