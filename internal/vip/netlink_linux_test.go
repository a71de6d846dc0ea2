package vip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// skipOrFail stops a test that cannot get the network namespace it needs: a
// skip on a developer machine, a failure under CI (CI=true), where a skipped
// test would hide that nothing was tested.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// throwawayNetns creates a network namespace named name+pid, which also
// becomes the test goroutine's, and deletes it in cleanup. The goroutine
// stays locked to its thread for the rest of the test: when the test ends the
// thread exits, so no other goroutine ever runs in the namespace.
func throwawayNetns(t *testing.T, name string) netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "skipping: network namespaces need root (running as uid %d)", os.Geteuid())
	}
	runtime.LockOSThread() // never unlocked; see above
	name = fmt.Sprintf("%s-%d", name, os.Getpid())
	ns, err := netns.NewNamed(name)
	if err != nil {
		skipOrFail(t, "skipping: cannot create a network namespace: %v", err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete network namespace %s: %v", name, err)
		}
	})
	return ns
}

// inNetns runs f with the test's thread in ns, then moves it back to back.
func inNetns(t *testing.T, ns, back netns.NsHandle, f func()) {
	t.Helper()
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	f()
	if err := netns.Set(back); err != nil {
		t.Fatal(err)
	}
}

// vethPair makes the veth pair a<->b, a in the current namespace and b in
// peerNS, both up, with the given addresses, and returns them.
func vethPair(t *testing.T, peerNS netns.NsHandle, a, b string, addrA, addrB netip.Prefix) (netlink.Link, netlink.Link) {
	t.Helper()
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}); err != nil {
		t.Fatalf("add veth %s<->%s: %v", a, b, err)
	}
	lb, err := netlink.LinkByName(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(lb, int(peerNS)); err != nil {
		t.Fatalf("move %s to the peer namespace: %v", b, err)
	}
	peer, err := netlink.NewHandleAt(peerNS)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	var links []netlink.Link
	for _, x := range []struct {
		h    *netlink.Handle
		name string
		addr netip.Prefix
	}{{nil, a, addrA}, {peer, b, addrB}} {
		h := x.h
		if h == nil {
			h = &netlink.Handle{} // the current namespace
		}
		l, err := h.LinkByName(x.name)
		if err != nil {
			t.Fatal(err)
		}
		ipn := &net.IPNet{IP: x.addr.Addr().AsSlice(), Mask: net.CIDRMask(x.addr.Bits(), 32)}
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipn}); err != nil {
			t.Fatalf("add %s to %s: %v", x.addr, x.name, err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		links = append(links, l)
	}
	return links[0], links[1]
}

// addrsOf lists the IPv4 prefixes on link.
func addrsOf(t *testing.T, link netlink.Link) []netip.Prefix {
	t.Helper()
	list, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Prefix
	for _, a := range list {
		ip, _ := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out
}

// neighMAC is the MAC the neighbour table of link in ns maps ip to, nil if
// none.
func neighMAC(t *testing.T, ns netns.NsHandle, link netlink.Link, ip netip.Addr) net.HardwareAddr {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	list, err := h.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list {
		if got, _ := netip.AddrFromSlice(n.IP); got.Unmap() == ip {
			return n.HardwareAddr
		}
	}
	return nil
}

// TestNetlinkAnnouncer holds and releases a VIP on one end of a veth pair
// between two throwaway network namespaces, the holder's and a neighbour's:
// Hold puts the /32 on the interface found
// from the node IP and announces it, so the peer sees gratuitous ARP and its
// stale neighbour entry for the VIP moves to the holder's MAC; Release
// removes the address; both are idempotent.
func TestNetlinkAnnouncer(t *testing.T) {
	peerNS := throwawayNetns(t, "stratum-vip-test-peer")
	holderNS := throwawayNetns(t, "stratum-vip-test-holder")
	node, peerAddr := netip.MustParsePrefix("198.18.0.1/24"), netip.MustParsePrefix("198.18.0.2/24")
	vipAddr := netip.MustParseAddr("198.18.0.100")
	holder, peer := vethPair(t, peerNS, "vip0", "vip1", node, peerAddr)
	mac := holder.Attrs().HardwareAddr

	if name, err := InterfaceOf(node.Addr()); err != nil || name != "vip0" {
		t.Fatalf("InterfaceOf(%s) = %q, %v; want vip0", node.Addr(), name, err)
	}
	if _, err := InterfaceOf(netip.MustParseAddr("198.19.0.1")); !errors.Is(err, ErrNoInterface) {
		t.Fatalf("InterfaceOf(an address nobody has) = %v, want ErrNoInterface", err)
	}

	// The peer remembers the VIP at some other MAC, as it would the previous
	// holder's.
	oldMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	var listen *arp.Client
	// staleAt makes the peer's neighbour entry for the VIP oldMAC, stale.
	staleAt := func() {
		if err := netlink.NeighSet(&netlink.Neigh{
			LinkIndex: peer.Attrs().Index, IP: vipAddr.AsSlice(), HardwareAddr: oldMAC,
			State: netlink.NUD_STALE, Family: netlink.FAMILY_V4,
		}); err != nil {
			t.Fatal(err)
		}
	}
	inNetns(t, peerNS, holderNS, func() {
		staleAt()
		ifi, err := net.InterfaceByName("vip1")
		if err != nil {
			t.Fatal(err)
		}
		if listen, err = arp.Dial(ifi); err != nil {
			t.Fatalf("listen for ARP on vip1: %v", err)
		}
	})
	defer listen.Close()
	if got := neighMAC(t, peerNS, peer, vipAddr); got.String() != oldMAC.String() {
		t.Fatalf("peer's neighbour entry for %s = %s, want %s", vipAddr, got, oldMAC)
	}

	a := &NetlinkAnnouncer{NodeIP: node.Addr(), Addr: vipAddr}
	vip32 := netip.PrefixFrom(vipAddr, 32)
	ctx := context.Background()
	for i := range 2 {
		if err := a.Hold(ctx); err != nil {
			t.Fatalf("Hold #%d: %v", i+1, err)
		}
		if got := addrsOf(t, holder); !slices.Contains(got, vip32) || !slices.Contains(got, node) {
			t.Fatalf("after Hold #%d vip0 has %v, want %s beside %s", i+1, got, vip32, node)
		}
	}

	// Both Holds announced: arpCount requests and replies each, broadcast,
	// sender and target the VIP, sender MAC vip0's.
	counts := map[arp.Operation]int{}
	if err := listen.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for {
		p, f, err := listen.Read()
		if err != nil {
			break // the deadline: everything sent has been read
		}
		if p.SenderIP != vipAddr {
			continue // the kernel's own ARP, if any
		}
		if p.TargetIP != vipAddr || p.SenderHardwareAddr.String() != mac.String() || f.Destination.String() != "ff:ff:ff:ff:ff:ff" {
			t.Errorf("not a gratuitous ARP for %s from %s: %+v in frame to %s", vipAddr, mac, p, f.Destination)
		}
		counts[p.Operation]++
	}
	if counts[arp.OperationRequest] != 2*arpCount || counts[arp.OperationReply] != 2*arpCount {
		t.Errorf("received gratuitous ARP %v, want %d requests and %d replies", counts, 2*arpCount, 2*arpCount)
	}
	if got := neighMAC(t, peerNS, peer, vipAddr); got.String() != mac.String() {
		t.Errorf("peer's neighbour entry for %s = %s, want the holder's %s", vipAddr, got, mac)
	}

	for i := range 2 {
		if err := a.Release(); err != nil {
			t.Fatalf("Release #%d: %v", i+1, err)
		}
		if got := addrsOf(t, holder); slices.Contains(got, vip32) || !slices.Contains(got, node) {
			t.Fatalf("after Release #%d vip0 has %v, want %s only", i+1, got, node)
		}
	}

	// With Reannounce, a held VIP is announced again and again until its
	// Release: the neighbours' caches come back to it after another holder
	// announced over it.
	re := &NetlinkAnnouncer{NodeIP: node.Addr(), Addr: vipAddr, Reannounce: 100 * time.Millisecond}
	if err := re.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	inNetns(t, peerNS, holderNS, staleAt)
	time.Sleep(time.Second)
	if got := neighMAC(t, peerNS, peer, vipAddr); got.String() != mac.String() {
		t.Errorf("a second after another MAC took the peer's cache, its entry for %s = %s, want the re-announcing holder's %s", vipAddr, got, mac)
	}
	if err := listen.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	rounds := 0
	for {
		p, _, err := listen.Read()
		if err != nil {
			break
		}
		if p.SenderIP == vipAddr && p.Operation == arp.OperationReply {
			rounds++
		}
	}
	if rounds < arpCount+5 {
		t.Errorf("%d gratuitous ARP replies in about 2 s with Reannounce 100ms, want more than %d", rounds, arpCount+5)
	}
	if err := re.Release(); err != nil {
		t.Fatal(err)
	}

	// A named interface works the same, and a released VIP on a vanished
	// interface is released.
	named := &NetlinkAnnouncer{Interface: "vip0", Addr: vipAddr}
	if err := named.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	if got := addrsOf(t, holder); !slices.Contains(got, vip32) {
		t.Fatalf("after Hold on vip0 it has %v", got)
	}
	if err := named.Release(); err != nil {
		t.Fatal(err)
	}
	if got := addrsOf(t, holder); slices.Contains(got, vip32) {
		t.Fatalf("after Release on vip0 it has %v", got)
	}
	if err := (&NetlinkAnnouncer{Interface: "gone0", Addr: vipAddr}).Release(); err != nil {
		t.Errorf("Release on a missing interface: %v", err)
	}
	if err := (&NetlinkAnnouncer{Interface: "vip0", Addr: netip.MustParseAddr("2001:db8::1")}).Hold(ctx); err == nil {
		t.Error("Hold of an IPv6 VIP succeeded")
	}
}

// TestNetlinkAnnouncerLifetime: with a Lifetime the VIP goes into the kernel
// with that valid lifetime and is renewed while held, so it outlives many
// lifetimes; once the renewals stop without a Release (the holder was
// killed) the kernel removes it within a lifetime.
func TestNetlinkAnnouncerLifetime(t *testing.T) {
	throwawayNetns(t, "st-vip-lft")
	link := upVeth(t, "st-lft0", "st-lft1")
	vip := netip.MustParseAddr("198.18.0.100")
	a := &NetlinkAnnouncer{Interface: "st-lft0", Addr: vip, Lifetime: 2 * time.Second}
	held := func() (bool, int) {
		t.Helper()
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		for _, ad := range addrs {
			if got, _ := netip.AddrFromSlice(ad.IP); got == vip {
				return true, ad.ValidLft
			}
		}
		return false, 0
	}
	if err := a.Hold(context.Background()); err != nil {
		t.Fatal(err)
	}
	ok, lft := held()
	if !ok || lft <= 0 || lft > 2 {
		t.Fatalf("after Hold: held %v, valid lifetime %d s; want held with a lifetime of at most 2 s", ok, lft)
	}
	time.Sleep(5 * time.Second) // two and a half lifetimes, renewed
	if ok, _ := held(); !ok {
		t.Fatal("the held VIP expired although it was being renewed")
	}
	a.stopRenewal()
	deadline := time.Now().Add(4 * time.Second)
	for {
		if ok, _ := held(); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the VIP outlived its lifetime by 2 s after the renewals stopped")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := a.Release(); err != nil {
		t.Fatalf("release of an expired VIP: %v", err)
	}
}

// TestNetlinkAnnouncerKeepsTheVIPOnlyWhileTheLeaseIsFresh: gated on the
// lease (as Run gates it), a held VIP is renewed while the lease's last write
// is younger than the lease less a retry period, taken off once it is older (the
// holder's renewals stalled: its apiserver stopped answering, or the process
// was frozen) before any other candidate may win the lease (the write plus
// the lease duration), though Release never ran, and put back as soon as a
// write is fresh again. Ungated, it was renewed until client-go gave the
// lease up, seconds after another node could hold the VIP.
func TestNetlinkAnnouncerKeepsTheVIPOnlyWhileTheLeaseIsFresh(t *testing.T) {
	throwawayNetns(t, "st-vip-gate")
	link := upVeth(t, "st-gate0", "st-gate1")
	vip := netip.MustParseAddr("198.18.0.101")
	held := func() bool {
		t.Helper()
		for _, p := range addrsOf(t, link) {
			if p.Addr() == vip {
				return true
			}
		}
		return false
	}
	var mu sync.Mutex
	lastWrite, writing := time.Now(), true
	go func() { // a holder renewing its lease every RetryPeriod, until told to stop
		for range time.Tick(DefaultRetryPeriod) {
			mu.Lock()
			if writing {
				lastWrite = time.Now()
			}
			mu.Unlock()
		}
	}()
	a := &NetlinkAnnouncer{Interface: "st-gate0", Addr: vip, Lifetime: DefaultAddressLifetime, Reannounce: DefaultReannounce}
	within := DefaultLeaseDuration - DefaultRetryPeriod // as Run hands it
	a.gate(func() time.Time { mu.Lock(); defer mu.Unlock(); return lastWrite }, within)
	if err := a.Hold(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	time.Sleep(2 * DefaultLeaseDuration)
	if !held() {
		t.Fatal("the VIP went although its lease was renewed")
	}

	mu.Lock()
	writing = false
	stalled := lastWrite
	mu.Unlock()
	time.Sleep(time.Until(stalled.Add(within - 500*time.Millisecond)))
	if !held() {
		t.Fatalf("the VIP went before its lease's last write was %s old", within)
	}
	for held() {
		if time.Since(stalled) > DefaultLeaseDuration {
			t.Fatalf("the VIP outlived its lease's last write by the lease duration (%s): another node may hold it by now", DefaultLeaseDuration)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("taken off %s after the lease's last write (gate %s, lease %s)", time.Since(stalled).Round(10*time.Millisecond), within, DefaultLeaseDuration)

	mu.Lock()
	writing, lastWrite = true, time.Now()
	mu.Unlock()
	deadline := time.Now().Add(2 * time.Second)
	for !held() {
		if time.Now().After(deadline) {
			t.Fatal("the VIP did not come back once its lease was written again")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// upVeth makes a veth pair a-b in the current network namespace, both ends
// up, and returns a.
func upVeth(t *testing.T, a, b string) netlink.Link {
	t.Helper()
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{b, a} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	l, err := netlink.LinkByName(a)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestNetlinkAnnouncerFollowsARecreatedInterface: the held VIP's interface
// is deleted and made again under its name (a network restart re-creating a
// bridge or a bond), with a new index. The renewals put the VIP on the new
// one within a lifetime and keep it there; they renewed on
// the old index, failing, and the VIP was gone for good while this node
// kept the lease.
func TestNetlinkAnnouncerFollowsARecreatedInterface(t *testing.T) {
	throwawayNetns(t, "st-vip-remade")
	old := upVeth(t, "st-rmd0", "st-rmd1")
	vip := netip.MustParseAddr("198.18.0.102")
	a := &NetlinkAnnouncer{Interface: "st-rmd0", Addr: vip, Lifetime: 2 * time.Second, Reannounce: DefaultReannounce}
	if err := a.Hold(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	if err := netlink.LinkDel(old); err != nil { // its veth peer goes with it
		t.Fatal(err)
	}
	remade := upVeth(t, "st-rmd0", "st-rmd1")
	if remade.Attrs().Index == old.Attrs().Index {
		t.Fatalf("the re-created interface kept its index %d", old.Attrs().Index)
	}
	deadline := time.Now().Add(4 * time.Second) // two lifetimes
	for !slices.ContainsFunc(addrsOf(t, remade), func(p netip.Prefix) bool { return p.Addr() == vip }) {
		if time.Now().After(deadline) {
			t.Fatalf("the VIP is not on the re-created interface %d s after it was made (addresses %v)", 4, addrsOf(t, remade))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // more than a lifetime: it is renewed there, not added once
	if !slices.ContainsFunc(addrsOf(t, remade), func(p netip.Prefix) bool { return p.Addr() == vip }) {
		t.Fatal("the VIP on the re-created interface expired: it is not renewed there")
	}
	if err := a.Release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	if slices.ContainsFunc(addrsOf(t, remade), func(p netip.Prefix) bool { return p.Addr() == vip }) {
		t.Fatal("the VIP stayed on the re-created interface after its release")
	}
}
