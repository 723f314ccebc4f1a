package main

import (
	"context"
	"errors"
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
	fs.StringVar(&c.peers, "peers", "", "--cluster: every node, this one included, as ID=RAFT_ADDR/HTTP_ADDR separated by commas (every node gets the same list)")
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
	if c.peerList, err = parsePeers(c.peers); err != nil {
		return err
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
	if c.creds, err = c.credentials(); err != nil {
		return err
	}
	return cluster.CheckExposure(c.self, c.creds)
}

// credentials reads the cluster's credentials from the flags and
// TANDEM_CLUSTER_KEY: a key, or a CA with this node's certificate, or
// none.
func (c *clusterFlags) credentials() (cluster.Credentials, error) {
	envKey := os.Getenv("TANDEM_CLUSTER_KEY")
	tlsFiles := c.ca != "" || c.cert != "" || c.certKey != ""
	switch {
	case tlsFiles && (c.keyFile != "" || envKey != ""):
		return cluster.Credentials{}, errors.New("give a cluster key (--cluster-key-file or TANDEM_CLUSTER_KEY) or certificates (--cluster-ca, --cluster-cert, --cluster-cert-key), not both")
	case c.keyFile != "" && envKey != "":
		return cluster.Credentials{}, errors.New("give the cluster key once: --cluster-key-file or TANDEM_CLUSTER_KEY")
	case c.keyFile != "":
		key, err := os.ReadFile(c.keyFile)
		if err != nil {
			return cluster.Credentials{}, fmt.Errorf("--cluster-key-file: %w", err)
		}
		creds, err := cluster.KeyCredentials(key)
		if err != nil {
			return cluster.Credentials{}, fmt.Errorf("--cluster-key-file %s: %w", c.keyFile, err)
		}
		return creds, nil
	case envKey != "":
		creds, err := cluster.KeyCredentials([]byte(envKey))
		if err != nil {
			return cluster.Credentials{}, fmt.Errorf("TANDEM_CLUSTER_KEY: %w", err)
		}
		return creds, nil
	case tlsFiles:
		var pem [3][]byte
		for i, f := range []struct{ flag, path string }{{"--cluster-ca", c.ca}, {"--cluster-cert", c.cert}, {"--cluster-cert-key", c.certKey}} {
			if f.path == "" {
				return cluster.Credentials{}, fmt.Errorf("mutual TLS needs --cluster-ca, --cluster-cert and --cluster-cert-key: %s is missing", f.flag)
			}
			b, err := os.ReadFile(f.path)
			if err != nil {
				return cluster.Credentials{}, fmt.Errorf("%s: %w", f.flag, err)
			}
			pem[i] = b
		}
		return cluster.TLSCredentials(pem[0], pem[1], pem[2])
	}
	return cluster.Credentials{}, nil
}

// parsePeers parses --peers (cluster.ParsePeers).
func parsePeers(s string) ([]cluster.Peer, error) {
	peers, err := cluster.ParsePeers(s)
	if err != nil {
		return nil, fmt.Errorf("--peers: %w", err)
	}
	return peers, nil
}

// serveCluster runs this process as a node of a cluster: the node's HTTP
// listener serves the API to clients and /_cluster/ to the other nodes.
func serveCluster(ctx context.Context, sc *serveConfig, logger *slog.Logger, raftLog io.Writer, listening func(addr string)) error {
	cf := &sc.cluster
	cfg := sc.cfg
	cfg.Logger = logger
	return cluster.Serve(ctx, cluster.ServeConfig{
		Node: cluster.Config{
			ID: cf.node, Dir: sc.cfg.DataDir, Peers: cf.peerList, Engine: sc.cfg.Engine, Log: raftLog,
			HeartbeatTimeout: cf.timeout, ElectionTimeout: cf.timeout,
			Credentials: cf.creds, RequestTimeout: sc.cfg.Timeout,
		},
		Server: cfg, Shards: cf.shards, Replicas: cf.replicas, Listening: listening,
	})
}
