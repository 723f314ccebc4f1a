package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testnet"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// distCorpus is a small collection with a metadata field, in the JSON
// lines `tandem index` reads.
const distCorpus = `{"_id":"cat","title":"Cats","text":"Domestic cats are small felines that purr and hunt mice.","area":"pets"}
{"_id":"dog","title":"Dogs","text":"Dogs are loyal canines that bark and fetch sticks.","area":"pets"}
{"_id":"rust","title":"Rust","text":"Iron oxide forms when iron meets water and air.","area":"chemistry"}
{"_id":"salt","title":"Salt","text":"Sodium chloride dissolves in water into its ions.","area":"chemistry"}
{"_id":"tide","title":"Tides","text":"The moon's gravity raises the oceans twice a day.","area":"earth"}
{"_id":"quake","title":"Earthquakes","text":"Plates of the crust slip along faults and shake the ground.","area":"earth"}
{"_id":"bird","title":"Parrots","text":"Parrots are clever birds that can learn to speak words.","area":"pets"}
{"_id":"acid","title":"Acids","text":"An acid gives up protons; vinegar and lemon juice are weak acids.","area":"chemistry"}
`

// The release archive (scripts/dist.sh, make dist) runs where it is
// unpacked with an empty environment: `tandem version` finds its own
// libraries and model, `index`, `search` and `serve` work, the native
// libraries a server maps are the archive's, and searches answer as this
// source build does on the same corpus.
func TestReleaseArchive(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds the release archive (about 150 MB)")
	}
	loc := engine.Native()
	if loc.Prefix == "" || loc.ONNXRuntime == "" || loc.Models == "" {
		t.Skipf("skipping: no native prefix with ONNX Runtime and models (run scripts/setup.sh): %+v", loc)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	dist := exec.Command("bash", filepath.Join(root, "scripts/dist.sh"), "--out", out, "--version", "test", "--gzip", "1")
	var distErr bytes.Buffer
	dist.Stderr = &distErr
	stdout, err := dist.Output()
	if err != nil {
		t.Fatalf("scripts/dist.sh: %v\n%s", err, distErr.String())
	}
	archive := strings.TrimSpace(string(stdout))
	if want := filepath.Join(out, "tandem-test-linux-amd64.tar.gz"); archive != want {
		t.Fatalf("scripts/dist.sh printed %q, want %q", archive, want)
	}

	unpacked := t.TempDir()
	if b, err := exec.Command("tar", "-xzf", archive, "-C", unpacked).CombinedOutput(); err != nil {
		t.Fatalf("unpacking: %v\n%s", err, b)
	}
	home := filepath.Join(unpacked, "tandem-test-linux-amd64")
	for _, f := range []string{"tandem", "README.md", "lib/libfaiss_c.so", "lib/libonnxruntime.so.1", "lib/libopenblas.so.0", "models/bge-small-en-v1.5/model.onnx", "licenses/faiss-LICENSE", "licenses/onnxruntime-LICENSE"} {
		if _, err := os.Stat(filepath.Join(home, f)); err != nil {
			t.Errorf("the archive lacks %s: %v", f, err)
		}
	}
	tandem := filepath.Join(home, "tandem")
	work := t.TempDir()
	// release runs the unpacked tandem with no environment at all, in a
	// working directory of its own.
	release := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(tandem, args...)
		cmd.Env, cmd.Dir = []string{}, work
		var errb bytes.Buffer
		cmd.Stderr = &errb
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("env -i tandem %s: %v\n%s%s", strings.Join(args, " "), err, b, errb.String())
		}
		return string(b)
	}

	version := release("version")
	for _, want := range []string{"tandem test", "native prefix:  " + home, "onnxruntime:    " + filepath.Join(home, "lib/libonnxruntime.so.1"), "models:         " + filepath.Join(home, "models")} {
		if !strings.Contains(version, want) {
			t.Errorf("tandem version says\n%s\nwant a line %q", version, want)
		}
	}

	corpus := filepath.Join(work, "corpus.jsonl")
	if err := os.WriteFile(corpus, []byte(distCorpus), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(work, "data")
	col := filepath.Join(data, "animals")
	release("index", "--dir", col, "--corpus", corpus)
	source := filepath.Join(t.TempDir(), "animals")
	if code, _, errs := tandemRun(t, "index", "--dir", source, "--corpus", corpus); code != 0 {
		t.Fatalf("index from source: %d %s", code, errs)
	}

	searches := [][]string{
		{"caring for a pet that meows"},
		{"--mode", "late", "what makes the sea rise"},
		{"--mode", "dense", "--filter", `{"term":{"area":"chemistry"}}`, "metal corrosion"},
		{"--mode", "bm25", "water"},
	}
	for _, s := range searches {
		got := release(append([]string{"search", "--dir", col, "--json", "-k", "4"}, s...)...)
		code, want, errs := tandemRun(t, append([]string{"search", "--dir", source, "--json", "-k", "4"}, s...)...)
		if code != 0 {
			t.Fatalf("search %q from source: %d %s", s, code, errs)
		}
		if got != want {
			t.Errorf("search %q: the archive's tandem answered\n%s\nthe source build\n%s", s, got, want)
		}
		if !strings.Contains(got, `"id"`) {
			t.Errorf("search %q: no hits: %s", s, got)
		}
	}

	// serve: the HTTP API over the same collection answers as search does,
	// and the libraries it maps come from the archive.
	var searched struct {
		Hits []struct {
			ID    string  `json:"id"`
			Score float64 `json:"score"`
		} `json:"hits"`
	}
	if err := json.Unmarshal([]byte(release("search", "--dir", col, "--json", "-k", "4", "caring for a pet that meows")), &searched); err != nil {
		t.Fatal(err)
	}
	addr := testnet.Addr(t)
	serve := exec.Command(tandem, "serve", "--data", data, "--addr", addr)
	serve.Env, serve.Dir = []string{}, work
	var log syncBuffer
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		serve.Process.Signal(syscall.SIGTERM)
		if err := serve.Wait(); err != nil {
			t.Errorf("serve: %v\n%s", err, log.String())
		}
	}()
	client := &http.Client{Timeout: testtime.D(5 * time.Minute)}
	for deadline := time.Now().Add(testtime.D(5 * time.Minute)); ; time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archive's server is not ready: %v\n%s", err, log.String())
		}
	}
	body := `{"text":"caring for a pet that meows","mode":"hybrid","k":4}`
	resp, err := client.Post("http://"+addr+"/v1/collections/animals/search", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var served struct {
		Hits []struct {
			ID    string  `json:"id"`
			Score float64 `json:"score"`
		} `json:"hits"`
	}
	err = json.NewDecoder(resp.Body).Decode(&served)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST search: %d %v\n%s", resp.StatusCode, err, log.String())
	}
	if fmt.Sprint(served.Hits) != fmt.Sprint(searched.Hits) || len(served.Hits) == 0 {
		t.Errorf("served hits %v; tandem search %v", served.Hits, searched.Hits)
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", serve.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range []string{"libfaiss_c.so", "libonnxruntime.so.1", "libopenblas.so.0", "libgfortran.so.5"} {
		want := filepath.Join(home, "lib", lib)
		if !strings.Contains(string(maps), want) {
			var from []string
			for line := range strings.Lines(string(maps)) {
				if strings.Contains(line, strings.TrimSuffix(lib, ".0")) {
					from = append(from, strings.TrimSpace(line))
				}
			}
			t.Errorf("the server does not map %s; it maps %q", want, from)
		}
	}
}
