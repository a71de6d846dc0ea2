package ha_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/sim"
)

// TestNewMemberPublishNotLost starts new etcd members the instant their
// learner add returns, on a one-voter cluster whose log is compacted (so
// each gets a snapshot): the race in which the leader's snapshot swallows
// the new member's publish, which etcd itself would only retry after its
// request timeout (docs/performance.md). The start must end with the member
// serving clients and etcd never having timed out that publish.
func TestNewMemberPublishNotLost(t *testing.T) {
	const joiners = 4
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := sim.New(ctx, sim.Config{ControlPlanes: 1, SpareHosts: joiners})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cli, err := c.Host("cp1").EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// More than etcd's 100 applied entries between in-memory snapshots: the
	// log is compacted, and a new member is sent a snapshot.
	for i := range 150 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/fill/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(6 * time.Second) // etcd refuses member adds for its first 5 s
	restarts := 0
	for i := range joiners {
		h := c.Host(fmt.Sprintf("cp%d", i+2))
		layOutRaw(t, c, h)
		resp, err := cli.MemberAddAsLearner(ctx, []string{h.PeerURL()})
		if err != nil {
			t.Fatal(err)
		}
		st := saveLearnerState(t, h, resp)
		n := joinNodeOn(h)
		if err := n.StartEtcd(ctx, st); err != nil {
			t.Fatalf("%s: start etcd: %v", h.Name(), err)
		}
		if m := n.EtcdMemberStatus(ctx, h.IP().String()); m.Err != nil || m.Leader == 0 {
			t.Fatalf("%s: started, but its etcd does not serve with a leader: %+v", h.Name(), m)
		}
		if ev := c.Events().Find("service", "publish of this member timed out"); len(ev) > 0 {
			t.Fatalf("%s: etcd timed out the new member's publish, which the start should have mended: %v\n%s", h.Name(), ev, c.Events())
		}
		for _, e := range c.Events().Find("service", "etcd start cancelled") {
			if e.Host == h.Name() {
				restarts++
			}
		}
		// Back to one voter for the next joiner: remove the learner.
		h.StopEtcd()
		if _, err := cli.MemberRemove(ctx, resp.Member.ID); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d new members lost their publish and were restarted", restarts, joiners)
}

// TestNewMemberStartsAfterAnotherLeft: a member added as a learner, whose
// node state saved the add's answer as its initial cluster, starts for the
// first time after another member was removed meanwhile (another control
// plane's reset between this join's add and its start). etcd starts a
// member without data only with an initial cluster of exactly the members
// the cluster knows, so the start brings the saved list up to date (and
// saves it) instead of failing at every start with "member count is
// unequal"; the member then serves with a leader, and the cluster has the
// three members it should.
func TestNewMemberStartsAfterAnotherLeft(t *testing.T) {
	t.Parallel() // its own simulated cluster
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := sim.Start(t, sim.Config{ControlPlanes: 3, SpareHosts: 1})
	cli, err := c.Host("cp1").EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	h := c.Host("cp4")
	layOutRaw(t, c, h)
	var resp *clientv3.MemberAddResponse
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		// etcd refuses an add until its leader has been connected to
		// every voter for 5 s.
		if resp, err = cli.MemberAddAsLearner(ctx, []string{h.PeerURL()}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("add cp4 as a learner: %v", err)
		}
	}
	st := saveLearnerState(t, h, resp)
	// cp3 leaves before cp4's first start.
	cp3 := c.Host("cp3")
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		if m.Name == cp3.Name() {
			if _, err := cli.MemberRemove(ctx, m.ID); err != nil {
				t.Fatalf("remove cp3: %v", err)
			}
		}
	}
	cp3.StopEtcd()

	n, logs := loggedNodeOn(h)
	if err := n.StartEtcd(ctx, st); err != nil {
		t.Fatalf("cp4's first start after cp3 left: %v\n%s", err, logs)
	}
	if m := n.EtcdMemberStatus(ctx, h.IP().String()); m.Err != nil || m.Leader == 0 {
		t.Fatalf("cp4 started, but its etcd does not serve with a leader: %+v", m)
	}
	saved, err := nodestate.Load(h.Files())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(saved.Etcd.InitialCluster, cp3.PeerURL()) || !strings.Contains(saved.Etcd.InitialCluster, h.Name()+"="+h.PeerURL()) {
		t.Fatalf("cp4's saved initial cluster %q; want it without cp3 and with cp4", saved.Etcd.InitialCluster)
	}
	if ml, err := cli.MemberList(ctx); err != nil || len(ml.Members) != 3 {
		t.Fatalf("members after cp4's start: %v, %v; want cp1, cp2 and cp4", ml, err)
	}
}

// saveLearnerState saves on h the node state of the learner its add (resp)
// made, its initial cluster the add's answer, as a join saves it.
func saveLearnerState(t *testing.T, h *sim.Host, resp *clientv3.MemberAddResponse) *nodestate.NodeState {
	t.Helper()
	var ic []string
	for _, m := range resp.Members {
		name := m.Name
		if m.ID == resp.Member.ID {
			name = h.Name()
		}
		ic = append(ic, name+"="+m.PeerURLs[0])
	}
	st := &nodestate.NodeState{Role: nodestate.RoleControlPlane, NodeName: h.Name(), NodeIP: h.IP().String(),
		Etcd: nodestate.Etcd{Name: h.Name(), PeerURL: h.PeerURL(), ClientURL: h.ClientURL(), InitialCluster: strings.Join(ic, ","), InitialClusterState: "existing"}}
	if err := nodestate.Save(h.Files(), st); err != nil {
		t.Fatal(err)
	}
	return st
}
