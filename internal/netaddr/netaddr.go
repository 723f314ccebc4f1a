// Package netaddr answers questions about listen addresses that both the
// server and the cluster ask before they listen.
package netaddr

import "net"

// IsLoopback reports whether addr (host:port) binds only loopback
// interfaces; "localhost" counts, an empty host (every interface) does not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
