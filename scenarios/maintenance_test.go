package scenarios

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	utlsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"pgregory.net/rapid"

	"stratum.dev/stratum/cmd/stratum/cli"
	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/host/faultfs"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// maintCheckShare: a TestMaintenance check runs a whole lifecycle (a
// cluster grown from one node onto the VIP, a snapshot restore with its
// rejoins, an etcd downgrade, joins on an older etcd and on a failing disk),
// the work of about three checks of the other properties, so it runs a
// third of their count (at least one).
const maintCheckShare = 3

// maintenance is one check of TestMaintenance: a cluster built and kept by
// stratum's own commands, run through cli.Run on each simulated host as an
// operator types them. It starts as a single controller (`stratum up`
// without a VIP) that grows into HA: a join as printed, the VIP adopted
// (`stratum up --vip`), every node's clients and Cilium repointed onto it.
// Then the operator's maintenance, each at least once per check in a drawn
// order, with drawn parameters: a snapshot restored on one control plane and
// rejoined by the others (crashed at drawn checkpoints, or while a member of
// the restored cluster restarts), an etcd downgrade
// with the members swapped one by one to the older etcd, a join on a host
// whose etcd is the older release, a join on a host whose disk fails, and a
// control plane's reset (crashed at a drawn checkpoint), joined again or
// left a spare.
type maintenance struct {
	*vipWorld
	// spares are the hosts not yet control planes.
	spares []*sim.Host
	// snapDir holds the snapshots (the operator's backup disk).
	snapDir string
	// present are ConfigMaps that must read back through the VIP; gone are
	// ConfigMaps written after the snapshot a restore went back to.
	present, gone []string
	// snaps are the snapshots saved so far, oldest first: a restore may go
	// back to any of them.
	snaps []savedSnapshot
}

// savedSnapshot is a snapshot the operator saved: its file, the ConfigMaps
// it holds, and the etcd version its data is at (etcdutl's status of it).
type savedSnapshot struct {
	file    string
	holds   []string
	storage string
}

func TestMaintenance(t *testing.T) {
	explored.require("Maintenance", "restore", "downgrade", "olderJoiner", "diskJoin", "diskRejoin", "reset")
	shareChecks(t, maintCheckShare)
	property(t, func(rt *rapid.T) {
		c := startCluster(rt, sim.Config{Fresh: true, SpareHosts: 5, APIServers: true, VIP: true})
		m := &maintenance{vipWorld: &vipWorld{t: rt, ctx: checkCtx(rt, 20*time.Minute), c: c, stats: &vipStats{badJoins: map[string]int{}}}}
		dir, err := os.MkdirTemp("", "stratum-snapshots-")
		if err != nil {
			rt.Fatal(err)
		}
		rt.Cleanup(func() { os.RemoveAll(dir) })
		m.snapDir = dir
		m.spares = c.Hosts()
		m.growFromOne(rt)
		actions := map[string]func(*rapid.T){
			"restore":     m.restore,
			"downgrade":   m.downgrade,
			"olderJoiner": m.olderJoiner,
			"diskJoin":    m.diskJoin,
			"reset":       m.reset,
		}
		// Every action once, in a drawn order, except that the restore
		// comes after a join (with three control planes or more, its
		// first rejoin is refused without --force and runs forced, on a
		// failing disk) and the older joiner before the downgrade (after
		// it, the older etcd is the cluster's and no refusal is due);
		// then drawn ones among those that apply, about one per four of
		// rapid's steps.
		tour := rapid.Permutation(slices.Sorted(maps.Keys(actions))).Draw(rt, "maintenance order")
		if r, j := slices.Index(tour, "restore"), min(slices.Index(tour, "diskJoin"), slices.Index(tour, "olderJoiner")); r < j {
			tour[r], tour[j] = tour[j], tour[r]
		}
		if o, d := slices.Index(tour, "olderJoiner"), slices.Index(tour, "downgrade"); o > d {
			tour[o], tour[d] = tour[d], tour[o]
		}
		// The reset after the restore, so a reset that is not joined back
		// does not take the restore's third control plane away.
		if z, r := slices.Index(tour, "reset"), slices.Index(tour, "restore"); z < r {
			tour = slices.Insert(slices.Delete(tour, z, z+1), r, "reset")
		}
		for _, name := range tour {
			explored.ran(name)
			actions[name](rt)
		}
		for range rapid.IntRange(0, max(1, steps()/4)).Draw(rt, "further actions") {
			name := rapid.SampledFrom(m.applicable()).Draw(rt, "action")
			explored.ran(name)
			actions[name](rt)
		}
		m.converge()
	}, assets.KubeAPIServerName, assets.EtcdName(version.EtcdPrevious))
}

// shareChecks runs the property under t with 1/share of rapid's check count
// (at least one), restoring it after.
func shareChecks(t *testing.T, share int) {
	f := flag.Lookup("rapid.checks")
	was := f.Value.String()
	var n int
	fmt.Sscan(was, &n)
	_ = f.Value.Set(fmt.Sprint(max(1, (n+share-1)/share)))
	t.Cleanup(func() { _ = f.Value.Set(was) })
}

// steps is rapid's -rapid.steps.
func steps() int {
	var n int
	fmt.Sscan(flag.Lookup("rapid.steps").Value.String(), &n)
	return n
}

// applicable are the maintenance actions that apply now: a restore always, a
// reset while a control plane other than the first is left,
// the downgrade while the cluster runs the current etcd (again, after a
// restore on a node with it), the joins while a spare host is left.
func (m *maintenance) applicable() []string {
	out := []string{"restore"}
	if len(m.cps) > 1 {
		out = append(out, "reset")
	}
	if m.downgradable() {
		out = append(out, "downgrade")
	}
	if len(m.spares) > 0 {
		out = append(out, "diskJoin", "olderJoiner")
	}
	return out
}

// run runs `stratum args...` on h and fails the check unless it exits with
// want; it returns stdout and stderr.
func (m *maintenance) run(h *sim.Host, want int, args ...string) (string, string) {
	m.t.Helper()
	code, out, errOut := m.stratum(h, args...)
	if code != want {
		m.t.Fatalf("stratum %s on %s: exit %d, want %d (after %s)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), h.Name(), code, want, m.last, out, errOut)
	}
	m.last = "stratum " + strings.Join(args, " ") + " on " + h.Name()
	return out, errOut
}

// takeSpare draws a host that is not a control plane yet and takes it off
// the spares.
func (m *maintenance) takeSpare(t *rapid.T, label string) *sim.Host {
	if len(m.spares) == 0 {
		t.Skip("no spare host left")
	}
	h := drawHost(t, m.spares, label)
	m.spares = slices.DeleteFunc(m.spares, func(s *sim.Host) bool { return s == h })
	return h
}

// growFromOne is a single controller that grows into HA: `stratum up` on a
// drawn host without a VIP (its clients on its own address), data and the
// Cilium objects written through it, a join as printed, then the VIP
// adopted on every control plane and every node's clients repointed onto it
// (Cilium with one of them). A repoint drawn before the VIP serves is
// refused and changes nothing.
func (m *maintenance) growFromOne(t *rapid.T) {
	first := m.takeSpare(t, "first control plane")
	m.run(first, cli.ExitOK, "up")
	m.cps = append(m.cps, first)
	var err error
	if m.ca, err = first.Files().ReadFile(version.PKIFile("ca.crt")); err != nil {
		t.Fatalf("%s's cluster CA after stratum up: %v", first.Name(), err)
	}
	cs, server, err := m.nodeClient(first)
	if err != nil {
		t.Fatal(err)
	}
	if server == m.c.VIPURL() {
		t.Fatalf("a control plane brought up without a VIP has its clients on the VIP %s", server)
	}
	m.writeConfigMap(cs, "grown-from-one")
	ds, dep := sim.CiliumObjects()
	if _, err := cs.AppsV1().DaemonSets("kube-system").Create(m.ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the Cilium DaemonSet: %v", err)
	}
	if _, err := cs.AppsV1().Deployments("kube-system").Create(m.ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the Cilium operator Deployment: %v", err)
	}
	m.join(m.takeSpare(t, "second control plane"), false)

	vip := m.c.VIPAddress().String()
	if rapid.Bool().Draw(t, "repoint before the VIP serves") {
		h := drawHost(t, m.cps, "early repoint on")
		before := kubeconfigs(t, h)
		m.run(h, cli.ExitRefused, "repoint", "--vip", vip)
		explored.invariant("a repoint onto a VIP that does not serve changes nothing")
		if after := kubeconfigs(t, h); !equalFiles(before, after) {
			t.Fatalf("a refused repoint on %s changed its kubeconfigs", h.Name())
		}
	}
	for _, name := range rapid.Permutation(names(m.cps)).Draw(t, "VIP adoption order") {
		m.run(m.c.Host(name), cli.ExitOK, "up", "--vip", vip)
	}
	if _, err := m.c.WaitVIP(m.ctx); err != nil {
		t.Fatalf("no control plane holds the VIP after every one adopted it: %v", err)
	}
	withCilium := drawHost(t, m.cps, "repoint Cilium with")
	for _, name := range rapid.Permutation(names(m.cps)).Draw(t, "repoint order") {
		h := m.c.Host(name)
		args := []string{"repoint", "--vip", vip}
		if h == withCilium {
			args = append(args, "--cilium", "--rollout-timeout", "1s")
		}
		m.run(h, cli.ExitOK, args...)
		explored.invariant("after a repoint every kubeconfig of the node targets the VIP")
		for p, b := range kubeconfigs(t, h) {
			if !bytes.Contains(b, []byte("server: "+m.c.VIPURL())) {
				t.Fatalf("after stratum repoint on %s, %s does not target the VIP %s:\n%s", h.Name(), p, m.c.VIPURL(), b)
			}
		}
	}
	m.checkCilium(vip)
	vcs, _, err := m.userClient(m.cps[0])
	if err != nil {
		t.Fatal(err)
	}
	m.writeConfigMap(vcs, vipSentinel)
	m.checkClients()
	m.loads = startWorkloads(t, m.ctx, m.c, "vip", vcs, m.cps[0], vipProbeTimeout)
	// The operator's first backup, once the cluster is HA: a restore may
	// go back to it later, past joins, resets and a downgrade.
	m.saveSnapshot(t, vcs)
}

// saveSnapshot: a ConfigMap written, `stratum snapshot save` on a drawn
// control plane, another ConfigMap written; the snapshot is kept in snaps.
func (m *maintenance) saveSnapshot(t *rapid.T, vcs kubernetes.Interface) savedSnapshot {
	saver := drawHost(t, m.cps, "snapshot saved on")
	m.writeConfigMap(vcs, fmt.Sprintf("before-snapshot-%d", len(m.snaps)))
	file := filepath.Join(m.snapDir, fmt.Sprintf("etcd-%d.db", len(m.snaps)))
	m.run(saver, cli.ExitOK, "snapshot", "save", file)
	st, err := utlsnapshot.NewV3(zap.NewNop()).Status(file)
	if err != nil {
		t.Fatalf("etcdutl status of the snapshot saved on %s: %v", saver.Name(), err)
	}
	s := savedSnapshot{file: file, holds: slices.Clone(m.present), storage: st.Version}
	m.snaps = append(m.snaps, s)
	m.writeConfigMap(vcs, fmt.Sprintf("after-snapshot-%d", len(m.snaps)-1))
	return s
}

// writeConfigMap writes ConfigMap default/name through cs; it must then
// read back through the VIP (checkData). The VIP sentinel carries what
// readThroughVIP expects.
func (m *maintenance) writeConfigMap(cs kubernetes.Interface, name string) {
	m.t.Helper()
	value := name
	if name == vipSentinel {
		value = "through the VIP"
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string]string{"written": value}}
	ok, last := eventually(m.ctx, vipSettle, func() (bool, string) {
		ctx, cancel := context.WithTimeout(m.ctx, vipProbeTimeout)
		defer cancel()
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err)
	})
	if !ok {
		m.t.Fatalf("write ConfigMap default/%s within %s (after %s): %s", name, vipSettle, m.last, last)
	}
	m.present = append(m.present, name)
}

// checkData: through the VIP, with each control plane's admin kubeconfig,
// every ConfigMap written since the last restore's snapshot reads back, and
// none written after that snapshot does.
func (m *maintenance) checkData() {
	t := m.t
	explored.invariant("data acknowledged before a snapshot survives its restore; data after it is gone")
	for _, h := range m.cps {
		cs, _, err := m.userClient(h)
		if err != nil {
			t.Fatal(err)
		}
		ok, last := eventually(m.ctx, vipSettle, func() (bool, string) {
			ctx, cancel := context.WithTimeout(m.ctx, vipProbeTimeout)
			defer cancel()
			for _, name := range m.present {
				if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
					return false, fmt.Sprintf("ConfigMap %s: %v", name, err)
				}
			}
			for _, name := range m.gone {
				if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return false, fmt.Sprintf("ConfigMap %s, written after the snapshot restored: %v, want NotFound", name, err)
				}
			}
			return true, ""
		})
		if !ok {
			t.Fatalf("through the VIP with %s's admin kubeconfig (after %s): %s", h.Name(), m.last, last)
		}
	}
}

// check is the invariant between actions: the members are the control
// planes, all voters of one cluster; clients read through the VIP; the
// data is what was acknowledged.
func (m *maintenance) check() {
	m.checkMembers()
	m.checkClients()
	m.checkData()
}

// checkMembers: within the bound, the members are exactly the control
// planes, every one a voter, each host's node state naming its member.
func (m *maintenance) checkMembers() {
	t := m.t
	explored.invariant("the members are the control planes, all voters")
	ok, last := eventually(m.ctx, 60*time.Second, func() (bool, string) {
		ms, err := m.memberList()
		if err != nil {
			return false, err.Error()
		}
		if len(ms) != len(m.cps) {
			return false, fmt.Sprintf("members %+v, want %v", ms, names(m.cps))
		}
		for _, mb := range ms {
			h := m.c.Host(mb.Name)
			if h == nil || !slices.Contains(m.cps, h) || mb.PeerURLs != h.PeerURL() || mb.Learner {
				return false, fmt.Sprintf("member %+v is not a control plane's voter", mb)
			}
		}
		return true, ""
	})
	if !ok {
		t.Fatalf("the members are not the control planes %v, all voters, within 60s (after %s): %s", names(m.cps), m.last, last)
	}
	for _, h := range m.cps {
		st, err := nodestate.Load(h.Files())
		if err != nil || st.Etcd.PeerURL != h.PeerURL() {
			t.Fatalf("%s's node state (after %s): %+v, %v", h.Name(), m.last, st, err)
		}
	}
}

// kubeconfigs are the host's kubeconfigs, by file name.
func kubeconfigs(t *rapid.T, h *sim.Host) map[string][]byte {
	out, err := h.Kubeconfigs()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func equalFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// checkCilium: every container and init container of the Cilium agent and
// operator reaches the apiserver through the VIP, and the agent's other
// settings are kept.
func (m *maintenance) checkCilium(vip string) {
	t := m.t
	explored.invariant("Cilium's agent and operator point at the VIP")
	cs, _, err := m.nodeClient(m.cps[0])
	if err != nil {
		t.Fatal(err)
	}
	ds, err := cs.AppsV1().DaemonSets("kube-system").Get(m.ctx, "cilium", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := cs.AppsV1().Deployments("kube-system").Get(m.ctx, "cilium-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []corev1.PodSpec{ds.Spec.Template.Spec, dep.Spec.Template.Spec} {
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			if env["KUBERNETES_SERVICE_HOST"] != vip || env["KUBERNETES_SERVICE_PORT"] != fmt.Sprint(version.APIServerPort) {
				t.Fatalf("Cilium container %s after the repoint: %v, want KUBERNETES_SERVICE_HOST=%s", c.Name, env, vip)
			}
			if c.Name == "cilium-agent" && env["K8S_NODE_NAME"] != "x" {
				t.Fatalf("the repoint dropped the agent's other settings: %v", env)
			}
		}
	}
}

// restore is disaster recovery: a snapshot (drawn: one saved earlier in the
// check, or a new one saved on a drawn control plane, ConfigMaps written
// before it and after it) restored on a drawn control plane (the seed); one
// of a newer etcd's data than the seed runs (saved before the downgrade) is
// refused first, changing nothing, and a new one is saved and restored. The
// cluster's revision never goes back, and every other control plane is
// rejoined in a drawn order, each
// first without --force (refused, changing nothing, exactly while its old
// cluster keeps a quorum), and each crashed at a drawn checkpoint of its
// rejoin and re-run. A rejoin that needs no --force may instead run, forced,
// while a drawn member of the restored cluster restarts under it
// (restartUnder), and must succeed. The clients' histories are checked before the restore
// (which rewinds the data by design) and start afresh after it.
func (m *maintenance) restore(t *rapid.T) {
	seed := drawHost(t, m.cps, "snapshot restored on")
	vcs, _, err := m.userClient(m.cps[0])
	if err != nil {
		t.Fatal(err)
	}
	var snap savedSnapshot
	if len(m.snaps) > 0 && rapid.Bool().Draw(t, "restore an older snapshot") {
		snap = m.snaps[rapid.IntRange(0, len(m.snaps)-1).Draw(t, "older snapshot")]
		explored.ran("restore: a snapshot saved earlier")
	} else {
		snap = m.saveSnapshot(t, vcs)
		explored.ran("restore: a snapshot saved just before")
	}
	if olderEtcd(seed.EtcdVersion(), snap.storage) {
		m.newerSnapshotRefused(t, seed, snap)
		explored.ran("restore: a newer etcd's snapshot refused, a new one saved")
		snap = m.saveSnapshot(t, vcs)
	}
	checkHistories(t, m.ctx, m.loads, m.cps[0])
	before := m.clusterRevision(t)
	m.run(seed, cli.ExitOK, "snapshot", "restore", snap.file)
	explored.invariant("a restore never moves the cluster's revision back")
	if after := m.clusterRevision(t); after <= before {
		t.Fatalf("the restore of %s on %s moved the cluster's revision back from %d to %d", snap.file, seed.Name(), before, after)
	}
	written := append(slices.Clone(m.present), m.gone...)
	m.present = slices.Clone(snap.holds)
	m.gone = slices.DeleteFunc(written, func(s string) bool { return slices.Contains(snap.holds, s) })
	old := len(m.cps)
	others := slices.DeleteFunc(slices.Clone(m.cps), func(h *sim.Host) bool { return h == seed })
	order := rapid.Permutation(names(others)).Draw(t, "rejoin order")
	diskFaulted := false
	// rejoined are the restored cluster's members: the seed and those
	// rejoined so far.
	rejoined := []*sim.Host{seed}
	for i, name := range order {
		h := m.c.Host(name)
		// The old cluster's members still on it: this one and those after.
		stillOld := len(order) - i
		if olderEtcd(h.EtcdVersion(), seed.EtcdVersion()) {
			m.olderRejoinRefused(t, h, seed)
		}
		// A rejoin its old cluster's quorum does not refuse may meet a
		// member of the restored cluster restarting, the seed its first
		// step talks to in most draws: it must wait the outage out.
		if stillOld <= old/2 {
			if victim := rapid.OneOf(rapid.Just("none"), rapid.SampledFrom(names(rejoined))).Draw(t, "restart under the rejoin of "+name); victim != "none" {
				args := []string{"etcd", "rejoin", "--server", seed.IP().String(), "--force"}
				r := m.restartUnder("rejoin", h, m.c.Host(victim), args, rejoinCrashPoints)
				if r.code != cli.ExitOK {
					t.Fatalf("stratum %s on %s%s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), name, r.restarted, r.code, r.out, r.errOut)
				}
				m.last = "stratum etcd rejoin on " + name + r.restarted
				rejoined = append(rejoined, h)
				continue
			}
		}
		before := nodeFiles(t, h)
		code, out, errOut := m.stratum(h, "etcd", "rejoin", "--server", seed.IP().String())
		explored.invariant("a rejoin without --force never wipes a member of a cluster that keeps a quorum")
		switch {
		case stillOld > old/2 && code != cli.ExitRefused:
			t.Fatalf("stratum etcd rejoin without --force on %s, whose old cluster keeps %d of %d members: exit %d, want a refusal (3)\nstdout:\n%s\nstderr:\n%s", name, stillOld, old, code, out, errOut)
		case code == cli.ExitRefused:
			if !strings.Contains(errOut, "quorum") {
				t.Fatalf("stratum etcd rejoin on %s refused without naming the old cluster's quorum:\n%s", name, errOut)
			}
			if after := nodeFiles(t, h); !equalFiles(before, after) {
				t.Fatalf("a refused rejoin on %s changed its files", name)
			}
			if !h.EtcdRunning() {
				t.Fatalf("a refused rejoin on %s stopped its etcd", name)
			}
		case code != cli.ExitOK:
			t.Fatalf("stratum etcd rejoin on %s (its old cluster keeps %d of %d members): exit %d\nstdout:\n%s\nstderr:\n%s", name, stillOld, old, code, out, errOut)
		}
		if code == cli.ExitOK {
			rejoined = append(rejoined, h)
			continue
		}
		rejoined = append(rejoined, h) // by the forced rejoin below, or the check fails
		args := []string{"etcd", "rejoin", "--server", seed.IP().String(), "--force"}
		if cp := rapid.SampledFrom(append([]string{"none"}, rejoinCrashPoints...)).Draw(t, "crash the rejoin of "+name+" at"); cp != "none" {
			m.crashedRun(h, cp, args)
		}
		// The first forced rejoin of every restore runs on a failing disk.
		if !diskFaulted {
			diskFaulted = true
			m.diskFaultedRejoin(t, h, args)
			continue
		}
		m.run(h, cli.ExitOK, args...)
	}
	m.checkMembers()
	m.checkClients()
	m.checkData()
	vcs, _, err = m.userClient(m.cps[0])
	if err != nil {
		t.Fatal(err)
	}
	m.loads = startWorkloads(t, m.ctx, m.c, "vip", vcs, m.cps[0], vipProbeTimeout)
}

// reset: a control plane other than the first (whose credentials the
// workloads hold) leaves with `stratum reset`, the operator having started
// whatever was down. When drawn the reset crashes at a drawn checkpoint, and
// `stratum up` there is refused, naming the unfinished reset, until the
// reset is run again. Then the members are the remaining control planes,
// the clients and data are served, and nothing of a control plane is left on
// the host; when drawn it joins again with a join command as printed, else
// it is a spare again.
func (m *maintenance) reset(t *rapid.T) {
	if len(m.cps) < 2 {
		t.Skip("no control plane but the first to reset")
	}
	for _, h := range m.cps {
		if !h.EtcdRunning() || !h.APIServerRunning() || !m.vipRunning(h) {
			m.run(h, cli.ExitOK, "up")
		}
	}
	h := drawHost(t, m.cps[1:], "control plane to reset")
	if cp := rapid.SampledFrom(append([]string{"none"}, ha.ResetCheckpoints...)).Draw(t, "crash the reset of "+h.Name()+" at"); cp != "none" {
		m.crashedRun(h, cp, []string{"reset"})
		explored.invariant("a node whose reset is unfinished does not start")
		if _, errOut := m.run(h, cli.ExitRefused, "up"); !strings.Contains(errOut, "reset of this node is under way") {
			t.Fatalf("stratum up on %s after its reset crashed at %s was refused without naming the reset:\n%s", h.Name(), cp, errOut)
		}
	}
	m.run(h, cli.ExitOK, "reset")
	m.cps = slices.DeleteFunc(m.cps, func(c *sim.Host) bool { return c == h })
	explored.invariant("a reset leaves nothing of a control plane")
	data, _ := h.Files().ReadDir(version.EtcdDataDir)
	if left := nodeFiles(t, h); len(left) > 0 || len(data) > 0 || hasFile(h, ha.ResetJournalPath()) {
		t.Fatalf("after its reset %s still has %v, %d entries of etcd data, reset journal %v", h.Name(), slices.Sorted(maps.Keys(left)), len(data), hasFile(h, ha.ResetJournalPath()))
	}
	m.check()
	if !rapid.Bool().Draw(t, "join "+h.Name()+" again") {
		m.spares = append(m.spares, h)
		return
	}
	m.run(h, cli.ExitOK, m.printedJoin(drawHost(t, m.cps, "minter for "+h.Name()))...)
	m.cps = append(m.cps, h)
	m.check()
}

// newerSnapshotRefused: a restore on seed of a snapshot whose data is of a
// newer etcd than seed runs (saved before the downgrade) is refused, naming
// both versions, before it stops anything: seed's files, services and the
// cluster's data are as they were.
func (m *maintenance) newerSnapshotRefused(t *rapid.T, seed *sim.Host, snap savedSnapshot) {
	explored.invariant("a snapshot of a newer etcd's data is refused before the restore stops anything")
	before := nodeFiles(t, seed)
	_, errOut := m.run(seed, cli.ExitRefused, "snapshot", "restore", snap.file)
	if !strings.Contains(errOut, "newer etcd") || !strings.Contains(errOut, majorMinor(snap.storage)) {
		t.Fatalf("the restore on %s (etcd %s) of %s (data at etcd %s) was refused without naming the versions:\n%s", seed.Name(), seed.EtcdVersion(), snap.file, snap.storage, errOut)
	}
	if after := nodeFiles(t, seed); !equalFiles(before, after) || !seed.EtcdRunning() || !seed.APIServerRunning() {
		t.Fatalf("a refused restore changed %s: files changed %v, etcd running %v, apiserver running %v", seed.Name(), !equalFiles(before, after), seed.EtcdRunning(), seed.APIServerRunning())
	}
	m.checkData()
}

// clusterRevision is the highest revision the running control planes'
// members report, as etcdctl endpoint status would show it.
func (m *maintenance) clusterRevision(t *rapid.T) int64 {
	var rev int64
	for _, h := range m.cps {
		if !h.EtcdRunning() {
			continue
		}
		cli, err := h.EtcdClient()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		st, err := cli.Status(ctx, cli.Endpoints()[0])
		cancel()
		cli.Close()
		if err == nil && st.Header.Revision > rev {
			rev = st.Header.Revision
		}
	}
	return rev
}

// olderRejoinRefused: a rejoin of h, whose etcd is older than the one the
// seed restored the snapshot with, is refused even with --force, naming
// h's version, before it changes anything (etcd would exit at the rejoined
// member's first start, after the wipe and the add). The operator then
// installs the seed's etcd on h.
func (m *maintenance) olderRejoinRefused(t *rapid.T, h, seed *sim.Host) {
	before, running := nodeFiles(t, h), h.EtcdRunning()
	members := m.seedMembers(t, seed)
	code, out, errOut := m.stratum(h, "etcd", "rejoin", "--server", seed.IP().String(), "--force")
	explored.invariant("a rejoin on an older etcd than the restored cluster's is refused before it changes anything")
	if code != cli.ExitRefused || !strings.Contains(errOut, strings.TrimPrefix(h.EtcdVersion(), "v")) {
		t.Fatalf("stratum etcd rejoin --force on %s, whose etcd %s is older than the seed %s's %s: exit %d, want a refusal (3) naming the versions\nstdout:\n%s\nstderr:\n%s", h.Name(), h.EtcdVersion(), seed.Name(), seed.EtcdVersion(), code, out, errOut)
	}
	if after := nodeFiles(t, h); !equalFiles(before, after) || h.EtcdRunning() != running {
		t.Fatalf("a rejoin on %s refused for its etcd version changed it: files changed %v, etcd running %v -> %v", h.Name(), !equalFiles(before, after), running, h.EtcdRunning())
	}
	if after := m.seedMembers(t, seed); after != members {
		t.Fatalf("a rejoin on %s refused for its etcd version changed the seed's members: %s -> %s", h.Name(), members, after)
	}
	m.installEtcd(h, seed.EtcdVersion())
}

// seedMembers are the members of seed's etcd cluster, by ID and learner flag.
func (m *maintenance) seedMembers(t *rapid.T, seed *sim.Host) string {
	ec, err := directEtcd(seed, seed.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	ml, err := ec.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list of the seed %s: %v", seed.Name(), err)
	}
	var out []string
	for _, mb := range ml.Members {
		out = append(out, fmt.Sprintf("%x:%v", mb.ID, mb.IsLearner))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// installEtcd makes h's etcd run version v from its next start: the
// operator installing that etcd on it.
func (m *maintenance) installEtcd(h *sim.Host, v string) {
	if v == version.Etcd {
		v = "" // the pinned etcd: the embedded member
	}
	h.SetEtcdVersion(v)
	m.c.Events().Record(h.Name(), "action", "etcd %s installed", h.EtcdVersion())
}

// rejoinCrashPoints are the rejoin checkpoints every forced rejoin of a
// member with data reaches (ha.CheckpointRejoinAfterMemberRemove only comes
// when the seed still lists the node as a started member).
var rejoinCrashPoints = slices.DeleteFunc(slices.Clone(ha.RejoinCheckpoints), func(cp string) bool {
	return cp == ha.CheckpointRejoinAfterMemberRemove
})

// nodeFiles are the host's files under /etc/stratum and its node state, by
// path: what a refusal must leave as it was.
func nodeFiles(t *rapid.T, h *sim.Host) map[string][]byte {
	out := map[string][]byte{}
	var walk func(dir string)
	walk = func(dir string) {
		entries, err := h.Files().ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range entries {
			p := path.Join(dir, e.Name())
			if e.IsDir() {
				walk(p)
				continue
			}
			if b, err := h.Files().ReadFile(p); err == nil {
				out[p] = b
			}
		}
	}
	walk(version.K8sConfDir)
	if b, err := h.Files().ReadFile(nodestate.Path); err == nil {
		out[nodestate.Path] = b
	}
	return out
}

// downgrade is `stratum etcd downgrade <previous minor>` on a drawn control
// plane, with the operator swapping each member to the older etcd in a
// drawn order once etcd has lowered its storage (its service stopped, the
// older binary installed, started again), while the clients keep working;
// a join drawn mid-way is refused while the downgrade is under way. The
// command returns once every member runs the older etcd and etcd has ended
// the downgrade.
func (m *maintenance) downgrade(t *rapid.T) {
	if !m.downgradable() {
		t.Skip("the cluster already runs the previous etcd")
	}
	target := versionMinor(version.EtcdPrevious)
	on := drawHost(t, m.cps, "downgrade through")
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := m.stratum(on, "etcd", "downgrade", target)
		done <- result{code, out, errOut}
	}()
	order := rapid.Permutation(names(m.cps)).Draw(t, "swap order")
	// A join is tried after a drawn swap but the last (the downgrade is
	// then still under way), when a spare host is left.
	joinAt := rapid.IntRange(0, max(0, len(order)-2)).Draw(t, "join attempted after swap")
	obs := observerOn(m.cps[0], m.c.Config().Etcd)
	for i, name := range order {
		h := m.c.Host(name)
		early := ""
		ok, last := eventually(m.ctx, 2*time.Minute, func() (bool, string) {
			select {
			case r := <-done:
				early = fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.errOut)
				return true, ""
			default:
			}
			st, err := obs.EtcdStorageAt(m.ctx, h.IP().String())
			return err == nil && strings.HasPrefix(st.StorageVersion, target), fmt.Sprintf("%+v %v", st, err)
		})
		if early != "" {
			t.Fatalf("stratum etcd downgrade %s on %s returned before %s (of %v) was swapped to the older etcd: %s", target, on.Name(), name, order, early)
		}
		if !ok {
			t.Fatalf("%s's storage not lowered to %s within 2 min of the downgrade: %s", name, target, last)
		}
		d := h.Handle()
		if err := d.StopService(m.ctx, ha.ServiceEtcd); err != nil {
			t.Fatalf("stop etcd on %s: %v", name, err)
		}
		h.SetEtcdVersion(version.EtcdPrevious)
		if err := d.StartService(m.ctx, ha.ServiceEtcd); err != nil {
			t.Fatalf("start %s on etcd %s mid-downgrade: %v", name, version.EtcdPrevious, err)
		}
		m.c.Events().Record(name, "action", "etcd swapped to %s", version.EtcdPrevious)
		m.last = "the swap of " + name + " to etcd " + version.EtcdPrevious
		m.checkClients()
		if i == joinAt && len(m.spares) > 0 && i < len(order)-1 {
			m.joinRefusedMidDowngrade(t)
		}
	}
	select {
	case r := <-done:
		if r.code != cli.ExitOK {
			t.Fatalf("stratum etcd downgrade %s on %s: exit %d\nstdout:\n%s\nstderr:\n%s", target, on.Name(), r.code, r.out, r.errOut)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("stratum etcd downgrade %s did not return within 2 min of the last swap", target)
	}
	m.last = "the etcd downgrade to " + target
	explored.invariant("after a downgrade every member runs the older etcd")
	for _, h := range m.cps {
		if st := obs.EtcdMemberStatus(m.ctx, h.IP().String()); st.Err != nil || !strings.HasPrefix(strings.TrimPrefix(st.Version, "v"), target+".") {
			t.Fatalf("after the downgrade, %s's member: %+v", h.Name(), st)
		}
	}
	m.check()
}

// joinRefusedMidDowngrade: a join as printed on a spare while the downgrade
// is under way is refused before anything is added, naming the downgrade.
func (m *maintenance) joinRefusedMidDowngrade(t *rapid.T) {
	h := drawHost(t, m.spares, "joiner mid-downgrade")
	args := m.printedJoin(drawHost(t, m.cps, "minter mid-downgrade"))
	before, _ := m.memberList()
	code, out, errOut := m.stratum(h, args...)
	explored.invariant("a join while an etcd downgrade is under way is refused before the add")
	if code != cli.ExitRefused || !strings.Contains(errOut, "downgrade") {
		t.Fatalf("a join on %s during the etcd downgrade: exit %d, want a refusal (3) naming the downgrade\nstdout:\n%s\nstderr:\n%s", h.Name(), code, out, errOut)
	}
	if after, _ := m.memberList(); len(after) != len(before) {
		t.Fatalf("a refused join during the downgrade changed the members: %+v -> %+v", before, after)
	}
	if hasFile(h, nodestate.Path) || hasFile(h, ha.JoinIntentPath()) {
		t.Fatalf("a refused join left node state or a journal on %s", h.Name())
	}
}

// versionMinor is "3.6" of "v3.6.16".
func versionMinor(v string) string {
	maj, min := etcdMinor(v)
	return fmt.Sprintf("%d.%d", maj, min)
}

// etcdMinor is the major and minor of an etcd version ("v3.6.16", "3.7.3").
func etcdMinor(v string) (major, minor int) {
	fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &major, &minor)
	return major, minor
}

// majorMinor is etcd version v as major.minor.
func majorMinor(v string) string {
	major, minor := etcdMinor(v)
	return fmt.Sprintf("%d.%d", major, minor)
}

// olderEtcd: etcd version a's major.minor is below b's.
func olderEtcd(a, b string) bool {
	amaj, amin := etcdMinor(a)
	bmaj, bmin := etcdMinor(b)
	return amaj < bmaj || amaj == bmaj && amin < bmin
}

// clusterEtcd is the lowest etcd version the control planes run: the
// cluster version etcd decides, which a new member's etcd may not be below.
func (m *maintenance) clusterEtcd() string {
	lowest := ""
	for _, h := range m.cps {
		if v := h.EtcdVersion(); lowest == "" || olderEtcd(v, lowest) {
			lowest = v
		}
	}
	return lowest
}

// downgradable: the cluster runs an etcd newer than the previous release.
func (m *maintenance) downgradable() bool {
	return olderEtcd(version.EtcdPrevious, m.clusterEtcd())
}

// olderJoiner is a join as printed on a spare whose etcd is the previous
// release (an older stratum there). While the cluster runs a newer etcd it
// is refused before the member-add, naming both versions, and leaves
// nothing; the operator installs the cluster's etcd and runs the same
// command again. Once the cluster is downgraded it joins as it is.
func (m *maintenance) olderJoiner(t *rapid.T) {
	h := m.takeSpare(t, "joiner on the older etcd")
	m.installEtcd(h, version.EtcdPrevious)
	minter := drawHost(t, m.cps, "minter for "+h.Name())
	args := m.printedJoin(minter)
	if !m.downgradable() {
		m.run(h, cli.ExitOK, args...)
		m.cps = append(m.cps, h)
		m.check()
		return
	}
	before, _ := m.memberList()
	filesBefore := nodeFiles(t, h)
	code, out, errOut := m.stratum(h, args...)
	explored.invariant("a joiner on an older etcd than the cluster's is refused before the add")
	if code != cli.ExitRefused || !strings.Contains(errOut, strings.TrimPrefix(version.EtcdPrevious, "v")) {
		t.Fatalf("the join as printed on %s, whose etcd is %s, into a cluster on %s: exit %d, want a refusal (3) naming the versions\nstdout:\n%s\nstderr:\n%s", h.Name(), version.EtcdPrevious, version.Etcd, code, out, errOut)
	}
	if after, _ := m.memberList(); len(after) != len(before) {
		t.Fatalf("a refused join on the older etcd changed the members: %+v -> %+v", before, after)
	}
	if after := nodeFiles(t, h); !equalFiles(filesBefore, after) {
		t.Fatalf("a refused join on the older etcd left files on %s", h.Name())
	}
	m.installEtcd(h, m.clusterEtcd())
	m.run(h, cli.ExitOK, args...)
	m.cps = append(m.cps, h)
	m.check()
}

// diskJoin is a join as printed on a spare whose disk fails: a drawn kind of
// file operation under a drawn directory, the Nth of them, once or from then
// on, with EIO or ENOSPC; when drawn, the host then crashes losing what was
// not fsync'd. A join that fails names the errno; whatever happened, every
// file it wrote parses or is absent, no member is an orphan, and with the
// disk mended the operator's next step (`stratum up` where node state was
// saved, the join command again where not) makes it a control plane whose
// files a crash could no longer change.
func (m *maintenance) diskJoin(t *rapid.T) {
	h := m.takeSpare(t, "joiner with a failing disk")
	args := m.printedJoin(drawHost(t, m.cps, "minter for "+h.Name()))
	code := m.diskFaulted(t, h, "join", args)
	explored.invariant("after a disk fault on a join no member is an orphan")
	m.checkNoOrphanOn(h)
	// `stratum up` where the join saved node state, the join again where not.
	m.finishAfterDiskFault(t, h, "join", code == cli.ExitOK || hasFile(h, nodestate.Path), args)
	m.cps = append(m.cps, h)
	m.check()
}

// diskFaultedRejoin is a forced rejoin (args) on h whose disk fails, as
// diskFaulted draws it, then what the operator does next: `stratum up`
// after a rejoin that finished (its node state records the seed's
// cluster), the same rejoin again after one that failed.
func (m *maintenance) diskFaultedRejoin(t *rapid.T, h *sim.Host, args []string) {
	explored.ran("diskRejoin")
	code := m.diskFaulted(t, h, "rejoin", args)
	// Whatever the rejoin reached, the node keeps a node state: it is
	// what `stratum up` starts from and what a re-run plans from.
	explored.invariant("after a disk fault on a rejoin the node keeps its node state")
	if !hasFile(h, nodestate.Path) {
		t.Fatalf("after the rejoin on %s (exit %d), the node has no node state", h.Name(), code)
	}
	m.finishAfterDiskFault(t, h, "rejoin", code == cli.ExitOK, args)
}

// finishAfterDiskFault is the operator's next step after a disk-faulted op
// (args) on h: nothing when it finished and h still runs, `stratum up` when
// upFrom (what op saved lets h start), the same command again otherwise.
// Then op has finished, and nothing a crash could lose may be left.
func (m *maintenance) finishAfterDiskFault(t *rapid.T, h *sim.Host, op string, upFrom bool, args []string) {
	switch {
	case upFrom && h.EtcdRunning() && h.APIServerRunning():
	case upFrom:
		m.run(h, cli.ExitOK, "up")
	default:
		m.run(h, cli.ExitOK, args...)
	}
	explored.invariant("a finished " + op + " leaves nothing a crash could lose")
	if u := h.UnsyncedFiles(); len(u) > 0 {
		t.Fatalf("the %s on %s finished, but a crash now would lose %v", op, h.Name(), u)
	}
}

// diskFaulted runs `stratum args...` (the op) on h with a drawn disk fault
// on its stratum files: an operation (create, write, fsync, rename,
// directory fsync, mkdir), the directory it hits, from its nth time, once
// or from then on, EIO or ENOSPC. Then, drawn, h crashes losing what was
// not fsync'd. The command either finishes or fails naming the errno;
// after it every node file parses or is absent. It returns the command's
// exit code.
func (m *maintenance) diskFaulted(t *rapid.T, h *sim.Host, op string, args []string) int {
	ops := []faultfs.Op{faultfs.OpCreate, faultfs.OpWrite, faultfs.OpSync, faultfs.OpRename, faultfs.OpSyncDir, faultfs.OpMkdir}
	rule := &faultfs.Rule{
		Ops:    []faultfs.Op{rapid.SampledFrom(ops).Draw(t, "failing disk operation")},
		Prefix: rapid.SampledFrom([]string{version.PKIDir + "/", version.K8sConfDir + "/", version.StateDir + "/"}).Draw(t, "failing under"),
		Nth:    rapid.IntRange(1, 4).Draw(t, "failing from the nth"),
		Sticky: rapid.Bool().Draw(t, "failing from then on"),
		Errno:  rapid.SampledFrom([]syscall.Errno{syscall.EIO, syscall.ENOSPC}).Draw(t, "errno"),
	}
	h.FailDisk(rule)
	code, out, errOut := m.stratum(h, args...)
	fired := rule.Fired() > 0
	if code != cli.ExitOK {
		explored.invariant("a " + op + " that a disk fault fails names the errno")
		if !fired || !strings.Contains(errOut, rule.Errno.Error()) {
			t.Fatalf("the %s on %s with %s armed (fired %v): exit %d, its error does not name %q\nstdout:\n%s\nstderr:\n%s", op, h.Name(), rule, fired, code, rule.Errno.Error(), out, errOut)
		}
	}
	h.DisarmDisk()
	m.c.Events().Record(h.Name(), "action", "the %s with %s armed: exit %d, fired %v", op, rule, code, fired)
	if rapid.Bool().Draw(t, "crash losing unsynced data") {
		h.CrashLosingUnsynced()
	}
	explored.invariant("after a disk fault every node file parses or is absent")
	if err := sim.CheckNodeFiles(h.Files()); err != nil {
		t.Fatalf("after the %s on %s with %s (exit %d): %v\nstderr:\n%s", op, h.Name(), rule, code, err, errOut)
	}
	return code
}

// checkNoOrphanOn: a member with h's peer URL exists only while h holds the
// join's intent journal or its node state.
func (m *maintenance) checkNoOrphanOn(h *sim.Host) {
	ms, err := m.memberList()
	if err != nil {
		m.t.Fatal(err)
	}
	for _, mb := range ms {
		if mb.PeerURLs == h.PeerURL() && !hasFile(h, nodestate.Path) && !hasFile(h, ha.JoinIntentPath()) {
			m.t.Fatalf("member %+v is %s's, which holds neither node state nor an intent journal: an orphan member", mb, h.Name())
		}
	}
}

// converge: every control plane restarted with `stratum up` where a crash
// or a fault left it down, then the members, the clients, the data and the
// clients' histories.
func (m *maintenance) converge() {
	explored.ran("check")
	for _, h := range m.cps {
		if !h.EtcdRunning() || !h.APIServerRunning() || !m.vipRunning(h) {
			m.run(h, cli.ExitOK, "up")
		}
	}
	m.check()
	checkHistories(m.t, m.ctx, m.loads, m.cps[0])
}
