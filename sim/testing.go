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

// StartTimeout bounds a simulated cluster's start in Start: its etcd
// members and kube-apiservers ready.
const StartTimeout = 3 * time.Minute

// Start is New for a test: the cluster closes when the test ends, passed or
// failed, and a failed test prints the event log (Adopt).
func Start(t TB, cfg Config) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("start simulated cluster: %v", err)
	}
	Adopt(t, c)
	return c
}

// Adopt hands c, started by New, to test t as Start does: it closes when t
// ends, and a failed t prints its event log. A harness that starts a
// cluster before the test that uses it (the scenarios start the next
// check's cluster ahead) adopts it then.
func Adopt(t TB, c *Cluster) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("simulation event log:\n%s", c.events.String())
		}
		c.Close()
	})
}
