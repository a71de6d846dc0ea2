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
