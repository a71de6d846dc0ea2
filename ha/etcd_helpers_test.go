package ha_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// nodeOn is the ha node on a simulated host, as the simulator builds it:
// one Handle, the operation's process, for its calls and its checkpoints
// (a CrashCommandAt kills the Handle that reaches the checkpoint).
func nodeOn(h *sim.Host) *ha.Node {
	d := h.Handle()
	return ha.NewNode(ha.Env{Host: d, Checkpoint: d.Checkpoint})
}

// loggedNodeOn is nodeOn with its logs kept in the returned buffer.
func loggedNodeOn(h *sim.Host) (*ha.Node, *syncbuf.Buffer) {
	lb := &syncbuf.Buffer{}
	return ha.NewNode(ha.Env{Host: h.Handle(), Checkpoint: h.Handle().Checkpoint,
		Log:      slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Progress: func(line string) { fmt.Fprintf(lb, "progress: %s\n", line) }}), lb
}

// observer is a host's handle whose dialer ignores the simulated network's
// cuts: an operator who can still reach both sides of a partition, so the
// members' own answers (not the dial refusals) are what is judged.
type observer struct{ *sim.Handle }

func (observer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

func observerOn(h *sim.Host) *ha.Node { return ha.NewNode(ha.Env{Host: observer{h.Handle()}}) }

// ipsOf are the named hosts' IPs.
func ipsOf(c *sim.Cluster, names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, c.Host(n).IP().String())
	}
	return out
}

// cpNames are cp1..cpN.
func cpNames(n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, "cp"+string(rune('0'+i)))
	}
	return out
}

// layOutJoiner writes what a join leaves on a spare host before its member
// add: the shared PKI and its own leaves.
func layOutJoiner(t testing.TB, c *sim.Cluster, h *sim.Host) {
	t.Helper()
	files := c.Shared().Files()
	leaves, err := pki.NodeLeaves(c.Shared(), h.Name(), net.IP(h.IP().AsSlice()), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range leaves {
		files[name] = data
	}
	for name, data := range files {
		if err := h.Files().WriteFile(version.PKIFile(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// startJoiner saves the joiner's node state with the initial cluster its
// member add returned and starts its (embedded) etcd.
func startJoiner(t testing.TB, ctx context.Context, h *sim.Host, ic string) {
	t.Helper()
	st := &nodestate.NodeState{Role: nodestate.RoleControlPlane, NodeName: h.Name(), NodeIP: h.IP().String(),
		Etcd: nodestate.Etcd{Name: h.Name(), PeerURL: h.PeerURL(), ClientURL: h.ClientURL(), InitialCluster: ic, InitialClusterState: "existing"}}
	if err := nodestate.Save(h.Files(), st); err != nil {
		t.Fatal(err)
	}
	if err := h.StartEtcd(ctx); err != nil {
		t.Fatalf("start joiner etcd on %s: %v", h.Name(), err)
	}
}

// isLearner reports whether the member with peerURL is a learner, per the
// harness's view through h.
func isLearner(t testing.TB, h *sim.Host, peerURL string) (found, learner bool) {
	t.Helper()
	cli, err := h.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		for _, u := range m.PeerURLs {
			if u == peerURL {
				return true, m.IsLearner
			}
		}
	}
	return false, false
}

// membershipViews describes, for a failure message, each host's view of
// the membership: its member list read serializably (its own applied
// state) and linearizably, and its raft and applied indexes.
func membershipViews(hosts []*sim.Host) string {
	var b strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&b, "\n  %s:", h.Name())
		cli, err := h.EtcdClient()
		if err != nil {
			fmt.Fprintf(&b, " no client: %v", err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if st, err := cli.Status(ctx, h.ClientURL()); err == nil {
			fmt.Fprintf(&b, " raft index %d, applied %d, leader %x;", st.RaftIndex, st.RaftAppliedIndex, st.Leader)
		}
		for _, lin := range []bool{false, true} {
			var opts []clientv3.OpOption
			if !lin {
				opts = append(opts, clientv3.WithSerializable())
			}
			ml, err := cli.MemberList(ctx, opts...)
			if err != nil {
				fmt.Fprintf(&b, " list (linearizable %t): %v;", lin, err)
				continue
			}
			fmt.Fprintf(&b, " list (linearizable %t):", lin)
			for _, m := range ml.Members {
				fmt.Fprintf(&b, " %s learner=%t", m.Name, m.IsLearner)
			}
			b.WriteString(";")
		}
		cancel()
		cli.Close()
	}
	return b.String()
}

// leaderHost is the host whose member leads, waiting up to 5 s for one.
func leaderHost(t testing.TB, c *sim.Cluster, names []string) string {
	t.Helper()
	obs := observerOn(c.Host(names[0]))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range names {
			m := obs.EtcdMemberStatus(context.Background(), c.Host(n).IP().String())
			if m.Err == nil && m.Leader != 0 && m.Leader == m.ID {
				return n
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no etcd leader within 5s")
	return ""
}

// settledStorage reads EtcdStorageAt once etcd's storage version has reached
// want (a "3.7" prefix): a new cluster starts at none, passes through 3.5.0,
// and is migrated up to its cluster version shortly after it forms.
func settledStorage(t testing.TB, ctx context.Context, n *ha.Node, ip, want string) (ha.EtcdStorage, error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := n.EtcdStorageAt(ctx, ip)
		if err != nil || strings.HasPrefix(st.StorageVersion, want) || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// etcdClusterID is the etcd cluster ID h's member answers for, in hex as the
// node state records it.
func etcdClusterID(t testing.TB, ctx context.Context, h *sim.Host) string {
	t.Helper()
	cli, err := h.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", ml.Header.GetClusterId())
}
