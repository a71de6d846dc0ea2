package ha_test

import (
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
)

// TestJoinWaitsOutAQuorumLostForAMoment: a join into a cluster of two
// voters, one of which restarts (handed to systemd's unit, upgraded) at the
// instant before the join's member add (its fence confirm, its lookup), or
// before its promotion, waits for the quorum to come back and joins. The
// printed join command run with --install on two machines at once meets
// exactly this (docs/cli.md).
func TestJoinWaitsOutAQuorumLostForAMoment(t *testing.T) {
	t.Parallel() // its own simulated clusters
	for _, cp := range []string{ha.CheckpointAfterIntent, ha.CheckpointStartAfterEtcd} {
		t.Run(cp, func(t *testing.T) {
			t.Parallel() // each on its own cluster
			j := startJoinCluster(t, 2)
			j.writeSentinel()
			o := j.mint(time.Hour)
			if err := j.join("cp2", o); err != nil {
				t.Fatalf("join of cp2: %v", err)
			}
			pause := j.c.PauseAt("cp3", cp)
			done := make(chan error, 1)
			go func() { done <- j.join("cp3", o) }()
			select {
			case <-pause.Reached():
			case err := <-done:
				t.Fatalf("cp3's join ended before %s: %v", cp, err)
			}
			restarted := stopEtcdFor(j.ctx, j.c.Host("cp2"), 8*time.Second)
			pause.Release()
			if err := <-restarted; err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("cp3's join, cp2's etcd stopped for 8 s at %s: %v", cp, err)
			}
			if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter cp3:voter" {
				t.Fatalf("members after cp3's join: %s", got)
			}
		})
	}
}
