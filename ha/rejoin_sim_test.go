package ha_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// restoreCluster is a simulated three-control-plane cluster with etcd data
// written before and after a snapshot.
type restoreCluster struct {
	t    *testing.T
	c    *sim.Cluster
	ctx  context.Context
	snap string
}

const (
	keyBefore = "/stratum-test/before-snapshot"
	keyAfter  = "/stratum-test/after-snapshot"
)

func startRestoreCluster(t *testing.T) *restoreCluster {
	t.Helper()
	assetstest.Require(t)
	// cp3 starts without an apiserver: nothing reads through it before it
	// rejoins (whose start runs one), and after the restore it would only
	// retry a stale etcd beside the apiservers the test does read.
	cfg := sim.Config{ControlPlanes: 3, APIServers: true, WithoutAPIServer: []string{"cp3"}}
	if os.Getenv("STRATUM_TEST_EVENTS") != "" {
		cfg.EventsTo = os.Stderr // the event log as it happens, for a run that dies
	}
	c := sim.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	t.Cleanup(cancel)
	r := &restoreCluster{t: t, c: c, ctx: ctx, snap: filepath.Join(t.TempDir(), "etcd.db")}
	r.put("cp1", keyBefore)
	if _, err := configMapClient(t, c.Host("cp1")).CoreV1().ConfigMaps("default").Create(ctx, configMap("before", map[string]string{"k": "v"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ss, err := joinNodeOn(c.Host("cp1")).SnapshotSave(ctx, r.snap)
	if err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	if ss.TotalKeys == 0 || ss.Revision == 0 {
		t.Fatalf("snapshot status: %+v", ss)
	}
	r.put("cp1", keyAfter)
	if _, err := configMapClient(t, c.Host("cp1")).CoreV1().ConfigMaps("default").Create(ctx, configMap("after", map[string]string{"k": "v"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *restoreCluster) put(host, key string) {
	r.t.Helper()
	put(r.t, r.ctx, r.c.Host(host), key)
}

func (r *restoreCluster) restore() {
	r.t.Helper()
	var out syncbuf.Buffer
	if err := reportingNodeOn(r.c.Host("cp1"), &out).SnapshotRestore(r.ctx, &out, r.snap); err != nil {
		r.t.Fatalf("restore on cp1: %v\n%s", err, out.String())
	}
	for _, step := range []string{"restore into scratch (hash verified): done in", "stop the control plane: done in", "start the control plane: done in"} {
		if !strings.Contains(out.String(), step) {
			r.t.Errorf("the restore did not report the step %q:\n%s", step, out.String())
		}
	}
	if got := r.members("cp1"); strings.Join(got, " ") != "cp1:voter" {
		r.t.Fatalf("after restore the seed's members are %v, want cp1 alone", got)
	}
}

// members lists the members of the cluster of host's etcd as name:voter|learner.
func (r *restoreCluster) members(host string) []string {
	r.t.Helper()
	cli := r.memberClient(host)
	defer cli.Close()
	ml, err := cli.MemberList(r.ctx)
	if err != nil {
		r.t.Fatalf("member list through %s: %v", host, err)
	}
	var out []string
	for _, m := range ml.Members {
		role := "voter"
		if m.IsLearner {
			role = "learner"
		}
		if m.Name == "" {
			role = "unstarted"
		}
		out = append(out, fmt.Sprintf("%s:%s", m.Name, role))
	}
	sort.Strings(out)
	return out
}

func (r *restoreCluster) clusterID(host string) uint64 {
	r.t.Helper()
	cli := r.memberClient(host)
	defer cli.Close()
	st, err := cli.Status(r.ctx, r.c.Host(host).ClientURL())
	if err != nil {
		r.t.Fatalf("status of %s: %v", host, err)
	}
	return st.Header.ClusterId
}

// checkHoldsSnapshot: host's own member serves the snapshot's data: the key
// written before the snapshot, not the one after.
func (r *restoreCluster) checkHoldsSnapshot(host string) {
	r.t.Helper()
	cli := r.memberClient(host)
	defer cli.Close()
	for key, want := range map[string]int64{keyBefore: 1, keyAfter: 0} {
		resp, err := cli.Get(r.ctx, key)
		if err != nil {
			r.t.Fatalf("get %s through %s: %v", key, host, err)
		}
		if resp.Count != want {
			r.t.Fatalf("%s: %s count %d, want %d", host, key, resp.Count, want)
		}
	}
}

func (r *restoreCluster) rejoin(host string, force bool) (string, error) {
	var out syncbuf.Buffer
	err := reportingNodeOn(r.c.Host(host), &out).RejoinEtcd(r.ctx, &out, r.c.Host("cp1").IP().String(), force)
	return out.String(), err
}

// reportingNodeOn is joinNodeOn with its step and waiting lines (Env.Progress)
// written to w, as the CLI prints them.
func reportingNodeOn(h *sim.Host, w io.Writer) *ha.Node {
	d := h.Handle()
	return ha.NewNode(ha.Env{Host: d, Checkpoint: d.Checkpoint, Progress: func(line string) { fmt.Fprintln(w, line) }})
}

// memberClient is an etcd client of host's own member alone; the caller
// closes it.
func (r *restoreCluster) memberClient(host string) *clientv3.Client {
	r.t.Helper()
	h := r.c.Host(host)
	cli, err := h.EtcdClient(h.ClientURL())
	if err != nil {
		r.t.Fatal(err)
	}
	return cli
}

// revision is the etcd revision host's member answers a read with.
func (r *restoreCluster) revision(host string) int64 {
	r.t.Helper()
	return revision(r.t, r.ctx, r.c.Host(host))
}

// restoreRefusesDamagedSnapshot runs a restore of the snapshot with one byte
// of its checksum changed (its data no longer matches it): refused, with
// cp1's control plane running and its cluster as it was.
func (r *restoreCluster) restoreRefusesDamagedSnapshot() {
	r.t.Helper()
	db, err := os.ReadFile(r.snap)
	if err != nil {
		r.t.Fatal(err)
	}
	db[len(db)-1] ^= 0xff
	damaged := filepath.Join(r.t.TempDir(), "damaged.db")
	if err := os.WriteFile(damaged, db, 0o600); err != nil {
		r.t.Fatal(err)
	}
	var out syncbuf.Buffer
	err = reportingNodeOn(r.c.Host("cp1"), &out).SnapshotRestore(r.ctx, &out, damaged)
	if !errors.Is(err, ha.ErrRefused) || !strings.Contains(err.Error(), "nothing was changed") {
		r.t.Fatalf("restore of a snapshot whose data does not match its checksum: %v, want a refusal\n%s", err, out.String())
	}
	cp1 := r.c.Host("cp1")
	if !cp1.EtcdRunning() || !cp1.APIServerRunning() {
		r.t.Fatalf("a refused restore stopped cp1's control plane: etcd running %v, apiserver running %v", cp1.EtcdRunning(), cp1.APIServerRunning())
	}
	if got := strings.Join(r.members("cp1"), " "); got != "cp1:voter cp2:voter cp3:voter" {
		r.t.Fatalf("members after a refused restore: %s", got)
	}
}

// TestSnapshotRestoreThenRejoin: a damaged snapshot is refused before
// anything stops; a good one makes cp1 the seed of a new cluster whose
// revisions go on past every revision the old one reached (watchers never
// see it go backwards, and one from before is told it was compacted); a
// rejoin is refused while the old cluster may hold a quorum or on an older
// etcd, and otherwise brings the others into the seed's cluster.
func TestSnapshotRestoreThenRejoin(t *testing.T) {
	t.Parallel() // its own simulated cluster
	r := startRestoreCluster(t)
	c := r.c
	cp1IP := c.Host("cp1").IP().String()
	r.restoreRefusesDamagedSnapshot()
	before := r.revision("cp1")
	r.restore()
	r.checkHoldsSnapshot("cp1")
	// The old cluster may have gone on long after the snapshot; the test's
	// went on only a few revisions, and cp1's apiserver writes more than
	// that once restarted. So the bar is set above anything the restarted
	// apiserver writes in seconds: only a bump puts the restored cluster
	// past it.
	const farPastTheOldCluster = 100_000
	if after := r.revision("cp1"); after <= before+farPastTheOldCluster {
		t.Fatalf("the restored cluster's revision is %d, not far past the old cluster's %d: watchers of a cluster that went on after the snapshot would see it go backwards", after, before)
	}
	cli := r.memberClient("cp1")
	_, err := cli.Get(r.ctx, keyBefore, clientv3.WithRev(before))
	cli.Close()
	if err == nil || !strings.Contains(err.Error(), "compacted") {
		t.Fatalf("a read at the old cluster's revision %d after the restore: %v, want it refused as compacted (so a watcher from before relists)", before, err)
	}

	// cp2 and cp3 still make a quorum of the old cluster: a rejoin without
	// force is refused and changes nothing.
	cp2 := c.Host("cp2")
	stateBefore, _ := cp2.Files().ReadFile(nodestate.Path)
	// The dry run prints the plan and the refusal it would meet; the checks
	// below hold after it too.
	var plan syncbuf.Buffer
	if err := joinNodeOn(cp2).RejoinPlan(r.ctx, &plan, cp1IP, false); !errors.Is(err, ha.ErrOldClusterQuorum) || !errors.Is(err, ha.ErrRefused) {
		t.Fatalf("rejoin dry run: %v, want the refusal the rejoin would meet (ErrOldClusterQuorum)\n%s", err, plan.String())
	}
	if p := plan.String(); !strings.Contains(p, "would rejoin cp2") || !strings.Contains(p, "wipe") || !strings.Contains(p, "the wipe would be refused without --force") {
		t.Fatalf("rejoin dry run printed:\n%s", p)
	}
	if out, err := r.rejoin("cp2", false); !errors.Is(err, ha.ErrOldClusterQuorum) || !errors.Is(err, ha.ErrRefused) {
		t.Fatalf("rejoin without force while the old cluster has quorum: %v\n%s", err, out)
	}
	if stateAfter, _ := cp2.Files().ReadFile(nodestate.Path); !bytes.Equal(stateBefore, stateAfter) {
		t.Fatalf("a refused rejoin changed the node state")
	}
	if empty, err := cp2.Files().ReadDir(version.EtcdDataDir); err != nil || len(empty) == 0 || !cp2.EtcdRunning() || !cp2.APIServerRunning() {
		t.Fatalf("a refused rejoin touched cp2's etcd: data %v (%v), etcd running %v, apiserver running %v", empty, err, cp2.EtcdRunning(), cp2.APIServerRunning())
	}
	if got := strings.Join(r.members("cp2"), " "); got != "cp1:voter cp2:voter cp3:voter" {
		t.Fatalf("old cluster's members after a refused rejoin: %s", got)
	}
	if got := strings.Join(r.members("cp1"), " "); got != "cp1:voter" {
		t.Fatalf("seed's members after a refused rejoin: %s", got)
	}

	// On an etcd older than the restored cluster's (an older stratum on
	// cp2), even a forced rejoin is refused before it stops or wipes
	// anything: etcd would exit at the first start, after the add.
	cp2.SetEtcdVersion(version.EtcdPrevious)
	var olderPlan syncbuf.Buffer
	if err := joinNodeOn(cp2).RejoinPlan(r.ctx, &olderPlan, cp1IP, true); !errors.Is(err, ha.ErrEtcdVersionSkew) || !errors.Is(err, ha.ErrRefused) {
		t.Fatalf("rejoin dry run on etcd %s: %v, want ErrEtcdVersionSkew\n%s", version.EtcdPrevious, err, olderPlan.String())
	}
	if p := olderPlan.String(); !strings.Contains(p, "the rejoin would be refused, --force or not") {
		t.Fatalf("rejoin dry run on etcd %s printed:\n%s", version.EtcdPrevious, p)
	}
	if out, err := r.rejoin("cp2", true); !errors.Is(err, ha.ErrEtcdVersionSkew) || !errors.Is(err, ha.ErrRefused) || !strings.Contains(err.Error(), strings.TrimPrefix(version.EtcdPrevious, "v")) {
		t.Fatalf("rejoin --force on etcd %s into a cluster on %s: %v, want a refusal (ErrEtcdVersionSkew) naming the versions\n%s", version.EtcdPrevious, version.Etcd, err, out)
	}
	if stateAfter, _ := cp2.Files().ReadFile(nodestate.Path); !bytes.Equal(stateBefore, stateAfter) || !cp2.EtcdRunning() || !cp2.APIServerRunning() {
		t.Fatalf("a rejoin refused for its etcd version changed cp2: node state changed %v, etcd running %v, apiserver running %v", !bytes.Equal(stateBefore, stateAfter), cp2.EtcdRunning(), cp2.APIServerRunning())
	}
	if got := strings.Join(r.members("cp1"), " "); got != "cp1:voter" {
		t.Fatalf("seed's members after a rejoin refused for its etcd version: %s", got)
	}
	cp2.SetEtcdVersion("")

	start := time.Now()
	if out, err := r.rejoin("cp2", true); err != nil {
		t.Fatalf("rejoin cp2 --force: %v\n%s", err, out)
	} else if !strings.Contains(out, "wipe: done in") || !strings.Contains(out, "start: done in") {
		t.Errorf("the rejoin did not report its steps with their durations:\n%s", out)
	}
	t.Logf("cp2 rejoined in %s", time.Since(start).Round(time.Millisecond))

	// cp3 alone is no quorum: no force needed. It is paused after its stop,
	// and a second maintenance operation on cp3 meanwhile is refused naming
	// the rejoin, and changes nothing.
	cp3 := c.Host("cp3")
	armed := c.PauseAt("cp3", ha.CheckpointRejoinAfterStop)
	errc := make(chan error, 1)
	var out3 syncbuf.Buffer
	go func() {
		errc <- joinNodeOn(cp3).RejoinEtcd(r.ctx, &out3, cp1IP, false)
	}()
	select {
	case <-armed.Reached():
	case err := <-errc:
		t.Fatalf("cp3's rejoin ended before its pause: %v\n%s", err, out3.String())
	case <-r.ctx.Done():
		t.Fatal(r.ctx.Err())
	}
	if _, err := nodelock.Acquire(cp3.Handle(), nodelock.Maintenance, "test"); !errors.Is(err, nodelock.ErrBusy) || !strings.Contains(err.Error(), "stratum etcd rejoin") {
		t.Fatalf("maintenance lock during a rejoin: %v", err)
	}
	state3, _ := cp3.Files().ReadFile(nodestate.Path)
	if out, err := r.rejoin("cp3", true); !errors.Is(err, nodelock.ErrBusy) || !strings.Contains(err.Error(), "stratum etcd rejoin") {
		t.Fatalf("second rejoin during a rejoin: %v\n%s", err, out)
	}
	if s, _ := cp3.Files().ReadFile(nodestate.Path); !bytes.Equal(s, state3) {
		t.Fatal("a refused second rejoin changed cp3's node state")
	}
	if got := strings.Join(r.members("cp1"), " "); got != "cp1:voter cp2:voter" {
		t.Fatalf("seed's members while cp3 is paused: %s", got)
	}
	armed.Release()
	if err := <-errc; err != nil {
		t.Fatalf("rejoin cp3: %v\n%s", err, out3.String())
	}
	if !strings.Contains(out3.String(), "rejoined") {
		t.Fatalf("cp3's rejoin output:\n%s", out3.String())
	}

	if got := strings.Join(r.members("cp1"), " "); got != "cp1:voter cp2:voter cp3:voter" {
		t.Fatalf("members after the rejoins: %s", got)
	}
	n := joinNodeOn(c.Host("cp1"))
	var ips []string
	for _, name := range []string{"cp1", "cp2", "cp3"} {
		ips = append(ips, c.Host(name).IP().String())
		if a, b := r.clusterID("cp1"), r.clusterID(name); a != b {
			t.Fatalf("%s in cluster %x, the seed in %x", name, b, a)
		}
		r.checkHoldsSnapshot(name)
		checkFileModes(t, c.Host(name))
	}
	if err := n.EtcdClusterHealthy(r.ctx, ips); err != nil {
		t.Fatalf("cluster after the rejoins: %v", err)
	}
	cm := configMapClient(t, cp3).CoreV1().ConfigMaps("default")
	if _, err := cm.Get(r.ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("configmap written before the snapshot, through cp3: %v", err)
	}
	if _, err := cm.Get(r.ctx, "after", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("configmap written after the snapshot, through cp3: %v (want not found)", err)
	}
	for _, name := range []string{"cp2", "cp3"} {
		st, err := nodestate.Load(c.Host(name).Files())
		if err != nil || st.Etcd.InitialClusterState != "existing" || st.Etcd.ClusterID != fmt.Sprintf("%x", r.clusterID("cp1")) {
			t.Fatalf("%s node state after rejoin: %+v (%v)", name, st, err)
		}
	}
}

// TestRejoinCrashAtEachCheckpointResumes crashes cp2 at each rejoin
// checkpoint and re-runs the same command on the rebooted host: the re-run
// resumes and converges. Each checkpoint gets its own cluster, restored on
// cp1 from the snapshot, so each rejoin starts from a stale cp2.
func TestRejoinCrashAtEachCheckpointResumes(t *testing.T) {
	t.Parallel() // its own simulated cluster
	for _, cp := range ha.RejoinCheckpoints {
		t.Run(cp, func(t *testing.T) {
			t.Parallel() // each on its own cluster
			rejoinCrashAt(t, cp, false)
		})
	}
}

// TestRejoinResumesAfterItsProcessIsKilled is
// TestRejoinCrashAtEachCheckpointResumes with only the rejoin's process
// killed (SIGKILL of `stratum etcd rejoin`), cp2 running on with its
// services as the rejoin left them, as a real host's supervisor keeps them;
// the same command run again converges. Killed at its start, every service
// runs; after its etcd start, etcd runs as a learner. At the checkpoints
// between, the rejoin has stopped every service, as a host crash leaves it,
// which TestRejoinCrashAtEachCheckpointResumes covers.
func TestRejoinResumesAfterItsProcessIsKilled(t *testing.T) {
	t.Parallel() // its own simulated cluster
	for _, cp := range []string{ha.CheckpointRejoinStart, ha.CheckpointRejoinAfterEtcdStart} {
		t.Run(cp, func(t *testing.T) {
			t.Parallel() // each on its own cluster
			rejoinCrashAt(t, cp, true)
		})
	}
}

// rejoinCrashAt is one round of TestRejoinCrashAtEachCheckpointResumes, or,
// killProcess, of TestRejoinResumesAfterItsProcessIsKilled.
func rejoinCrashAt(t *testing.T, cp string, killProcess bool) {
	r := startRestoreCluster(t)
	c := r.c
	cp2 := c.Host("cp2")
	r.restore()
	seedID := r.clusterID("cp1")
	others := "" // members of the seed beside cp1 and cp2
	if cp == ha.CheckpointRejoinAfterMemberRemove {
		r.staleStartedMember("cp2")
		others = " cp3:voter"
	}
	inc := cp2.Incarnation()
	arm := c.CrashAt
	if killProcess {
		arm = c.CrashCommandAt
	}
	armed := arm("cp2", cp)
	errc := make(chan error, 1)
	go func() {
		errc <- joinNodeOn(cp2).RejoinEtcd(r.ctx, io.Discard, c.Host("cp1").IP().String(), true)
	}()
	select {
	case <-armed.Reached():
	case err := <-errc:
		t.Fatalf("%s: the rejoin ended without reaching the checkpoint: %v", cp, err)
	case <-r.ctx.Done():
		t.Fatal(r.ctx.Err())
	}
	if !killProcess {
		waitCrashed(t, cp2, inc)
	}
	// While cp2 is down the seed has cp1, and cp2 only as a learner: one
	// that never started once the add is done, a started one once its
	// etcd ran.
	want := "cp1:voter" + others
	if cp == ha.CheckpointRejoinAfterMemberAdd || cp == ha.CheckpointRejoinAfterStateSave {
		want = ":unstarted cp1:voter" + others
	}
	if cp == ha.CheckpointRejoinAfterEtcdStart {
		want = "cp1:voter cp2:learner" + others
	}
	if got := strings.Join(r.members("cp1"), " "); got != want {
		t.Fatalf("%s: seed's members while cp2 is crashed: %s, want %s", cp, got, want)
	}
	// From the stop to the state save the node state names the old
	// membership while the data goes: a reboot's `stratum up` refuses,
	// starting nothing.
	switch cp {
	case ha.CheckpointRejoinAfterStop, ha.CheckpointRejoinAfterWipe, ha.CheckpointRejoinAfterMemberRemove, ha.CheckpointRejoinAfterMemberAdd:
		if _, err := joinNodeOn(cp2).StartControlPlane(r.ctx); !errors.Is(err, ha.ErrEtcdDataReplacing) || !ha.IsRefusal(err) || !strings.Contains(err.Error(), "stratum etcd rejoin --server "+c.Host("cp1").IP().String()) {
			t.Fatalf("%s: stratum up while the rejoin is unfinished: %v, want a refusal with ErrEtcdDataReplacing naming the rejoin", cp, err)
		}
		if cp2.EtcdRunning() {
			t.Fatalf("%s: the refused up started etcd", cp)
		}
	}
	start := time.Now()
	if out, err := r.rejoin("cp2", true); err != nil {
		t.Fatalf("%s: re-run after the crash: %v\n%s", cp, err, out)
	}
	t.Logf("%s: re-run converged in %s", cp, time.Since(start).Round(time.Millisecond))
	if got := strings.Join(r.members("cp1"), " "); got != "cp1:voter cp2:voter"+others {
		t.Fatalf("%s: members after the re-run: %s", cp, got)
	}
	if id := r.clusterID("cp2"); id != seedID {
		t.Fatalf("%s: cp2 in cluster %x, the seed in %x", cp, id, seedID)
	}
	r.checkHoldsSnapshot("cp2")
	if !cp2.APIServerRunning() {
		t.Fatalf("%s: cp2's apiserver is not running after the re-run", cp)
	}
}

// staleStartedMember leaves host as a started member of the seed's cluster
// whose node state does not know it: host and cp3 rejoin in full (cp3 keeps
// the seed's quorum while host is down), then host crashes and its node
// state names the old cluster again (as one restored from a backup taken
// before the rejoin would). The next rejoin must drop the started member
// before it can add the node again, so it passes
// CheckpointRejoinAfterMemberRemove.
func (r *restoreCluster) staleStartedMember(host string) {
	r.t.Helper()
	for _, name := range []string{host, "cp3"} {
		if out, err := r.rejoin(name, true); err != nil {
			r.t.Fatalf("rejoin of %s before making %s stale: %v\n%s", name, host, err, out)
		}
	}
	h := r.c.Host(host)
	inc := h.Incarnation()
	h.Crash()
	waitCrashed(r.t, h, inc)
	st, err := nodestate.Load(h.Files())
	if err != nil {
		r.t.Fatal(err)
	}
	st.Etcd.ClusterID = "1"
	if err := nodestate.Save(h.Files(), st); err != nil {
		r.t.Fatal(err)
	}
}

// waitCrashed waits until h's crash has finished: Armed.Reached closes, and
// the incarnation is bumped, before Host.Crash has stopped the host's
// services, so a re-run started at once would race the crash's own stops
// (its hard stop of etcd would kill the member the re-run starts). Done is:
// a new incarnation, no apiserver or etcd running, and nothing listening on
// the etcd ports.
func waitCrashed(t *testing.T, h *sim.Host, inc uint64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		quiet := h.Incarnation() != inc && !h.APIServerRunning() && !h.EtcdRunning()
		for _, port := range []string{"2379", "2380"} {
			if !quiet {
				break
			}
			if conn, err := net.DialTimeout("tcp", net.JoinHostPort(h.IP().String(), port), 200*time.Millisecond); err == nil {
				conn.Close()
				quiet = false
			}
		}
		if quiet {
			time.Sleep(100 * time.Millisecond)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the crash did not finish within a minute", h.Name())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRejoinRefusedWhileOldPeersMayHoldQuorum: five control planes, cp1
// restored. From cp2, cut off from cp3..cp5 (which still make a quorum of the
// old cluster, 3 of 5), the silent members are enough to hold a quorum: a
// rejoin without force is refused. Healed, they report a leader: refused
// again. Neither refusal changes anything.
func TestRejoinRefusedWhileOldPeersMayHoldQuorum(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp1, cp2 := c.Host("cp1"), c.Host("cp2")
	snap := filepath.Join(t.TempDir(), "etcd.db")
	if _, err := joinNodeOn(cp1).SnapshotSave(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if err := joinNodeOn(cp1).SnapshotRestore(ctx, io.Discard, snap); err != nil {
		t.Fatal(err)
	}
	state, _ := cp2.Files().ReadFile(nodestate.Path)
	check := func(want string) {
		t.Helper()
		var out syncbuf.Buffer
		err := joinNodeOn(cp2).RejoinEtcd(ctx, &out, cp1.IP().String(), false)
		if !errors.Is(err, ha.ErrOldClusterQuorum) || !strings.Contains(err.Error(), want) {
			t.Fatalf("rejoin of cp2: %v, want %v naming %q\n%s", err, ha.ErrOldClusterQuorum, want, out.String())
		}
		if s, _ := cp2.Files().ReadFile(nodestate.Path); !bytes.Equal(s, state) || !cp2.EtcdRunning() {
			t.Fatalf("a refused rejoin changed cp2 (etcd running %v)", cp2.EtcdRunning())
		}
	}
	// cp2 notices the lost leader after an election timeout, and finds its
	// old leader again once healed: wait for each state, then check it.
	waitRefusal := func(want string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			err := joinNodeOn(cp2).RejoinEtcd(ctx, io.Discard, cp1.IP().String(), false)
			if err != nil && strings.Contains(err.Error(), want) {
				break
			}
			if !errors.Is(err, ha.ErrOldClusterQuorum) || time.Now().After(deadline) {
				t.Fatalf("waiting for a refusal naming %q: %v", want, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		check(want)
	}
	c.Partition([]string{"cp1", "cp2"}, []string{"cp3", "cp4", "cp5"})
	waitRefusal("3 of the old cluster's 5 members")
	c.Heal()
	waitRefusal("still report a leader")

	// Two old peers stopped: two others answer without a leader and the
	// silent are no majority, so cp2's rejoin goes ahead, until a crash
	// once it has stopped cp2's control plane. Its re-run, without --force
	// as well, counts cp2's own etcd, stopped by that first run, as no
	// member of a quorum elsewhere, and finishes the rejoin.
	c.Host("cp3").StopEtcd()
	c.Host("cp4").StopEtcd()
	deadline := time.Now().Add(time.Minute)
	for {
		rep, err := joinNodeOn(cp2).RejoinPlanOf(ctx, cp1.IP().String(), false)
		if err == nil && rep.Refused == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rejoin of cp2 with cp3 and cp4 stopped is still refused: %+v, %v", rep, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	inc := cp2.Incarnation()
	crashDuring(t, c, cp2, ha.CheckpointRejoinAfterStop, func() error {
		return joinNodeOn(cp2).RejoinEtcd(ctx, io.Discard, cp1.IP().String(), false)
	})
	waitCrashed(t, cp2, inc)
	var out syncbuf.Buffer
	if err := joinNodeOn(cp2).RejoinEtcd(ctx, &out, cp1.IP().String(), false); err != nil {
		t.Fatalf("the rejoin of cp2, re-run without --force after a crash once it stopped cp2's etcd: %v\n%s", err, out.String())
	}
	ms, err := cp1.EtcdMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, fmt.Sprintf("%s learner=%v", m.Name, m.IsLearner))
	}
	slices.Sort(got)
	if want := []string{"cp1 learner=false", "cp2 learner=false"}; !slices.Equal(got, want) {
		t.Fatalf("the seed's members after cp2's rejoin: %v, want %v", got, want)
	}
}
