package testnet

import (
	"net"
	"strconv"
	"testing"
)

func TestAddrs(t *testing.T) {
	addrs := Addrs(t, 20)
	lo := ephemeralLow()
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s picked twice", a)
		}
		seen[a] = true
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if lo-lowest >= 1000 && (port < lowest || port >= lo) {
			t.Errorf("%s is outside [%d, %d)", a, lowest, lo)
		}
		// Free to bind once picked.
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("listen on %s: %v", a, err)
		}
		l.Close()
	}
	// Claimed: a second pick in this test never repeats one.
	for _, a := range Addrs(t, 20) {
		if seen[a] {
			t.Fatalf("%s picked again while claimed", a)
		}
	}
}
