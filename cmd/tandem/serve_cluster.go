package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/tandemsearch/tandem/cluster"
)

// clusterFlags are serve's flags for --cluster.
type clusterFlags struct {
	on               bool
	node, peers      string
	join             string
	shards, replicas int
	timeout          time.Duration
	// The cluster's credentials: a key file, or the CA and this node's
	// certificate and key (PEM files).
	keyFile           string
	ca, cert, certKey string
	creds             cluster.Credentials
	self              cluster.Peer
	peerList          []cluster.Peer
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.on, "cluster", false, "serve as a node of a cluster (--node, --peers): collections are sharded and replicated over the nodes; the HTTP API is the same")
	fs.StringVar(&c.node, "node", "", "--cluster: this node's id, one of --peers")
	fs.StringVar(&c.peers, "peers", "", "--cluster: every node, this one included, as ID=RAFT_ADDR/HTTP_ADDR separated by commas (every node gets the same list); with --join, this node alone")
	fs.StringVar(&c.join, "join", "", "--cluster: the HTTP address of a node of a running cluster to join; the cluster then moves replicas to this node by its placement rule")
	fs.IntVar(&c.shards, "shards", 3, "--cluster: shards of a collection created here")
	fs.IntVar(&c.replicas, "replicas", 0, "--cluster: replicas of each shard of a collection created here (default min(3, nodes))")
	fs.DurationVar(&c.timeout, "raft-timeout", 500*time.Millisecond, "--cluster: Raft's heartbeat and election timeout: lower recovers from a lost leader sooner")
	fs.StringVar(&c.keyFile, "cluster-key-file", "", "--cluster: file holding the cluster key, the same on every node (at least 32 bytes, e.g. `openssl rand -hex 32`; also TANDEM_CLUSTER_KEY): nodes speak TLS to each other and refuse a peer without it. A node with a non-loopback address needs a key or --cluster-ca")
	fs.StringVar(&c.ca, "cluster-ca", "", "--cluster: PEM file of the cluster's CA, for mutual TLS between nodes instead of a key (with --cluster-cert and --cluster-cert-key)")
	fs.StringVar(&c.cert, "cluster-cert", "", "--cluster: PEM file of this node's certificate, signed by --cluster-ca, for server and client authentication, naming the node's addresses")
	fs.StringVar(&c.certKey, "cluster-cert-key", "", "--cluster: PEM file of the private key of --cluster-cert")
}

// parse checks the cluster flags: the peers, this node among them, the
// credentials, and that an unprotected node listens on loopback only.
func (c *clusterFlags) parse() error {
	if c.node == "" || c.peers == "" {
		return fmt.Errorf("--cluster needs --node and --peers")
	}
	var err error
	if c.peerList, err = cluster.ParsePeers(c.peers); err != nil {
		return fmt.Errorf("--peers: %w", err)
	}
	found := false
	for _, p := range c.peerList {
		if p.ID == c.node {
			c.self, found = p, true
		}
	}
	if !found {
		return fmt.Errorf("--node %q is not among --peers", c.node)
	}
	src := cluster.CredentialSources{KeyFile: c.keyFile, Key: os.Getenv("TANDEM_CLUSTER_KEY"), CA: c.ca, Cert: c.cert, CertKey: c.certKey}
	if c.creds, err = cluster.LoadCredentials(src); err != nil {
		return err
	}
	return cluster.CheckExposure(c.self, c.creds)
}

// serveCluster runs this process as a node of a cluster: the node's HTTP
// listener serves the API to clients and /_cluster/ to the other nodes.
func serveCluster(ctx context.Context, sc *serveConfig, logger *slog.Logger, raftLog io.Writer, listening func(addr string)) error {
	cf := &sc.cluster
	cfg := sc.cfg
	cfg.Logger = logger
	return cluster.Serve(ctx, cluster.ServeConfig{
		Node: cluster.Config{
			ID: cf.node, Dir: sc.cfg.DataDir, Peers: cf.peerList, Join: cf.join, Engine: sc.cfg.Engine, Log: raftLog,
			HeartbeatTimeout: cf.timeout, ElectionTimeout: cf.timeout,
			Credentials: cf.creds, RequestTimeout: sc.cfg.Timeout,
		},
		Server: cfg, Shards: cf.shards, Replicas: cf.replicas, Listening: listening,
	})
}
