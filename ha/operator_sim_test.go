package ha_test

import (
	"strings"
	"testing"
	"time"
)

// TestOperatorPassPromotesAStrandedLearner: a join whose node started its
// learner but never got to promote it (its own start path never ran again)
// is promoted by the operator's pass on another control plane.
func TestOperatorPassPromotesAStrandedLearner(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 1)
	o := j.mint(time.Hour)
	cp2 := j.c.Host("cp2")
	n := joinNodeOn(cp2)
	if _, err := n.PrepareControlPlaneJoin(j.ctx, o); err != nil {
		t.Fatal(err)
	}
	// Start only etcd, as a start path interrupted before its promotion.
	if err := cp2.StartEtcd(j.ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:learner" {
		t.Fatalf("before the pass: %s", got)
	}
	admin := configMapClient(t, j.c.Host("cp1"))
	rep, err := j.cp1.OperatorPass(j.ctx, admin)
	if err != nil {
		t.Fatalf("operator pass: %v", err)
	}
	if strings.Join(rep.Promoted, ",") != "cp2" {
		t.Fatalf("promoted %v, want cp2", rep.Promoted)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter" {
		t.Fatalf("after the pass: %s", got)
	}
	// A second pass has nothing to do.
	if rep, err := j.cp1.OperatorPass(j.ctx, admin); err != nil || len(rep.Promoted) != 0 {
		t.Fatalf("second pass: %v %v", rep.Promoted, err)
	}
}
