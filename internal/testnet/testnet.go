// Package testnet gives tests loopback addresses for servers to listen on.
//
// A test that starts a server by address (another process, or a node
// restarted on the address it had) cannot hand it a listener: it picks an
// address first, and the server binds it later. An address picked by
// binding port 0 and closing the listener is one the kernel hands out
// again, to the next bind of port 0 and to outgoing connections, in every
// process: go test runs packages at once, and one package's connection
// may take the port before the server binds it, which then fails with
// "address already in use".
//
// Addrs picks ports below the kernel's ephemeral range, which neither
// port 0 binds nor outgoing connections take. It picks them at random, and
// claims each with a file that other test processes using this package
// see, so that two tests running at once never pick the same port. A port
// is checked free by binding it when it is picked.
//
// It is imported only by tests.
package testnet

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// lowest is the lowest port Addrs picks: below it are ports services
// commonly use.
const lowest = 10000

// Addrs returns n distinct loopback addresses ("127.0.0.1:port"), each
// free when it was picked and claimed for the rest of the test.
func Addrs(t testing.TB, n int) []string {
	t.Helper()
	hi := ephemeralLow() // ports in [lowest, hi) are picked
	if hi-lowest < 1000 {
		return anyAddrs(t, n)
	}
	dir := filepath.Join(os.TempDir(), "tandem-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("testnet: %v", err)
	}
	var out []string
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(out) < n; tries++ {
		if tries == 100*n {
			t.Fatalf("testnet: %d tries found %d of %d free ports in [%d, %d)", tries, len(out), n, lowest, hi)
		}
		port := lowest + rand.IntN(hi-lowest)
		claim := filepath.Join(dir, strconv.Itoa(port))
		f, err := os.OpenFile(claim, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue // another test holds it
		}
		if err != nil {
			t.Fatalf("testnet: claim port %d: %v", port, err)
		}
		fmt.Fprintf(f, "%d %s\n", os.Getpid(), t.Name())
		f.Close()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			os.Remove(claim) // in use outside the tests
			continue
		}
		held = append(held, l) // held until all are picked, though claims keep them distinct
		t.Cleanup(func() { os.Remove(claim) })
		out = append(out, addr)
	}
	return out
}

// Addr is Addrs(t, 1)[0].
func Addr(t testing.TB) string {
	t.Helper()
	return Addrs(t, 1)[0]
}

// ephemeralLow is the lowest port of the kernel's ephemeral range, or 0
// when it cannot be read (not Linux).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

// anyAddrs picks addresses by binding port 0, holding each listener until
// all are picked so that none repeats: the fallback where the ephemeral
// range is unknown.
func anyAddrs(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testnet: %v", err)
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out
}
