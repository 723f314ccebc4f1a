package cluster

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testnet"
)

var moveDocs = flag.Int("cluster.movedocs", 20000, "BenchmarkMoveReplica: documents in the shard that moves")

// BenchmarkMoveReplica times the move of one replica of a shard of
// -cluster.movedocs documents (about 60 words each, BM25), from a node
// being drained to the third node of an in-process cluster on loopback:
// from the drain to the old replica's leaving, with the copy (a Raft
// snapshot of the store, restored and indexed) and the catch-up. Run it
// once: go test ./cluster -run '^$' -bench MoveReplica -benchtime 1x.
func BenchmarkMoveReplica(b *testing.B) {
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		nodes := benchNodes(b)
		spec := CollectionSpec{Name: "c", Shards: 1, Replicas: 2, Schema: testSchema(), Placement: [][]string{{"n0", "n1"}}}
		if err := nodes[0].CreateCollection(ctx, spec); err != nil {
			b.Fatal(err)
		}
		words := []string{"wing", "flow", "shock", "boundary", "layer", "heat", "transfer", "pressure", "supersonic", "cylinder", "plate", "turbulent"}
		for i := 0; i < *moveDocs; i += 1000 {
			var docs []tandem.Doc
			for j := i; j < min(i+1000, *moveDocs); j++ {
				text := ""
				for k := range 60 {
					text += words[(j*7+k*k)%len(words)] + fmt.Sprint(k%5) + " "
				}
				docs = append(docs, tandem.Doc{ID: fmt.Sprint("d", j), Fields: map[string]any{"text": text, "year": j}})
			}
			if _, err := nodes[0].Index(ctx, "c", docs); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		start := time.Now()
		if err := nodes[2].Drain(ctx, "n1"); err != nil {
			b.Fatal(err)
		}
		var done Move
		for {
			st := nodes[0].fsm.state()
			if len(st.Done) > 0 {
				done = st.Done[0]
				break
			}
			if time.Since(start) > 10*time.Minute {
				b.Fatal("no move within 10 minutes")
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.StopTimer()
		if int(done.Docs) != *moveDocs {
			b.Fatalf("moved %d documents, want %d", done.Docs, *moveDocs)
		}
		b.ReportMetric(done.Switched.Sub(done.Started).Seconds(), "s-copy")
		b.ReportMetric(time.Since(start).Seconds(), "s-move")
		b.ReportMetric(float64(done.Docs), "docs")
		for _, n := range nodes {
			n.Close()
		}
	}
}

func benchNodes(b *testing.B) []*Node {
	var peers []Peer
	addrs := testnet.Addrs(b, 6)
	for i := range 3 {
		peers = append(peers, Peer{ID: fmt.Sprint("n", i), Raft: addrs[2*i], HTTP: addrs[2*i+1]})
	}
	root := b.TempDir()
	var nodes []*Node
	for _, p := range peers {
		n, err := Start(Config{ID: p.ID, Dir: root + "/" + p.ID, Peers: peers, Engine: engine.Options{}})
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	return nodes
}
