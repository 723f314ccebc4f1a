package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/internal/testtime"
)

const taskHelperEnv = "TANDEM_TASK_HELPER_DIR"

// TestTaskKillHelper is the server process of TestTaskKill: it serves its
// data directory on a loopback port, printing "listening ADDR", until it
// is killed. It only runs when TestTaskKill starts it.
func TestTaskKillHelper(t *testing.T) {
	dir := os.Getenv(taskHelperEnv)
	if dir == "" {
		t.Skip("helper process for TestTaskKill")
	}
	cfg := &Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg.Engine.BatchSize = 10 // many batches, each fsynced
	s, err := New(cfg)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	fmt.Println("listening", ln.Addr())
	s.Serve(context.Background(), ln)
}

// TestTaskKill SIGKILLs a server 20 times at random points of an ingest
// task, restarting it each time. In the end the task has succeeded, every
// document of its body is stored at the version of its last line, none
// twice, the one bad line is refused once, and the task's committed line
// never went back.
func TestTaskKill(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a server 20 times")
	}
	dir := t.TempDir()
	const docs, second = 3000, 1000
	lines := append(taskLines(docs, 1), taskLines(second, 2)...)
	lines = append(lines[:700:700], append([]string{`{"_id":"bad","v":`}, lines[700:]...)...) // line 701
	body := strings.Join(lines, "\n") + "\n"
	r := rand.New(rand.NewPCG(44, 2))
	client := &http.Client{Timeout: testtime.D(time.Minute)}

	start := func() (*exec.Cmd, string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTaskKillHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), taskHelperEnv+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		addr := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
					addr <- a
				} else if strings.HasPrefix(sc.Text(), "error") {
					addr <- sc.Text()
				}
			}
			io.Copy(io.Discard, out)
		}()
		select {
		case a := <-addr:
			if strings.HasPrefix(a, "error") {
				t.Fatalf("helper: %s", a)
			}
			return cmd, "http://" + a
		case <-time.After(testtime.D(2 * time.Minute)):
			cmd.Process.Kill()
			t.Fatal("the server did not start")
		}
		return nil, ""
	}
	call := func(method, url string, in string, out any) int {
		req, _ := http.NewRequest(method, url, strings.NewReader(in))
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, data)
			}
		}
		return resp.StatusCode
	}

	var id int64
	committed, kills, during := 0, 0, 0 // during: kills while the task was unfinished
	for round := 0; round < 20; round++ {
		cmd, url := start()
		if round == 0 {
			if code := call("PUT", url+"/v1/collections/c", "{}", nil); code != http.StatusCreated {
				t.Fatalf("create: %d", code)
			}
			var v taskView
			if code := call("POST", url+"/v1/collections/c/documents?wait=false", body, &v); code != http.StatusAccepted {
				t.Fatalf("upload: %d %+v", code, v)
			}
			id = v.ID
		}
		// A random point of what is left, spread so that all 20 kills
		// come before the end; every fifth round kills during the start
		// (the collection opening, the task resuming).
		target := committed
		if round%5 != 4 {
			left := len(lines) - committed
			target += 1 + r.IntN(max(1, left/(21-round)))
		}
		var v taskView
		for {
			call("GET", fmt.Sprintf("%s/v1/tasks/%d", url, id), "", &v)
			if v.CommittedLines < committed {
				t.Fatalf("round %d: committed_lines went back from %d to %d", round, committed, v.CommittedLines)
			}
			committed = v.CommittedLines
			if committed >= target || v.State != taskProcessing && v.State != taskEnqueued {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if v.State != taskProcessing && v.State != taskEnqueued {
			t.Fatalf("round %d: the task is %s before its kill", round, v.State)
		}
		during++
		t.Logf("round %d: kill at %d of %d lines committed", round, v.CommittedLines, len(lines))
		time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond) // within a batch
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		kills++
	}

	cmd, url := start()
	defer func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}()
	var v taskView
	testtime.Until(t, 3*time.Minute, 50*time.Millisecond, "the task to succeed after the kills", func() error {
		call("GET", fmt.Sprintf("%s/v1/tasks/%d", url, id), "", &v)
		if v.State != taskSucceeded {
			return fmt.Errorf("task %d is %s (%d of %d committed)", id, v.State, v.CommittedLines, len(lines))
		}
		return nil
	})
	if v.Received != docs+second+1 || v.Indexed != docs+second || v.Refused != 1 || len(v.Errors) != 1 || v.Errors[0].Line != 701 || v.CommittedLines != len(lines) {
		t.Fatalf("the task after %d kills: %+v", kills, v)
	}
	var info struct{ Docs int }
	call("GET", url+"/v1/collections/c", "", &info)
	if info.Docs != docs {
		t.Fatalf("%d documents after %d kills, want %d", info.Docs, kills, docs)
	}
	for i := range docs {
		var doc documentBody
		if code := call("GET", fmt.Sprintf("%s/v1/collections/c/documents/t%04d", url, i), "", &doc); code != http.StatusOK {
			t.Fatalf("t%04d: %d", i, code)
		}
		want := 1.0
		if i < second {
			want = 2
		}
		if doc.Fields["v"] != want {
			t.Fatalf("t%04d is at version %v, want %v", i, doc.Fields["v"], want)
		}
	}
	// Searches agree with the store: each document once.
	var res searchJSON
	q, _ := json.Marshal(map[string]any{"text": "common", "k": 1000, "ids_only": true})
	call("POST", url+"/v1/collections/c/search", string(q), &res)
	seen := map[string]bool{}
	for _, h := range res.Hits {
		if seen[h.ID] {
			t.Fatalf("%s found twice", h.ID)
		}
		seen[h.ID] = true
	}
	t.Logf("%d kills, %d of them while the task was processing", kills, during)
}
