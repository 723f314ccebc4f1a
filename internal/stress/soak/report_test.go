package soak

import (
	"strings"
	"testing"
	"time"
)

func TestSoakGrowth(t *testing.T) {
	flat := func(n int) []Sample {
		var ss []Sample
		for i := range n {
			ss = append(ss, Sample{Elapsed: time.Duration(i) * time.Minute, RSS: 400 << 20, Goroutines: 40, Files: 30})
		}
		return ss
	}
	if g := judgeGrowth(flat(10), 2*time.Minute, true); len(g) != 0 {
		t.Errorf("flat: %v", g)
	}
	for _, tc := range []struct {
		name string
		edit func(ss []Sample)
		want string
	}{
		{"rss", func(ss []Sample) {
			for i := range ss {
				ss[i].RSS += int64(i) * 40 << 20
			}
		}, "RSS grew"},
		{"rss spike at the end", func(ss []Sample) { ss[len(ss)-1].RSS *= 2 }, ""},
		{"rss within 64 MiB", func(ss []Sample) {
			for i := 3; i < len(ss); i++ {
				ss[i].RSS += 60 << 20
			}
		}, ""},
		{"goroutines", func(ss []Sample) {
			for i := range ss {
				ss[i].Goroutines += 5 * i
			}
		}, "goroutines grew"},
		{"files", func(ss []Sample) {
			for i := range ss {
				ss[i].Files += 5 * i
			}
		}, "open files grew"},
	} {
		ss := flat(10)
		tc.edit(ss)
		g := strings.Join(judgeGrowth(ss, 2*time.Minute, true), "; ")
		if (tc.want == "") != (g == "") || !strings.Contains(g, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, g, tc.want)
		}
	}
	// Under the race detector RSS is not judged; goroutines still are.
	grown := flat(10)
	for i := range grown {
		grown[i].RSS += int64(i) * 40 << 20
	}
	if g := judgeGrowth(grown, 2*time.Minute, false); len(g) != 0 {
		t.Errorf("rss growth with memory not judged: %v", g)
	}
	for i := range grown {
		grown[i].Goroutines += 5 * i
	}
	if g := strings.Join(judgeGrowth(grown, 2*time.Minute, false), "; "); !strings.Contains(g, "goroutines grew") || strings.Contains(g, "RSS") {
		t.Errorf("goroutine growth with memory not judged: %q", g)
	}
	if g := judgeGrowth(flat(3), 5*time.Minute, true); len(g) != 1 || !strings.Contains(g[0], "no growth check") {
		t.Errorf("no sample after warm-up: %v", g)
	}
}
