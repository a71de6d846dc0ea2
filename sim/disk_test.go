package sim

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/internal/host/faultfs"
)

// TestFailDiskRecordsFaultsAndCrashLosesUnsynced: an armed disk fault fails
// an operation's write through its Handle with an error naming the
// operation, the path and the errno, recorded as a "fault" event; the new
// contents it renamed into place before its directory fsync failed are
// lost by a crash that loses unsynced data, and the old ones come back.
func TestFailDiskRecordsFaultsAndCrashLosesUnsynced(t *testing.T) {
	c := Start(t, Config{Fresh: true, SpareHosts: 1})
	h := c.Host("cp1")
	d := h.Handle()
	const p = "/var/lib/stratum/node-state.json"
	if err := d.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.FailDisk(&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpSyncDir}, Prefix: "/var/lib/stratum", Errno: syscall.ENOSPC})
	err := d.WriteFile(p, []byte("new"), 0o600)
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, faultfs.ErrInjected) || !strings.Contains(err.Error(), "fsync-dir /var/lib/stratum") {
		t.Fatalf("write with its directory fsync failing = %v", err)
	}
	if ev := c.Events().Find("fault", "disk: fsync-dir /var/lib/stratum: no space left on device"); len(ev) != 1 || ev[0].Host != "cp1" {
		t.Fatalf("fault events %v; log:\n%s", ev, c.Events())
	}
	h.DisarmDisk()
	if got, _ := d.ReadFile(p); string(got) != "new" {
		t.Fatalf("before the crash the file holds %q, want the renamed new contents", got)
	}
	if u := h.UnsyncedFiles(); len(u) != 1 || u[0] != p {
		t.Fatalf("unsynced %v, want [%s]", u, p)
	}
	inc := h.Incarnation()
	h.CrashLosingUnsynced()
	if h.Incarnation() != inc+1 {
		t.Fatal("the crash did not bump the incarnation")
	}
	if got, _ := h.Handle().ReadFile(p); string(got) != "old" {
		t.Fatalf("after a crash losing unsynced data the file holds %q, want the durable \"old\"", got)
	}
	if len(c.Events().Find("crash", "disk lost what was not fsync'd: ["+p+"]")) != 1 {
		t.Fatalf("the crash's loss is not recorded:\n%s", c.Events())
	}
}

// TestCrashAtDiskFreezesBetweenSteps: a crash armed at a write's directory
// fsync freezes the operation before it, crashes the host, and the rename
// it made is undone; the operation's handle is stale.
func TestCrashAtDiskFreezesBetweenSteps(t *testing.T) {
	c := Start(t, Config{Fresh: true, SpareHosts: 1})
	h := c.Host("cp1")
	const p = "/etc/stratum/pki/ca.crt"
	if err := h.Handle().WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	armed := h.CrashAtDisk(&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpSyncDir}, Prefix: "/etc/stratum/pki"})
	d := h.Handle()
	returned := make(chan struct{})
	go func() {
		defer close(returned) // a crash must not even run this
		_ = d.WriteFile(p, []byte("new"), 0o600)
	}()
	select {
	case <-armed.Reached():
	case <-time.After(10 * time.Second):
		t.Fatal("the disk operation was never reached")
	}
	select {
	case <-returned:
		t.Fatal("an operation crashed at a disk operation returned")
	case <-time.After(300 * time.Millisecond):
	}
	if got, _ := h.Handle().ReadFile(p); string(got) != "old" {
		t.Fatalf("after the crash the file holds %q, want the durable \"old\"", got)
	}
	if err := d.WriteFile(p, []byte("late"), 0o600); !errors.Is(err, ErrStaleIncarnation) {
		t.Fatalf("a write from the crashed incarnation = %v", err)
	}
	if len(c.Events().Find("fault", "disk: crash before fsync-dir /etc/stratum/pki")) != 1 {
		t.Fatalf("the crash point is not recorded:\n%s", c.Events())
	}
	// The crash disarmed itself: the disk works again.
	if err := h.Handle().WriteFile(p, []byte("after"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCrashLosingUnsyncedAtCheckpoint: the checkpoint form crashes the
// operation there, losing what was not fsync'd.
func TestCrashLosingUnsyncedAtCheckpoint(t *testing.T) {
	c := Start(t, Config{Fresh: true, SpareHosts: 1})
	h := c.Host("cp1")
	armed := c.CrashLosingUnsyncedAt("cp1", "after-write")
	d := h.Handle()
	go func() {
		_ = d.WriteFile("/var/lib/stratum/a", []byte("a"), 0o600)
		_ = d.Checkpoint(context.Background(), "after-write")
	}()
	select {
	case <-armed.Reached():
	case <-time.After(10 * time.Second):
		t.Fatal("checkpoint never reached")
	}
	if got, err := h.Handle().ReadFile("/var/lib/stratum/a"); err != nil || string(got) != "a" {
		t.Fatalf("a write that returned before the crash was lost: %q %v", got, err)
	}
	if len(c.Events().Find("crash", "disk lost what was not fsync'd: []")) != 1 {
		t.Fatalf("the crash losing unsynced data is not recorded:\n%s", c.Events())
	}
}
