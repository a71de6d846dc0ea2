package ha_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/sim"
)

// TestRestoreCrashRefusesUpUntilReRun: a snapshot restore on cp1 crashes at
// each of its checkpoints, between the stop of the control plane and the
// node state's record of the restored membership. `stratum up` there (what
// a reboot runs) refuses, naming the restore to re-run, and starts nothing:
// etcd started from the old node state on replaced or half-written data
// would serve an empty or stale cluster through the apiserver. The re-run
// of the restore then finishes it: cp1's etcd serves the snapshot's data and
// its apiserver runs.
func TestRestoreCrashRefusesUpUntilReRun(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c, ctx, snap := snapshottedControlPlane(t)
	cp1 := c.Host("cp1")
	for _, cp := range ha.RestoreCheckpoints {
		t.Run(cp, func(t *testing.T) {
			put(t, ctx, cp1, keyAfter)
			inc := cp1.Incarnation()
			crashDuring(t, c, cp1, cp, func() error { return joinNodeOn(cp1).SnapshotRestore(ctx, io.Discard, snap) })
			waitCrashed(t, cp1, inc)
			_, err := joinNodeOn(cp1).Up(ctx, ha.BootstrapOptions{})
			if !errors.Is(err, ha.ErrEtcdDataReplacing) || !ha.IsRefusal(err) {
				t.Fatalf("stratum up after the restore crashed at %s: %v, want a refusal with ErrEtcdDataReplacing", cp, err)
			}
			if cp1.EtcdRunning() || cp1.APIServerRunning() {
				t.Fatalf("the refused up started etcd (%v) or the apiserver (%v)", cp1.EtcdRunning(), cp1.APIServerRunning())
			}
			if err := joinNodeOn(cp1).SnapshotRestore(ctx, io.Discard, snap); err != nil {
				t.Fatalf("the restore re-run after a crash at %s: %v", cp, err)
			}
			if !has(t, ctx, cp1, keyBefore) || has(t, ctx, cp1, keyAfter) {
				t.Fatalf("after the re-run cp1 does not serve the snapshot's data (%s: %v, %s: %v)", keyBefore, has(t, ctx, cp1, keyBefore), keyAfter, has(t, ctx, cp1, keyAfter))
			}
			if !cp1.APIServerRunning() {
				t.Fatal("cp1's apiserver is not running after the re-run")
			}
			if _, err := joinNodeOn(cp1).Up(ctx, ha.BootstrapOptions{}); err != nil {
				t.Fatalf("stratum up after the finished restore: %v", err)
			}
		})
	}
}

// TestRestoreWithNoSupervisorThenUp: a restore on a control plane whose
// supervisor is stopped (after a quorum loss its `stratum up` may keep
// failing) replaces the data, records the new membership and says the
// control plane did not start; `stratum up` then starts it on the
// snapshot's data. The data replacement journal is not left behind to
// block that `up`.
func TestRestoreWithNoSupervisorThenUp(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c, ctx, snap := snapshottedControlPlane(t)
	cp1 := c.Host("cp1")
	put(t, ctx, cp1, keyAfter)
	if err := cp1.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	cp1.StopEtcd()
	d := cp1.Handle()
	n := ha.NewNode(ha.Env{Host: sim.Unsupervised(d, filepath.Join(t.TempDir(), "supervisor.sock")), Checkpoint: d.Checkpoint})
	err := n.SnapshotRestore(ctx, io.Discard, snap)
	if !errors.Is(err, supervisor.ErrNotRunning) || !strings.Contains(err.Error(), "data restored, but the control plane did not start") {
		t.Fatalf("restore with no supervisor: %v, want the data restored and the start failing for want of a supervisor", err)
	}
	if _, err := joinNodeOn(cp1).Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up after the restore: %v", err)
	}
	if !has(t, ctx, cp1, keyBefore) || has(t, ctx, cp1, keyAfter) {
		t.Fatal("cp1 does not serve the snapshot's data after the restore and stratum up")
	}
}

// snapshottedControlPlane is one control plane with its apiserver, keyBefore
// written, and a snapshot of it saved at snap; ctx bounds the test.
func snapshottedControlPlane(t *testing.T) (c *sim.Cluster, ctx context.Context, snap string) {
	t.Helper()
	assetstest.Require(t)
	c = sim.Start(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	put(t, ctx, c.Host("cp1"), keyBefore)
	snap = filepath.Join(t.TempDir(), "etcd.db")
	if _, err := joinNodeOn(c.Host("cp1")).SnapshotSave(ctx, snap); err != nil {
		t.Fatal(err)
	}
	return c, ctx, snap
}

// TestRestoreStoppedBeforeItsStop: a restore stopped (Ctrl-C) before it
// stops the control plane (here before it began) is refused as stopped,
// with the control plane running on its data and no journal that would
// keep `stratum up` from starting it.
func TestRestoreStoppedBeforeItsStop(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c, ctx, snap := snapshottedControlPlane(t)
	cp1 := c.Host("cp1")
	put(t, ctx, cp1, keyAfter)
	stopped, stop := context.WithCancel(ctx)
	stop()
	err := joinNodeOn(cp1).SnapshotRestore(stopped, io.Discard, snap)
	if !ha.IsRefusal(err) || !strings.Contains(err.Error(), "snapshot restore stopped before it changed anything") {
		t.Fatalf("a restore stopped before it began: %v, want a refusal saying it stopped", err)
	}
	if !cp1.EtcdRunning() || !cp1.APIServerRunning() || !has(t, ctx, cp1, keyAfter) {
		t.Fatalf("after a restore stopped before it began: etcd running %t, apiserver running %t, the data as it was %t", cp1.EtcdRunning(), cp1.APIServerRunning(), has(t, ctx, cp1, keyAfter))
	}
	if _, err := cp1.Files().Stat(ha.DataReplacePath()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a restore stopped before it began left its journal (stat: %v)", err)
	}

	// Stopped once its stop of the control plane is done: the data is
	// not replaced, no journal stays, and `stratum up` starts the control
	// plane again on it.
	stopped, stop = context.WithCancel(ctx)
	d := cp1.Handle()
	stopAfterStop := ha.NewNode(ha.Env{Host: d, Checkpoint: func(ctx context.Context, name string) error {
		if name == ha.CheckpointRestoreAfterStop {
			stop()
		}
		return d.Checkpoint(ctx, name)
	}})
	err = stopAfterStop.SnapshotRestore(stopped, io.Discard, snap)
	if err == nil || ha.IsRefusal(err) || !strings.Contains(err.Error(), "stopped once the control plane was stopped") || !strings.Contains(err.Error(), "stratum up") {
		t.Fatalf("a restore stopped after its stop: %v, want a failure saying the data is untouched and `stratum up` starts it again", err)
	}
	if _, err := cp1.Files().Stat(ha.DataReplacePath()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a restore stopped after its stop left its journal (stat: %v)", err)
	}
	if _, err := joinNodeOn(cp1).Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up after a restore stopped after its stop: %v", err)
	}
	if !has(t, ctx, cp1, keyAfter) {
		t.Fatal("after a restore stopped after its stop, and stratum up, cp1 does not serve its data as it was")
	}

	// Stopped once the data is replaced: its start fails, and `stratum
	// up` starts the restored cluster and records its ID, which the
	// restore records only once its own start is done.
	stopped, stop = context.WithCancel(ctx)
	stopAfterData := ha.NewNode(ha.Env{Host: d, Checkpoint: func(ctx context.Context, name string) error {
		if name == ha.CheckpointRestoreAfterData {
			stop()
		}
		return d.Checkpoint(ctx, name)
	}})
	if err := stopAfterData.SnapshotRestore(stopped, io.Discard, snap); err == nil || !strings.Contains(err.Error(), "data restored, but the control plane did not start") {
		t.Fatalf("a restore stopped once the data was replaced: %v, want its start's failure", err)
	}
	if _, err := joinNodeOn(cp1).Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up after a restore stopped in its start: %v", err)
	}
	st, err := nodestate.Load(cp1.Files())
	if err != nil {
		t.Fatal(err)
	}
	ms, err := cp1.EtcdMembers(ctx)
	if err != nil || len(ms) != 1 || !has(t, ctx, cp1, keyBefore) {
		t.Fatalf("after the restore stopped in its start and stratum up: members %v (%v), the snapshot's data %t", ms, err, has(t, ctx, cp1, keyBefore))
	}
	if want := etcdClusterID(t, ctx, cp1); st.Etcd.ClusterID != want {
		t.Fatalf("after the restore stopped in its start and stratum up, the node state records etcd cluster %q, want the restored one's, %s", st.Etcd.ClusterID, want)
	}
}
