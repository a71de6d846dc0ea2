package ha

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"stratum.dev/stratum/internal/host"
)

// firewall is a dirHost whose firewall trusts what it is told, or fails
// every rule change (an iptables whose lock stays busy) when broken.
type firewall struct {
	dirHost
	broken  bool
	trusted *[]netip.Prefix
}

func (f firewall) TrustCIDR(p netip.Prefix) error {
	if f.broken {
		return errors.New("iptables: the xtables lock stayed busy")
	}
	*f.trusted = append(*f.trusted, p)
	return nil
}

func (f firewall) UntrustCIDR(p netip.Prefix) error {
	if f.broken {
		return errors.New("iptables: the xtables lock stayed busy")
	}
	*f.trusted = slices.DeleteFunc(*f.trusted, func(q netip.Prefix) bool { return q == p })
	return nil
}

// TestARefusedJoinTakesBackOnlyTheTrustItGave: the undo of a refused join
// takes back the firewall trust the join gave, and none it failed to give:
// on a host whose iptables fails, the undo would fail the same way, and the
// refusal (exit 3) would read as a failure (exit 1) over a firewall that
// was never opened.
func TestARefusedJoinTakesBackOnlyTheTrustItGave(t *testing.T) {
	pods := netip.MustParsePrefix("10.244.0.0/16")
	for _, broken := range []bool{false, true} {
		var trusted []netip.Prefix
		c := &createdFiles{Host: firewall{dirHost: dirHost{&host.Dir{Root: t.TempDir()}}, broken: broken, trusted: &trusted}}
		if err := c.TrustCIDR(pods); (err != nil) != broken {
			t.Fatalf("broken=%t: TrustCIDR = %v", broken, err)
		}
		if err := c.undo(); err != nil || len(trusted) != 0 {
			t.Fatalf("broken=%t: undo = %v, the firewall trusting %v; want nil and nothing trusted", broken, err, trusted)
		}
	}
}
