package testtime

import (
	"errors"
	"testing"
	"time"
)

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want float64
	}{{"", 1}, {"10", 10}, {"0.5", 0.5}, {"0", 1}, {"-2", 1}, {"x", 1}, {"NaN", 1}} {
		t.Setenv("TANDEM_TEST_TIMESCALE", tc.env)
		if got := Scale(); got != tc.want {
			t.Errorf("TANDEM_TEST_TIMESCALE=%q: Scale() = %g, want %g", tc.env, got, tc.want)
		}
	}
	t.Setenv("TANDEM_TEST_TIMESCALE", "3")
	if got := D(2 * time.Second); got != 6*time.Second {
		t.Errorf("D(2s) at scale 3 = %v, want 6s", got)
	}
}

func TestContextEndsBeforeTheBinary(t *testing.T) {
	ctx := Context(t)
	deadline, ok := t.Deadline()
	got, has := ctx.Deadline()
	if ok != has || (ok && !got.Before(deadline)) {
		t.Errorf("Context deadline %v (%v); the test's %v (%v): want one before it, or none without -timeout", got, has, deadline, ok)
	}
}

func TestUntil(t *testing.T) {
	n := 0
	Until(t, time.Minute, time.Millisecond, "the third call", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Errorf("Until called f %d times, want 3", n)
	}
}
