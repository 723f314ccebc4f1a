package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// The writer: a child process (Config.WriterCommand starts it; in tandem,
// the same binary run as `tandem torture --writer`) that upserts and deletes a mixed stream
// against one collection until the parent SIGKILLs it. It reports each
// phase it enters as a line "phase <name>" on stdout, written unbuffered
// before the phase's work starts, so the last line the parent reads after
// the kill is the phase the writer died in. Phases:
//
//	start         process started, before Open
//	open:recover  the writer's first Open (after a kill: catch-up, rebuilds)
//	open:clean    Open again after the writer's own Close
//	encode        computing the next operation's documents and vectors
//	ingest        inside Index, IndexJSONL or IndexStream, no batch reported
//	apply         inside IndexJSONL or IndexStream after a batch was reported
//	              committed (derived indexes applying, later batches)
//	delete        inside Delete (commit, then apply)
//	ledger        the call returned; recording the acknowledgement
//	close         inside Close (snapshots, then indexes and Badger)
//
// The ledger is the truth of what was acknowledged. Before each call the
// writer appends an intent line, with write(2) only (a process kill keeps
// it; it acknowledges nothing):
//
//	I <op> put <method> <lastseq> <id> <id> ...   upsert, version <op>, ids in call order
//	I <op> del delete <lastseq> <id> <id> ...
//
// and once the call has returned nil, "A <op>", fsynced. <lastseq> is the
// store's last change-log sequence before the call, so the checker can
// tell whether the call in flight at the kill committed anything.

// tortureModel is the external model of the torture collection, and
// tortureDim its dense and token dimension (residual codes need a multiple
// of 8; small keeps kills and checks fast).
const (
	tortureModel = "ext"
	tortureDim   = 16
)

// tortureBatchSize is the engine's batch size in the torture collection:
// smaller than the largest calls, so that one call commits several
// batches and a kill can land between them.
const tortureBatchSize = 64

// tortureKeywords are the values of the keyword field, which the checker's
// filters select on.
var tortureKeywords = []string{"red", "green", "blue", "gold"}

var tortureWords = strings.Fields(`apple river stone cloud ember falcon garden harbor island jungle
	kettle lantern meadow needle orchard pepper quartz ribbon saddle timber velvet willow yarrow zephyr
	anchor basket candle dragon engine feather glacier hammer`)

// tortureSchema is the collection's schema: a text field for BM25, a
// keyword and a number for filters, and (unless an installed model is
// used) the external model, whose vectors every document brings.
func tortureSchema(external bool, lateIndex string) *tandem.Schema {
	s := &tandem.Schema{Strict: true, Fields: []tandem.Field{
		{Name: "text", Type: tandem.Text},
		{Name: "kw", Type: tandem.Keyword},
		{Name: "ver", Type: tandem.Number},
	}}
	if external {
		s.Models = []tandem.Model{{Name: tortureModel, Dense: true, Dim: tortureDim, Late: true, TokenDim: tortureDim,
			LateIndex: lateIndex, Similarity: tandem.Cosine, External: true}}
	}
	return s
}

// tortureOptions are the engine options of the writer and of the checker.
func tortureOptions(model, lateIndex string) *engine.Options {
	o := &engine.Options{Schema: tortureSchema(model == "", lateIndex), BatchSize: tortureBatchSize, EncoderThreads: 1}
	if model != "" {
		o.Dense, o.Late, o.LateIndex = []string{model}, []string{model}, lateIndex
	}
	return o
}

// docRand is the random source of one version of one document: its
// fields and vectors are a function of (id, version) only, so the checker
// knows what each acknowledged version must hold.
func docRand(id string, ver int64, stream uint64) *rand.Rand {
	h := fnv.New64a()
	io.WriteString(h, id)
	return rand.New(rand.NewPCG(h.Sum64()^stream, uint64(ver)))
}

// tortureFields are the fields of version ver of id. Every text holds
// "common", so a BM25 search for it finds every document.
func tortureFields(id string, ver int64) map[string]any {
	r := docRand(id, ver, 1)
	words := []string{"common"}
	for range 2 + r.IntN(6) {
		words = append(words, tortureWords[r.IntN(len(tortureWords))])
	}
	words = append(words, fmt.Sprintf("v%d", ver))
	return map[string]any{"text": strings.Join(words, " "), "kw": tortureKeywords[r.IntN(len(tortureKeywords))], "ver": float64(ver)}
}

// tortureVectors are the external model's vectors of version ver of id:
// a unit dense vector and unit token rows, which the engine stores as
// given (they are already of unit length). Three versions in four have 2
// to 24 tokens; the fourth has 130 to 169, whose float16 matrix (over 4
// KiB) the store keeps in a blob segment rather than in Badger, so that
// kills land in segment appends and compactions too.
func tortureVectors(id string, ver int64) tandem.Vectors {
	r := docRand(id, ver, 2)
	v := tandem.Vectors{Dense: unitVector(r)}
	n := 2 + r.IntN(23)
	if r.IntN(4) == 0 {
		n = 130 + r.IntN(40)
	}
	for range n {
		v.Tokens = append(v.Tokens, unitVector(r))
	}
	return v
}

func unitVector(r *rand.Rand) []float32 {
	v := make([]float64, tortureDim)
	var ss float64
	for i := range v {
		v[i] = r.NormFloat64()
		ss += v[i] * v[i]
	}
	out := make([]float32, tortureDim)
	for i := range v {
		out[i] = float32(v[i] / math.Sqrt(ss))
	}
	return out
}

// tortureDoc is version ver of id, with its vectors unless the collection
// encodes with an installed model.
func tortureDoc(id string, ver int64, external bool) tandem.Doc {
	d := tandem.Doc{ID: id, Fields: tortureFields(id, ver)}
	if external {
		d.Vectors = map[string]tandem.Vectors{tortureModel: tortureVectors(id, ver)}
	}
	return d
}

func tortureID(i int) string { return fmt.Sprintf("d%05d", i) }

// WriterConfig is what the parent tells one writer process, in the flags
// WriterFlags defines.
type WriterConfig struct {
	dir, ledger string
	seed        uint64
	firstOp     int64
	ids         int
	maxBatch    int
	closeEvery  int
	lateIndex   string
	model       string
}

func (c WriterConfig) args() []string {
	return []string{"--dir", c.dir, "--ledger", c.ledger, "--seed", fmt.Sprint(c.seed), "--first-op", fmt.Sprint(c.firstOp),
		"--ids", fmt.Sprint(c.ids), "--max-batch", fmt.Sprint(c.maxBatch), "--close-every", fmt.Sprint(c.closeEvery),
		"--late-index", c.lateIndex, "--model", c.model}
}

// WriterFlags defines the writer's flags on fs: the flags args writes.
func WriterFlags(fs *flag.FlagSet) *WriterConfig {
	c := new(WriterConfig)
	fs.StringVar(&c.dir, "dir", "", "collection directory")
	fs.StringVar(&c.ledger, "ledger", "", "ledger file")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of this writer's operations")
	fs.Int64Var(&c.firstOp, "first-op", 1, "number of the first operation")
	fs.IntVar(&c.ids, "ids", 2000, "size of the id pool")
	fs.IntVar(&c.maxBatch, "max-batch", 300, "largest batch")
	fs.IntVar(&c.closeEvery, "close-every", 15, "close and reopen the engine once in this many operations")
	fs.StringVar(&c.lateIndex, "late-index", "Residual", "late-interaction index")
	fs.StringVar(&c.model, "model", "", "installed model instead of the external one")
	return c
}

// runTortureWriter runs the writer until it is killed; it returns only on
// an error, which the parent reports (a writer never errs otherwise).
func runTortureWriter(c WriterConfig, stdout io.Writer) error {
	phase := func(name string) { fmt.Fprintf(stdout, "phase %s\n", name) }
	phase("start")
	ctx := context.Background()
	r := rand.New(rand.NewPCG(c.seed, 0x70727475))
	ledger, err := os.OpenFile(c.ledger, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	opts := tortureOptions(c.model, c.lateIndex)
	phase("open:recover")
	e, err := engine.Open(c.dir, opts)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	// The live ids, to pick existing documents to update and delete.
	live := map[string]bool{}
	if err := e.Shard().Store().ScanDocs(ctx, func(_ uint64, d tandem.Doc) error { live[d.ID] = true; return nil }); err != nil {
		return err
	}
	liveList := func() []string {
		out := make([]string, 0, len(live))
		for id := range live {
			out = append(out, id)
		}
		return out
	}
	external := c.model == ""
	for op := c.firstOp; ; op++ {
		if r.IntN(c.closeEvery) == 0 {
			phase("close")
			if err := e.Close(); err != nil {
				return fmt.Errorf("close: %w", err)
			}
			phase("open:clean")
			if e, err = engine.Open(c.dir, opts); err != nil {
				return fmt.Errorf("reopen: %w", err)
			}
		}
		phase("encode")
		// Batch sizes are log-uniform in 1..maxBatch: mostly small, some
		// of several engine batches.
		n := int(math.Exp(r.Float64() * math.Log(float64(c.maxBatch)+1)))
		n = max(1, min(n, c.maxBatch))
		existing := liveList()
		r.Shuffle(len(existing), func(i, j int) { existing[i], existing[j] = existing[j], existing[i] })
		// A quarter of the operations delete, in smaller batches, so the
		// collection keeps about half the id pool.
		del := len(existing) > 0 && r.IntN(4) == 0
		if del {
			n = max(1, n/3)
		}
		seen := map[string]bool{}
		var ids []string
		for range n {
			var id string
			// Deletes mostly hit live documents; upserts mix updates and
			// new (or deleted) ids.
			if len(existing) > 0 && (del && r.IntN(10) > 0 || !del && r.IntN(2) == 0) {
				id, existing = existing[0], existing[1:]
			} else {
				id = tortureID(r.IntN(c.ids))
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		seq := e.Shard().Store().LastSeq()
		if del {
			if err := writeIntent(ledger, op, "del", "delete", seq, ids); err != nil {
				return err
			}
			phase("delete")
			if _, err := e.Delete(ctx, ids); err != nil {
				return fmt.Errorf("op %d: delete: %w", op, err)
			}
			for _, id := range ids {
				delete(live, id)
			}
		} else {
			docs := make([]tandem.Doc, len(ids))
			for i, id := range ids {
				docs[i] = tortureDoc(id, op, external)
			}
			method := []string{"index", "index", "index", "jsonl", "stream"}[r.IntN(5)]
			var jsonl []byte
			if method == "jsonl" {
				if jsonl, err = tortureJSONL(docs); err != nil {
					return err
				}
			}
			if err := writeIntent(ledger, op, "put", method, seq, ids); err != nil {
				return err
			}
			phase("ingest")
			reported := false
			progress := func(engine.Progress) {
				if !reported {
					reported = true
					phase("apply")
				}
			}
			switch method {
			case "index":
				_, err = e.Index(ctx, docs)
			case "jsonl":
				_, err = e.IndexJSONL(ctx, bytes.NewReader(jsonl), engine.JSONLOptions{Progress: progress})
			case "stream":
				i := 0
				_, err = e.IndexStream(ctx, func() (tandem.Doc, error) {
					if i == len(docs) {
						return tandem.Doc{}, io.EOF
					}
					i++
					return docs[i-1], nil
				}, engine.StreamOptions{Progress: progress})
			}
			if err != nil {
				return fmt.Errorf("op %d: %s: %w", op, method, err)
			}
			for _, id := range ids {
				live[id] = true
			}
		}
		phase("ledger")
		if _, err := fmt.Fprintf(ledger, "A %d\n", op); err != nil {
			return err
		}
		if err := ledger.Sync(); err != nil {
			return err
		}
	}
}

func writeIntent(w io.Writer, op int64, kind, method string, seq uint64, ids []string) error {
	_, err := fmt.Fprintf(w, "I %d %s %s %d %s\n", op, kind, method, seq, strings.Join(ids, " "))
	return err
}

// tortureJSONL is docs as JSONL lines, vectors under tandem.VectorsKey.
// encoding/json writes float32 values in their shortest float32 form, which
// the engine parses back bit for bit.
func tortureJSONL(docs []tandem.Doc) ([]byte, error) {
	var buf bytes.Buffer
	for _, d := range docs {
		m := map[string]any{"_id": d.ID}
		for k, v := range d.Fields {
			m[k] = v
		}
		if d.Vectors != nil {
			m[tandem.VectorsKey] = d.Vectors
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

// RunWriter is the writer process: it runs c, writing its phase lines to
// stdout, until the process is killed. On an error it writes a line "error <message>" for the parent,
// which reports it, and returns the error; a config without a directory,
// a ledger and positive counts is refused before the writer starts.
func RunWriter(c WriterConfig, stdout io.Writer) error {
	if c.dir == "" || c.ledger == "" || c.ids < 1 || c.maxBatch < 1 || c.closeEvery < 1 {
		return fmt.Errorf("torture --writer: --dir, --ledger, and positive --ids, --max-batch, --close-every are required")
	}
	if err := runTortureWriter(c, stdout); err != nil {
		fmt.Fprintf(stdout, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return err
	}
	return nil
}
