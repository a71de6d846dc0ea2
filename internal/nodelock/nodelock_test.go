package nodelock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"stratum.dev/stratum/internal/host"
)

type clockDir struct{ *host.Dir }

func (clockDir) Now() time.Time { return time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC) }

func TestSecondOperationIsRefusedNamingTheHolder(t *testing.T) {
	root := t.TempDir()
	a, b := clockDir{&host.Dir{Root: root}}, clockDir{&host.Dir{Root: root}}
	release, err := AcquireBoth(a, "stratum etcd rejoin")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(b, Maintenance, "stratum server (join)")
	if !errors.Is(err, ErrBusy) || !errors.Is(err, host.ErrLocked) && !strings.Contains(err.Error(), "stratum etcd rejoin") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "stratum etcd rejoin (pid") || !strings.Contains(err.Error(), "2026-11-30T03:00:00Z") {
		t.Fatalf("refusal does not name the holder: %v", err)
	}
	release()
	r2, err := AcquireBoth(b, "stratum server (join)")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	r2()
}

func TestAcquireBothReleasesMaintenanceWhenDataLockIsHeld(t *testing.T) {
	root := t.TempDir()
	a, b := clockDir{&host.Dir{Root: root}}, clockDir{&host.Dir{Root: root}}
	relData, err := Acquire(a, EtcdData, "stratum snapshot restore")
	if err != nil {
		t.Fatal(err)
	}
	defer relData()
	if _, err := AcquireBoth(b, "stratum etcd rejoin"); !errors.Is(err, ErrBusy) {
		t.Fatalf("err = %v", err)
	}
	relM, err := Acquire(b, Maintenance, "other")
	if err != nil {
		t.Fatalf("maintenance lock leaked by the refused AcquireBoth: %v", err)
	}
	relM()
}

// TestAHolderThatYieldsIsWaitedFor: an operation finding the locks held by
// one marked YieldMark (the supervisor's retried start, which takes them for
// each attempt) waits for the hold to end, saying whom it waits for, and
// again while it waits with how long it has, and takes them; one finding any other holder is refused at once.
func TestAHolderThatYieldsIsWaitedFor(t *testing.T) {
	root := t.TempDir()
	a, b := clockDir{&host.Dir{Root: root}}, clockDir{&host.Dir{Root: root}}
	release, err := AcquireBoth(a, YieldMark+"the supervisor's retried start")
	if err != nil {
		t.Fatal(err)
	}
	defer func(was time.Duration) { WaitSaidEvery = was }(WaitSaidEvery)
	WaitSaidEvery = 200 * time.Millisecond
	var mu sync.Mutex
	var said []string
	var waits []time.Duration
	took := make(chan error, 1)
	start := time.Now()
	go func() {
		rel, err := AcquireBoth(b, "stratum reset", WhileWaiting(func(holder string, waited time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			said, waits = append(said, holder), append(waits, waited)
		}))
		if err == nil {
			rel()
		}
		took <- err
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-took:
		t.Fatalf("AcquireBoth returned (%v) while a yielding holder held the locks", err)
	default:
	}
	// A waiter whose command is stopped (Ctrl-C) stops waiting, the lock
	// not taken: it would otherwise run minutes later, stopped.
	stopped, stop := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := Acquire(b, Maintenance, "stratum repoint", Until(stopped))
		gaveUp <- err
	}()
	time.Sleep(300 * time.Millisecond)
	stop()
	select {
	case err := <-gaveUp:
		if !errors.Is(err, ErrBusy) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped while waiting") {
			t.Fatalf("a stopped waiter = %v; want ErrBusy and the stop, saying so", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stopped waiter still waits for the yielding holder")
	}
	release()
	if err := <-took; err != nil {
		t.Fatalf("AcquireBoth once the yielding holder let go: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(said) < 3 || !strings.Contains(said[0], "the supervisor's retried start") || waits[0] != 0 || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("the wait was said %q after %v; want it said at its start, naming the holder, then again while it lasted", said, waits)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] <= waits[i-1] {
			t.Fatalf("the wait was said after %v; want each saying how long it had waited, growing", waits)
		}
	}

	release, err = AcquireBoth(a, "stratum certs renew")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := Acquire(b, Maintenance, "stratum reset", WhileWaiting(func(string, time.Duration) { t.Error("waited for a holder that does not yield") })); !errors.Is(err, ErrBusy) {
		t.Fatalf("Acquire under a holder that does not yield = %v; want ErrBusy at once", err)
	}
}
