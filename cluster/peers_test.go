package cluster

import (
	"slices"
	"strings"
	"testing"
)

func TestParsePeers(t *testing.T) {
	got, err := ParsePeers(" a=127.0.0.1:1/127.0.0.1:2, b=h:3/h:4 ,")
	if err != nil {
		t.Fatal(err)
	}
	want := []Peer{{ID: "a", Raft: "127.0.0.1:1", HTTP: "127.0.0.1:2"}, {ID: "b", Raft: "h:3", HTTP: "h:4"}}
	if !slices.Equal(got, want) {
		t.Fatalf("ParsePeers = %+v, want %+v", got, want)
	}
	for in, msg := range map[string]string{
		"":                   "no node given",
		"a=h:1":              `entry 1 "a=h:1": want ID=RAFT_ADDR/HTTP_ADDR`,
		"a=h:1/h:2,=h:3/h:4": `entry 2 "=h:3/h:4": want ID=RAFT_ADDR/HTTP_ADDR`,
		"a=h:1/nohost":       `entry 1 "a=h:1/nohost": address "nohost"`,
	} {
		_, err := ParsePeers(in)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParsePeers(%q) = %v, want an error with %q", in, err, msg)
		}
	}
}
