// Command consensusbench measures, side by side on loopback, what an
// acknowledged write costs on the two replication layers issue #17 names
// for a sharded Tandem, and how each recovers writes after its leader is
// lost:
//
//   - hashicorp/raft v1.8 with raft-boltdb/v2 log stores (fsync per append),
//     3 voters over raft's TCP transport;
//   - NATS JetStream, 3 embedded nats-server/v2 nodes in a cluster, one file
//     stream of 3 replicas with SyncAlways (fsync per write, as Raft's).
//
// Each round runs both, alternating, on the same payloads: sequential
// acknowledged writes (latency), then W concurrent writers (throughput),
// then the leader is shut down and the time until a write is acknowledged
// again is taken. It is a separate module so that Tandem's own build does
// not take these dependencies before the cluster package does.
//
//	go run . --rounds 3 --size 16384 --writes 300
//	go run . --kill --rounds 5   # nodes as processes, leader SIGKILLed
//
// DEBUG=1 prints the NATS servers' logs and each failed stream creation.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

type result struct {
	name       string
	lat        []time.Duration // sequential acknowledged writes
	throughput float64         // acknowledged writes/s with concurrent writers
	failover   time.Duration   // leader shut down -> next acknowledged write
}

// cluster is one replication layer with 3 nodes.
type cluster interface {
	// write returns once b is acknowledged, or fails at ctx's deadline,
	// which every caller sets.
	write(ctx context.Context, b []byte) error
	killLeader() error
	close()
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--node" {
		runNode(parseNodeFlags(os.Args[2:]))
		return
	}
	rounds := flag.Int("rounds", 3, "alternating rounds")
	size := flag.Int("size", 16<<10, "bytes per acknowledged write (one batch)")
	writes := flag.Int("writes", 300, "sequential writes per round")
	writers := flag.Int("writers", 8, "concurrent writers for the throughput phase")
	dur := flag.Duration("duration", 5*time.Second, "length of the throughput phase")
	kill := flag.Bool("kill", false, "run each node as a process and measure recovery after SIGKILL of the leader")
	raftTimeouts := flag.String("raft-timeouts", "1s,250ms", "--kill: Raft heartbeat and election timeouts to measure (1s is the default)")
	flag.Parse()
	if *kill {
		var ts []time.Duration
		for _, f := range strings.Split(*raftTimeouts, ",") {
			t, err := time.ParseDuration(f)
			check(err)
			ts = append(ts, t)
		}
		runKill(*rounds, *size, ts)
		return
	}
	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	var all = map[string][]result{}
	for r := 1; r <= *rounds; r++ {
		for _, name := range []string{"raft", "jetstream"} {
			dir, err := os.MkdirTemp("", "consensusbench-")
			check(err)
			var c cluster
			if name == "raft" {
				c, err = newRaft(dir)
			} else {
				c, err = newJetStream(dir)
			}
			check(err)
			res := run(name, c, payload, *writes, *writers, *dur)
			c.close()
			os.RemoveAll(dir)
			all[name] = append(all[name], res)
			fmt.Fprintf(os.Stderr, "round %d/%d %-9s p50 %6.2f ms  p99 %6.2f ms  %7.0f writes/s (%d writers)  failover %v\n",
				r, *rounds, name, ms(pct(res.lat, 0.5)), ms(pct(res.lat, 0.99)), res.throughput, *writers, res.failover.Round(time.Millisecond))
		}
	}
	med := func(name string, f func(result) float64) float64 {
		var v []float64
		for _, r := range all[name] {
			v = append(v, f(r))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	fmt.Printf("\n%d rounds, alternating, %d-byte writes, 3 nodes on loopback, fsync per write; medians over rounds\n\n", *rounds, *size)
	fmt.Println("| layer | p50 ms | p99 ms | writes/s, " + fmt.Sprint(*writers) + " writers | leader lost -> write acknowledged |")
	fmt.Println("|---|---|---|---|---|")
	for _, name := range []string{"raft", "jetstream"} {
		fmt.Printf("| %s | %.2f | %.2f | %.0f | %.0f ms |\n", name,
			med(name, func(r result) float64 { return ms(pct(r.lat, 0.5)) }),
			med(name, func(r result) float64 { return ms(pct(r.lat, 0.99)) }),
			med(name, func(r result) float64 { return r.throughput }),
			med(name, func(r result) float64 { return ms(r.failover) }))
	}
	fmt.Printf("\nraft/jetstream p50 ratio %.2f, throughput ratio %.2f\n",
		med("raft", func(r result) float64 { return ms(pct(r.lat, 0.5)) })/med("jetstream", func(r result) float64 { return ms(pct(r.lat, 0.5)) }),
		med("raft", func(r result) float64 { return r.throughput })/med("jetstream", func(r result) float64 { return r.throughput }))
}

// tryTimeout bounds one write while the layer recovers from the loss of
// its leader: a write sent to the lost leader is never answered, so the
// recovery time is measured to within this.
const tryTimeout = 100 * time.Millisecond

// write is one acknowledged write within timeout.
func write(c cluster, b []byte, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.write(ctx, b)
}

func run(name string, c cluster, payload []byte, n, writers int, dur time.Duration) result {
	res := result{name: name}
	for range 10 { // warm-up
		check(write(c, payload, 10*time.Second))
	}
	for range n {
		t := time.Now()
		check(write(c, payload, 10*time.Second))
		res.lat = append(res.lat, time.Since(t))
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(dur)
	start := time.Now()
	for range writers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				check(write(c, payload, 10*time.Second))
				done.Add(1)
			}
		})
	}
	wg.Wait()
	res.throughput = float64(done.Load()) / time.Since(start).Seconds()
	t := time.Now()
	check(c.killLeader())
	for {
		err := write(c, payload, tryTimeout)
		if err == nil {
			break
		}
		if time.Since(t) > time.Minute {
			check(fmt.Errorf("%s: no write acknowledged within a minute of the leader's loss: %w", name, err))
		}
		time.Sleep(5 * time.Millisecond)
	}
	res.failover = time.Since(t)
	return res
}

// --- hashicorp/raft ---

type countFSM struct{ n atomic.Int64 }

func (f *countFSM) Apply(*raft.Log) any                 { f.n.Add(1); return nil }
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnap{}, nil }
func (f *countFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnap struct{}

func (nopSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnap) Release()                          {}

type raftNode struct {
	r     *raft.Raft
	store *raftboltdb.BoltStore
	tr    *raft.NetworkTransport
	alive bool
}

type raftCluster struct {
	mu    sync.Mutex
	nodes []*raftNode
}

func newRaft(dir string) (*raftCluster, error) {
	c := &raftCluster{}
	var servers []raft.Server
	for i := range 3 {
		id := fmt.Sprintf("n%d", i)
		d := filepath.Join(dir, id)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		store, err := raftboltdb.NewBoltStore(filepath.Join(d, "raft.db"))
		if err != nil {
			return nil, err
		}
		snaps, err := raft.NewFileSnapshotStore(d, 1, io.Discard)
		if err != nil {
			return nil, err
		}
		tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
		if err != nil {
			return nil, err
		}
		conf := raft.DefaultConfig()
		conf.LocalID = raft.ServerID(id)
		conf.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: io.Discard})
		r, err := raft.NewRaft(conf, &countFSM{}, store, store, snaps, tr)
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, &raftNode{r: r, store: store, tr: tr, alive: true})
		servers = append(servers, raft.Server{ID: conf.LocalID, Address: tr.LocalAddr()})
	}
	if err := c.nodes[0].r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for c.leader() == nil {
		if ctx.Err() != nil {
			return nil, errors.New("raft: no leader in 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c, nil
}

func (c *raftCluster) leader() *raftNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.alive && n.r.State() == raft.Leader {
			return n
		}
	}
	return nil
}

func (c *raftCluster) write(ctx context.Context, b []byte) error {
	n := c.leader()
	if n == nil {
		return errors.New("raft: no leader")
	}
	d, _ := ctx.Deadline()
	return n.r.Apply(b, time.Until(d)).Error()
}

func (c *raftCluster) killLeader() error {
	n := c.leader()
	if n == nil {
		return errors.New("raft: no leader to kill")
	}
	c.mu.Lock()
	n.alive = false
	c.mu.Unlock()
	err := n.r.Shutdown().Error()
	n.tr.Close()
	n.store.Close()
	return err
}

func (c *raftCluster) close() {
	for _, n := range c.nodes {
		if n.alive {
			n.r.Shutdown().Error()
			n.tr.Close()
			n.store.Close()
		}
	}
}

// --- NATS JetStream ---

type jsCluster struct {
	servers []*server.Server
	nc      *nats.Conn
	js      nats.JetStreamContext
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func newJetStream(dir string) (*jsCluster, error) {
	c := &jsCluster{}
	routes := make([]int, 3)
	for i := range routes {
		routes[i] = freePort()
	}
	var urls []string
	for i := range 3 {
		var rs string
		for j, p := range routes {
			if j != i {
				rs += fmt.Sprintf(",nats://127.0.0.1:%d", p)
			}
		}
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       freePort(),
			JetStream:  true,
			StoreDir:   filepath.Join(dir, fmt.Sprintf("n%d", i)),
			SyncAlways: true,
			NoLog:      os.Getenv("DEBUG") == "",
			NoSigs:     true,
		}
		opts.Cluster.Name = "bench"
		opts.Cluster.Host = "127.0.0.1"
		opts.Cluster.Port = routes[i]
		opts.Routes = server.RoutesFromStr(rs[1:])
		s, err := server.NewServer(opts)
		if err != nil {
			return nil, err
		}
		if os.Getenv("DEBUG") != "" {
			s.ConfigureLogger()
		}
		go s.Start()
		c.servers = append(c.servers, s)
		urls = append(urls, s.ClientURL())
	}
	for _, s := range c.servers {
		if !s.ReadyForConnections(30 * time.Second) {
			return nil, errors.New("jetstream: server not ready in 30 s")
		}
	}
	nc, err := nats.Connect(urls[0]+","+urls[1]+","+urls[2], nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		return nil, err
	}
	c.nc = nc
	if c.js, err = nc.JetStream(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := addStream(ctx, c.js); err != nil {
		return nil, err
	}
	return c, nil
}

// addStream creates the benchmark's stream of 3 replicas, retrying until
// ctx ends: each try has a short deadline of its own, because a request
// sent before the metadata leader is elected gets no answer.
func addStream(ctx context.Context, js nats.JetStreamContext) error {
	for {
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AddStream(&nats.StreamConfig{Name: "S", Subjects: []string{"s"}, Replicas: 3, Storage: nats.FileStorage}, nats.Context(tctx))
		tcancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("jetstream: add stream: %w", err)
		}
		if os.Getenv("DEBUG") != "" {
			fmt.Fprintln(os.Stderr, "add stream:", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *jsCluster) write(ctx context.Context, b []byte) error {
	_, err := c.js.Publish("s", b, nats.Context(ctx))
	return err
}

func (c *jsCluster) killLeader() error {
	si, err := c.js.StreamInfo("S")
	if err != nil {
		return err
	}
	if si.Cluster == nil {
		return errors.New("jetstream: stream has no cluster info")
	}
	for _, s := range c.servers {
		if s.Name() == si.Cluster.Leader {
			s.Shutdown()
			return nil
		}
	}
	return fmt.Errorf("jetstream: leader %q not found", si.Cluster.Leader)
}

func (c *jsCluster) close() {
	c.nc.Close()
	for _, s := range c.servers {
		s.Shutdown()
	}
}

func pct(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.SortFunc(s, func(a, b time.Duration) int { return cmp.Compare(a, b) })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "consensusbench:", err)
		os.Exit(1)
	}
}
