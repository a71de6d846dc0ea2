package ha_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/sim"
)

// TestSpaceHealthAfterAChangeIsNoRefusal: with a member down, the health
// check before a defragmentation or a quota change refuses, saying nothing
// was changed; the same check waited on after the change (a member
// defragmented, etcd restarted onto the quota) says what it found, not
// that it refused and nothing was changed.
func TestSpaceHealthAfterAChangeIsNoRefusal(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.Host("cp3").StopEtcd()
	n := joinNodeOn(c.Host("cp1"))
	via := []string{c.Host("cp1").IP().String()}
	err := n.HealthyButForSpace(ctx, via, "etcd quota", "this node's etcd restarts onto the quota")
	if !errors.Is(err, ha.ErrClusterUnhealthy) || !strings.Contains(err.Error(), "etcd quota refused") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Errorf("the check before the change, cp3 down: %v, want a refusal saying nothing was changed", err)
	}
	err = n.WaitHealthyButForSpace(ctx, via, 500*time.Millisecond, "etcd quota")
	if !errors.Is(err, ha.ErrClusterUnhealthy) || strings.Contains(err.Error(), "etcd quota refused") || strings.Contains(err.Error(), "nothing was changed") {
		t.Errorf("the check after the change, cp3 down: %v, want what it found, not a refusal", err)
	}
}
