package ha_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/sim"
)

// TestResetAndRejoinStoppedSaySo: a reset or an etcd rejoin whose context
// ends (Ctrl-C) while it asks the members is refused as stopped, with
// nothing changed: not as members that do not answer, whose reset starts
// this node's etcd to ask again and whose advice is --force (discarding a
// member, or its data, on the strength of a Ctrl-C).
func TestResetAndRejoinStoppedSaySo(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stopped, stop := context.WithCancel(ctx)
	stop()
	h3 := c.Host("cp3")
	// Its files but the live etcd data, which its running member writes.
	files := func() map[string]string {
		m := snapshotFiles(t, h3.Root())
		for p := range m {
			if strings.HasPrefix(p, "/var/lib/stratum/etcd/") {
				delete(m, p)
			}
		}
		return m
	}
	before := files()
	for _, tc := range []struct {
		op  string
		run func() error
	}{
		{"reset", func() error { return joinNodeOn(h3).ResetControlPlane(stopped, &bytes.Buffer{}, false) }},
		{"etcd rejoin", func() error {
			return joinNodeOn(h3).RejoinEtcd(stopped, &bytes.Buffer{}, c.Host("cp1").IP().String(), false)
		}},
	} {
		err := tc.run()
		if !ha.IsRefusal(err) || !strings.Contains(err.Error(), tc.op+" stopped before it changed anything") || strings.Contains(err.Error(), "--force") {
			t.Errorf("%s stopped as it asked the members: %v, want a refusal saying it stopped, without --force", tc.op, err)
		}
		checkFilesAsBefore(t, before, files())
	}
	ms, err := c.Host("cp1").EtcdMembers(ctx)
	if err != nil || len(ms) != 3 || !h3.EtcdRunning() {
		t.Fatalf("after the stopped reset and rejoin: %d members (%v), cp3's etcd running %t; want the three, cp3's running", len(ms), err, h3.EtcdRunning())
	}
}
