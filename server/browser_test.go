package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/chromedp/chromedp"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// The page test drives server/ui/index.html in Debian's chromium, headless,
// against the real server on a temporary data directory, and checks that
// what the page shows is what the API answers for the same request.

// pageBrowser finds a Chromium; the test skips when there is none (make
// test installs Debian's through scripts/setup-browser.sh).
func pageBrowser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// pageModel is the external dense model of the test collection: a hashed
// bag of words, so that dense retrieval runs through FAISS without an
// encoder model.
const (
	pageModel = "hash32"
	pageDim   = 32
)

func pageVector(text string) []float32 {
	v := make([]float32, pageDim)
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for _, w := range words {
		if len(w) < 3 {
			continue
		}
		h := fnv.New32a()
		h.Write([]byte(w))
		s := h.Sum32()
		if s&(1<<31) != 0 {
			v[s%pageDim] -= 1
		} else {
			v[s%pageDim] += 1
		}
	}
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if n == 0 {
		v[0] = 1
		return v
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(n))
	}
	return v
}

var (
	pageTopics = []string{"alpha", "beta", "gamma"}
	pageTags   = []string{"review", "trial", "cohort", "model"}
)

// pageSchema is the test collection's: BM25 over title and text, an
// external dense model, and a metadata field of each type to filter on
// and count (the page counts them in this order, the number aside).
var pageSchema = map[string]any{
	"id_field": "_id",
	"fields": []map[string]any{
		{"name": "title", "type": "text"},
		{"name": "text", "type": "text"},
		{"name": "topic", "type": "keyword"},
		{"name": "year", "type": "number"},
		{"name": "tags", "type": "keywords"},
		{"name": "open", "type": "bool"},
		{"name": "published", "type": "date"},
	},
	"models": []map[string]any{{"name": pageModel, "dense": true, "dim": pageDim, "external": true, "similarity": "cosine"}},
}

// pageDocs returns ~30 documents: SciFact's first ones when the shared data
// is present, else a few inline abstracts; one more whose title and text
// hold markup, which the page must show as text. Each has a keyword
// "topic", a number "year", keywords "tags", a bool "open" and a date
// "published" for filters and facets, and its hashed vector.
func pageDocs(t *testing.T) []map[string]any {
	t.Helper()
	type doc struct{ id, title, text string }
	var docs []doc
	if f, err := os.Open("../../shared/data/scifact/corpus.jsonl"); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() && len(docs) < 29 {
			var d struct {
				ID    string `json:"_id"`
				Title string `json:"title"`
				Text  string `json:"text"`
			}
			if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
				t.Fatalf("scifact corpus: %v", err)
			}
			docs = append(docs, doc{d.ID, d.Title, d.Text})
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("scifact corpus: %v", err)
		}
	} else {
		t.Logf("../../shared/data/scifact absent (%v): inline documents instead", err)
		for i, s := range pageAbstracts {
			docs = append(docs, doc{fmt.Sprintf("inline-%d", i), s[0], s[1]})
		}
	}
	docs = append(docs, doc{"markup",
		`<img src=x onerror="window.__pwned=1"> Human stem <b>cells</b> & markup`,
		`Human stem cells <script>window.__pwned=2</script> are shown as text: <i>never</i> as HTML & never run.`})
	out := make([]map[string]any, len(docs))
	for i, d := range docs {
		out[i] = map[string]any{
			"_id": d.id, "title": d.title, "text": d.text,
			"topic": pageTopics[i%len(pageTopics)], "year": 1990 + i,
			"tags": []string{pageTags[i%len(pageTags)], pageTags[(i+1+i/4%3)%len(pageTags)]}, "open": i%3 != 0,
			"published": fmt.Sprintf("%d-%02d-15", 2018+i%4, 1+i%12),
			"_vectors":  map[string]any{pageModel: map[string]any{"dense": pageVector(d.title + " " + d.text)}},
		}
	}
	return out
}

// pageAbstracts stand in for SciFact when ../shared/data is absent.
var pageAbstracts = [][2]string{
	{"Human stem cells in tissue repair", "Stem cells of human tissue divide and repair damage after injury."},
	{"Hematopoietic stem cells and their niche", "Blood-forming stem cells live in the bone marrow niche, which controls their fate."},
	{"Obesity and insulin resistance", "Obesity links to insulin resistance and type 2 diabetes through inflammation of adipose tissue."},
	{"DNA methylation of human blood cells", "The methylome of peripheral blood mononuclear cells differs between individuals."},
	{"Glioma stem cell survival", "Targeting A20 decreases the survival of glioma stem cells and slows tumour growth."},
	{"Bayesian model complexity", "Bayesian measures of model complexity and fit compare models with different numbers of parameters."},
	{"Likelihood ratios made simple", "Likelihood ratios summarise how much a diagnostic test result changes the odds of disease."},
	{"Neural crest cells in the heart", "Cardiac neural crest cells contribute to a dormant multipotent stem cell in the heart."},
	{"Mesenchymal stem cells of the skull", "The suture is a niche for mesenchymal stem cells of craniofacial bones."},
	{"Immune escape in hepatitis C", "Loss of immune escape mutations during persistent infection in pregnancy enhances replication."},
	{"Rapamycin signalling and epilepsy", "The mammalian target of rapamycin pathway mediates epileptogenesis in a model of seizures."},
	{"Angiopoietin and organ dysfunction", "Acute administration of angiopoietin-1 ameliorates multiple organ dysfunction in sepsis."},
	{"Kidney epithelial cells in vivo", "Serial multiphoton imaging tracks the fate of glomerular epithelial cells in living mice."},
	{"Imprinting control by CTCF", "CTCF binding at an imprinting control region mediates maternally inherited chromatin structure."},
	{"Nuclear bodies assemble de novo", "A nuclear subcompartment assembles through multiple pathways and induces gene expression."},
	{"Viral microRNA regulation", "A herpesvirus noncoding RNA down-regulates a host microRNA in infected human T cells."},
	{"Replication origins under stress", "Chk1 inhibits replication factory activation but lets dormant origins fire in human cells."},
	{"White matter development in newborns", "Diffusion tensor imaging measures how cerebral white matter of human newborns develops."},
	{"Myeloid suppressor cells and myelodysplasia", "Myeloid-derived suppressor cells induce myelodysplasia in mice and in human marrow."},
	{"Gene targeting in human stem cells", "Zinc-finger nucleases target expressed and silent genes in human embryonic stem cells."},
	{"Carotid intima media thickness", "Carotid thickness and the ankle-brachial index correlate with cardiovascular risk in patients."},
	{"Visceral fat arterioles in obesity", "Arteriolar function in visceral adipose tissue is impaired in human obesity."},
	{"Growth reference curves", "Cross-sectional stature and weight reference curves describe the growth of children in the UK."},
	{"Extraction of plant DNA", "A rapid method extracts genomic DNA from cotton for restriction fragment analysis."},
	{"The sacroiliac joint", "The sacroiliac joint is inflamed early in the spondyloarthropathies."},
	{"Interferon-inducible genes", "Early interferon-inducible genes are induced in the absence of type I interferon signalling."},
	{"Serotyping microarrays", "Empirical Bayesian models analyse molecular serotyping microarrays of bacterial strains."},
	{"Myelin basic protein gene", "The human myelin basic protein gene lies within a large transcription unit."},
	{"Stop codons in alphavirus genes", "An opal termination codon preceding a viral gene modulates replication in mosquito cells."},
}

// pageHit is a hit as the API answers it.
type pageHit struct {
	ID      string         `json:"id"`
	Score   float64        `json:"score"`
	Fields  map[string]any `json:"fields"`
	Sources []struct {
		Retriever    string  `json:"retriever"`
		Rank         int     `json:"rank"`
		Score        float64 `json:"score"`
		Contribution float64 `json:"contribution"`
	} `json:"sources"`
	Highlights *tandem.Highlights `json:"highlights"`
}

// pageResult is a search's answer.
type pageResult struct {
	Hits   []pageHit      `json:"hits"`
	Facets []engine.Facet `json:"facets"`
}

// pageCall sends a JSON request and decodes the answer into out (when
// non-nil and 2xx); it returns the status and, for an error, the API's
// error message.
func pageCall(t *testing.T, method, url string, body any, out any) (int, string) {
	t.Helper()
	return pageCallKey(t, "", method, url, body, out)
}

// pageCallKey is pageCall with an API key.
func pageCallKey(t *testing.T, key, method, url string, body any, out any) (int, string) {
	t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := body.([]byte); ok {
		req.Header.Set("Content-Type", "application/x-ndjson")
	} else if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil && resp.StatusCode != http.StatusNoContent {
		t.Fatalf("%s %s: status %d, body not JSON: %v", method, url, resp.StatusCode, err)
	}
	if resp.StatusCode >= 400 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Message == "" {
			t.Fatalf("%s %s: status %d without an error message: %s", method, url, resp.StatusCode, raw)
		}
		return resp.StatusCode, e.Error.Message
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, raw)
		}
	}
	return resp.StatusCode, ""
}

// pageSearch runs body through the API and returns its hits.
func pageSearch(t *testing.T, base string, body map[string]any) []pageHit {
	t.Helper()
	return pageSearchKey(t, "", base+"/v1/collections/papers/search", body)
}

// pageSearchKey runs body through the API at url with an API key.
func pageSearchKey(t *testing.T, key, url string, body map[string]any) []pageHit {
	t.Helper()
	return pageSearchAll(t, key, url, body).Hits
}

// pageSearchAll runs body through the API at url and returns its answer.
func pageSearchAll(t *testing.T, key, url string, body map[string]any) pageResult {
	t.Helper()
	var res pageResult
	if status, msg := pageCallKey(t, key, "POST", url, body, &res); status != http.StatusOK {
		t.Fatalf("API search %v: status %d: %s", body, status, msg)
	}
	return res
}

func pageHitIDs(hits []pageHit) []string {
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	return ids
}

// pageShownHit is a hit as the page shows it: its text, the words marked
// (BM25's <mark>s, and the late-interaction matches of the query word
// shown, by document token), and the list of those matches.
type pageShownHit struct {
	ID      string            `json:"id"`
	Title   string            `json:"title"`
	Snippet string            `json:"snippet"`
	Frags   []pageShownFrag   `json:"frags"`
	Marks   []string          `json:"marks"`
	Late    map[string]string `json:"late"`
	Matched []struct {
		Doc   int     `json:"doc"`
		Score float64 `json:"score"`
		Word  string  `json:"word"`
	} `json:"matched"`
	Fields  map[string]string `json:"fields"`
	Sources []struct {
		Retriever string  `json:"retriever"`
		Width     float64 `json:"width"`
		Detail    string  `json:"detail"`
	} `json:"sources"`
}

// pageShownFrag is a stretch of the text field the page shows: a
// fragment, or the value's start.
type pageShownFrag struct {
	Start int    `json:"start"`
	Text  string `json:"text"`
}

const pageReadHitsJS = `Array.from(document.querySelectorAll('#hits .hit')).map(h => ({
	id: h.dataset.id,
	title: h.querySelector('.title').textContent,
	snippet: (h.querySelector('.snippet') || {textContent: ''}).textContent,
	frags: Array.from(h.querySelectorAll('.snippet .frag')).map(f => ({start: Number(f.dataset.start), text: f.textContent})),
	marks: Array.from(h.querySelectorAll('mark')).map(m => m.textContent),
	late: Array.from(h.querySelectorAll('.late')).reduce((o, s) => { o[s.dataset.doc] = (o[s.dataset.doc] || '') + s.textContent; return o; }, {}),
	matched: Array.from(h.querySelectorAll('.late-list:not([hidden]) .late-item')).map(i => ({
		doc: Number(i.dataset.doc), score: Number(i.dataset.score), word: i.querySelector('.late-word').textContent,
	})),
	fields: Object.fromEntries(Array.from(h.querySelectorAll('.fields [data-field]')).map(d => [d.dataset.field, d.querySelector('dd').textContent])),
	sources: Array.from(h.querySelectorAll('.source')).map(s => ({
		retriever: s.dataset.retriever,
		width: parseFloat(s.querySelector('.fill').style.width),
		detail: s.querySelector('.source-detail').textContent,
	})),
}))`

func pageShownIDs(hits []pageShownHit) []string {
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	return ids
}

// pageSetJS sets a control's value as a person would, firing input and change.
const pageSetJS = `((sel, v) => {
	const e = document.querySelector(sel);
	if (!e) return 'no element ' + sel;
	e.value = v;
	if (e.value !== v) return sel + ' has no option ' + v;
	e.dispatchEvent(new Event('input', {bubbles: true}));
	e.dispatchEvent(new Event('change', {bubbles: true}));
	return '';
})(%s, %s)`

// pageDriver drives the page in the browser for one test or subtest,
// each step under its own timeout, scaled by the test time scale
// (internal/testtime); a failure ends that test, naming the step and what
// the page's error box says.
// pageOpen starts headless Chromium for the test (each step with its own
// timeout); stop ends it and reports the page's uncaught JavaScript
// errors.
func pageOpen(t *testing.T, chrome string) (d pageDriver, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(testtime.Context(t))
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	stopAll := func() {
		cancelBrowser()
		cancelAlloc()
		cancel()
	}
	if err := chromedp.Do(bctx); err != nil {
		stopAll()
		t.Fatalf("start %s: %v", chrome, err)
	}
	jsErrors := pageExceptions(bctx)
	return pageDriver{t, bctx}, func() {
		if errs := jsErrors(); len(errs) > 0 {
			t.Errorf("uncaught JavaScript errors in the page: %q", errs)
		}
		stopAll()
	}
}

type pageDriver struct {
	t   *testing.T
	ctx context.Context // the browser's
}

func (d pageDriver) do(name string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	d.t.Helper()
	sctx, cancel := context.WithTimeout(d.ctx, testtime.D(timeout))
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		d.t.Fatalf("%s: %v (the page's message: %q)", name, err, pageMessage(d.ctx))
	}
}

// set sets a control's value as a person would, firing input and change.
func (d pageDriver) set(sel, value string) {
	d.t.Helper()
	s, _ := json.Marshal(sel)
	v, _ := json.Marshal(value)
	if problem := pageRun(d.t, d.ctx, "set "+sel, chromedp.Evaluate[string](fmt.Sprintf(pageSetJS, s, v))); problem != "" {
		d.t.Fatal(problem)
	}
}

// seq is the number of answers the page has shown (#results[data-seq]).
func (d pageDriver) seq() int {
	d.t.Helper()
	return pageRun(d.t, d.ctx, "read #results", chromedp.Evaluate[int](`Number(document.querySelector('#results').dataset.seq)`))
}

// press clicks a button that runs a search and waits for its answer; it
// returns #results' state, "done" or "error".
func (d pageDriver) press(button string) string {
	d.t.Helper()
	seq := d.seq()
	d.do("click "+button, 10*time.Second, chromedp.Click(chromedp.CSS(button)))
	return d.answered(button, seq)
}

// answered waits until the page shows an answer after the seq-th, with
// no search scheduled or under way, and returns #results' state.
func (d pageDriver) answered(what string, seq int) string {
	d.t.Helper()
	state := pageRun(d.t, d.ctx, "wait for the answer", chromedp.Poll[string](fmt.Sprintf(`(() => {
		const r = document.querySelector('#results');
		return Number(r.dataset.seq) > %d && r.dataset.state !== 'loading' && !r.dataset.pending ? r.dataset.state : null;
	})()`, seq), chromedp.WithPollingInterval(20*time.Millisecond)))
	if state == "error" {
		// Say why, for the caller that did not expect it.
		d.t.Logf("%s: state %q, #error %q", what, state, d.eval(`document.querySelector('#error').textContent`))
	}
	return state
}

// typeQuery empties the query box (quietly: no input event, so no search
// of the empty box), types text key by key and waits for the page's
// answer to it.
func (d pageDriver) typeQuery(text string) string {
	d.t.Helper()
	d.eval(`(q => { q.value = ''; return ''; })(document.querySelector('#query'))`)
	seq := d.seq()
	d.do("type "+text, 10*time.Second, chromedp.SendKeys(chromedp.CSS("#query"), text))
	return d.answered("type "+text, seq)
}

func (d pageDriver) shown() []pageShownHit {
	d.t.Helper()
	return pageRun(d.t, d.ctx, "read hits", chromedp.Evaluate[[]pageShownHit](pageReadHitsJS))
}

func (d pageDriver) eval(expr string) string {
	d.t.Helper()
	return pageRun(d.t, d.ctx, expr, chromedp.Evaluate[string](expr))
}

// screenshot saves the whole page as name in $TANDEM_SCREENSHOT_DIR,
// else in tandem-screenshots under the temporary directory: kept after
// the test (unlike t.TempDir), for a person to look at.
func (d pageDriver) screenshot(name string) {
	d.t.Helper()
	dir := os.Getenv("TANDEM_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "tandem-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		d.t.Fatal(err)
	}
	png := pageRun(d.t, d.ctx, "screenshot", chromedp.FullScreenshot(100))
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		d.t.Fatal(err)
	}
	d.t.Logf("screenshot: %s", path)
}

// The test server's limits: a query of at most 64 bytes, k+offset at
// most 40 and a filter of at most 8 clauses, which the page learns from
// the collection's description and keeps to.
const (
	pageMaxQuery   = 64
	pageMaxK       = 40
	pageMaxClauses = 8
)

func TestPageInBrowser(t *testing.T) {
	chrome := pageBrowser()
	if chrome == "" {
		t.Skip("no chromium on PATH (chromium, chromium-browser or google-chrome): run scripts/setup-browser.sh, which make test runs")
	}

	s, err := New(&Config{DataDir: t.TempDir(), MaxQuery: pageMaxQuery, MaxK: pageMaxK, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Engine: engine.Options{NoSync: true, EncoderThreads: 1, FilterLimits: filter.Limits{MaxClauses: pageMaxClauses}}})
	if err != nil {
		t.Fatal(err)
	}
	// searches counts the search requests that reach the server, and
	// hold delays some of them.
	var searches atomic.Int64
	var hold pageHold
	h := s.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/search") {
			searches.Add(1)
			hold.wait(r)
		}
		h.ServeHTTP(w, r)
	}))
	defer func() {
		srv.Close()
		if err := s.Close(); err != nil {
			t.Errorf("close server: %v", err)
		}
	}()
	base := srv.URL

	// The collection, through the API.
	if status, msg := pageCall(t, "PUT", base+"/v1/collections/papers", map[string]any{"schema": pageSchema}, nil); status != http.StatusCreated {
		t.Fatalf("create collection: status %d: %s", status, msg)
	}
	docs := pageDocs(t)
	var ndjson bytes.Buffer
	for _, d := range docs {
		line, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		ndjson.Write(line)
		ndjson.WriteByte('\n')
	}
	var ingest struct {
		Indexed int `json:"indexed"`
		Failed  int `json:"failed"`
	}
	if status, msg := pageCall(t, "POST", base+"/v1/collections/papers/documents", ndjson.Bytes(), &ingest); status != http.StatusOK || ingest.Indexed != len(docs) || ingest.Failed != 0 {
		t.Fatalf("index: status %d %s, %+v of %d documents", status, msg, ingest, len(docs))
	}

	// The browser: headless Debian chromium, as root in a container, for
	// as long as the test (each step has its own timeout).
	d, stopPage := pageOpen(t, chrome)
	defer stopPage()
	bctx := d.ctx

	// The page lists the collection and, once it is picked, its
	// retrievers; it keeps k within the server's --max-k.
	d.do("open the page", 30*time.Second,
		chromedp.Navigate(base+"/"),
		chromedp.Poll[chromedp.Void](`document.querySelector('#collection option[value="papers"]')`),
	)
	d.set("#collection", "papers")
	d.do("wait for the collection", 20*time.Second, chromedp.Poll[chromedp.Void](`document.body.dataset.info === 'papers' || null`))
	modes := pageRun(t, bctx, "read modes", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#mode option')).map(o => o.value)`))
	if want := []string{"hybrid", "bm25", "dense:" + pageModel}; !slices.Equal(modes, want) {
		t.Errorf("modes %v, want %v", modes, want)
	}
	kOpts := pageRun(t, bctx, "read k", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#k option:not(:disabled)')).map(o => o.value)`))
	if want := []string{"5", "10", "20"}; !slices.Equal(kOpts, want) {
		t.Errorf("k offers %v with --max-k %d, want %v", kOpts, pageMaxK, want)
	}

	// BM25: the page's hits are the API's, in order, with title, the
	// text's fragments and exactly the API's marked words.
	const query = "human stem cells"
	d.set("#mode", "bm25")
	d.set("#k", "5")
	if state := d.typeQuery(query); state != "done" {
		t.Fatalf("bm25 search: state %q", state)
	}
	got := d.shown()
	want := pageSearch(t, base, pageBody(query, 0, nil, "bm25"))
	if len(want) != 5 || !slices.Equal(pageShownIDs(got), pageHitIDs(want)) {
		t.Fatalf("bm25: page shows %v, API answers %v", pageShownIDs(got), pageHitIDs(want))
	}
	for i, h := range got {
		w := want[i]
		if h.Title != w.Fields["title"] {
			t.Errorf("hit %s: title %q, want %q", h.ID, h.Title, w.Fields["title"])
		}
		pageCheckHighlights(t, h, w)
		if h.Fields["topic"] != w.Fields["topic"] || h.Fields["year"] != fmt.Sprint(w.Fields["year"]) {
			t.Errorf("hit %s: fields %v, API's %v", h.ID, h.Fields, w.Fields)
		}
		if len(h.Sources) != 1 || h.Sources[0].Retriever != "bm25" || math.Abs(h.Sources[0].Width-100) > 0.1 {
			t.Errorf("hit %s: sources %+v, want one bm25 bar at 100%%", h.ID, h.Sources)
		}
	}
	// The document with markup in its text is shown as text, never run.
	if pwned := pageRun(t, bctx, "check markup", chromedp.Evaluate[bool](`window.__pwned !== undefined || document.querySelector('#hits img, #hits script, #hits b, #hits i') !== null`)); pwned {
		t.Error("a document's markup became HTML in the page")
	}
	if i := slices.Index(pageShownIDs(got), "markup"); i < 0 {
		t.Errorf("the document with markup is not among the hits %v", pageShownIDs(got))
	} else if !strings.Contains(got[i].Title, "<b>cells</b>") || !strings.Contains(got[i].Snippet, "<script>") {
		t.Errorf("markup document shown as %q / %q, want its markup as text", got[i].Title, got[i].Snippet)
	}

	pageCheckTyping(t, d, base, &searches, &hold)
	pageCheckQueryLimit(t, d, base)

	// Hybrid: the query's vector in the expert box, min-max fusion, and a
	// filter from the builder: topic = beta and year >= 2000.
	qv, _ := json.Marshal(map[string]any{pageModel: map[string]any{"dense": pageVector(query)}})
	d.set("#mode", "hybrid")
	d.set("#fusion", "minmax")
	// Without the external model's query vector, which the server would
	// ask for, the page says so and sends nothing.
	n0 := searches.Load()
	d.do("search without the query vector", 10*time.Second, chromedp.Click(chromedp.CSS("#search")))
	if msg := d.eval(`document.querySelector('#error-message').textContent`); !strings.Contains(msg, "dense:"+pageModel) || !strings.Contains(msg, "query vector") {
		t.Errorf("hybrid without the query vector: #error-message %q, want the page to ask for dense:%s's vector", msg, pageModel)
	}
	if n := searches.Load() - n0; n != 0 {
		t.Errorf("hybrid without the query vector: the page sent %d searches", n)
	}
	d.do("open the raw boxes", 10*time.Second, chromedp.Click(chromedp.CSS("#advanced summary")))
	d.set("#vectors", string(qv))
	d.do("add two filter rows", 10*time.Second,
		chromedp.Click(chromedp.CSS("#filter-add")),
		chromedp.Click(chromedp.CSS("#filter-add")),
		chromedp.WaitVisible(chromedp.CSS(`#filter-rows .filter-row:nth-child(2) .filter-field`)),
	)
	d.set("#filter-rows .filter-row:nth-child(1) .filter-field", "topic")
	d.set("#filter-rows .filter-row:nth-child(1) .filter-op", "eq")
	d.set("#filter-rows .filter-row:nth-child(1) .filter-value", "beta")
	d.set("#filter-rows .filter-row:nth-child(2) .filter-field", "year")
	d.set("#filter-rows .filter-row:nth-child(2) .filter-op", "gte")
	d.set("#filter-rows .filter-row:nth-child(2) .filter-value", "2000")
	d.set("#query", query)
	filter := map[string]any{"and": []any{
		map[string]any{"term": map[string]any{"topic": "beta"}},
		map[string]any{"range": map[string]any{"year": map[string]any{"gte": 2000}}},
	}}
	preview := d.eval(`document.querySelector('#filter-json').textContent`)
	if wantJSON, _ := json.Marshal(filter); preview != string(wantJSON) {
		t.Errorf("filter preview %s, want %s", preview, wantJSON)
	}
	vec := pageVector(query)
	hybrid := func(offset int) map[string]any {
		b := pageBody(query, offset, filter, "bm25", "dense:"+pageModel)
		b["fusion"] = "minmax"
		b["vectors"] = map[string]any{pageModel: map[string]any{"dense": vec}}
		b["facets"] = pageFacets("topic", "year")
		return b
	}
	if state := d.press("#search"); state != "done" {
		t.Fatalf("filtered hybrid search: state %q", state)
	}
	got = d.shown()
	res := pageSearchAll(t, "", base+"/v1/collections/papers/search", hybrid(0))
	want = res.Hits
	if len(want) != 5 || !slices.Equal(pageShownIDs(got), pageHitIDs(want)) {
		t.Fatalf("filtered hybrid: page shows %v, API answers %v", pageShownIDs(got), pageHitIDs(want))
	}
	checkFiltered := func(got []pageShownHit, want []pageHit) {
		t.Helper()
		for i, h := range got {
			year, err := strconv.Atoi(h.Fields["year"])
			if err != nil || year < 2000 || h.Fields["topic"] != "beta" || want[i].Fields["topic"] != "beta" || want[i].Fields["year"].(float64) < 2000 {
				t.Errorf("hit %s breaks the filter: page %v, API %v", h.ID, h.Fields, want[i].Fields)
			}
			if len(h.Sources) != 2 {
				t.Errorf("hit %s: %d bars, want bm25 and dense", h.ID, len(h.Sources))
				continue
			}
			for j, s := range h.Sources {
				ws := want[i].Sources[j]
				share := 100 * ws.Contribution / want[i].Score
				if s.Retriever != ws.Retriever || math.Abs(s.Width-share) > 0.1 {
					t.Errorf("hit %s: bar %s %.1f%%, API's %s %.1f%%", h.ID, s.Retriever, s.Width, ws.Retriever, share)
				}
				if ws.Rank > 0 && !strings.Contains(s.Detail, fmt.Sprintf("rank %d ", ws.Rank)) {
					t.Errorf("hit %s: bar %s says %q, API's rank %d", h.ID, s.Retriever, s.Detail, ws.Rank)
				}
			}
		}
	}
	checkFiltered(got, want)
	// The facets beside the rows are the API's counts for the same
	// request: topic's without its own row (disjunctive), so that alpha
	// and gamma still show.
	pageCheckFacets(t, d, res.Facets)
	if f := res.Facets[0]; f.Field != "topic" || len(f.Values) != 3 {
		t.Errorf("disjunctive topic facet %+v: want its three values", f)
	}
	d.screenshot("page.png")

	// Paging: next shows the API's second page, previous the first again.
	if state := d.press("#next"); state != "done" {
		t.Fatalf("next page: state %q", state)
	}
	got = d.shown()
	want = pageSearch(t, base, hybrid(5))
	if len(want) == 0 || !slices.Equal(pageShownIDs(got), pageHitIDs(want)) {
		t.Fatalf("page 2: page shows %v, API answers %v", pageShownIDs(got), pageHitIDs(want))
	}
	checkFiltered(got, want)
	nextDisabled := pageRun(t, bctx, "read #next", chromedp.Evaluate[bool](`document.querySelector('#next').disabled`))
	if len(want) < 5 && !nextDisabled {
		t.Errorf("page 2 holds %d of 5 hits, yet #next is enabled", len(want))
	}
	if state := d.press("#prev"); state != "done" {
		t.Fatalf("previous page: state %q", state)
	}
	if got, want := pageShownIDs(d.shown()), pageHitIDs(pageSearch(t, base, hybrid(0))); !slices.Equal(got, want) {
		t.Fatalf("back on page 1: page shows %v, API answers %v", got, want)
	}

	// Picking facet values adds them to the filter rows and searches.
	filter = pageCheckFacetPicks(t, d, base, hybrid(0))

	// An invalid raw filter: the page shows the API's message.
	d.set("#filter-raw", `{"term": {"colour": "red"}}`)
	if state := d.press("#search"); state != "error" {
		t.Fatalf("invalid filter: state %q, want error", state)
	}
	bad := hybrid(0)
	bad["filter"] = map[string]any{"and": append(slices.Clone(filter["and"].([]any)), map[string]any{"term": map[string]any{"colour": "red"}})}
	bad["facets"] = pageFacets("topic", "year", "published")
	status, apiMsg := pageCall(t, "POST", base+"/v1/collections/papers/search", bad, nil)
	if status != http.StatusBadRequest || !strings.Contains(apiMsg, "colour") {
		t.Fatalf("API on an unknown filter field: status %d %q", status, apiMsg)
	}
	errHidden := pageRun(t, bctx, "read #error", chromedp.Evaluate[bool](`document.querySelector('#error').hidden`))
	msg := d.eval(`document.querySelector('#error-message').textContent`)
	hitCount := pageRun(t, bctx, "count hits", chromedp.Evaluate[int](`document.querySelectorAll('#hits .hit').length`))
	if errHidden || msg != apiMsg {
		t.Errorf("#error hidden=%v shows %q, want the API's %q", errHidden, msg, apiMsg)
	}
	if hitCount != 0 {
		t.Errorf("%d hits still shown after a failed search", hitCount)
	}
	d.screenshot("error.png")

	// A filter over the server's --max-filter-clauses: the page says so
	// and sends nothing.
	n0 = searches.Load()
	d.set("#filter-raw", `{"terms": {"topic": ["a", "b", "c", "d", "e", "f", "g", "h", "i"]}}`)
	d.do("search over the clause limit", 10*time.Second, chromedp.Click(chromedp.CSS("#search")))
	if msg := d.eval(`document.querySelector('#error-message').textContent`); !strings.Contains(msg, fmt.Sprintf("14 clauses, over the server's limit of %d (--max-filter-clauses)", pageMaxClauses)) {
		t.Errorf("a filter of 14 clauses: #error-message %q, want the page to name the limit", msg)
	}
	if n := searches.Load() - n0; n != 0 {
		t.Errorf("a filter over the limit: the page sent %d searches", n)
	}
	d.set("#filter-raw", "")

	// Late interaction, with the installed default model.
	t.Run("late", func(t *testing.T) { pageCheckLate(t, pageDriver{t, bctx}, base) })

	// A server that is gone: the page says so.
	srv.Close()
	if state := d.press("#search"); state != "error" {
		t.Fatalf("server gone: state %q, want error", state)
	}
	code := d.eval(`document.querySelector('#error-code').textContent`)
	if !strings.HasPrefix(code, "network") {
		t.Errorf("server gone: #error-code %q, want network", code)
	}

	// A server with keys: without one the page shows the API's 401
	// message; with the read key typed in the key box (and kept in
	// localStorage) it lists and searches.
	ks, err := New(&Config{DataDir: t.TempDir(), AdminKeys: []string{"admin-secret"}, ReadKeys: []string{"read-secret"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Engine: engine.Options{NoSync: true}})
	if err != nil {
		t.Fatal(err)
	}
	ksrv := httptest.NewServer(ks.Handler())
	defer func() {
		ksrv.Close()
		if err := ks.Close(); err != nil {
			t.Errorf("close keyed server: %v", err)
		}
	}()
	if status, msg := pageCallKey(t, "admin-secret", "PUT", ksrv.URL+"/v1/collections/keyed", map[string]any{}, nil); status != http.StatusCreated {
		t.Fatalf("create keyed collection: status %d: %s", status, msg)
	}
	var plain bytes.Buffer
	for _, d := range docs {
		line, _ := json.Marshal(map[string]any{"_id": d["_id"], "title": d["title"], "text": d["text"]})
		plain.Write(line)
		plain.WriteByte('\n')
	}
	if status, msg := pageCallKey(t, "admin-secret", "POST", ksrv.URL+"/v1/collections/keyed/documents", plain.Bytes(), &ingest); status != http.StatusOK || ingest.Failed != 0 {
		t.Fatalf("index keyed: status %d %s, %+v", status, msg, ingest)
	}
	status, apiMsg = pageCall(t, "GET", ksrv.URL+"/v1/collections", nil, nil)
	if status != http.StatusUnauthorized {
		t.Fatalf("keyed server without a key: status %d", status)
	}
	d.do("open the keyed server's page", 30*time.Second,
		chromedp.Navigate(ksrv.URL+"/"),
		chromedp.Poll[chromedp.Void](`!document.querySelector('#error').hidden`),
	)
	if msg := d.eval(`document.querySelector('#error-message').textContent`); !strings.Contains(msg, apiMsg) {
		t.Errorf("no key: #error-message %q, want the API's %q", msg, apiMsg)
	}
	d.set("#api-key", "read-secret")
	d.do("save the key", 30*time.Second,
		chromedp.Click(chromedp.CSS("#api-key-save")),
		chromedp.Poll[chromedp.Void](`document.querySelector('#mode option[value="bm25"]') && document.querySelector('#error').hidden`),
	)
	d.do("reload", 30*time.Second,
		chromedp.Navigate(ksrv.URL+"/"),
		chromedp.Poll[chromedp.Void](`document.querySelector('#mode option[value="bm25"]') && document.querySelector('#error').hidden`),
	)
	if key := d.eval(`document.querySelector('#api-key').value`); key != "read-secret" {
		t.Errorf("after a reload the key box holds %q", key)
	}
	d.set("#query", query)
	if state := d.press("#search"); state != "done" {
		t.Fatalf("keyed search: state %q", state)
	}
	want = pageSearchKey(t, "read-secret", ksrv.URL+"/v1/collections/keyed/search", map[string]any{"text": query, "k": 10, "retrievers": []string{"bm25"}})
	if got := pageShownIDs(d.shown()); len(want) == 0 || !slices.Equal(got, pageHitIDs(want)) {
		t.Errorf("keyed: page shows %v, API answers %v", got, pageHitIDs(want))
	}
}

// pageRun runs one action in the page under a timeout (30 s, scaled by
// the test time scale); a failure ends the test, naming the step.
func pageRun[T any](t *testing.T, ctx context.Context, name string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, testtime.D(30*time.Second))
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v (the page's message: %q)", name, err, pageMessage(ctx))
	}
	return v
}

// pageMessage returns what #error shows, if anything, to explain a step
// that failed.
func pageMessage(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), testtime.D(5*time.Second))
	defer cancel()
	msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const e = document.querySelector('#error');
		return e && !e.hidden ? e.textContent.trim().replace(/\s+/g, ' ') : ''; })()`))
	return msg
}

// pageExceptions collects the page's uncaught exceptions and unhandled
// rejections; the returned func stops collecting and returns them.
func pageExceptions(ctx context.Context) func() []string {
	ctx, cancel := context.WithCancel(ctx)
	msgs := chromedp.Console(ctx)
	var errs []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() {
				errs = append(errs, m.String())
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		return errs
	}
}
