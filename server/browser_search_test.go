package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chromedp/chromedp"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// The steps of TestPageInBrowser that check what the page asks the API
// beyond hits: facets, highlights, the late-interaction explanation, and
// searching as a person types within the server's limits.

// pageBody is the search the page sends the papers collection for text:
// k 5, its highlight and facets, and filter unless nil.
func pageBody(text string, offset int, filter map[string]any, retrievers ...string) map[string]any {
	b := map[string]any{"text": text, "k": 5, "offset": offset, "retrievers": retrievers,
		"highlight": map[string]any{"fields": []string{"title", "text"}, "fragment_size": 120, "fragments": 2},
		"facets":    pageFacets()}
	if filter != nil {
		b["filter"] = filter
	}
	return b
}

// pageFacets are the facets the page asks of the papers collection: the
// values of its keyword, keywords and bool fields and the years of its
// date (not the number), disjunctive for the fields the rows constrain.
func pageFacets(constrained ...string) []map[string]any {
	var out []map[string]any
	for _, f := range []string{"topic", "tags", "open", "published"} {
		r := map[string]any{"field": f}
		if f == "published" {
			r["date_interval"] = "year"
		}
		if slices.Contains(constrained, f) {
			r["disjunctive"] = true
		}
		out = append(out, r)
	}
	return out
}

// pageCheckHighlights checks that the page marks exactly the API's
// marked words in a hit's title and text, and shows the text's fragments
// (or, without any, the start of the text).
func pageCheckHighlights(t *testing.T, h pageShownHit, w pageHit) {
	t.Helper()
	var marks []string
	if w.Highlights != nil {
		for _, f := range []string{"title", "text"} {
			for _, fr := range w.Highlights.Fields[f] {
				r := []rune(fr.Text)
				for _, m := range fr.Marks {
					marks = append(marks, string(r[m.Start:m.End]))
				}
			}
		}
	}
	if len(marks) == 0 || !slices.Equal(h.Marks, marks) {
		t.Errorf("hit %s: marked %q, the API's marks %q", h.ID, h.Marks, marks)
	}
	text, _ := w.Fields["text"].(string)
	if w.Highlights == nil || len(w.Highlights.Fields["text"]) == 0 {
		if len(h.Frags) != 1 || h.Frags[0].Start != 0 || utf8.RuneCountInString(h.Frags[0].Text) > 240 || !strings.HasPrefix(text, h.Frags[0].Text) {
			t.Errorf("hit %s without text fragments shows %+v, want the start of its text, at most 240 characters", h.ID, h.Frags)
		}
		return
	}
	var frags []pageShownFrag
	for _, fr := range w.Highlights.Fields["text"] {
		frags = append(frags, pageShownFrag{Start: fr.Start, Text: fr.Text})
	}
	if !slices.Equal(h.Frags, frags) {
		t.Errorf("hit %s: fragments %+v, the API's %+v", h.ID, h.Frags, frags)
	}
}

// pageShownFacet is a facet as the panel shows it.
type pageShownFacet struct {
	Field string `json:"field"`
	Kind  string `json:"kind"`
	Items []struct {
		Label  string `json:"label"`
		Count  int64  `json:"count"`
		Picked bool   `json:"picked"`
	} `json:"items"`
	Rest string `json:"rest"`
}

const pageReadFacetsJS = `document.querySelector('#facets').hidden ? null :
Array.from(document.querySelectorAll('#facet-list .facet')).map(s => ({
	field: s.dataset.field, kind: s.dataset.kind,
	items: Array.from(s.querySelectorAll('.facet-item')).map(b => ({
		label: b.dataset.label, count: Number(b.dataset.count), picked: b.getAttribute('aria-pressed') === 'true'})),
	rest: (s.querySelector('.facet-rest') || {textContent: ''}).textContent,
}))`

// pageCheckFacets checks that the panel shows the API's facets, every
// value and bucket with its count, and what they leave out; it returns
// them as shown.
func pageCheckFacets(t *testing.T, d pageDriver, want []engine.Facet) []pageShownFacet {
	t.Helper()
	got := pageRun(t, d.ctx, "read facets", chromedp.Evaluate[[]pageShownFacet](pageReadFacetsJS))
	if len(got) != len(want) {
		t.Fatalf("page shows %d facets %+v, the API answers %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		type item struct {
			label string
			count int64
		}
		var gi, wi []item
		for _, it := range g.Items {
			gi = append(gi, item{it.Label, it.Count})
		}
		for _, v := range w.Values {
			wi = append(wi, item{fmt.Sprint(v.Value), v.Count})
		}
		for _, b := range w.Buckets {
			label := b.Key
			if from, _ := b.From.(string); strings.HasSuffix(from, "-01-01T00:00:00Z") {
				label = strings.TrimSuffix(from, "-01-01T00:00:00Z")
			}
			wi = append(wi, item{label, b.Count})
		}
		var rest []string
		if w.OtherValues > 0 {
			rest = append(rest, fmt.Sprintf("%d more values (%d documents)", w.OtherValues, w.Other))
		}
		if w.Missing > 0 {
			rest = append(rest, fmt.Sprintf("%d without a value", w.Missing))
		}
		if g.Field != w.Field || g.Kind != w.Kind || !slices.Equal(gi, wi) || g.Rest != strings.Join(rest, " · ") {
			t.Errorf("facet %d: page shows %s (%s) %v %q; API answers %s (%s) %v %q", i, g.Field, g.Kind, gi, g.Rest, w.Field, w.Kind, wi, strings.Join(rest, " · "))
		}
	}
	return got
}

// pageCheckFacetPicks picks facet values in the panel, as a person would,
// and checks that each lands in the filter rows, that the search reruns
// under it and that the counts are the API's; body is the search the
// page sends before. It returns the filter the rows hold at the end.
func pageCheckFacetPicks(t *testing.T, d pageDriver, base string, body map[string]any) map[string]any {
	t.Helper()
	url := base + "/v1/collections/papers/search"
	before := pageSearchAll(t, "", url, body)

	// Another topic: the row becomes "any of" both, and topic's counts,
	// disjunctive, do not move.
	if state := d.press(`#facet-list .facet[data-field="topic"] .facet-item[data-label="gamma"]`); state != "done" {
		t.Fatalf("pick topic gamma: state %q", state)
	}
	filter := map[string]any{"and": []any{
		map[string]any{"terms": map[string]any{"topic": []string{"beta", "gamma"}}},
		map[string]any{"range": map[string]any{"year": map[string]any{"gte": 2000}}},
	}}
	pageCheckPreview(t, d, filter)
	body["filter"] = filter
	res := pageSearchAll(t, "", url, body)
	got := d.shown()
	if len(res.Hits) == 0 || !slices.Equal(pageShownIDs(got), pageHitIDs(res.Hits)) {
		t.Fatalf("topic beta or gamma: page shows %v, API answers %v", pageShownIDs(got), pageHitIDs(res.Hits))
	}
	for _, h := range got {
		if h.Fields["topic"] != "beta" && h.Fields["topic"] != "gamma" {
			t.Errorf("hit %s: topic %q, picked beta or gamma", h.ID, h.Fields["topic"])
		}
	}
	shown := pageCheckFacets(t, d, res.Facets)
	if !slices.EqualFunc(res.Facets[0].Values, before.Facets[0].Values, func(a, b engine.FacetValue) bool { return a == b }) {
		t.Errorf("disjunctive topic counts moved when a topic was picked: %v, then %v", before.Facets[0].Values, res.Facets[0].Values)
	}
	for _, it := range shown[0].Items {
		if it.Picked != (it.Label == "beta" || it.Label == "gamma") {
			t.Errorf("topic %s shown picked=%v", it.Label, it.Picked)
		}
	}

	// A year of the date histogram: rows >= its start and < its end.
	var year engine.FacetBucket
	for _, f := range res.Facets {
		if f.Field == "published" && len(f.Buckets) > 0 {
			year = f.Buckets[len(f.Buckets)-1]
		}
	}
	label := strings.TrimSuffix(year.From.(string), "-01-01T00:00:00Z")
	if state := d.press(fmt.Sprintf(`#facet-list .facet[data-field="published"] .facet-item[data-label="%s"]`, label)); state != "done" {
		t.Fatalf("pick published %s: state %q", label, state)
	}
	filter["and"] = append(filter["and"].([]any),
		map[string]any{"range": map[string]any{"published": map[string]any{"gte": year.From}}},
		map[string]any{"range": map[string]any{"published": map[string]any{"lt": year.To}}})
	pageCheckPreview(t, d, filter)
	body["facets"] = pageFacets("topic", "year", "published")
	res = pageSearchAll(t, "", url, body)
	got = d.shown()
	if len(res.Hits) == 0 || !slices.Equal(pageShownIDs(got), pageHitIDs(res.Hits)) {
		t.Fatalf("published in %s: page shows %v, API answers %v", label, pageShownIDs(got), pageHitIDs(res.Hits))
	}
	for _, h := range got {
		if !strings.HasPrefix(h.Fields["published"], label+"-") {
			t.Errorf("hit %s: published %q, picked %s", h.ID, h.Fields["published"], label)
		}
	}
	pageCheckFacets(t, d, res.Facets)
	d.screenshot("facets.png")
	return filter
}

// pageCheckPreview checks the filter the page shows it will send.
func pageCheckPreview(t *testing.T, d pageDriver, filter map[string]any) {
	t.Helper()
	want, _ := jsonString(filter)
	if got := d.eval(`document.querySelector('#filter-json').textContent`); got != want {
		t.Errorf("filter preview %s, want %s", got, want)
	}
}

// pageHold holds the server's answers to the searches of one query text
// until the page has moved on: until a search of another text reaches the
// server after one of the held text did, or the client gives up on the
// held one (the page aborts it when it starts a newer search). Holding
// on that signal rather than for a while, the answer comes after the
// page moved on however slowly the page types and searches.
type pageHold struct {
	mu struct {
		sync.Mutex
		text    string        // the held text; "" holds nothing
		arrived chan struct{} // closed once a search of text reached the server
		release chan struct{} // closed once the page has moved on, or by stop
	}
	done atomic.Int64 // searches held, then answered or given up
}

// hold holds the searches of text from now on. arrived is closed once
// one reaches the server; stop holds nothing more and answers any held
// search still waiting.
func (h *pageHold) hold(text string) (arrived <-chan struct{}, stop func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.text, h.mu.arrived, h.mu.release = text, make(chan struct{}), make(chan struct{})
	release := h.mu.release
	return h.mu.arrived, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.mu.text = ""
		closeOnce(release)
	}
}

// closeOnce closes c unless it is closed; its caller holds the lock that
// guards c.
func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

func (h *pageHold) wait(r *http.Request) {
	if r.Method != http.MethodPost {
		return
	}
	h.mu.Lock()
	text, arrived, release := h.mu.text, h.mu.arrived, h.mu.release
	h.mu.Unlock()
	if text == "" {
		return
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var b struct {
		Text string `json:"text"`
	}
	if err != nil || json.Unmarshal(body, &b) != nil {
		return
	}
	h.mu.Lock()
	if b.Text == text {
		closeOnce(arrived)
	} else if isClosed(arrived) {
		closeOnce(release) // the page moved on
	}
	h.mu.Unlock()
	if b.Text != text {
		return
	}
	select {
	case <-release:
	case <-r.Context().Done():
	}
	h.done.Add(1)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pageCheckTyping types a query key by key, a key every 50 ms as a quick
// typist does, pausing once: after "stem", until the page has searched
// it, and the server holds that answer until the page has moved on to
// the rest. The page must send fewer searches than keys were pressed
// (two, the pause's and the final text's, when no other pause reached
// its 250 ms), and show the final text's results only, the API's: never
// the answer to "stem", which comes after the page moved on.
func pageCheckTyping(t *testing.T, d pageDriver, base string, searches *atomic.Int64, hold *pageHold) {
	t.Helper()
	const first, rest = "stem", " cell"
	text := first + rest
	d.eval(`(q => { q.value = ''; return ''; })(document.querySelector('#query'))`)
	// The page's searches are counted as it sends them (an aborted one
	// may never reach the server) and noted, by text, once each ends
	// (answered, or the error's name: AbortError when the page gave up
	// on it), the keys as they reach it, and the answers as it shows them.
	d.eval(`(() => { window.__shown = []; window.__sent = 0; window.__keys = []; window.__ended = {};
		const r = document.querySelector('#results');
		new MutationObserver(() => window.__shown.push(r.dataset.text)).observe(r, {attributes: true, attributeFilter: ['data-seq']});
		document.querySelector('#query').addEventListener('input', () => window.__keys.push(performance.now()));
		const fetch = window.fetch;
		window.fetch = function (url, init) {
			const p = fetch.apply(this, arguments);
			if (String(url).endsWith('/search')) {
				window.__sent++;
				let text = null;
				try { text = JSON.parse(init.body).text; } catch (e) {}
				p.then(r => r.clone().text()).then(() => 'answered', e => e.name).then(how => { window.__ended[text] = how; });
			}
			return p;
		};
		return ''; })()`)
	arrived, stop := hold.hold(first)
	defer stop()
	n0, held0, seq := searches.Load(), hold.done.Load(), d.seq()
	d.do("focus the query", 10*time.Second, chromedp.Focus(chromedp.CSS("#query")))
	typeKeys := func(s string) {
		for _, r := range s {
			d.do("type "+string(r), 10*time.Second, chromedp.KeyEvent(string(r)), chromedp.Sleep(50*time.Millisecond))
		}
	}
	typeKeys(first)
	// The pause: until the page's search of "stem" reaches the server.
	select {
	case <-arrived:
	case <-time.After(testtime.D(30 * time.Second)):
		t.Fatalf("typed %q and paused %v: the page's search of it has not reached the server", first, testtime.D(30*time.Second))
	}
	typeKeys(rest)
	if state := d.answered("type", seq); state != "done" {
		t.Fatalf("typed %q: state %q", text, state)
	}
	// Until the held answer to "stem" is given or given up, and the
	// page's search of it has ended, so that the page has taken its
	// answer if it would.
	testtime.Until(t, 30*time.Second, 20*time.Millisecond, fmt.Sprintf("the held answer to %q given or given up", first), func() error {
		if hold.done.Load() == held0 {
			return errors.New("still held")
		}
		return nil
	})
	firstJS, _ := json.Marshal(first)
	ended := pageRun(t, d.ctx, "wait for the page's search of "+first+" to end", chromedp.Poll[string](fmt.Sprintf(`window.__ended[%s] || null`, firstJS), chromedp.WithPollingInterval(20*time.Millisecond)))

	sent := pageRun(t, d.ctx, "count searches", chromedp.Evaluate[int64](`window.__sent`))
	n := searches.Load() - n0
	keys := pageRun(t, d.ctx, "time the keys", chromedp.Evaluate[[]float64](`window.__keys`))
	gap := 0.0 // the longest pause between keys, the deliberate one aside
	for i := 1; i < len(keys); i++ {
		if i != len(first) {
			gap = max(gap, keys[i]-keys[i-1])
		}
	}
	t.Logf("typing %d keys, at most %.0f ms apart but for one pause: the page sent %d searches, %d reached the server; its search of %q ended: %s", len(text), gap, sent, n, first, ended)
	quick := gap < 200 // else the page may rightly have searched once more
	if sent < 2 || sent >= int64(len(text)) || n > sent || (quick && sent != 2) {
		t.Errorf("typing %d keys with one pause: the page sent %d searches and the server saw %d, want 2 (at least 2 and fewer than the keys on a machine that stalled)", len(text), sent, n)
	}
	shownTexts := pageRun(t, d.ctx, "read answers", chromedp.Evaluate[[]string](`window.__shown`))
	if slices.Contains(shownTexts, first) || len(shownTexts) == 0 || shownTexts[len(shownTexts)-1] != text || (quick && len(shownTexts) != 1) {
		t.Errorf("typed %q (keys at most %.0f ms apart): the page showed answers for %q, want the final text's only", text, gap, shownTexts)
	}
	want := pageSearch(t, base, pageBody(text, 0, nil, "bm25"))
	if got := pageShownIDs(d.shown()); len(want) == 0 || !slices.Equal(got, pageHitIDs(want)) {
		t.Errorf("typed %q: page shows %v, API answers %v", text, got, pageHitIDs(want))
	}
}

func ptr[T any](v T) *T { return &v }

// pageCheckQueryLimit types a query over the server's --max-query: the
// page sends its longest prefix within the limit, whole characters, and
// says so, and the server answers.
func pageCheckQueryLimit(t *testing.T, d pageDriver, base string) {
	t.Helper()
	long := strings.Repeat("cellules souches é ", 5)
	cut := long
	for len(cut) > pageMaxQuery {
		_, size := utf8.DecodeLastRuneInString(cut)
		cut = cut[:len(cut)-size]
	}
	d.set("#query", long)
	if state := d.press("#search"); state != "done" {
		t.Fatalf("query of %d bytes: state %q, want the page to send %d bytes", len(long), state, len(cut))
	}
	if sent := d.eval(`document.querySelector('#results').dataset.text`); sent != cut {
		t.Errorf("query of %d bytes: the page sent %q (%d bytes), want %q", len(long), sent, len(sent), cut)
	}
	if note := d.eval(`(n => n.hidden ? '' : n.textContent)(document.querySelector('#query-note'))`); !strings.Contains(note, fmt.Sprint(pageMaxQuery, " bytes")) || !strings.Contains(note, "--max-query") {
		t.Errorf("query note %q: want it to say the query was cut at %d bytes (--max-query)", note, pageMaxQuery)
	}
	want := pageSearch(t, base, pageBody(cut, 0, nil, "bm25"))
	if got := pageShownIDs(d.shown()); !slices.Equal(got, pageHitIDs(want)) {
		t.Errorf("cut query: page shows %v, API answers %v", got, pageHitIDs(want))
	}
}

// pageNotes are the late-interaction collection's documents.
var pageNotes = []map[string]any{
	{"_id": "cat", "title": "Cats", "text": "A small domesticated feline that purrs and chases mice.", "kind": "animal", "year": 2001},
	{"_id": "lion", "title": "Lions of the savanna", "text": "Large cats that live in prides and roar rather than purr.", "kind": "animal", "year": 2005},
	{"_id": "car", "title": "Cars", "text": "A motor vehicle with four wheels used for transport on roads.", "kind": "machine", "year": 1999},
	{"_id": "bread", "title": "Bread", "text": "A staple food baked from flour, water and yeast.", "kind": "food", "year": 2010},
	{"_id": "engine", "title": "Purring engines", "text": "A well tuned engine purrs quietly at idle.", "kind": "machine", "year": 2015},
	{"_id": "kitten", "title": "Kittens", "text": "Young cats sleep most of the day and purr when content.", "kind": "animal", "year": 2020},
}

// pageCheckLate indexes a few documents with the installed default model
// as a late-interaction retriever, searches them in the page, and checks
// that hovering over and focusing a query word marks, in each hit, the
// API's document tokens for that word's query tokens, and lists them with
// their scores.
func pageCheckLate(t *testing.T, d pageDriver, base string) {
	if _, err := encoder.Find(""); err != nil {
		t.Skipf("the default model %s is not installed (%v): the page's late-interaction explanation needs its tokenizer", encoder.DefaultModel, err)
	}
	schema := map[string]any{"id_field": "_id", "fields": []map[string]any{
		{"name": "title", "type": "text"}, {"name": "text", "type": "text"},
		{"name": "kind", "type": "keyword"}, {"name": "year", "type": "number"},
	}}
	if status, msg := pageCall(t, "PUT", base+"/v1/collections/notes", map[string]any{"schema": schema, "late": []string{encoder.DefaultModel}}, nil); status != http.StatusCreated {
		t.Fatalf("create notes: status %d: %s", status, msg)
	}
	var lines []byte
	for _, n := range pageNotes {
		line, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(append(lines, line...), '\n')
	}
	if status, msg := pageCall(t, "POST", base+"/v1/collections/notes/documents", lines, nil); status != http.StatusOK {
		t.Fatalf("index notes: status %d: %s", status, msg)
	}
	d.do("open the page", 30*time.Second,
		chromedp.Navigate(base+"/"),
		chromedp.Poll[chromedp.Void](`document.querySelector('#collection option[value="notes"]')`),
	)
	d.set("#collection", "notes")
	d.do("wait for notes", 20*time.Second, chromedp.Poll[chromedp.Void](`document.body.dataset.info === 'notes' || null`))
	late := "late:" + encoder.DefaultModel
	d.set("#mode", "hybrid")
	d.set("#k", "5")
	const query = "cats purring"
	d.set("#query", query)
	if state := d.press("#search"); state != "done" {
		t.Fatalf("late search: state %q", state)
	}
	res := pageSearchAll(t, "", base+"/v1/collections/notes/search", map[string]any{
		"text": query, "k": 5, "offset": 0, "retrievers": []string{"bm25", late},
		"highlight": map[string]any{"fields": []string{"title", "text"}, "fragment_size": 120, "fragments": 2},
		"facets":    []map[string]any{{"field": "kind"}},
	})
	if got := pageShownIDs(d.shown()); len(res.Hits) == 0 || !slices.Equal(got, pageHitIDs(res.Hits)) {
		t.Fatalf("late: page shows %v, API answers %v", got, pageHitIDs(res.Hits))
	}
	words := pageWords(query)
	chips := pageRun(t, d.ctx, "read query words", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#query-words:not([hidden]) .qword')).map(b => b.textContent)`))
	if len(chips) != len(words) {
		t.Fatalf("query words shown %q, want %d: %v", chips, len(words), words)
	}
	for i, w := range words {
		if chips[i] != string([]rune(query)[w[0]:w[1]]) {
			t.Errorf("query word %d shown %q, want %q", i, chips[i], string([]rune(query)[w[0]:w[1]]))
		}
	}

	// Hovering over the first word, then focusing the second (as the
	// keyboard does), then selecting it and moving the pointer away.
	x := pageRun(t, d.ctx, "find the first word", chromedp.Evaluate[[]float64](`(r => [r.x + r.width / 2, r.y + r.height / 2])(document.querySelector('.qword[data-word="0"]').getBoundingClientRect())`))
	d.do("hover over the first word", 10*time.Second, chromedp.MouseEvent(chromedp.MouseMoved, x[0], x[1]))
	pageCheckWord(t, d, res.Hits, words[0], query)
	d.do("focus the second word", 10*time.Second, chromedp.Focus(chromedp.CSS(`.qword[data-word="1"]`)))
	pageCheckWord(t, d, res.Hits, words[1], query)
	d.do("select it", 10*time.Second, chromedp.KeyEvent(" "), chromedp.MouseEvent(chromedp.MouseMoved, 1, 1))
	if pressed := d.eval(`document.querySelector('.qword[data-word="1"]').getAttribute('aria-pressed')`); pressed != "true" {
		t.Errorf("the selected word's aria-pressed is %q", pressed)
	}
	pageCheckWord(t, d, res.Hits, words[1], query)
	d.screenshot("late.png")
}

// pageWords are the query's words as the page splits them: runs of
// letters, marks and digits, as ranges of characters.
func pageWords(text string) [][2]int {
	var out [][2]int
	start := -1
	r := []rune(text)
	for i := 0; i <= len(r); i++ {
		in := i < len(r) && (unicode.IsLetter(r[i]) || unicode.IsMark(r[i]) || unicode.IsDigit(r[i]))
		if in && start < 0 {
			start = i
		}
		if !in && start >= 0 {
			out = append(out, [2]int{start, i})
			start = -1
		}
	}
	return out
}

// pageCheckWord checks what each hit shows for a query word: its list is
// the API's matches of the word's query tokens (document words, not
// special tokens) with their scores, and the document words marked are
// those matches, where the page shows their characters.
func pageCheckWord(t *testing.T, d pageDriver, hits []pageHit, word [2]int, query string) {
	t.Helper()
	text := string([]rune(query)[word[0]:word[1]])
	shown := d.shown()
	marked := 0
	for i, h := range shown {
		w := hits[i]
		if w.Highlights == nil || len(w.Highlights.Late) == 0 {
			t.Fatalf("hit %s: the API gave no late-interaction matches", w.ID)
		}
		type match struct {
			doc   int
			score float64
			word  string
		}
		var want, got []match
		wantMarks := map[string]string{}
		for _, tm := range w.Highlights.Late[0].Tokens {
			q := tm.Query
			if q.Kind != "text" || q.Start < word[0] || q.End > word[1] || tm.Doc == nil || tm.Doc.Kind != "text" {
				continue
			}
			want = append(want, match{tm.Doc.Index, tm.Score, tm.Doc.Text})
			if s := pageShownPart(h, *tm.Doc); s != "" {
				wantMarks[fmt.Sprint(tm.Doc.Index)] = s
			}
		}
		for _, m := range h.Matched {
			got = append(got, match{m.Doc, m.Score, m.Word})
		}
		if !slices.EqualFunc(got, want, func(a, b match) bool {
			return a.doc == b.doc && a.word == b.word && math.Abs(a.score-b.score) < 1e-12
		}) {
			t.Errorf("hit %s, word %q: lists %v, the API's matches %v", h.ID, text, got, want)
		}
		if len(h.Late) != len(wantMarks) {
			t.Errorf("hit %s, word %q: marks %v, the API's matches shown %v", h.ID, text, h.Late, wantMarks)
		}
		for doc, s := range wantMarks {
			if h.Late[doc] != s {
				t.Errorf("hit %s, word %q: document token %s marked %q, want %q", h.ID, text, doc, h.Late[doc], s)
			}
		}
		marked += len(h.Late)
	}
	if marked == 0 {
		t.Errorf("word %q: no document word marked in any hit", text)
	}
}

// pageShownPart is the part of a document token the page shows: the
// title in full, the text by its fragments (or its start).
func pageShownPart(h pageShownHit, tok tandem.TokenRef) string {
	var pieces []pageShownFrag
	switch tok.Field {
	case "title":
		pieces = []pageShownFrag{{Start: 0, Text: h.Title}}
	case "text":
		pieces = h.Frags
	}
	var b strings.Builder
	for _, p := range pieces {
		r := []rune(p.Text)
		s, e := max(tok.Start-p.Start, 0), min(tok.End-p.Start, len(r))
		if s < e {
			b.WriteString(string(r[s:e]))
		}
	}
	return b.String()
}

// jsonString encodes v as JSON as the page's JSON.stringify does, with
// no HTML escapes.
func jsonString(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n"), err
}
