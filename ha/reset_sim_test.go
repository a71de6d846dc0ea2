package ha_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/host/faultfs"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestResetConvergesAfterACrashAtEveryCheckpoint: a reset of cp3 (a voter
// with its apiserver and VIP candidate running) crashes at each of its
// checkpoints in turn. Until it is re-run, `stratum up` there refuses,
// naming the unfinished reset; the re-run then finishes it: cp3's member is
// gone, the two others are healthy started voters, and nothing of a control
// plane is left on cp3. cp3's node state names only itself as its initial
// cluster, as a snapshot restore's seed records it (found by TestMaintenance),
// so the re-run, its own etcd down after the crash, must find the cluster
// through the members the reset recorded when it began.
//
// One cluster serves every checkpoint: after each reset, cp3 joins again
// with a freshly minted join command, as an operator would, so the next
// checkpoint's reset starts from a control plane the production join built
// (and that join, after a reset, is checked on the way).
func TestResetConvergesAfterACrashAtEveryCheckpoint(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 3, APIServers: true, VIP: true})
	cp1, cp3 := nodeOn(c.Host("cp1")), c.Host("cp3")
	// The reset journal's first write fails at the directory fsync after
	// its rename: the reset is refused with nothing changed, and the file
	// that rename left is taken away, so `stratum up` is not refused as if
	// a reset were under way.
	t.Run("the journal's first write failing late", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cp3.FailDisk(&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpSyncDir}, Prefix: path.Dir(ha.ResetJournalPath()), Errno: syscall.EIO})
		err := joinNodeOn(cp3).ResetControlPlane(ctx, io.Discard, false)
		cp3.DisarmDisk()
		if !ha.IsRefusal(err) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("the reset whose journal's directory fsync failed: %v; want a refusal naming EIO", err)
		}
		if _, err := cp3.Files().Stat(ha.ResetJournalPath()); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the refused reset left its journal (stat: %v)", err)
		}
		if _, err := joinNodeOn(cp3).Up(ctx, ha.BootstrapOptions{}); err != nil {
			t.Fatalf("up after the refused reset: %v", err)
		}
		if err := nodeOn(c.Host("cp1")).EtcdClusterHealthy(ctx, ipsOf(c, "cp1", "cp2", "cp3")); err != nil {
			t.Fatalf("the cluster after cp3's refused reset: %v", err)
		}
	})
	for i, checkpoint := range ha.ResetCheckpoints {
		ok := t.Run(checkpoint, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if i > 0 {
				rejoin(ctx, t, c, cp1, "cp3")
			}
			crashResetAt(ctx, t, c, cp3, checkpoint)
			if _, err := joinNodeOn(cp3).Up(ctx, ha.BootstrapOptions{}); !errors.Is(err, ha.ErrResetUnderWay) || !ha.IsRefusal(err) {
				t.Fatalf("up after the reset crashed at %s: %v, want a refusal naming the reset under way", checkpoint, err)
			}
			if err := joinNodeOn(cp3).ResetControlPlane(ctx, io.Discard, false); err != nil {
				t.Fatalf("the reset re-run after a crash at %s: %v", checkpoint, err)
			}
			checkResetFromTwoVoters(ctx, t, c, cp3)
		})
		if !ok {
			return // the cluster the next checkpoint would start from is not known
		}
	}
	// cp1 and cp2 are left: two voters, each one's vote part of the quorum.
	// cp2's reset crashes before its member-remove, and cp1 alone answers
	// nothing; the re-run starts cp2's etcd again, so the cluster has its
	// quorum back, and removes cp2 through it.
	t.Run("two voters", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cp2 := c.Host("cp2")
		crashResetAt(ctx, t, c, cp2, ha.CheckpointResetAfterStopAPIServer)
		if _, err := joinNodeOn(cp2).Up(ctx, ha.BootstrapOptions{}); !errors.Is(err, ha.ErrResetUnderWay) {
			t.Fatalf("up after cp2's reset crashed: %v, want a refusal naming the reset under way", err)
		}
		// A restore or rejoin that was replacing cp2's etcd data when it
		// stopped left data etcd must not start on: the re-run refuses to
		// start it, naming the journal and the ways on (what finishes a
		// restore or rejoin refuses while the reset's journal is there).
		if err := cp2.Files().WriteFile(ha.DataReplacePath(), []byte(`{"op":"etcd rejoin"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		var refused syncbuf.Buffer
		if err := joinNodeOn(cp2).ResetControlPlane(ctx, &refused, false); !ha.IsRefusal(err) || !strings.Contains(err.Error(), ha.DataReplacePath()) ||
			!strings.Contains(err.Error(), "stratum reset --force") || strings.Contains(refused.String(), "starting it") || cp2.EtcdRunning() {
			t.Fatalf("the reset re-run over a data replacement under way = %v (etcd running: %t), want a refusal naming %s\n%s", err, cp2.EtcdRunning(), ha.DataReplacePath(), refused.String())
		}
		if err := cp2.Files().Remove(ha.DataReplacePath()); err != nil {
			t.Fatal(err)
		}
		var out syncbuf.Buffer
		if err := joinNodeOn(cp2).ResetControlPlane(ctx, &out, false); err != nil {
			t.Fatalf("the reset of one of two voters, re-run after a crash: %v\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "starting it, so the cluster has its quorum back") {
			t.Errorf("the re-run did not say it started cp2's etcd:\n%s", out.String())
		}
		ms, err := c.Host("cp1").EtcdMembers(ctx)
		if err != nil || len(ms) != 1 || ms[0].PeerURLs[0] != c.Host("cp1").PeerURL() {
			t.Fatalf("members after cp2's reset: %v, %v; want cp1 alone", ms, err)
		}
		if err := nodeOn(c.Host("cp1")).EtcdClusterHealthy(ctx, ipsOf(c, "cp1")); err != nil {
			t.Fatalf("cp1 after cp2's reset: %v", err)
		}
		checkNoControlPlaneFiles(t, cp2)
	})
	// cp2 joins again, and its reset crashes right after the member-remove;
	// then cp1 goes down too, so no member answers the re-run. The journal
	// records the removal: the re-run does not start cp2's removed member
	// again, and finishes the reset.
	t.Run("two voters, the other down after the removal", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cp2 := c.Host("cp2")
		rejoin(ctx, t, c, cp1, "cp2")
		crashResetAt(ctx, t, c, cp2, ha.CheckpointResetAfterMemberRemove)
		c.Host("cp1").StopEtcd()
		var out syncbuf.Buffer
		if err := joinNodeOn(cp2).ResetControlPlane(ctx, &out, false); err != nil {
			t.Fatalf("the reset re-run with its member removed and no member answering: %v\n%s", err, out.String())
		}
		if strings.Contains(out.String(), "starting it") {
			t.Errorf("the re-run started cp2's removed member:\n%s", out.String())
		}
		checkNoControlPlaneFiles(t, cp2)
		if err := c.Host("cp1").StartEtcd(ctx); err != nil {
			t.Fatal(err)
		}
		if ms, err := c.Host("cp1").EtcdMembers(ctx); err != nil || len(ms) != 1 {
			t.Fatalf("members after cp2's reset: %v, %v; want cp1 alone", ms, err)
		}
	})
}

// rejoin joins name again, through a join command minted on cp1, and starts
// its control plane.
func rejoin(ctx context.Context, t *testing.T, c *sim.Cluster, cp1 *ha.Node, name string) {
	t.Helper()
	o, err := mintOptions(ctx, c, cp1, time.Hour)
	if err != nil {
		t.Fatalf("mint for %s: %v", name, err)
	}
	n := joinNodeOn(c.Host(name))
	if _, err := n.PrepareControlPlaneJoin(ctx, o); err != nil {
		t.Fatalf("%s joins again after its reset: %v", name, err)
	}
	if _, err := n.StartControlPlane(ctx); err != nil {
		t.Fatalf("%s starts after joining again: %v", name, err)
	}
}

// crashResetAt records h's node state with only itself as its initial
// cluster, then runs its reset until the host crashes at checkpoint.
func crashResetAt(ctx context.Context, t *testing.T, c *sim.Cluster, h *sim.Host, checkpoint string) {
	t.Helper()
	st, err := nodestate.Load(h.Files())
	if err != nil {
		t.Fatal(err)
	}
	st.Etcd.InitialCluster = h.Name() + "=" + h.PeerURL()
	if err := nodestate.Save(h.Files(), st); err != nil {
		t.Fatal(err)
	}
	inc := h.Incarnation()
	resetUntil(ctx, t, h, c.CrashAt(h.Name(), checkpoint), checkpoint)
	waitCrashed(t, h, inc)
}

// resetUntil runs h's reset until it reaches checkpoint, where armed
// (a crash, or the kill of its process) stops it for good.
func resetUntil(ctx context.Context, t *testing.T, h *sim.Host, armed sim.Armed, checkpoint string) {
	t.Helper()
	returned := make(chan error, 1)
	go func() { returned <- joinNodeOn(h).ResetControlPlane(ctx, io.Discard, false) }()
	select {
	case <-armed.Reached():
	case err := <-returned:
		t.Fatalf("the reset returned (%v) without reaching %s", err, checkpoint)
	case <-ctx.Done():
		t.Fatalf("the reset never reached %s", checkpoint)
	}
}

// checkResetFromTwoVoters checks, from outside cp3, that cp3's reset is
// finished: cp1 and cp2 are the only members, started healthy voters, and
// cp3 holds no state and no configuration of a control plane.
func checkResetFromTwoVoters(ctx context.Context, t *testing.T, c *sim.Cluster, cp3 *sim.Host) {
	t.Helper()
	ms, err := c.Host("cp1").EtcdMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, fmt.Sprintf("%s learner=%v started=%v", m.PeerURLs, m.IsLearner, m.Name != ""))
	}
	want := []string{fmt.Sprintf("[%s] learner=false started=true", c.Host("cp1").PeerURL()), fmt.Sprintf("[%s] learner=false started=true", c.Host("cp2").PeerURL())}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("members after the reset: %v, want %v", got, want)
	}
	if err := nodeOn(c.Host("cp1")).EtcdClusterHealthy(ctx, ipsOf(c, "cp1", "cp2")); err != nil {
		t.Fatalf("the cluster after cp3's reset: %v", err)
	}
	checkNoControlPlaneFiles(t, cp3)
}

// checkNoControlPlaneFiles fails t unless h holds no state and no
// configuration of a control plane.
func checkNoControlPlaneFiles(t *testing.T, h *sim.Host) {
	t.Helper()
	for _, dir := range []string{version.StateDir, version.K8sConfDir} {
		if entries, err := h.Files().ReadDir(dir); err == nil && len(entries) > 0 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("%s's %s after the reset: %s", h.Name(), dir, strings.Join(names, ", "))
		}
	}
}

// TestResetUndoesACrashedJoin: a join that crashed right after its member-add
// left an unstarted learner that only its intent journal records. A reset
// there removes that learner and every file, and the machine then joins
// with the same join command.
func TestResetUndoesACrashedJoin(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 1)
	o := j.mint(time.Hour)
	cp2 := j.c.Host("cp2")
	inc := cp2.Incarnation()
	armed := j.c.CrashAt("cp2", ha.CheckpointAfterMemberAdd)
	go func() { _, _ = joinNodeOn(cp2).PrepareControlPlaneJoin(j.ctx, o) }()
	select {
	case <-armed.Reached():
	case <-j.ctx.Done():
		t.Fatal("the join never reached its member-add checkpoint")
	}
	waitCrashed(t, cp2, inc)
	if got := j.members(); !slices.Equal(got, []string{":learner", "cp1:voter"}) {
		t.Fatalf("members after the crashed join: %v, want cp1 and an unstarted learner", got)
	}
	// Directories of control-plane binaries under the state directory stay:
	// the default one, and a --bin-dir of the unit or a release staged
	// for an upgrade (with a link, as an install may make); a directory
	// holding no binary goes with the rest.
	binDirs := map[string]string{
		path.Join(version.StateDir, "bin", "etcd"):                "",
		path.Join(version.StateDir, "bin-next", "kube-apiserver"): "",
		path.Join(version.StateDir, "releases", "v2", "etcd"):     "",
		path.Join(version.StateDir, "scratch", "notes"):           "gone",
	}
	for p := range binDirs {
		if err := cp2.Files().MkdirAll(path.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := cp2.Files().WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(cp2.Path(path.Join(version.StateDir, "bin", "etcd")), cp2.Path(path.Join(version.StateDir, "bin-next", "etcd"))); err != nil {
		t.Fatal(err)
	}
	rep, err := joinNodeOn(cp2).ResetPlanOf(j.ctx, false)
	if err != nil || strings.Join(rep.Steps, ",") != "member-remove,wipe" || rep.Role != "learner" || rep.Refused != "" {
		t.Fatalf("the reset's plan after the crashed join: %+v, %v; want member-remove and wipe of a learner", rep, err)
	}
	if err := joinNodeOn(cp2).ResetControlPlane(j.ctx, io.Discard, false); err != nil {
		t.Fatalf("reset after the crashed join: %v", err)
	}
	if got := j.members(); !slices.Equal(got, []string{"cp1:voter"}) {
		t.Fatalf("members after the reset: %v, want cp1 alone", got)
	}
	if survives, err := joinNodeOn(cp2).JoinIntentSurvives(j.ctx); err != nil || survives {
		t.Fatalf("the join journal after the reset: survives %v, %v", survives, err)
	}
	for p, want := range binDirs {
		if _, err := cp2.Files().Stat(p); (err == nil) != (want == "") {
			t.Errorf("%s after the reset: %v, want it %s", p, err, cmp.Or(want, "kept"))
		}
	}
	if entries, err := cp2.Files().ReadDir(version.StateDir); err != nil || len(entries) != 3 {
		t.Errorf("%s after the reset: %v (%v), want only bin, bin-next and releases", version.StateDir, entries, err)
	}
	if err := j.join("cp2", o); err != nil {
		t.Fatalf("the same join after the reset: %v", err)
	}
	if got := j.members(); !slices.Equal(got, []string{"cp1:voter", "cp2:voter"}) {
		t.Fatalf("members after the join: %v", got)
	}
}

// TestResetConvergesAfterItsProcessIsKilled: cp3's reset is
// killed (SIGKILL of `stratum reset`) at each of its checkpoints in turn
// while the host runs on: the services stay as the reset left them, as a
// real host's supervisor keeps them (etcd running while its member is
// removed, say), where TestResetConvergesAfterACrashAtEveryCheckpoint
// re-runs from everything stopped. The reset run again at once finishes it:
// cp3's member is gone, the others are healthy voters, nothing of a control
// plane is left on cp3 and none of its services runs. The checkpoints are
// those where a service still runs; from its etcd's stop on, the reset has
// stopped everything, as a host crash leaves it.
func TestResetConvergesAfterItsProcessIsKilled(t *testing.T) {
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 3, APIServers: true, VIP: true})
	cp1, cp3 := nodeOn(c.Host("cp1")), c.Host("cp3")
	running := []string{ha.CheckpointResetStart, ha.CheckpointResetAfterStopVIP, ha.CheckpointResetAfterStopAPIServer, ha.CheckpointResetAfterMemberRemove}
	for i, checkpoint := range running {
		ok := t.Run(checkpoint, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if i > 0 {
				rejoin(ctx, t, c, cp1, "cp3")
			}
			resetUntil(ctx, t, cp3, c.CrashCommandAt(cp3.Name(), checkpoint), checkpoint)
			var out syncbuf.Buffer
			if err := joinNodeOn(cp3).ResetControlPlane(ctx, &out, false); err != nil {
				t.Fatalf("the reset re-run after its process was killed at %s: %v\n%s", checkpoint, err, out.String())
			}
			checkResetFromTwoVoters(ctx, t, c, cp3)
			if cp3.EtcdRunning() || cp3.APIServerRunning() {
				t.Fatalf("after the reset re-run from a kill at %s cp3 still runs etcd (%t) or its apiserver (%t)", checkpoint, cp3.EtcdRunning(), cp3.APIServerRunning())
			}
		})
		if !ok {
			return // the cluster the next checkpoint would start from is not known
		}
	}
}

// TestResetThatStartedItsEtcdSaysSo: a reset re-run after a crash before
// its member-remove, with another voter down, finds no member answering
// and starts this node's etcd again (the quorum back); the removal would
// then leave the remaining voters under quorum, and the reset is refused.
// That refusal is no longer "nothing was changed" (exit 3): this run
// started the member, which votes again, and the error says so (exit 1).
func TestResetThatStartedItsEtcdSaysSo(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp3 := c.Host("cp3")
	inc := cp3.Incarnation()
	resetUntil(ctx, t, cp3, c.CrashAt(cp3.Name(), ha.CheckpointResetStart), ha.CheckpointResetStart)
	waitCrashed(t, cp3, inc)
	c.Host("cp2").StopEtcd()
	var out syncbuf.Buffer
	err := joinNodeOn(cp3).ResetControlPlane(ctx, &out, false)
	if err == nil || ha.IsRefusal(err) || !strings.Contains(err.Error(), "under the quorum") ||
		!strings.Contains(err.Error(), "except that this reset had started this node's etcd again") {
		t.Fatalf("the reset that started its etcd, then refused = %v (refusal %t); want a failure (not a refusal) saying it started etcd\n%s", err, ha.IsRefusal(err), out.String())
	}
	if !strings.Contains(out.String(), "starting it, so the cluster has its quorum back") || !cp3.EtcdRunning() {
		t.Fatalf("the reset did not start cp3's etcd (running %t):\n%s", cp3.EtcdRunning(), out.String())
	}
	if ms, err := c.Host("cp1").EtcdMembers(ctx); err != nil || len(ms) != 3 {
		t.Fatalf("members after the refused removal: %v, %v; want all three", ms, err)
	}
	// Its dry run says the same as the reset would.
	rep, err := joinNodeOn(cp3).ResetPlanOf(ctx, false)
	if rerr := rep.RefusedError(); err != nil || !rep.Unfinished || !ha.IsRefusal(rerr) || !strings.Contains(rerr.Error(), "nothing was changed by this run; an earlier run of this reset left it unfinished") {
		t.Fatalf("the dry run over the unfinished journal: %+v, %v; refusal %v; want one saying an earlier run left it unfinished", rep, err, rerr)
	}
	// Run again, cp3's etcd now running: refused with nothing changed by
	// this run, and said to be a reset an earlier run left unfinished.
	err = joinNodeOn(cp3).ResetControlPlane(ctx, io.Discard, false)
	if !ha.IsRefusal(err) || !strings.Contains(err.Error(), "nothing was changed by this run; an earlier run of this reset left it unfinished") {
		t.Fatalf("the reset run again over its unfinished journal = %v (refusal %t); want a refusal saying an earlier run left it unfinished", err, ha.IsRefusal(err))
	}
}
