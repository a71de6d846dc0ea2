package ha_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

func TestDowngradeEtcd(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t, assets.EtcdName(version.Etcd), assets.EtcdName(version.EtcdPrevious))
	names := cpNames(3)
	versions := map[string]string{}
	for _, n := range names {
		versions[n] = version.Etcd
	}
	c := sim.Start(t, sim.Config{ControlPlanes: 3, EtcdVersions: versions})
	ctx := context.Background()
	ips := ipsOf(c, names...)
	n, logs := loggedNodeOn(c.Host("cp1"))

	// Each member raises its own storage version some time after the
	// cluster version settles: wait for all of them before comparing.
	var before ha.EtcdStorage
	for _, ip := range ips {
		st, err := settledStorage(t, ctx, n, ip, "3.7")
		if err != nil || !strings.HasPrefix(st.StorageVersion, "3.7") {
			t.Fatalf("storage of %s before = %+v, %v", ip, st, err)
		}
		before = st
	}

	// Refusals change nothing: an upgrade, a skipped minor version, a
	// malformed target.
	for _, target := range []string{"3.8", "3.4", "v3.5"} {
		err := n.DowngradeEtcd(ctx, ips[0], target)
		if !errors.Is(err, ha.ErrDowngradeNotValidated) {
			t.Errorf("DowngradeEtcd to %s = %v; want ErrDowngradeNotValidated", target, err)
		}
	}
	if err := n.DowngradeEtcd(ctx, ips[0], "three.six"); err == nil || errors.Is(err, ha.ErrDowngradeNotValidated) {
		t.Errorf("DowngradeEtcd to a malformed target = %v; want a refusal before etcd is asked", err)
	}
	for _, ip := range ips {
		st, err := n.EtcdStorageAt(ctx, ip)
		if err != nil || st.StorageVersion != before.StorageVersion || st.Downgrading || st.DowngradeTarget != "" {
			t.Fatalf("storage of %s after refused downgrades = %+v, %v; want %+v", ip, st, err, before)
		}
	}

	// A cluster that is not healthy is refused before etcd is asked. A
	// member that does not answer (restarting, an election) is waited for,
	// and the wait said; here the operator's Ctrl-C ends it.
	c.Host("cp3").StopEtcd()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := n.DowngradeEtcd(wctx, ips[0], "3.6")
	cancel()
	if err == nil || errors.Is(err, ha.ErrDowngradeNotValidated) || !strings.Contains(err.Error(), "not healthy") || !strings.Contains(err.Error(), "stopped while it waited") {
		t.Errorf("DowngradeEtcd with a member down, stopped after 2s = %v; want a health refusal after a wait", err)
	}
	if !strings.Contains(logs.String(), "waiting for the cluster's etcd to become healthy before the downgrade is asked of it") {
		t.Errorf("DowngradeEtcd with a member down did not say it waited:\n%s", logs)
	}
	if st, _ := n.EtcdStorageAt(ctx, ips[0]); st.Downgrading {
		t.Fatalf("a refused downgrade was enabled: %+v", st)
	}

	// End to end: enable, wait for every member's storage to be lowered,
	// swap each member to the previous etcd, and DowngradeEtcd returns.
	// The first run is interrupted once the storage is lowered; the re-run
	// (as the CLI's help says: run it again) waits for the enabled downgrade.
	done := make(chan error, 1)
	start := time.Now()
	firstCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	// Begun with cp3's member still down, which it waits for: back a
	// second later, the downgrade goes on.
	go func() { done <- n.DowngradeEtcd(firstCtx, ips[0], "v3.6") }()
	time.Sleep(time.Second)
	if err := c.Host("cp3").StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, ip := range ips {
		for {
			st, err := n.EtcdStorageAt(ctx, ip)
			if err == nil && strings.HasPrefix(st.StorageVersion, "3.6") {
				if !st.Downgrading || st.DowngradeTarget != "3.6.0" {
					t.Errorf("storage of %s = %+v; want a downgrade to 3.6.0 enabled", ip, st)
				}
				break
			}
			select {
			case err := <-done:
				t.Fatalf("DowngradeEtcd returned %v before any member was swapped\nlogs:\n%s", err, logs)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("storage of %s not lowered: %+v, %v\nlogs:\n%s", ip, st, err, logs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("storage lowered on every member %s after DowngradeEtcd started", time.Since(start).Round(time.Millisecond))
	interrupt()
	if err := <-done; err == nil {
		t.Fatal("the interrupted DowngradeEtcd returned nil before any member was swapped")
	}
	waitHealthy(t, n, ips) // the operator's re-run comes later than at once
	go func() { done <- n.DowngradeEtcd(ctx, ips[0], "3.6") }()
	// The operator swaps the members once the re-run waits for them (a
	// swap of cp1 before would take down the member the re-run asks).
	for !strings.Contains(logs.String(), "already enabled (an earlier run was interrupted)") {
		select {
		case err := <-done:
			t.Fatalf("the re-run of DowngradeEtcd returned %v before it waited for the members\nlogs:\n%s", err, logs)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, name := range names {
		select {
		case err := <-done:
			t.Fatalf("DowngradeEtcd returned %v before %s was swapped", err, name)
		default:
		}
		h := c.Host(name)
		h.StopEtcd()
		h.SetEtcdVersion(version.EtcdPrevious)
		if err := h.StartEtcd(ctx); err != nil {
			t.Fatalf("start %s on etcd %s: %v", name, version.EtcdPrevious, err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("DowngradeEtcd: %v\nlogs:\n%s", err, logs)
		}
	case <-time.After(time.Minute):
		t.Fatalf("DowngradeEtcd did not return after every member was swapped\nlogs:\n%s", logs)
	}
	t.Logf("DowngradeEtcd returned %s after it started", time.Since(start).Round(time.Millisecond))
	for _, ip := range ips {
		if m := n.EtcdMemberStatus(ctx, ip); m.Err != nil || !strings.HasPrefix(m.Version, "3.6") {
			t.Errorf("member %s after the downgrade: %+v", ip, m)
		}
	}
	if !strings.Contains(logs.String(), "etcd downgrade in progress") {
		t.Errorf("no progress was logged; logs:\n%s", logs)
	}
	// Run once more after it ended: nothing to do, and not an error.
	if err := n.DowngradeEtcd(ctx, ips[0], "3.6"); err != nil {
		t.Fatalf("DowngradeEtcd again once every member runs 3.6: %v", err)
	}
}

// waitHealthy waits up to 20 s for EtcdClusterHealthy.
func waitHealthy(t *testing.T, n *ha.Node, ips []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := n.EtcdClusterHealthy(context.Background(), ips)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not healthy within 20s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDowngradeStoppedAfterItsValidation: a Ctrl-C that lands once etcd has
// validated the downgrade, before its enable is sent, is a refusal with the
// cluster as it was (a validation changes nothing), not a failure that says
// the downgrade may be enabled.
func TestDowngradeStoppedAfterItsValidation(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 1})
	ip := ipsOf(c, "cp1")[0]
	n, _ := loggedNodeOn(c.Host("cp1"))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pause := c.PauseAt("cp1", ha.CheckpointDowngradeValidated)
	result := make(chan error, 1)
	go func() { result <- n.DowngradeEtcd(ctx, ip, "3.6") }()
	select {
	case <-pause.Reached():
	case err := <-result:
		t.Fatalf("DowngradeEtcd returned (%v) before etcd validated it", err)
	}
	stop()
	pause.Release()
	err := <-result
	if !ha.IsRefusal(err) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped before it changed anything") {
		t.Fatalf("DowngradeEtcd stopped after etcd validated it = %v; want a refusal saying it was stopped", err)
	}
	if st, err := n.EtcdStorageAt(context.Background(), ip); err != nil || st.Downgrading {
		t.Fatalf("storage after a downgrade stopped before its enable: %+v, %v; want no downgrade enabled", st, err)
	}
}

// TestDowngradeWaitSaysHowItEnded: the wait for every member to run the
// downgrade's target says how long it waited when its bound (or the
// caller's) ran out, and that it was stopped on a Ctrl-C, where both read
// "context deadline exceeded" or "context canceled" alone.
func TestDowngradeWaitSaysHowItEnded(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 1})
	n := ha.NewNode(ha.Env{Host: c.Host("cp1").Handle()})
	hosts := ipsOf(c, "cp1")
	short, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := n.WaitMembersRun(short, hosts, "3.6"); err == nil || !strings.Contains(err.Error(), "; waited 2s)") && !strings.Contains(err.Error(), "; waited 1s)") {
		t.Errorf("a downgrade wait past its bound = %v; want it to say how long it waited", err)
	}
	stopped, stop := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, stop)
	if err := n.WaitMembersRun(stopped, hosts, "3.6"); err == nil || !strings.Contains(err.Error(), "stopped while waiting") || !errors.Is(err, context.Canceled) {
		t.Errorf("a downgrade wait stopped = %v; want it to say it was stopped", err)
	}
}
