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
	"os/signal"
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
		Schema    *tandem.Schema `json:"schema"`
		Dense     []string       `json:"dense,omitempty"`
		Late      []string       `json:"late,omitempty"`
		LateIndex string         `json:"late_index,omitempty"`
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

// call sends a request to the server and decodes a 2xx answer into out;
// any other is an *apiError with the server's message.
func (u *upload) call(ctx context.Context, method, path string, body io.Reader, size int64, contentType string, out any) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(u.server, "/")+path, body)
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
		return nil, fmt.Errorf("%s %s: %w", method, req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, req.URL.Redacted(), err)
	}
	if resp.StatusCode/100 != 2 {
		var eb struct {
			Error struct{ Code, Message string }
		}
		if json.Unmarshal(data, &eb) != nil || eb.Error.Message == "" {
			eb.Error.Message = strings.TrimSpace(string(data))
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

func (u *upload) run(stdout, stderr io.Writer) error {
	if _, err := url.ParseRequestURI(u.server); err != nil || !strings.HasPrefix(u.server, "http") {
		return fmt.Errorf("--server %q: want a URL such as http://127.0.0.1:7700", u.server)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	coll := "/v1/collections/" + url.PathEscape(u.collection)

	// The collection: used as it is, or created.
	var info struct{ Retrievers []string }
	_, err := u.call(ctx, "GET", coll, nil, 0, "", &info)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.status == http.StatusNotFound:
		body, err := json.Marshal(u.create)
		if err != nil {
			return err
		}
		if _, err := u.call(ctx, "PUT", coll, strings.NewReader(string(body)), int64(len(body)), "application/json", &info); err != nil {
			return err
		}
		if !u.quiet {
			fmt.Fprintf(stderr, "created collection %s on %s\n", u.collection, u.server)
		}
	case err != nil:
		return err
	case u.creating:
		fmt.Fprintf(stderr, "note: collection %s exists on %s; its schema and models are used and --schema, --id-field, --strict, --field, --models, --external and --late-index are ignored\n", u.collection, u.server)
	}
	if !u.quiet {
		fmt.Fprintf(stderr, "retrievers: %s\n", strings.Join(info.Retrievers, ", "))
	}

	// The upload: streamed, with its length when it is a file.
	var in io.Reader = os.Stdin
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
	resp, err := u.call(ctx, "POST", coll+"/documents?wait=false", in, size, "application/x-ndjson", &task)
	if err != nil {
		return err
	}
	taskURL := strings.TrimRight(u.server, "/") + resp.Header.Get("Location")
	if !u.quiet {
		fmt.Fprintf(stderr, "task %d: %d documents received in %s; following %s\n", task.ID, task.Received, time.Since(start).Round(time.Millisecond), taskURL)
	}
	if u.noWait {
		fmt.Fprintf(stdout, "task %d enqueued: %d documents; follow it at %s\n", task.ID, task.Received, taskURL)
		return nil
	}

	// Follow it.
	taskPath := fmt.Sprintf("/v1/tasks/%d", task.ID)
	// A line per committed batch, as a local index prints, and one every
	// 10 s while a batch is being encoded.
	var last time.Time
	shown := -1
	fails := 0
	for task.State == "enqueued" || task.State == "processing" {
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted: stopped following task %d, which goes on on the server (%s); cancel it with: curl -X DELETE %s", task.ID, taskURL, taskURL)
		case <-time.After(500 * time.Millisecond):
		}
		if _, err := u.call(ctx, "GET", taskPath, nil, 0, "", &task); err != nil {
			if ctx.Err() != nil {
				continue
			}
			// A server restarting resumes the task: keep asking a while.
			if fails++; fails >= 20 {
				return fmt.Errorf("following task %d (%s): %w", task.ID, taskURL, err)
			}
			continue
		}
		fails = 0
		settled := task.Indexed + task.Refused
		if !u.quiet && (settled != shown && time.Since(last) >= time.Second || time.Since(last) >= 10*time.Second) {
			last, shown = time.Now(), settled
			fmt.Fprintln(stderr, taskLine(task, time.Since(start)))
		}
	}
	if !u.quiet {
		fmt.Fprintln(stderr, taskLine(task, time.Since(start)))
	}
	for _, e := range task.Errors {
		id := ""
		if e.ID != "" {
			id = fmt.Sprintf(" (id %q)", e.ID)
		}
		fmt.Fprintf(stderr, "skipped: line %d%s: %s\n", e.Line, id, e.Error)
	}
	if len(task.Errors) < task.Refused {
		fmt.Fprintf(stderr, "skipped: %d more lines (the task lists the first %d)\n", task.Refused-len(task.Errors), len(task.Errors))
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
