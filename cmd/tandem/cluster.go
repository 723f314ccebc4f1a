package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tandemsearch/tandem/cluster"
)

// clusterCommand is registered in main.go's command table.
var clusterCommand = command{"show a cluster's status (nodes, shards, moves), drain a node, or back a node up, through a node's API", runCluster}

func runCluster(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster", stderr)
	a := cluster.Admin{}
	fs.StringVar(&a.URL, "server", "http://127.0.0.1:7700", "URL of any node of the cluster")
	key := cmp.Or(os.Getenv("TANDEM_API_KEY"), strings.Split(os.Getenv("TANDEM_API_KEYS"), ",")[0])
	fs.StringVar(&a.Key, "key", key, "admin API key (default $TANDEM_API_KEY, else the first of $TANDEM_API_KEYS, as tandem serve takes them)")
	if err := parseOrUsage(fs, args, stderr, "tandem cluster [--server URL] [--key KEY] status | drain NODE | backup FILE", func() bool {
		return !(fs.NArg() == 1 && fs.Arg(0) == "status" || fs.NArg() == 2 && (fs.Arg(0) == "drain" || fs.Arg(0) == "backup"))
	}); err != nil {
		return err
	}
	if fs.Arg(0) == "backup" { // the node's; tandem restore lays it out, and the node rejoins with --join
		f, err := os.Create(fs.Arg(1))
		if err == nil {
			err = errors.Join(a.Backup(context.Background(), f), f.Close())
		}
		return err
	}
	if fs.Arg(0) == "drain" {
		if err := a.Drain(context.Background(), fs.Arg(1)); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "draining %s: its replicas move to the other nodes, then it leaves the cluster (tandem cluster status shows the moves)\n", fs.Arg(1))
		return nil
	}
	st, err := a.Status(context.Background())
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(st)
}
