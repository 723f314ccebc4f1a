// Command apicall is the scripts' client of Tandem's HTTP API (make
// cluster-demo, make fuzz-api): a call that, when it fails, says what the
// server answered, and an upload that runs as a task and is followed to
// its end. It needs the standard library only, so `go build` fetches
// nothing, and it fails with one line, never a traceback.
//
// Usage:
//
//	apicall [-t TEMPLATE | -raw] [-max BYTES] METHOD URL [BODY]
//	apicall upload [-every D] [-report D] [-deadline D] [-allow-refused] COLLECTION-URL FILE
//
// The API key, if the server wants one, is $TANDEM_API_KEY: the
// environment, not the command line, which ps shows.
//
// A call sends BODY (JSON text, or @FILE; an .ndjson or .jsonl file goes as
// application/x-ndjson) and prints the answer as indented JSON, cut at
// -max bytes, or as it came (-raw), or through the text/template -t over the decoded JSON: a
// missing key is an error, numbers are float64, and the template has
// funcs (get MAP KEY DEFAULT) for a key the answer may leave out, (int
// NUMBER) and (join LIST SEP).
//
// An upload posts FILE to COLLECTION-URL/documents?wait=false, which
// answers 202 with a task, and follows the task (its Location) every -every,
// printing its progress at most every -report and at each change of
// state. It succeeds when the task succeeds with no document refused (or
// some, with -allow-refused); a task that fails or is cancelled, refused
// documents, or a task unfinished after -deadline fail it, and the task
// goes on in the server.
//
// Any failure prints one line on stderr, "apicall: ...": the request, the
// HTTP status and the server's error code and message, or what went wrong;
// the exit status is then 1 (2 for a wrong command line).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/template"
	"time"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "upload" {
		err = upload(os.Args[2:])
	} else {
		err = call(os.Args[1:])
	}
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "apicall: %v\nusage: apicall [-t TEMPLATE | -raw] [-max BYTES] METHOD URL [BODY]\n       apicall upload [-every D] [-report D] [-deadline D] [-allow-refused] COLLECTION-URL FILE\n", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "apicall: %v\n", err)
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// client bounds each request: an upload's body is spooled by the server
// before it answers, and a search may encode its query.
var client = &http.Client{Timeout: 10 * time.Minute}

// apiError is a request that failed: the server's answer, or why there
// was none.
type apiError struct {
	method, url string
	status      int
	code, msg   string
	err         error
}

func (e *apiError) Error() string {
	switch {
	case e.err != nil:
		return fmt.Sprintf("%s %s: %v", e.method, e.url, e.err)
	case e.code != "":
		return fmt.Sprintf("%s %s: HTTP %d %s: %s", e.method, e.url, e.status, e.code, e.msg)
	default:
		return fmt.Sprintf("%s %s: HTTP %d: %s", e.method, e.url, e.status, e.msg)
	}
}

// do sends a request with the key of $TANDEM_API_KEY and returns the
// answer's body; a status of 400 or more is an *apiError with the server's
// message.
func do(method, target string, body io.Reader, contentType string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		return nil, nil, &apiError{method: method, url: target, err: err}
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if key := os.Getenv("TANDEM_API_KEY"); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the method and URL are said already
		}
		return nil, nil, &apiError{method: method, url: target, err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, &apiError{method: method, url: target, err: fmt.Errorf("reading the answer (HTTP %d): %w", resp.StatusCode, err)}
	}
	if resp.StatusCode >= 400 {
		e := &apiError{method: method, url: target, status: resp.StatusCode}
		// The API's errors are {"error": {"code", "message"}}; the
		// cluster's routes between nodes answer {"error": "message"}.
		var body struct {
			Error json.RawMessage `json:"error"`
		}
		var apiErr struct{ Code, Message string }
		var msg string
		switch {
		case json.Unmarshal(data, &body) != nil || body.Error == nil:
		case json.Unmarshal(body.Error, &apiErr) == nil && apiErr.Message != "":
			e.code, e.msg = apiErr.Code, apiErr.Message
		case json.Unmarshal(body.Error, &msg) == nil && msg != "":
			e.msg = msg
		}
		if e.msg == "" {
			e.msg = cut(strings.TrimSpace(string(data)), 300)
			if e.msg == "" {
				e.msg = http.StatusText(resp.StatusCode)
			}
		}
		return resp, data, e
	}
	return resp, data, nil
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// call is apicall METHOD URL [BODY].
func call(args []string) error {
	fs := flag.NewFlagSet("apicall", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	tmpl := fs.String("t", "", "print the answer through this text/template")
	max := fs.Int("max", 0, "cut the printed JSON at this many bytes (0: whole)")
	raw := fs.Bool("raw", false, "print the answer as it came")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() < 2 || fs.NArg() > 3 {
		return usageError{"want METHOD URL [BODY]"}
	}
	method, target := strings.ToUpper(fs.Arg(0)), fs.Arg(1)
	var t *template.Template
	if *tmpl != "" {
		var err error
		if t, err = template.New("t").Option("missingkey=error").Funcs(funcs).Parse(*tmpl); err != nil {
			return usageError{fmt.Sprintf("-t: %v", err)}
		}
	}
	var body io.Reader
	contentType := ""
	if fs.NArg() == 3 {
		b := fs.Arg(2)
		if name, ok := strings.CutPrefix(b, "@"); ok {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			body, contentType = f, bodyType(name)
		} else {
			if !json.Valid([]byte(b)) {
				return usageError{fmt.Sprintf("the body is not JSON: %s", cut(b, 80))}
			}
			body, contentType = strings.NewReader(b), "application/json"
		}
	}
	_, data, err := do(method, target, body, contentType)
	if err != nil {
		return err
	}
	if *raw {
		_, err := os.Stdout.Write(data)
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("%s %s: the answer is not JSON (%v): %s", method, target, err, cut(string(data), 200))
	}
	if t != nil {
		var out bytes.Buffer
		if err := t.Execute(&out, v); err != nil {
			return fmt.Errorf("%s %s: printing the answer: %v", method, target, err)
		}
		_, err := os.Stdout.Write(out.Bytes())
		return err
	}
	pretty, _ := json.MarshalIndent(v, "", " ")
	s := string(pretty)
	if *max > 0 {
		s = cut(s, *max)
	}
	_, err = fmt.Println(s)
	return err
}

// funcs are the templates' own.
var funcs = template.FuncMap{
	"get": func(m map[string]any, key string, def any) any {
		if v, ok := m[key]; ok && v != nil {
			return v
		}
		return def
	},
	"int": func(v any) (int64, error) {
		f, ok := v.(float64)
		if !ok {
			return 0, fmt.Errorf("int: %v is not a number", v)
		}
		return int64(f), nil
	},
	"join": func(list []any, sep string) string {
		parts := make([]string, len(list))
		for i, v := range list {
			parts[i] = fmt.Sprint(v)
		}
		return strings.Join(parts, sep)
	},
}

func bodyType(name string) string {
	if strings.HasSuffix(name, ".ndjson") || strings.HasSuffix(name, ".jsonl") {
		return "application/x-ndjson"
	}
	return "application/json"
}

// task is what the upload follows of a task (server/openapi.json, Task).
type task struct {
	ID            int64      `json:"id"`
	Collection    string     `json:"collection"`
	State         string     `json:"state"`
	Bytes         int64      `json:"bytes"`
	Received      int        `json:"received"`
	Indexed       int        `json:"indexed"`
	Refused       int        `json:"refused"`
	DocsPerSecond *float64   `json:"docs_per_second"`
	ETASeconds    *float64   `json:"eta_seconds"`
	StartedAt     *time.Time `json:"started_at"`
	FinishedAt    *time.Time `json:"finished_at"`
	Error         string     `json:"error"`
	Errors        []struct {
		Line  int    `json:"line"`
		ID    string `json:"id"`
		Error string `json:"error"`
	} `json:"errors"`
}

func (t *task) finished() bool {
	return t.State == "succeeded" || t.State == "failed" || t.State == "cancelled"
}

// progress is a line saying how far t is, elapsed after its upload.
func (t *task) progress(elapsed time.Duration) string {
	s := fmt.Sprintf("task %d %s at %s: %s of %s documents", t.ID, t.State, duration(elapsed), thousands(t.Indexed+t.Refused), thousands(t.Received))
	if t.Received > 0 {
		s += fmt.Sprintf(" (%d%%)", 100*(t.Indexed+t.Refused)/t.Received)
	}
	if t.Refused > 0 {
		s += fmt.Sprintf(", %s refused", thousands(t.Refused))
	}
	if t.DocsPerSecond != nil {
		s += fmt.Sprintf(", %.1f docs/s", *t.DocsPerSecond)
	}
	if t.ETASeconds != nil {
		s += ", about " + duration(time.Duration(*t.ETASeconds*float64(time.Second))) + " left"
	}
	return s
}

// upload is apicall upload COLLECTION-URL FILE.
func upload(args []string) error {
	fs := flag.NewFlagSet("apicall upload", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	every := fs.Duration("every", 2*time.Second, "ask for the task this often")
	report := fs.Duration("report", 10*time.Second, "print its progress at most this often (and at each change of state)")
	deadline := fs.Duration("deadline", time.Hour, "fail when the task has not ended after this long (0: never)")
	allowRefused := fs.Bool("allow-refused", false, "succeed though the task refused documents")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() != 2 {
		return usageError{"want upload COLLECTION-URL FILE"}
	}
	base, file := strings.TrimSuffix(fs.Arg(0), "/"), fs.Arg(1)
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	target := base + "/documents?wait=false"
	start := time.Now()
	resp, data, err := do("POST", target, f, bodyType(file))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST %s: HTTP %d, want 202 and a task: %s", target, resp.StatusCode, cut(string(data), 200))
	}
	var t task
	if err := json.Unmarshal(data, &t); err != nil || t.ID <= 0 {
		return fmt.Errorf("POST %s: the 202's body is not a task (%v): %s", target, err, cut(string(data), 200))
	}
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return fmt.Errorf("POST %s: the 202 has no Location to follow the task at (%q)", target, resp.Header.Get("Location"))
	}
	fmt.Printf("task %d %s: %s documents, %s, queued in %s; following %s\n", t.ID, t.State, thousands(t.Received), size(t.Bytes), duration(time.Since(start)), loc)

	const tries = 5 // failed GETs in a row before giving up (a node restarting)
	failed, last, printed := 0, t.State, time.Now()
	for !t.finished() {
		if *deadline > 0 && time.Since(start) > *deadline {
			return fmt.Errorf("task %d is still %s after %s (-deadline): %s of %s documents settled; it goes on in the server (GET %s; DELETE cancels it)",
				t.ID, t.State, *deadline, thousands(t.Indexed+t.Refused), thousands(t.Received), loc)
		}
		time.Sleep(*every)
		var next task
		_, data, err := do("GET", loc.String(), nil, "")
		if err == nil {
			if err = json.Unmarshal(data, &next); err != nil {
				err = fmt.Errorf("GET %s: the answer is not a task (%v): %s", loc, err, cut(string(data), 200))
			}
		}
		if err != nil {
			var ae *apiError
			if failed++; failed >= tries || (errors.As(err, &ae) && ae.status >= 400 && ae.status < 500) {
				return fmt.Errorf("following task %d: %w", t.ID, err)
			}
			fmt.Printf("task %d: asking failed (try %d of %d): %v\n", t.ID, failed, tries, err)
			continue
		}
		failed, t = 0, next
		if t.State != last || (!t.finished() && time.Since(printed) >= *report) {
			if !t.finished() {
				fmt.Println(t.progress(time.Since(start)))
			}
			last, printed = t.State, time.Now()
		}
	}

	took := time.Since(start)
	if t.StartedAt != nil && t.FinishedAt != nil {
		took = t.FinishedAt.Sub(*t.StartedAt)
	}
	if t.State != "succeeded" {
		return fmt.Errorf("task %d %s after %s: %s (%s of %s documents indexed, committed before it ended)",
			t.ID, t.State, duration(took), t.Error, thousands(t.Indexed), thousands(t.Received))
	}
	rate := ""
	if s := took.Seconds(); s > 0 {
		rate = fmt.Sprintf(", %.1f docs/s", float64(t.Indexed)/s)
	}
	fmt.Printf("task %d succeeded: %s documents indexed, %s refused, in %s%s\n", t.ID, thousands(t.Indexed), thousands(t.Refused), duration(took), rate)
	for i, e := range t.Errors {
		if i == 5 {
			fmt.Printf("  ... and %d more\n", t.Refused-i)
			break
		}
		fmt.Printf("  refused line %d (id %q): %s\n", e.Line, e.ID, e.Error)
	}
	if t.Refused > 0 && !*allowRefused {
		return fmt.Errorf("task %d refused %s of %s documents (above; GET %s lists them)", t.ID, thousands(t.Refused), thousands(t.Received), loc)
	}
	return nil
}

// thousands writes n with commas: 12,345.
func thousands(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// duration writes d as "4.2 s", "3 min 05 s" or "2 h 07 min".
func duration(d time.Duration) string {
	switch s := d.Seconds(); {
	case s < 60:
		return fmt.Sprintf("%.1f s", s)
	case s < 3600:
		return fmt.Sprintf("%d min %02d s", int(s)/60, int(s)%60)
	default:
		return fmt.Sprintf("%d h %02d min", int(s)/3600, int(s)/60%60)
	}
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
