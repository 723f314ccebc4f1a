package cluster

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// ParsePeers reads a cluster's nodes written as `tandem serve --peers`
// takes them: comma-separated ID=RAFT_ADDR/HTTP_ADDR entries, each
// address host:port. An error names the entry.
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	for i, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		id, addrs, ok := strings.Cut(f, "=")
		raft, web, ok2 := strings.Cut(addrs, "/")
		if !ok || !ok2 || id == "" || raft == "" || web == "" {
			return nil, fmt.Errorf("entry %d %q: want ID=RAFT_ADDR/HTTP_ADDR", i+1, f)
		}
		for _, a := range []string{raft, web} {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("entry %d %q: address %q: %v", i+1, f, a, err)
			}
		}
		out = append(out, Peer{ID: id, Raft: raft, HTTP: web})
	}
	if len(out) == 0 {
		return nil, errors.New("no node given")
	}
	return out, nil
}
