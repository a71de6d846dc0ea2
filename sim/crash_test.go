package sim

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

func TestCrashAtCheckpointFreezesAndFencesTheIncarnation(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 1, SpareHosts: 1})
	h := c.Host("cp2")
	armed := c.CrashAt("cp2", "after-write-a")
	returned := make(chan struct{})
	handleCh := make(chan *Handle, 1)
	go func() {
		defer close(returned) // a crash must not even run this
		d := h.Handle()
		handleCh <- d
		ctx := context.Background()
		if err := d.WriteFile("/var/lib/stratum/a", []byte("a"), 0o600); err != nil {
			t.Errorf("write a: %v", err)
		}
		if err := d.Checkpoint(ctx, "after-write-a"); err != nil {
			t.Errorf("checkpoint: %v", err)
		}
		_ = d.WriteFile("/var/lib/stratum/b", []byte("b"), 0o600)
	}()
	select {
	case <-armed.Reached():
	case <-time.After(10 * time.Second):
		t.Fatal("checkpoint never reached")
	}
	select {
	case <-returned:
		t.Fatal("an operation crashed at a checkpoint returned")
	case <-time.After(300 * time.Millisecond):
	}
	old := <-handleCh
	if err := old.WriteFile("/var/lib/stratum/c", []byte("c"), 0o600); !errors.Is(err, ErrStaleIncarnation) {
		t.Fatalf("a write from the crashed incarnation = %v, want ErrStaleIncarnation", err)
	}
	if _, err := old.Lock("maintenance", "old"); !errors.Is(err, ErrStaleIncarnation) {
		t.Fatalf("a lock from the crashed incarnation = %v", err)
	}
	// The reboot sees exactly what was written before the crash.
	d := h.Handle()
	if got, err := d.ReadFile("/var/lib/stratum/a"); err != nil || string(got) != "a" {
		t.Fatalf("file written before the crash: %q %v", got, err)
	}
	for _, p := range []string{"/var/lib/stratum/b", "/var/lib/stratum/c"} {
		if _, err := d.ReadFile(p); err == nil {
			t.Fatalf("%s exists although it was written after the crash", p)
		}
	}
	if len(c.Events().Find("crash", "host crashed")) != 1 {
		t.Fatalf("event log does not record the crash:\n%s", c.Events())
	}
}

// TestCrashCommandAtKillsTheOperationAlone: the operation's process is
// killed at the checkpoint and freezes there; its lock is released and its
// connection closed, every later call through its handle fails with
// ErrCommandKilled, while the host's incarnation, its files and its etcd
// member go on.
func TestCrashCommandAtKillsTheOperationAlone(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 1})
	h := c.Host("cp1")
	inc := h.Incarnation()
	killed := c.CrashCommandAt("cp1", "after-lock")
	opened := make(chan net.Conn, 1)
	handleCh := make(chan *Handle, 1)
	returned := make(chan struct{})
	go func() {
		defer close(returned) // a killed process runs none of this
		d := h.Handle()
		handleCh <- d
		if _, err := d.Lock("maintenance", "killed op"); err != nil {
			t.Errorf("lock: %v", err)
		}
		conn, err := d.DialContext(context.Background(), "tcp", h.ClientURL()[len("https://"):])
		if err != nil {
			t.Errorf("dial: %v", err)
		}
		opened <- conn
		if err := d.Checkpoint(context.Background(), "after-lock"); err != nil {
			t.Errorf("checkpoint: %v", err)
		}
	}()
	select {
	case <-killed.Reached():
	case <-time.After(10 * time.Second):
		t.Fatal("checkpoint never reached")
	}
	select {
	case <-returned:
		t.Fatal("an operation killed at a checkpoint returned")
	case <-time.After(300 * time.Millisecond):
	}
	old, conn := <-handleCh, <-opened
	if err := old.WriteFile("/var/lib/stratum/x", []byte("x"), 0o600); !errors.Is(err, ErrCommandKilled) {
		t.Fatalf("a write of the killed operation = %v, want ErrCommandKilled", err)
	}
	if _, err := conn.Write([]byte("x")); err == nil {
		t.Fatal("the killed operation's connection still writes")
	}
	release, err := h.Handle().Lock("maintenance", "next op")
	if err != nil {
		t.Fatalf("the lock the killed operation held: %v; want it released", err)
	}
	_ = release()
	if h.Incarnation() != inc || !h.EtcdRunning() {
		t.Fatalf("the host after the kill: incarnation %d (was %d), etcd running %t; want it running on", h.Incarnation(), inc, h.EtcdRunning())
	}
}

func TestCrashReleasesLocksAndStopsServices(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 3})
	h := c.Host("cp3")
	if _, err := h.Handle().Lock("maintenance", "stratum etcd rejoin"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Handle().Lock("maintenance", "stratum server"); err == nil {
		t.Fatal("the lock was not held")
	}
	h.Crash()
	if h.EtcdRunning() {
		t.Fatal("etcd survived the host crash")
	}
	release, err := h.Handle().Lock("maintenance", "after reboot")
	if err != nil {
		t.Fatalf("lock after crash: %v", err)
	}
	release()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	if !h.EtcdRunning() {
		t.Fatal("etcd not running after reboot")
	}
}

func TestPauseAndFailAtCheckpoint(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 1})
	d := c.Host("cp1").Handle()
	boom := errors.New("injected")
	c.FailAt("cp1", "x", boom)
	if err := d.Checkpoint(context.Background(), "x"); !errors.Is(err, boom) {
		t.Fatalf("FailAt: %v", err)
	}
	if err := d.Checkpoint(context.Background(), "x"); err != nil {
		t.Fatalf("an arming fires once; second reach = %v", err)
	}
	p := c.PauseAt("cp1", "y")
	done := make(chan error, 1)
	go func() { done <- d.Checkpoint(context.Background(), "y") }()
	<-p.Reached()
	select {
	case <-done:
		t.Fatal("paused checkpoint returned before release")
	case <-time.After(100 * time.Millisecond):
	}
	p.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.CheckpointsSeen()["x"] != 2 || c.CheckpointsSeen()["y"] != 1 {
		t.Fatalf("checkpoints seen %v", c.CheckpointsSeen())
	}
}

func TestClockOffset(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 1})
	h := c.Host("cp1")
	h.SetClockOffset(2 * time.Hour)
	if skew := time.Until(h.Handle().Now()); skew < 119*time.Minute {
		t.Fatalf("clock offset not applied: %s", skew)
	}
}
