package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tandemsearch/tandem/cluster"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/server"
)

// clusterFlags are serve's flags for --cluster.
type clusterFlags struct {
	on               bool
	node, peers      string
	shards, replicas int
	timeout          time.Duration
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.on, "cluster", false, "serve as a node of a cluster (--node, --peers): collections are sharded and replicated over the nodes; the HTTP API is the same")
	fs.StringVar(&c.node, "node", "", "--cluster: this node's id, one of --peers")
	fs.StringVar(&c.peers, "peers", "", "--cluster: every node, this one included, as ID=RAFT_ADDR/HTTP_ADDR separated by commas (every node gets the same list)")
	fs.IntVar(&c.shards, "shards", 3, "--cluster: shards of a collection created here")
	fs.IntVar(&c.replicas, "replicas", 0, "--cluster: replicas of each shard of a collection created here (default min(3, nodes))")
	fs.DurationVar(&c.timeout, "raft-timeout", 500*time.Millisecond, "--cluster: Raft's heartbeat and election timeout: lower recovers from a lost leader sooner")
}

// parsePeers parses --peers.
func parsePeers(s string) ([]cluster.Peer, error) {
	var out []cluster.Peer
	for i, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		id, addrs, ok := strings.Cut(f, "=")
		raft, web, ok2 := strings.Cut(addrs, "/")
		if !ok || !ok2 || id == "" || raft == "" || web == "" {
			return nil, fmt.Errorf("--peers: entry %d %q: want ID=RAFT_ADDR/HTTP_ADDR", i+1, f)
		}
		for _, a := range []string{raft, web} {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("--peers: entry %d %q: address %q: %v", i+1, f, a, err)
			}
		}
		out = append(out, cluster.Peer{ID: id, Raft: raft, HTTP: web})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--peers: no node given")
	}
	return out, nil
}

// catalog adapts a cluster's collections to server.Catalog.
type catalog struct{ c cluster.Catalog }

func (c catalog) List() []string { return c.c.List() }
func (c catalog) Open(name string) (server.Collection, error) {
	col, err := c.c.Open(name)
	if err != nil {
		return nil, err
	}
	return col, nil
}
func (c catalog) Create(ctx context.Context, name string, opts engine.Options) (server.Collection, error) {
	col, err := c.c.Create(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	return col, nil
}
func (c catalog) Drop(ctx context.Context, name string) error { return c.c.Drop(ctx, name) }

// clusterDial, when set, opens this node's connections to the others:
// the failover test routes them through fault-injecting proxies.
var clusterDial cluster.Dialer

// serveCluster runs this process as a node of a cluster: the node's HTTP
// listener serves the API to clients and /_cluster/ to the other nodes.
func serveCluster(ctx context.Context, sc *serveConfig, logger *slog.Logger, raftLog io.Writer, listening func(addr string)) error {
	peers, err := parsePeers(sc.cluster.peers)
	if err != nil {
		return err
	}
	var self *cluster.Peer
	for i := range peers {
		if peers[i].ID == sc.cluster.node {
			self = &peers[i]
		}
	}
	if self == nil {
		return fmt.Errorf("--node %q is not among --peers", sc.cluster.node)
	}
	var api atomic.Pointer[http.Handler]
	node, err := cluster.Start(cluster.Config{
		ID: sc.cluster.node, Dir: sc.cfg.DataDir, Peers: peers, Engine: sc.cfg.Engine, Log: raftLog, Dial: clusterDial,
		HeartbeatTimeout: sc.cluster.timeout, ElectionTimeout: sc.cluster.timeout,
		API: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h := api.Load(); h != nil {
				(*h).ServeHTTP(w, r)
				return
			}
			http.Error(w, `{"error":{"code":"starting","message":"the node is starting"}}`, http.StatusServiceUnavailable)
		}),
	})
	if err != nil {
		return err
	}
	cfg := sc.cfg
	cfg.Logger = logger
	cfg.DataDir = ""
	cfg.Catalog = catalog{cluster.Catalog{Node: node, Shards: sc.cluster.shards, Replicas: sc.cluster.replicas}}
	srv, err := server.New(&cfg)
	if err != nil {
		node.Close()
		return err
	}
	h := srv.Handler()
	api.Store(&h)
	if listening != nil {
		listening(self.HTTP)
	}
	<-ctx.Done()
	return errors.Join(node.Close(), srv.Close())
}
