package ha_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/internal/noderelease"
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
	// A second pass has nothing to promote. Of the release records, it
	// deletes only the one of no etcd member not renewed for 30 minutes:
	// not a member's (cp1's, however old), not a recent one (cp8's, a
	// supervisor that may still run), not one naming a member's ID under
	// another name.
	now := j.c.Host("cp1").Handle().Now()
	cp2ID := ""
	ms, err := j.c.Host("cp1").EtcdMembers(j.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == "cp2" {
			cp2ID = fmt.Sprintf("%x", m.ID)
		}
	}
	for _, r := range []noderelease.Release{
		{Node: "cp1", Since: now.Add(-time.Hour)},
		{Node: "cp9", MemberID: "1234", Since: now.Add(-time.Hour)},
		{Node: "cp8", Since: now.Add(-time.Minute)},
		{Node: "cp7", MemberID: cp2ID, Since: now.Add(-time.Hour)},
	} {
		if err := noderelease.Record(j.ctx, admin, r); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = j.cp1.OperatorPass(j.ctx, admin)
	if err != nil || len(rep.Promoted) != 0 || strings.Join(rep.ReleasesForgotten, ",") != "cp9" {
		t.Fatalf("second pass: promoted %v, release records deleted %v, %v; want none promoted and cp9's record deleted", rep.Promoted, rep.ReleasesForgotten, err)
	}
	left, err := noderelease.List(j.ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(noderelease.Nodes(left), ","); got != "cp1,cp7,cp8" {
		t.Fatalf("release records after the pass: %s, want cp1,cp7,cp8", got)
	}
}
