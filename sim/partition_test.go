package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestIsolatingAJoinedMemberHoldsAcrossTicks isolates a member that joined
// an existing cluster (its raft transport also has bootstrap remotes, whose
// pause etcd does not make idempotent: re-applying the cut on every network
// tick panicked the test process) and keeps it isolated over many ticks:
// it must keep running and see nothing written meanwhile; after a heal it
// catches up; a second isolation and heal behave the same; and it can be
// stopped while isolated and started again.
func TestIsolatingAJoinedMemberHoldsAcrossTicks(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := Start(t, Config{ControlPlanes: 3, SpareHosts: 1})
	cp1, cp4 := c.Host("cp1"), c.Host("cp4")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cli := etcdClientOf(t, cp1)
	id4 := addLearner(t, ctx, c, cli, cp4)
	if err := cp4.StartEtcd(ctx); err != nil {
		t.Fatalf("start cp4: %v", err)
	}
	eventually(t, 20*time.Second, "promote cp4", func() (bool, string) {
		_, err := cli.MemberPromote(ctx, id4)
		return err == nil, fmt.Sprint(err)
	})
	own := etcdClientOf(t, cp4)
	seen := func(key string) bool {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		r, err := own.Get(rctx, key, clientv3.WithSerializable())
		return err == nil && len(r.Kvs) == 1
	}
	for round := 1; round <= 2; round++ {
		key := fmt.Sprintf("/while-isolated/%d", round)
		c.Isolate("cp4")
		if _, err := cli.Put(ctx, key, "x"); err != nil {
			t.Fatalf("round %d: write through cp1 with cp4 isolated (3 of 4 voters): %v", round, err)
		}
		// Ten network ticks (200 ms each) with the cut in place.
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if !cp4.EtcdRunning() {
				t.Fatalf("round %d: isolated cp4's member stopped", round)
			}
			if seen(key) {
				t.Fatalf("round %d: isolated cp4 received %s: the cut leaks", round, key)
			}
		}
		c.Heal()
		eventually(t, 15*time.Second, fmt.Sprintf("round %d: cp4 catches up after the heal", round), func() (bool, string) {
			return seen(key), "not yet"
		})
	}
	// Stopping it while it is cut off: etcd's transport stop closes the
	// paused remotes' pipelines once more (this panicked the process too).
	c.Isolate("cp4")
	time.Sleep(500 * time.Millisecond) // two ticks: the cut is in place
	cp4.StopEtcd()
	c.Heal()
	if err := cp4.StartEtcd(ctx); err != nil {
		t.Fatalf("restart cp4 after a stop while isolated: %v", err)
	}
	eventually(t, 15*time.Second, "cp4 serves its data after the restart", func() (bool, string) {
		return seen("/while-isolated/2"), "not yet"
	})
}
