package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
	stratumvip "stratum.dev/stratum/internal/vip"
)

// reissueWithoutVIP replaces h's apiserver serving certificate with one that
// names the host and the first service IP but not the VIP, and restarts its
// apiserver on it: a node left with a certificate from before the VIP.
func reissueWithoutVIP(t *testing.T, ctx context.Context, c *Cluster, h *Host) {
	t.Helper()
	sans := &pki.APISANs{IPs: []net.IP{firstServiceIP(c.Config().ServiceCIDR)}}
	leaves, err := pki.NodeLeaves(c.Shared(), h.Name(), net.IP(h.IP().AsSlice()), sans, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"apiserver.crt", "apiserver.key"} {
		if err := h.Files().WriteFile(version.PKIFile(f), leaves[f], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := pki.CheckLeafCovers(leaves["apiserver.crt"], net.IP(c.VIPAddress().AsSlice())); !errors.Is(err, pki.ErrIPNotCovered) {
		t.Fatalf("reissued certificate covers the VIP: %v", err)
	}
	if err := h.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := h.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
}

// heldVIPSince reports whether the event log shows h holding the VIP at or
// after since.
func heldVIPSince(c *Cluster, h *Host, since time.Time) bool {
	for _, e := range c.Events().Find("vip", "holds the VIP") {
		if e.Host == h.Name() && !e.Time.Before(since) {
			return true
		}
	}
	return false
}

// TestVIPRefusedWithoutCoveringCertificate gives cp3 an apiserver certificate
// without the VIP: its kube-vip refuses to start, saying why; a candidate that
// was started before the certificate changed wins the lease once it is the
// only one, refuses to take the VIP and releases it; then a good host takes it.
func TestVIPRefusedWithoutCoveringCertificate(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := Start(t, Config{ControlPlanes: 3, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp1, cp2, cp3 := c.Host("cp1"), c.Host("cp2"), c.Host("cp3")
	// Only cp1 runs a candidate, so it holds the VIP; cp3's starts beside it
	// with its certificate still good.
	cp2.StopVIPCandidate()
	cp3.StopVIPCandidate()
	eventually(t, 20*time.Second, "cp1 holds the VIP", func() (bool, string) {
		return c.VIPHolder() == cp1, fmt.Sprint(c.VIPHolder())
	})
	if err := cp3.StartVIPCandidate(); err != nil {
		t.Fatalf("cp3 with a covering certificate: %v", err)
	}

	// Whichever host won the VIP while all three ran candidates, cp3 may
	// hold it only while its certificate still covered it.
	uncovered := time.Now()
	reissueWithoutVIP(t, ctx, c, cp3)

	// cp3's candidate runs on; once cp1's is gone it wins the lease.
	cp1.StopVIPCandidate()
	eventually(t, 20*time.Second, "cp3 wins the lease and refuses the VIP", func() (bool, string) {
		for _, e := range c.Events().Find("error", "won the VIP lease but did not take the VIP") {
			if e.Host == "cp3" {
				return true, ""
			}
		}
		return false, fmt.Sprint(c.VIPHolder())
	})
	eventually(t, 10*time.Second, "cp3's kube-vip stopped", func() (bool, string) {
		st, err := cp3.serviceStatus(ServiceVIP)
		return err == nil && !st.Running, fmt.Sprint(st, err)
	})

	// Refused at the start, saying why and what to do.
	err := cp3.StartVIPCandidate()
	if err == nil {
		t.Fatal("cp3's kube-vip started with a certificate that does not cover the VIP")
	}
	for _, want := range []string{"cp3", c.VIPAddress().String(), cp3.IP().String(), "re-run `stratum up` on cp3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if !errors.Is(err, pki.ErrIPNotCovered) {
		t.Errorf("refusal %v does not match pki.ErrIPNotCovered", err)
	}
	if st, _ := cp3.serviceStatus(ServiceVIP); st.Running {
		t.Fatal("a refused kube-vip reports running")
	}
	if len(c.Events().Find("error", "no kube-vip candidate was started")) != 1 {
		t.Fatalf("event log does not record the refusal:\n%s", c.Events())
	}

	// The lease was released: a good host takes the VIP at once.
	if err := cp2.StartVIPCandidate(); err != nil {
		t.Fatal(err)
	}
	if h, err := c.WaitVIP(ctx); err != nil || h != cp2 {
		t.Fatalf("VIP holder = %v (%v), want cp2", h, err)
	}
	if heldVIPSince(c, cp3, uncovered) {
		t.Fatalf("cp3 held the VIP with a certificate that does not cover it:\n%s", c.Events())
	}
}

// TestVIPReannouncedWhileHeld: two candidates that hold the VIP at once, as
// the two sides of a cluster split by a snapshot restore do (each here the
// only candidate on a Lease store of its own, so no apiserver decision is
// involved), take the VIP in turns; when one stops, the other takes it back
// within a few re-announce periods, as a real holder's gratuitous ARP rounds
// do. The claims must outlive the elector's callback, which returns as soon
// as the address is taken.
func TestVIPReannouncedWhileHeld(t *testing.T) {
	c := &Cluster{events: newEventLog(nil)}
	c.vip.conns = map[net.Conn]struct{}{}
	a, b := &Host{name: "a", cluster: c}, &Host{name: "b", cluster: c}
	run := func(h *Host) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- stratumvip.Run(ctx, stratumvip.Config{
				Client: fake.NewClientset(), Identity: h.name, Lease: VIPLeaseName,
				LeaseDuration: vipLeaseDuration, RenewDeadline: vipRenewDeadline, RetryPeriod: vipRetryPeriod,
				Announcer: &vipAnnouncer{h: h, life: ctx},
			})
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("candidate %s: %v", h.name, err)
			}
		}
	}
	holds := func(h *Host, within time.Duration) bool {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if c.VIPHolder() == h {
				return true
			}
		}
		return false
	}
	reannounces := func(h *Host, within time.Duration) bool {
		count := func() int {
			n := 0
			for _, e := range c.Events().Find("vip", "(re-announced)") {
				if e.Host == h.name {
					n++
				}
			}
			return n
		}
		before := count()
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if count() > before {
				return true
			}
		}
		return false
	}
	holder := func() string {
		if h := c.VIPHolder(); h != nil {
			return h.name
		}
		return "none"
	}
	stopA := run(a)
	if !holds(a, 10*time.Second) {
		t.Fatal("the lone candidate a never held the VIP")
	}
	stopB := run(b)
	if !holds(b, 10*time.Second) {
		t.Fatal("candidate b, alone on its own lease, never held the VIP")
	}
	// a's and b's re-announces tick at the same period, a few milliseconds
	// apart, so a holds for only that long each period: too short for a
	// holder poll to see every time. Each claim that changes the holder is
	// an event: a re-announce of a's while b holds records one.
	if !reannounces(a, 3*vipReannounce) {
		t.Fatalf("a, still holding its lease, did not re-announce the VIP while b held it too (holder %s)", holder())
	}
	stopB()
	if !holds(a, 3*vipReannounce) {
		t.Fatalf("after b stopped, a, still holding its lease, did not take the VIP back within %s (holder %s)", 3*vipReannounce, holder())
	}
	stopA()
	if h := holder(); h != "none" {
		t.Fatalf("after both candidates stopped the VIP holder is %s", h)
	}
}
