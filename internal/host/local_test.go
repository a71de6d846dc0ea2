package host

import (
	"net/netip"
	"testing"
)

// TestLocalAddressesRoutableFirstLoopbackKept checks the kernel's own list:
// 127.0.0.1 is an address of this host (a --node-ip of it is local), and a
// routable address, when the machine has one, comes before every loopback
// one so that detection picks it.
func TestLocalAddressesRoutableFirstLoopbackKept(t *testing.T) {
	addrs, err := (&Local{}).Addresses()
	if err != nil {
		t.Fatal(err)
	}
	loop := netip.MustParseAddr("127.0.0.1")
	seenLoop, hasLoop := false, false
	for _, a := range addrs {
		if a == loop {
			hasLoop = true
		}
		if a.IsLoopback() {
			seenLoop = true
		} else if seenLoop {
			t.Errorf("routable %s listed after a loopback address: %v", a, addrs)
		}
	}
	if !hasLoop {
		t.Errorf("127.0.0.1 missing from this host's addresses %v", addrs)
	}
}
