package ha_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"pgregory.net/rapid"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/host/faultfs"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// diskOp is one file operation a host made, as the fault layer saw it.
type diskOp struct {
	op   faultfs.Op
	path string
}

var recordedJoin struct {
	sync.Mutex
	ops []diskOp
}

// joinDiskOps are the file operations a control-plane join and its
// `stratum up` make on the joining host, in order, recorded once on a
// cluster of its own: the points a fault or a crash is drawn among.
func joinDiskOps(t *testing.T) []diskOp {
	t.Helper()
	recordedJoin.Lock()
	defer recordedJoin.Unlock()
	if recordedJoin.ops != nil {
		return recordedJoin.ops
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := sim.New(ctx, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true, VIP: true})
	if err != nil {
		t.Fatalf("start simulated cluster: %v", err)
	}
	defer c.Close()
	o, err := mintOptions(ctx, c, joinNodeOn(c.Host("cp1")), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ops []diskOp
	cp2 := c.Host("cp2")
	cp2.FailDisk(faultfs.InjectorFunc(func(op faultfs.Op, p string) syscall.Errno {
		mu.Lock()
		ops = append(ops, diskOp{op, p})
		mu.Unlock()
		return 0
	}))
	if err := runJoin(ctx, cp2, o); err != nil {
		t.Fatalf("recording the join's disk operations: %v\n%s", err, c.Events())
	}
	cp2.DisarmDisk()
	recordedJoin.ops = ops
	return ops
}

// ruleAt is a rule failing the operation recorded at ops[i] and, when
// sticky, every later one of its kind on its directory: the Nth operation
// of that kind there, N counted in the recording.
func ruleAt(ops []diskOp, i int, errno syscall.Errno, sticky bool) *faultfs.Rule {
	target := ops[i]
	prefix := path.Dir(target.path) + "/"
	switch target.op {
	case faultfs.OpMkdir, faultfs.OpSyncDir, faultfs.OpRemoveAll:
		prefix = target.path // the directory itself
	}
	probe := &faultfs.Rule{Ops: []faultfs.Op{target.op}, Prefix: prefix}
	for _, o := range ops[:i+1] {
		probe.Match(o.op, o.path)
	}
	return &faultfs.Rule{Ops: []faultfs.Op{target.op}, Prefix: prefix, Nth: probe.Seen(), Sticky: sticky, Errno: errno}
}

// subjects names, for each recorded operation, the file it serves: a
// temporary file's target, the file a directory fsync follows the rename or
// removal of, a directory made.
func subjects(ops []diskOp) []string {
	out := make([]string, len(ops))
	for i, o := range ops {
		dir, base := path.Split(o.path)
		if k := strings.Index(base, ".tmp-"); strings.HasPrefix(base, ".") && k > 0 {
			base = base[1:k]
		}
		out[i] = path.Join(dir, base)
		if o.op == faultfs.OpSyncDir && i > 0 && path.Dir(out[i-1]) == o.path {
			out[i] = out[i-1]
		}
	}
	return out
}

// The files that matter, for drawing a fault among their operations.
var diskTargets = map[string]func(subject string) bool{
	"intent journal": func(s string) bool { return s == ha.JoinIntentPath() },
	"node state":     func(s string) bool { return s == nodestate.Path },
	"PKI":            func(s string) bool { return strings.HasPrefix(s, version.PKIDir+"/") },
	"any":            func(string) bool { return true },
}

// drawDiskOp draws a recorded operation: first which files (the journal,
// the node state, the PKI, or any), then one of their operations.
func drawDiskOp(rt *rapid.T, ops []diskOp) int {
	subj := subjects(ops)
	names := slices.Sorted(maps.Keys(diskTargets))
	target := rapid.SampledFrom(names).Draw(rt, "files")
	var idx []int
	for i, s := range subj {
		if diskTargets[target](s) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		rt.Fatalf("the recorded join made no operation on the %s", target)
	}
	return rapid.SampledFrom(idx).Draw(rt, "disk op")
}

// firstFault is a rule that remembers the first operation it failed.
type firstFault struct {
	*faultfs.Rule
	mu    sync.Mutex
	first string
}

func (f *firstFault) MaybeFail(op faultfs.Op, p string) syscall.Errno {
	errno := f.Rule.MaybeFail(op, p)
	if errno != 0 {
		f.mu.Lock()
		if f.first == "" {
			f.first = fmt.Sprintf("%s %s", op, p)
		}
		f.mu.Unlock()
	}
	return errno
}

func (f *firstFault) firstOp() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

// runJoin is the join command on h: the preparation, then `stratum up`.
func runJoin(ctx context.Context, h *sim.Host, o ha.JoinOptions) error {
	n := joinNodeOn(h)
	if _, err := n.PrepareControlPlaneJoin(ctx, o); err != nil {
		return err
	}
	_, err := n.StartControlPlane(ctx)
	return err
}

// diskCase is one drawn case's cluster: cp1 running with its apiserver and
// the VIP, a sentinel written, a grant minted for cp2.
type diskCase struct {
	c   *sim.Cluster
	ctx context.Context
	cp2 *sim.Host
	o   ha.JoinOptions
	// stripFaulted: the fault met the start's write that takes the token
	// out of bootstrap.conf, which warns and goes on. A failed directory
	// fsync after its rename leaves the file without the token but not yet
	// durable, and no later start writes it again (it holds no token); a
	// crash would bring the token back, which the next start takes out.
	stripFaulted bool
}

func startDiskCase(rt sim.TB) *diskCase {
	rt.Helper()
	c := sim.Start(rt, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	rt.Cleanup(cancel)
	cs, err := c.Host("cp1").Admin()
	if err != nil {
		rt.Fatalf("%v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("sentinel", map[string]string{"written": "before"}), metav1.CreateOptions{}); err != nil {
		rt.Fatalf("%v", err)
	}
	o, err := mintOptions(ctx, c, joinNodeOn(c.Host("cp1")), time.Hour)
	if err != nil {
		rt.Fatalf("mint: %v", err)
	}
	return &diskCase{c: c, ctx: ctx, cp2: c.Host("cp2"), o: o}
}

// members lists the cluster's members as name:voter|learner, sorted, read
// through cp1: linearizable, or with clientv3.WithSerializable() as cp1
// knows them, which it answers while cp2, a voter of two, is down.
func (d *diskCase) members(rt sim.TB, opts ...clientv3.OpOption) []string {
	rt.Helper()
	cli, err := d.c.Host("cp1").EtcdClient()
	if err != nil {
		rt.Fatalf("%v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(d.ctx, 20*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx, opts...)
	if err != nil {
		rt.Fatalf("cp1's member list: %v", err)
	}
	var out []string
	for _, m := range ml.Members {
		role := "voter"
		if m.IsLearner {
			role = "learner"
		}
		out = append(out, m.Name+":"+role)
	}
	slices.Sort(out)
	return out
}

// checkSafe: a member beside cp1 exists only while cp2 holds the intent
// journal or its node state (never an orphan member), and never two.
func (d *diskCase) checkSafe(rt sim.TB, when string) {
	rt.Helper()
	ms := d.members(rt, clientv3.WithSerializable())
	if slices.Equal(ms, []string{"cp1:voter"}) {
		return
	}
	_, intentErr := d.cp2.Files().Stat(ha.JoinIntentPath())
	_, stateErr := d.cp2.Files().Stat(nodestate.Path)
	if intentErr != nil && stateErr != nil {
		rt.Fatalf("%s: members %v, but cp2 holds neither an intent journal nor node state (an orphan member)", when, ms)
	}
	if len(ms) > 2 {
		rt.Fatalf("%s: members %v: a duplicate add", when, ms)
	}
}

// checkFiles: every file the join writes on cp2 either parses with its real
// parser or is absent, and no temporary file is left (sim.CheckNodeFiles:
// the node state, the PKI, the kubeconfigs and configs), and the intent
// journal reads with the join's own reader.
func (d *diskCase) checkFiles(rt sim.TB, when string) {
	rt.Helper()
	if err := joinNodeOn(d.cp2).ReadJoinIntent(); err != nil && !errors.Is(err, ha.ErrNoJoinIntent) {
		rt.Fatalf("%s: the intent journal does not read: %v", when, err)
	}
	if err := sim.CheckNodeFiles(d.cp2.Files()); err != nil {
		rt.Fatalf("%s: %v", when, err)
	}
}

// reboot is `stratum up` on cp2 after a crash, judged as in
// TestJoinCrashAtEveryCheckpointConverges: with node state it starts; with a
// journal and no state it refuses with ErrIntentSurvives; with neither it
// refuses. It reports whether cp2 has node state.
func (d *diskCase) reboot(rt sim.TB) bool {
	rt.Helper()
	_, upErr := joinNodeOn(d.cp2).StartControlPlane(d.ctx)
	_, stateErr := d.cp2.Files().Stat(nodestate.Path)
	_, intentErr := d.cp2.Files().Stat(ha.JoinIntentPath())
	switch {
	case stateErr == nil:
		if upErr != nil {
			rt.Fatalf("stratum up on a node with saved state: %v", upErr)
		}
	case intentErr == nil:
		if !errors.Is(upErr, ha.ErrIntentSurvives) {
			rt.Fatalf("stratum up over a surviving intent = %v, want ErrIntentSurvives", upErr)
		}
	default:
		if upErr == nil {
			rt.Fatalf("stratum up on a node with neither state nor intent started something")
		}
	}
	d.checkSafe(rt, "after stratum up")
	return stateErr == nil
}

// converge is what an operator does next: `stratum up` on a node with
// saved state, the join command again on one without.
func (d *diskCase) converge(rt sim.TB) {
	rt.Helper()
	if _, err := d.cp2.Files().Stat(nodestate.Path); err == nil {
		if _, err := joinNodeOn(d.cp2).StartControlPlane(d.ctx); err != nil {
			rt.Fatalf("stratum up on a node with saved state: %v", err)
		}
		return
	}
	if err := runJoin(d.ctx, d.cp2, d.o); err != nil {
		rt.Fatalf("the join command re-run: %v", err)
	}
}

// checkJoined checks cp2 from outside, as a user would: two voters in one
// cluster, cp2's etcd member answering as a voter that knows its leader, no
// journal left, cp2's own apiserver answering /readyz and serving the data
// written before the join to a client that trusts the cluster CA only, and
// nothing on cp2's disk that a crash could still lose.
func (d *diskCase) checkJoined(rt sim.TB) {
	rt.Helper()
	if got := d.members(rt); !slices.Equal(got, []string{"cp1:voter", "cp2:voter"}) {
		rt.Fatalf("members: %v", got)
	}
	cli, err := d.cp2.EtcdClient()
	if err != nil {
		rt.Fatalf("%v", err)
	}
	defer cli.Close()
	st, err := cli.Status(d.ctx, d.cp2.ClientURL())
	if err != nil || st.IsLearner || st.Leader == 0 {
		rt.Fatalf("cp2's etcd member: %+v, %v", st, err)
	}
	if ok, err := joinNodeOn(d.cp2).JoinIntentSurvives(d.ctx); ok || err != nil {
		rt.Fatalf("the journal survives a finished join (%v)", err)
	}
	if boot, err := d.cp2.Files().ReadFile(version.Kubeconfig("bootstrap")); err != nil {
		rt.Fatalf("the join's bootstrap kubeconfig after a finished join: %v", err)
	} else if tok, err := kubeconfig.TokenOf(boot); err == nil {
		rt.Fatalf("the join's bootstrap kubeconfig still holds its token %s after a finished join", tok)
	}
	kc, err := d.cp2.Files().ReadFile(version.Kubeconfig("admin"))
	if err != nil {
		rt.Fatalf("%v", err)
	}
	cfg, err := kubeconfig.RESTConfig(kc)
	if err != nil {
		rt.Fatalf("%v", err)
	}
	cfg.Host = d.cp2.APIServerURL()
	cfg.TLSClientConfig.CAFile, cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.Insecure = "", d.c.Shared().Cluster.CertPEM, false
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		rt.Fatalf("%v", err)
	}
	if body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(d.ctx); err != nil {
		rt.Fatalf("cp2's apiserver /readyz: %v (%s)", err, body)
	}
	got, err := cs.CoreV1().ConfigMaps("default").Get(d.ctx, "sentinel", metav1.GetOptions{})
	if err != nil || got.Data["written"] != "before" {
		rt.Fatalf("data written before the join, read through cp2's apiserver: %v %v", got, err)
	}
	u := d.cp2.UnsyncedFiles()
	if d.stripFaulted {
		u = slices.DeleteFunc(u, func(p string) bool { return p == version.Kubeconfig("bootstrap") })
	}
	if len(u) > 0 {
		rt.Fatalf("a finished join left what a crash would lose: %v", u)
	}
}

var errnos = []syscall.Errno{syscall.EIO, syscall.ENOSPC}

// TestJoinDiskFaultFailsCleanlyThenConverges fails a drawn one of the disk
// operations a control-plane join and its `stratum up` make on the joining
// host (a create, write, fsync, rename, directory fsync, removal or mkdir of
// a drawn index), with EIO or ENOSPC, once or from then on: the join fails
// with an error naming the operation, the path and the errno; every file it
// writes still parses or is absent, with no temporary left, and no member is
// orphaned; when drawn, the host then crashes losing what was not fsync'd,
// and the same holds. With the disk healthy again, the operator's re-run
// (`stratum up` with node state, the join command without) makes cp2 a
// working control plane.
func TestJoinDiskFaultFailsCleanlyThenConverges(t *testing.T) {
	t.Parallel() // its own simulated clusters
	assetstest.Require(t)
	ops := joinDiskOps(t)
	rapid.Check(t, func(rt *rapid.T) {
		i := drawDiskOp(rt, ops)
		errno := rapid.SampledFrom(errnos).Draw(rt, "errno")
		sticky := rapid.Bool().Draw(rt, "sticky")
		crash := rapid.Bool().Draw(rt, "crash losing unsynced data after the failure")
		diskFaultCase(rt, ops, i, errno, sticky, crash)
	})
}

// diskFaultCase is one case of TestJoinDiskFaultFailsCleanlyThenConverges:
// the recorded operation i fails with errno (with every later one of its
// kind on its directory when sticky), and the host crashes losing unsynced
// data after the failure when crash.
func diskFaultCase(rt sim.TB, ops []diskOp, i int, errno syscall.Errno, sticky, crash bool) (first string) {
	rt.Helper()
	f := &firstFault{Rule: ruleAt(ops, i, errno, sticky)}
	rt.Logf("fault: %v (recorded op %d: %s %s)", f.Rule, i, ops[i].op, ops[i].path)
	d := startDiskCase(rt)
	d.cp2.FailDisk(f)
	err := runJoin(d.ctx, d.cp2, d.o)
	d.cp2.DisarmDisk()
	first = f.firstOp()
	switch {
	case first == "" && err != nil:
		rt.Fatalf("the join failed with no fault injected: %v", err)
	case first == "":
		rt.Logf("the drawn operation did not recur in this run; the join succeeded")
	case err == nil && i >= stripStart(ops):
		// The start's write that takes the token out of bootstrap.conf
		// (the file's last write): it warns and goes on.
		d.stripFaulted = true
		rt.Logf("the start's removal of the join's token met the fault (%s: %v): a warning, the join stands", first, errno)
	case err == nil:
		rt.Fatalf("the disk failed (%s: %v) and the join succeeded", first, errno)
	case !strings.Contains(err.Error(), first) || !errors.Is(err, errno):
		rt.Fatalf("the join's error does not name the disk failure (%s: %v): %v", first, errno, err)
	}
	d.checkFiles(rt, "after the disk failure")
	d.checkSafe(rt, "after the disk failure")
	if crash {
		d.cp2.CrashLosingUnsynced()
		d.checkFiles(rt, "after a crash losing unsynced data")
		d.checkSafe(rt, "after a crash losing unsynced data")
		d.reboot(rt)
	}
	d.converge(rt)
	d.checkFiles(rt, "after the re-run")
	d.checkJoined(rt)
	return first
}

// stripStart is the index of the first recorded operation of the start's
// write that takes the token out of bootstrap.conf: its temporary file's
// creation, the file's last.
func stripStart(ops []diskOp) int {
	return lastOp(ops, faultfs.OpCreate, version.Kubeconfig("bootstrap"))
}

// TestJoinCrashLosingUnsyncedConverges crashes the joining host, losing
// what was not fsync'd, at a drawn point: before a drawn one of the join's
// disk operations (between two steps of a write, say after the rename and
// before the directory fsync) or at a drawn checkpoint of the join or of
// its `stratum up`. Every file the join writes then parses or is absent,
// with no temporary left and no orphan member; `stratum up` starts a node
// with state and refuses one with only a journal; the operator's re-run
// makes cp2 a working control plane, with nothing left a crash could lose.
func TestJoinCrashLosingUnsyncedConverges(t *testing.T) {
	t.Parallel() // its own simulated clusters
	assetstest.Require(t)
	ops := joinDiskOps(t)
	checkpoints := append(slices.Clone(ha.JoinCheckpoints), ha.StartCheckpoints...)
	rapid.Check(t, func(rt *rapid.T) {
		atDisk := rapid.Bool().Draw(rt, "crash at a disk operation")
		var i int
		var cp string
		if atDisk {
			i = drawDiskOp(rt, ops)
			rt.Logf("crash before recorded op %d: %s %s", i, ops[i].op, ops[i].path)
		} else {
			cp = rapid.SampledFrom(checkpoints).Draw(rt, "checkpoint")
			rt.Logf("crash at checkpoint %s", cp)
		}
		diskCrashCase(rt, ops, atDisk, i, cp)
	})
}

// diskCrashCase is one case of TestJoinCrashLosingUnsyncedConverges: the
// crash comes before the recorded operation i when atDisk, at checkpoint cp
// otherwise.
func diskCrashCase(rt sim.TB, ops []diskOp, atDisk bool, i int, cp string) {
	rt.Helper()
	d := startDiskCase(rt)
	var armed sim.Armed
	if atDisk {
		armed = d.cp2.CrashAtDisk(ruleAt(ops, i, 0, false))
	} else {
		armed = d.c.CrashLosingUnsyncedAt("cp2", cp)
	}
	returned := make(chan error, 1)
	go func() { returned <- runJoin(d.ctx, d.cp2, d.o) }()
	select {
	case <-armed.Reached():
	case err := <-returned:
		rt.Fatalf("the join returned (%v) without reaching the crash point", err)
	case <-d.ctx.Done():
		rt.Fatalf("the join never reached the crash point")
	}
	for _, e := range d.c.Events().Find("crash", "disk lost") {
		rt.Logf("%s: %s", e.Host, e.What)
	}
	d.checkFiles(rt, "after the crash")
	d.checkSafe(rt, "after the crash")
	if !d.reboot(rt) {
		d.converge(rt)
	}
	d.checkFiles(rt, "after the re-run")
	d.checkJoined(rt)
}

// TestJoinNodeStateSaveFailingLate is the case that found the join's
// handling of a failed node-state save wrong, pinned: the directory fsync
// after the state's rename fails, so the save errs with the state in
// place. The join must remove the state before it rolls its member back
// (it left a state naming a removed member, whose PKI the undo removed),
// and the re-run converges; with the host crashing losing unsynced data
// after the failure, too.
func TestJoinNodeStateSaveFailingLate(t *testing.T) {
	t.Parallel() // its own simulated clusters
	assetstest.Require(t)
	ops := joinDiskOps(t)
	i := lastOp(ops, faultfs.OpSyncDir, nodestate.Path)
	if i < 0 {
		t.Fatal("the recorded join has no directory fsync after its node-state save")
	}
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%t", crash), func(t *testing.T) {
			diskFaultCase(t, ops, i, syscall.EIO, false, crash)
		})
	}
}

// TestJoinIntentWriteFailingLateLeavesNoJournal fails the directory fsync
// after the join's first write of its intent journal, the one point where a
// failed write leaves the file in place: the join is refused before its
// member-add, so it must take the journal away too, or the record of a
// member never added would make `stratum up` refuse and the next join
// resume it. The same join command then makes cp2 a working control plane.
func TestJoinIntentWriteFailingLateLeavesNoJournal(t *testing.T) {
	t.Parallel() // its own simulated clusters
	assetstest.Require(t)
	ops := joinDiskOps(t)
	i := nthOp(ops, faultfs.OpSyncDir, ha.JoinIntentPath(), 1)
	if i < 0 {
		t.Fatalf("the recorded join made no directory fsync after writing its intent journal: %v", ops)
	}
	d, err := joinFailingAt(t, ops, i, syscall.EIO)
	if !ha.IsRefusal(err) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "nothing was added to etcd") {
		t.Fatalf("the join whose intent journal's directory fsync failed: %v; want a refusal naming EIO", err)
	}
	if _, err := d.cp2.Files().Stat(ha.JoinIntentPath()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a join refused before its member-add left its intent journal (stat: %v)", err)
	}
	d.checkFiles(t, "after the refused join")
	d.checkSafe(t, "after the refused join")
	d.converge(t)
	d.checkJoined(t)
}

// TestJoinTokenStripFailingWarns fails the start's write that takes the
// bootstrap token out of the join's bootstrap kubeconfig (the file's last
// write), before its rename and after it: hygiene, not the join's work, so
// the join stands with a warning, and the token is out once it converges.
func TestJoinTokenStripFailingWarns(t *testing.T) {
	t.Parallel() // its own simulated clusters
	assetstest.Require(t)
	ops := joinDiskOps(t)
	boot := version.Kubeconfig("bootstrap")
	start := stripStart(ops)
	if first := slices.Index(subjects(ops), boot); start < 0 || first >= start {
		t.Fatalf("the recorded join does not write its bootstrap kubeconfig again at its start (first op %d, last create %d)", first, start)
	}
	for _, c := range []struct {
		op    faultfs.Op
		errno syscall.Errno
	}{{faultfs.OpWrite, syscall.ENOSPC}, {faultfs.OpSyncDir, syscall.EIO}} {
		t.Run(string(c.op), func(t *testing.T) {
			i := lastOp(ops, c.op, boot)
			if i < start {
				t.Fatalf("the start's strip of %s made no %s", boot, c.op)
			}
			if first := diskFaultCase(t, ops, i, c.errno, false, false); first == "" {
				t.Fatalf("the fault at the strip's %s never fired", c.op)
			}
		})
	}
}

// joinFailingAt runs cp2's join of a fresh disk case with the recorded
// operation i failing once with errno, and returns the case and the join's
// error.
func joinFailingAt(t *testing.T, ops []diskOp, i int, errno syscall.Errno) (*diskCase, error) {
	t.Helper()
	d := startDiskCase(t)
	d.cp2.FailDisk(&firstFault{Rule: ruleAt(ops, i, errno, false)})
	err := runJoin(d.ctx, d.cp2, d.o)
	d.cp2.DisarmDisk()
	return d, err
}

// nthOp is the index of the nth (from 1) recorded operation op whose
// subject is subject, -1 for none.
func nthOp(ops []diskOp, op faultfs.Op, subject string, nth int) int {
	subj := subjects(ops)
	for k := range ops {
		if ops[k].op == op && subj[k] == subject {
			if nth--; nth == 0 {
				return k
			}
		}
	}
	return -1
}

// lastOp is the index of the last recorded operation op whose subject is
// subject, -1 for none.
func lastOp(ops []diskOp, op faultfs.Op, subject string) int {
	subj := subjects(ops)
	for k := len(ops) - 1; k >= 0; k-- {
		if ops[k].op == op && subj[k] == subject {
			return k
		}
	}
	return -1
}

// TestJoinFailureAfterItsAddSaysWhatBecameOfTheMember fails the write that
// records the added member's ID in the intent journal (a full disk), after
// the member-add: the join's error says the member was removed again and
// to re-run the same join command, and the cluster is back to cp1 alone;
// the re-run then makes cp2 a working control plane.
func TestJoinFailureAfterItsAddSaysWhatBecameOfTheMember(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	ops := joinDiskOps(t)
	i := nthOp(ops, faultfs.OpWrite, ha.JoinIntentPath(), 2)
	if i < 0 {
		t.Fatalf("the recorded join wrote its intent journal fewer than twice: %v", ops)
	}
	d, err := joinFailingAt(t, ops, i, syscall.ENOSPC)
	if err == nil || ha.IsRefusal(err) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "record the added member") ||
		!strings.Contains(err.Error(), "the member this join added was removed again (rolled back)") {
		t.Fatalf("the join whose record of its added member failed = %v; want a failure saying the member was removed again", err)
	}
	if ms := d.members(t); !slices.Equal(ms, []string{"cp1:voter"}) {
		t.Fatalf("members after the rolled-back join: %v; want cp1 alone", ms)
	}
	d.checkFiles(t, "after the rolled-back join")
	d.converge(t)
	d.checkJoined(t)
}
