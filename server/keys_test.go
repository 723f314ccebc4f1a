package server

import (
	"slices"
	"strings"
	"testing"
)

func TestParseKeys(t *testing.T) {
	admin, read, err := ParseKeys([]byte("# keys\nadmin a1\n\n  read r1  \nadmin  a2\nread r2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(admin, []string{"a1", "a2"}) || !slices.Equal(read, []string{"r1", "r2"}) {
		t.Fatalf("admin %q, read %q", admin, read)
	}
	for in, want := range map[string]string{
		"admin a\nwrite w\n": `line 2: unknown kind "write" (want admin or read)`,
		"admin\n":            "line 1: want 'admin KEY' or 'read KEY'",
		"read   \n":          "line 1: want 'admin KEY' or 'read KEY'",
	} {
		_, _, err := ParseKeys([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseKeys(%q) = %v, want an error with %q", in, err, want)
		}
	}
}
