package main

// The --kill mode: each node is a process of its own, and the leader is
// killed with SIGKILL, so it can neither hand its leadership over nor
// close a connection. The parent writes through each layer's own client
// path: for JetStream a NATS client connected to every server; for Raft a
// small HTTP endpoint per node that applies a write when the node leads
// (Raft has no client protocol of its own).

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// nodeFlags are the flags of a child process (--node).
type nodeFlags struct {
	layer   string // raft or jetstream
	id      int
	dir     string
	ports   []int // per node: raft transport or NATS route port
	http    []int // per node: raft's write endpoint or NATS client port
	timeout time.Duration
}

func parseNodeFlags(args []string) nodeFlags {
	fs := flag.NewFlagSet("node", flag.ExitOnError)
	var nf nodeFlags
	var ports, web string
	fs.StringVar(&nf.layer, "layer", "", "raft or jetstream")
	fs.IntVar(&nf.id, "id", 0, "node index")
	fs.StringVar(&nf.dir, "dir", "", "data directory")
	fs.StringVar(&ports, "ports", "", "comma-separated peer ports")
	fs.StringVar(&web, "http", "", "comma-separated client ports")
	fs.DurationVar(&nf.timeout, "raft-timeout", time.Second, "raft heartbeat and election timeout")
	check(fs.Parse(args))
	nf.ports, nf.http = atois(ports), atois(web)
	return nf
}

func atois(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		check(err)
		out = append(out, n)
	}
	return out
}

// runNode is a child: one node until it is killed.
func runNode(nf nodeFlags) {
	check(os.MkdirAll(nf.dir, 0o755))
	if nf.layer == "jetstream" {
		var rs []string
		for j, p := range nf.ports {
			if j != nf.id {
				rs = append(rs, fmt.Sprintf("nats://127.0.0.1:%d", p))
			}
		}
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", nf.id), Host: "127.0.0.1", Port: nf.http[nf.id],
			JetStream: true, StoreDir: nf.dir, SyncAlways: true, NoLog: true, NoSigs: true,
		}
		opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = "bench", "127.0.0.1", nf.ports[nf.id]
		opts.Routes = server.RoutesFromStr(strings.Join(rs, ","))
		s, err := server.NewServer(opts)
		check(err)
		s.Start()
		select {}
	}
	store, err := raftboltdb.NewBoltStore(filepath.Join(nf.dir, "raft.db"))
	check(err)
	snaps, err := raft.NewFileSnapshotStore(nf.dir, 1, io.Discard)
	check(err)
	addr := fmt.Sprintf("127.0.0.1:%d", nf.ports[nf.id])
	tr, err := raft.NewTCPTransport(addr, nil, 3, 10*time.Second, io.Discard)
	check(err)
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(fmt.Sprint(nf.id))
	conf.HeartbeatTimeout, conf.ElectionTimeout = nf.timeout, nf.timeout
	conf.LeaderLeaseTimeout = min(conf.LeaderLeaseTimeout, nf.timeout)
	conf.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: io.Discard})
	r, err := raft.NewRaft(conf, &countFSM{}, store, store, snaps, tr)
	check(err)
	if nf.id == 0 {
		var servers []raft.Server
		for j, p := range nf.ports {
			servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprint(j)), Address: raft.ServerAddress(fmt.Sprintf("127.0.0.1:%d", p))})
		}
		check(r.BootstrapCluster(raft.Configuration{Servers: servers}).Error())
	}
	http.HandleFunc("/write", func(w http.ResponseWriter, req *http.Request) {
		b, err := io.ReadAll(req.Body)
		if err == nil {
			err = r.Apply(b, 5*time.Second).Error()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	http.HandleFunc("/leader", func(w http.ResponseWriter, req *http.Request) {
		if r.State() != raft.Leader {
			http.Error(w, "not leader", http.StatusServiceUnavailable)
		}
	})
	check(http.ListenAndServe(fmt.Sprintf("127.0.0.1:%d", nf.http[nf.id]), nil))
}

// procCluster is a layer's 3 nodes as child processes.
type procCluster struct {
	layer string
	procs []*exec.Cmd
	http  []int
	dead  map[int]bool
	// jetstream
	nc *nats.Conn
	js nats.JetStreamContext
}

func newProcCluster(layer, dir string, timeout time.Duration) (*procCluster, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ports, web := make([]string, 3), make([]string, 3)
	c := &procCluster{layer: layer, dead: map[int]bool{}}
	for i := range 3 {
		ports[i], web[i] = strconv.Itoa(freePort()), strconv.Itoa(freePort())
		n, _ := strconv.Atoi(web[i])
		c.http = append(c.http, n)
	}
	for i := range 3 {
		cmd := exec.Command(exe, "--node", "--layer", layer, "--id", strconv.Itoa(i),
			"--dir", filepath.Join(dir, fmt.Sprint(i)), "--ports", strings.Join(ports, ","), "--http", strings.Join(web, ","),
			"--raft-timeout", timeout.String())
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			c.close()
			return nil, err
		}
		c.procs = append(c.procs, cmd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if layer == "jetstream" {
		var urls []string
		for _, p := range c.http {
			urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
		}
		for {
			if c.nc, err = nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond)); err == nil {
				break
			}
			if ctx.Err() != nil {
				c.close()
				return nil, err
			}
			time.Sleep(50 * time.Millisecond)
		}
		if c.js, err = c.nc.JetStream(); err != nil {
			c.close()
			return nil, err
		}
		if err := addStream(ctx, c.js); err != nil {
			c.close()
			return nil, err
		}
		return c, nil
	}
	for c.raftLeader() < 0 {
		if ctx.Err() != nil {
			c.close()
			return nil, errors.New("raft: no leader in 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c, nil
}

var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

func (c *procCluster) raftLeader() int {
	for i, p := range c.http {
		if c.dead[i] {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/leader", p), nil)
		resp, err := httpClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return i
			}
		}
	}
	return -1
}

func (c *procCluster) write(ctx context.Context, b []byte) error {
	if c.layer == "jetstream" {
		_, err := c.js.Publish("s", b, nats.Context(ctx))
		return err
	}
	l := c.raftLeader()
	if l < 0 {
		return errors.New("raft: no leader")
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("http://127.0.0.1:%d/write", c.http[l]), bytes.NewReader(b))
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("raft: %s", bytes.TrimSpace(msg))
	}
	return nil
}

func (c *procCluster) killLeader() error {
	l := -1
	if c.layer == "jetstream" {
		si, err := c.js.StreamInfo("S")
		if err != nil {
			return err
		}
		if si.Cluster == nil {
			return errors.New("jetstream: stream has no cluster info")
		}
		l, _ = strconv.Atoi(strings.TrimPrefix(si.Cluster.Leader, "n"))
	} else {
		l = c.raftLeader()
	}
	if l < 0 {
		return errors.New("no leader to kill")
	}
	c.dead[l] = true
	return c.procs[l].Process.Signal(syscall.SIGKILL)
}

func (c *procCluster) close() {
	if c.nc != nil {
		c.nc.Close()
	}
	for _, p := range c.procs {
		p.Process.Signal(syscall.SIGKILL)
		p.Wait()
	}
}

// runKill measures, per round and alternating, the time from SIGKILL of
// the leader to the next acknowledged write, with writes of size bytes.
func runKill(rounds, size int, timeouts []time.Duration) {
	payload := bytes.Repeat([]byte{7}, size)
	type layer struct {
		name    string
		timeout time.Duration
	}
	layers := []layer{{"jetstream", 0}}
	for _, t := range timeouts {
		layers = append(layers, layer{"raft", t})
	}
	got := map[string][]time.Duration{}
	label := func(l layer) string {
		if l.name == "raft" {
			return fmt.Sprintf("raft (timeouts %v)", l.timeout)
		}
		return "jetstream"
	}
	for r := 1; r <= rounds; r++ {
		for _, l := range layers {
			dir, err := os.MkdirTemp("", "consensusbench-kill-")
			check(err)
			c, err := newProcCluster(l.name, dir, max(l.timeout, time.Millisecond))
			check(err)
			for range 20 {
				check(write(c, payload, 10*time.Second))
			}
			t := time.Now()
			check(c.killLeader())
			for {
				if err := write(c, payload, tryTimeout); err == nil {
					break
				} else if time.Since(t) > 2*time.Minute {
					check(fmt.Errorf("%s: no write acknowledged within 2 minutes of the kill: %w", l.name, err))
				}
				time.Sleep(5 * time.Millisecond)
			}
			d := time.Since(t)
			got[label(l)] = append(got[label(l)], d)
			fmt.Fprintf(os.Stderr, "round %d/%d %-26s leader killed -> write acknowledged %v\n", r, rounds, label(l), d.Round(time.Millisecond))
			c.close()
			os.RemoveAll(dir)
		}
	}
	fmt.Printf("\n%d rounds, alternating, 3 node processes on loopback, leader SIGKILLed, %d-byte writes retried within %v\n\n", rounds, size, tryTimeout)
	fmt.Println("| layer | min | median | max |")
	fmt.Println("|---|---|---|---|")
	for _, l := range layers {
		d := slices.Clone(got[label(l)])
		slices.Sort(d)
		fmt.Printf("| %s | %d ms | %d ms | %d ms |\n", label(l), d[0].Milliseconds(), d[len(d)/2].Milliseconds(), d[len(d)-1].Milliseconds())
	}
}
