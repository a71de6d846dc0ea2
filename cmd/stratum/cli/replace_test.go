package cli

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/noderelease"
	"stratum.dev/stratum/sim"
)

// TestReplacingAControlPlanesMachine is an operator replacing control-plane
// machines under the same address, with the join command exactly as
// `token create` printed it, judged from outside (an etcd client, as
// etcdctl, and client-go trusting only the cluster CA):
//   - a machine re-imaged after its join crashed right after the member-add
//     joins at once, taking over the learner its earlier life added;
//   - a machine re-imaged after it joined meets its old voter: the join
//     refuses (exit 3) with nothing added and nothing left on the machine,
//     and names the removal to run; that command as printed, on a running
//     control plane (which publishes the members left, for later joins),
//     then the same join again, bring the cluster back to three started
//     voters with the new machine serving.
func TestReplacingAControlPlanesMachine(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c, join := upWithPrintedJoin(t, 3)
	cp1, cp2, cp3 := c.Hosts()[0], c.Hosts()[1], c.Hosts()[2]
	if code, out, errOut := runCLI(t, on(cp2), join...); code != ExitOK {
		t.Fatalf("join on cp2: exit %d\n%s\n%s", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// cp3's first join crashes right after its member-add; the machine is
	// then re-imaged and the join run on it again.
	// The crashed run stays parked at the checkpoint, as after a SIGKILL.
	armed := c.CrashAt(cp3.Name(), ha.CheckpointAfterMemberAdd)
	returned := make(chan int, 1)
	go func() {
		code, _, _ := runCLI(t, on(cp3), join...)
		returned <- code
	}()
	select {
	case <-armed.Reached():
	case code := <-returned:
		t.Fatalf("the join on cp3 returned (exit %d) without reaching the member-add's checkpoint", code)
	case <-ctx.Done():
		t.Fatal("the join on cp3 never reached the member-add's checkpoint")
	}
	learner := memberWithPeerURL(ctx, t, cp1, cp3.PeerURL())
	if !learner.learner || learner.started {
		t.Fatalf("after the crash cp3's member is %+v, want an unstarted learner", learner)
	}
	reimage(t, cp3)
	if code, out, errOut := runCLI(t, on(cp3), join...); code != ExitOK {
		t.Fatalf("the join on cp3 re-imaged over its unstarted learner: exit %d\n%s\n%s", code, out, errOut)
	}
	if m := memberWithPeerURL(ctx, t, cp1, cp3.PeerURL()); m.id != learner.id || m.learner || !m.started {
		t.Fatalf("after the join cp3's member is %+v, want the learner %x taken over, promoted and started", m, learner.id)
	}

	// cp3, a voter now, is re-imaged: the join meets its old member.
	before := memberTable(ctx, t, cp1)
	reimage(t, cp3)
	code, out, errOut := runCLI(t, on(cp3), join...)
	if code != ExitRefused {
		t.Fatalf("the join on cp3 re-imaged over its voter: exit %d, want %d (refused)\n%s\n%s", code, ExitRefused, out, errOut)
	}
	if strings.Count(errOut, "nothing was added") != 1 {
		t.Errorf("the refusal says %q other than once:\n%s", "nothing was added", errOut)
	}
	removal := regexp.MustCompile("`(stratum etcd member remove [^`]+)`").FindStringSubmatch(errOut)
	if removal == nil {
		t.Fatalf("the refusal names no `stratum etcd member remove` to run:\n%s", errOut)
	}
	if after := memberTable(ctx, t, cp1); after != before {
		t.Fatalf("the refused join changed the members:\nbefore %s\nafter  %s", before, after)
	}
	if left := filesUnder(t, cp3.Root()); len(left) != 0 && !onlyRuntime(left) {
		t.Fatalf("the refused join left files on cp3: %v", keysOf(left))
	}

	cfg, err := c.VIPConfig() // cp1's admin kubeconfig: the cluster CA only
	if err != nil {
		t.Fatal(err)
	}
	// The release records cp3's and cp2's supervisors would have written
	// (the simulator runs none): the removal deletes cp3's, which names
	// the removed member, and keeps cp2's.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*sim.Host{cp2, cp3} {
		id := fmt.Sprintf("%x", memberWithPeerURL(ctx, t, cp1, h.PeerURL()).id)
		if err := noderelease.Record(ctx, cs, noderelease.Release{Node: h.Name(), MemberID: id, Stratum: Version, Since: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut = runCLI(t, on(cp1), strings.Fields(removal[1])[1:]...)
	if code != ExitOK || !strings.Contains(out, "its release record (Lease kube-system/stratum-release-cp3) deleted") {
		t.Fatalf("%s on cp1, as the refusal printed it: exit %d, want 0 saying cp3's release record was deleted\n%s\n%s", removal[1], code, out, errOut)
	}
	if releases, err := noderelease.List(ctx, cs); err != nil || len(releases) != 1 || releases["cp2"].Node != "cp2" {
		t.Fatalf("release records after cp3's member was removed: %v (%v), want cp2's alone", releases, err)
	}
	// The removal published the members that remain, for later joins.
	if got, want := publishedEtcdMembers(ctx, t, cfg)(), clientURLs(cp1, cp2); got != want {
		t.Fatalf("etcd members published after the removal: %q, want %q", got, want)
	}
	if code, out, errOut := runCLI(t, on(cp3), join...); code != ExitOK {
		t.Fatalf("the same join on cp3 after the removal: exit %d\n%s\n%s", code, out, errOut)
	}
	got := memberTable(ctx, t, cp1)
	want := fmt.Sprintf("%s voter started; %s voter started; %s voter started", cp1.PeerURL(), cp2.PeerURL(), cp3.PeerURL())
	if got != want {
		t.Fatalf("members after the replacement: %s\nwant %s", got, want)
	}
	servesWithClusterCA(ctx, t, cp3)
	readyz(ctx, t, "through the VIP", cfg)
}

// on is the CLI's options for running a command on h.
func on(h *sim.Host) Options {
	d := h.Handle()
	return Options{Host: func() (host.Host, error) { return d, nil }, Checkpoint: d.Checkpoint}
}

// upWithPrintedJoin is a fresh simulated cluster of spare machines with
// apiservers and a VIP: `stratum up --vip` run on the first, then the
// control-plane join command `token create --control-plane` printed there,
// as the arguments after "stratum".
func upWithPrintedJoin(t *testing.T, machines int) (*sim.Cluster, []string) {
	t.Helper()
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: machines, APIServers: true, VIP: true})
	cp1 := c.Hosts()[0]
	if code, out, errOut := runCLI(t, on(cp1), "up", "--vip", c.VIPAddress().String()); code != ExitOK {
		t.Fatalf("up: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, on(cp1), "token", "create", "--control-plane")
	if code != ExitOK {
		t.Fatalf("token create: exit %d\n%s", code, errOut)
	}
	return c, strings.Fields(printedCommandLines(out)[0])[1:]
}

// reimage replaces h's machine: a crash, then every file gone.
func reimage(t *testing.T, h *sim.Host) {
	t.Helper()
	if err := h.Reimage(); err != nil {
		t.Fatal(err)
	}
	if left := filesUnder(t, h.Root()); len(left) != 0 {
		t.Fatalf("%s re-imaged still has %v", h.Name(), keysOf(left))
	}
}

type memberView struct {
	id               uint64
	learner, started bool
}

// memberWithPeerURL is the member with peerURL, seen by an etcd client on
// from's member; it fails t when there is none.
func memberWithPeerURL(ctx context.Context, t *testing.T, from *sim.Host, peerURL string) memberView {
	t.Helper()
	ms := members(ctx, t, from)
	for _, m := range ms {
		if len(m.PeerURLs) == 1 && m.PeerURLs[0] == peerURL {
			return memberView{id: m.ID, learner: m.IsLearner, started: m.Name != ""}
		}
	}
	t.Fatalf("no etcd member has peer URL %s: %v", peerURL, ms)
	return memberView{}
}

// memberTable is the member list seen by an etcd client on from's member,
// one "peerURL role started" per member, sorted.
func memberTable(ctx context.Context, t *testing.T, from *sim.Host) string {
	t.Helper()
	var rows []string
	for _, m := range members(ctx, t, from) {
		role, state := "voter", "started"
		if m.IsLearner {
			role = "learner"
		}
		if m.Name == "" {
			state = "unstarted"
		}
		rows = append(rows, fmt.Sprintf("%s %s %s", strings.Join(m.PeerURLs, ","), role, state))
	}
	return strings.Join(sorted(rows), "; ")
}

// members is the member list an etcd client with from's client
// certificate, as etcdctl on that machine, gets from its member.
func members(ctx context.Context, t *testing.T, from *sim.Host) []*etcdserverpb.Member {
	t.Helper()
	ms, err := from.EtcdMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// onlyRuntime reports whether every file is under /run: the node's lock
// files, on a tmpfs a real machine clears at boot.
func onlyRuntime(files map[string]string) bool {
	for p := range files {
		if !strings.HasPrefix(p, "/run/") {
			return false
		}
	}
	return true
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return sorted(out)
}
