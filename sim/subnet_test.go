package sim

import (
	"net/netip"
	"testing"
)

// TestFreeSubnetSkipsOneHeld: a /24 an open cluster holds is not given to
// another although nothing listens on it yet (a fresh cluster, a spare host
// waiting to join), and it is given again once released.
func TestFreeSubnetSkipsOneHeld(t *testing.T) {
	a := netip.MustParseAddr("127.201.17.0")
	b := netip.MustParseAddr("127.201.18.0")
	draws := []netip.Addr{a, a, b, a}
	old := pickSubnet
	pickSubnet = func() netip.Addr {
		if len(draws) == 0 { // a drawn /24 was busy (another process)
			return old()
		}
		next := draws[0]
		draws = draws[1:]
		return next
	}
	defer func() { pickSubnet = old }()
	first, err := freeSubnet(3)
	if err != nil || first != a {
		t.Fatalf("first: %v, %v; want %v", first, err, a)
	}
	second, err := freeSubnet(3)
	if err != nil || second != b {
		t.Fatalf("second, while %v is held: %v, %v; want %v", a, second, err, b)
	}
	releaseSubnet(first)
	third, err := freeSubnet(3)
	if err != nil || third != a {
		t.Fatalf("after %v's release: %v, %v; want it again", a, third, err)
	}
	releaseSubnet(second)
	releaseSubnet(third)
}

// TestFreeSubnetSkipsOneLockedElsewhere: a /24 whose lock file another
// process holds (`make test` runs ./ha beside the simulator's and the CLI's
// tests), drawn before that process's cluster listens on it, is skipped; a
// /24 is locked while a cluster holds it and unlocked at its release.
func TestFreeSubnetSkipsOneLockedElsewhere(t *testing.T) {
	a := netip.MustParseAddr("127.202.17.0")
	b := netip.MustParseAddr("127.202.18.0")
	draws := []netip.Addr{a, b}
	old := pickSubnet
	pickSubnet = func() netip.Addr {
		if len(draws) == 0 {
			return old()
		}
		next := draws[0]
		draws = draws[1:]
		return next
	}
	defer func() { pickSubnet = old }()
	// Another process's lock: a second open file description conflicts
	// with flock as another process's would.
	elsewhere, free := lockSubnet(a)
	if !free || elsewhere == nil {
		t.Fatalf("taking %v's lock as another process: free %v, %v", a, free, elsewhere)
	}
	got, err := freeSubnet(3)
	if err != nil || got != b {
		elsewhere.Close()
		t.Fatalf("while another process holds %v's lock: %v, %v; want %v", a, got, err, b)
	}
	elsewhere.Close()
	if f, free := lockSubnet(b); free || f != nil {
		if f != nil {
			f.Close()
		}
		t.Errorf("%v, held by a cluster of this process, is not locked for the others", b)
	}
	releaseSubnet(got)
	f, free := lockSubnet(b)
	if !free || f == nil {
		t.Fatalf("%v after its release: still locked", b)
	}
	f.Close()
}
