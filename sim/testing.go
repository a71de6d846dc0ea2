package sim

import (
	"context"
	"time"
)

// TB is the part of testing.TB the simulator uses, so that the package does
// not link the testing package into the stratum binary.
type TB interface {
	Helper()
	Cleanup(func())
	Failed() bool
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Start is New for a test: the cluster closes when the test ends, passed or
// failed, and a failed test prints the event log.
func Start(t TB, cfg Config) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("start simulated cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("simulation event log:\n%s", c.events.String())
		}
		c.Close()
	})
	return c
}
