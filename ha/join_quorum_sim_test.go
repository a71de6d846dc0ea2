package ha_test

import (
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
)

// TestJoinWaitsOutAQuorumLostForAMoment: a join into a cluster of two
// voters, one of which restarts (handed to systemd's unit, upgraded) at the
// instant before the join judges the cluster's etcd (its member list and
// health gate), before its member add (its fence confirm, its lookup), or
// before its promotion, waits for the quorum to come back, saying so, and
// joins. The printed join command run with --install on two machines at once
// meets exactly this (docs/cli.md).
func TestJoinWaitsOutAQuorumLostForAMoment(t *testing.T) {
	t.Parallel() // its own simulated clusters
	waits := map[string]string{
		ha.CheckpointAfterKubeconfigs: "progress: waiting for the cluster's etcd to become healthy before this node's member is added (",
		ha.CheckpointAfterIntent:      "progress: waiting for the API server to answer the confirmation of this join's maintenance fence (",
		ha.CheckpointStartAfterEtcd:   "progress: waiting for the cluster to answer the promotion of learner",
	}
	for _, cp := range []string{ha.CheckpointAfterKubeconfigs, ha.CheckpointAfterIntent, ha.CheckpointStartAfterEtcd} {
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
			n, logs := loggedNodeOn(j.c.Host("cp3"))
			go func() { done <- joinAs(j.ctx, n, o) }()
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
				t.Fatalf("cp3's join, cp2's etcd stopped for 8 s at %s: %v\nlogs:\n%s", cp, err, logs)
			}
			if !strings.Contains(logs.String(), waits[cp]) {
				t.Errorf("the wait for the quorum at %s was not said as %q; logs:\n%s", cp, waits[cp], logs)
			}
			if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter cp3:voter" {
				t.Fatalf("members after cp3's join: %s", got)
			}
		})
	}
}

// TestJoinWaitsOutAServerSilentForAWhile: a join whose --server does not
// answer at all for longer than an operator's VIP check waits (its only
// control plane's kube-apiserver down for 12 s and then started again, as a
// restart on a real machine takes), saying so, and joins: its first contact
// with the cluster waits as long as its later steps would.
func TestJoinWaitsOutAServerSilentForAWhile(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 1)
	o := j.mint(time.Hour)
	cp1 := j.c.Host("cp1")
	if err := cp1.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(12 * time.Second)
		restarted <- cp1.StartAPIServer(j.ctx)
	}()
	n, logs := loggedNodeOn(j.c.Host("cp2"))
	if err := joinAs(j.ctx, n, o); err != nil {
		t.Fatalf("cp2's join, %s silent for 12 s and then starting: %v\nlogs:\n%s", o.Server, err, logs)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if want := "progress: waiting for " + o.Server + " to answer ("; !strings.Contains(logs.String(), want) {
		t.Errorf("the wait for the silent server was not said as %q; logs:\n%s", want, logs)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter" {
		t.Fatalf("members after cp2's join: %s", got)
	}
}
