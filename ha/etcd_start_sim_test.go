package ha_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
		ic := []string{}
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
