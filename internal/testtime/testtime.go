// Package testtime gives tests their waits on a slow or busy machine.
//
// A test checks what the code does, not how fast: speed belongs in
// benchmarks. Where a test must wait for something (a server to be ready,
// a cluster to elect, a write to apply), it waits through this package, so
// that one factor stretches every wait together:
//
//   - Scale is $TANDEM_TEST_TIMESCALE, a positive number (default 1; e.g.
//     TANDEM_TEST_TIMESCALE=10 make test TEST_TIMEOUT=10h on a machine ten
//     times slower than the one the waits were set on);
//   - D scales a duration;
//   - Context is the test's context with a deadline a little before go
//     test's -timeout, so that a wait that runs out fails naming what it
//     waited for instead of panicking with every goroutine's stack;
//   - Until polls a condition up to a scaled duration.
//
// It is imported only by tests.
package testtime

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// Scale returns $TANDEM_TEST_TIMESCALE, or 1 when it is unset. A value
// that is not a positive number is taken as 1, and Context fails the test
// naming it.
func Scale() float64 {
	s, _ := scale()
	return s
}

func scale() (float64, error) {
	v := os.Getenv("TANDEM_TEST_TIMESCALE")
	if v == "" {
		return 1, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > 1e6 {
		return 1, fmt.Errorf("testtime: TANDEM_TEST_TIMESCALE=%q: want a positive number", v)
	}
	return f, nil
}

// D returns d stretched by Scale.
func D(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Scale())
}

// Context returns the test's context (cancelled when the test ends) with a
// deadline a little before the test binary's own (go test -timeout): a
// twentieth of the time left, at most a minute, is kept for the test to
// report what it was waiting for. Without -timeout it has no deadline.
func Context(t testing.TB) context.Context {
	t.Helper()
	if _, err := scale(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tt, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return ctx
	}
	deadline, ok := tt.Deadline()
	if !ok {
		return ctx
	}
	margin := min(time.Until(deadline)/20, time.Minute)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(-margin))
	t.Cleanup(cancel)
	return ctx
}

// Until calls f every interval until it returns nil, and fails the test
// naming what and f's last error once D(d) has passed, or the test's
// Context has ended.
func Until(t testing.TB, d, interval time.Duration, what string, f func() error) {
	t.Helper()
	ctx := Context(t)
	deadline := time.Now().Add(D(d))
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %v (TANDEM_TEST_TIMESCALE %g): %v", what, D(d), Scale(), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}
