package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"path"
	"strings"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/internal/version"
)

func TestResolveNodeIPPrecedence(t *testing.T) {
	detect := func() (string, error) { return "192.0.2.9", nil }
	for _, tc := range []struct {
		name, flag, config, state, env string
		want                           NodeIPChoice
		wantErr                        string
	}{
		{"flag wins", "192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", NodeIPChoice{"192.0.2.1", "flag"}, ""},
		{"saved beats config", "", "192.0.2.2", "192.0.2.3", "192.0.2.4", NodeIPChoice{"192.0.2.3", "saved"}, ""},
		{"config beats env", "", "192.0.2.2", "", "192.0.2.4", NodeIPChoice{"192.0.2.2", "config"}, ""},
		{"env beats detection", "", "", "", "192.0.2.4", NodeIPChoice{"192.0.2.4", "env"}, ""},
		{"detected last", "", "", "", "", NodeIPChoice{"192.0.2.9", "detected"}, ""},
		{"a bad flag is an error, not skipped", "not-an-ip", "192.0.2.2", "", "", NodeIPChoice{}, "from flag"},
		{"unspecified refused", "0.0.0.0", "", "", "", NodeIPChoice{}, "cannot be"},
		{"dual-stack config", "", "192.0.2.2, 2001:db8::2", "", "", NodeIPChoice{"192.0.2.2,2001:db8::2", "config"}, ""},
		{"dual-stack saved, IPv6 first", "", "", "2001:db8::3,192.0.2.3", "", NodeIPChoice{"2001:db8::3,192.0.2.3", "saved"}, ""},
		{"two IPv4 refused", "", "192.0.2.2,192.0.2.5", "", "", NodeIPChoice{}, "one family"},
		{"three refused", "192.0.2.1,2001:db8::1,192.0.2.5", "", "", "", NodeIPChoice{}, "more than two"},
		{"a bad half refused", "192.0.2.1,nope", "", "", "", NodeIPChoice{}, "from flag is not an IP address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NODE_IP", tc.env)
			got, err := ResolveNodeIP(tc.flag, tc.config, tc.state, detect)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	t.Setenv("NODE_IP", "")
	if _, err := ResolveNodeIP("", "", "", func() (string, error) { return "", errors.New("no route") }); err == nil || !strings.Contains(err.Error(), "--node-ip") {
		t.Fatalf("failed detection = %v, want advice to pass --node-ip", err)
	}
}

// addrsOnly is a Network with the given detection candidates (node) and
// addresses (all; node when nil).
type addrsOnly struct{ node, all []netip.Addr }

func (a addrsOnly) Addresses() ([]netip.Addr, error) {
	if a.all == nil {
		return a.node, nil
	}
	return a.all, nil
}
func (a addrsOnly) NodeAddresses() ([]netip.Addr, error) { return a.node, nil }
func (addrsOnly) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no")
}
func (addrsOnly) TrustCIDR(netip.Prefix) error   { return nil }
func (addrsOnly) UntrustCIDR(netip.Prefix) error { return nil }

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func TestDetectNodeIPs(t *testing.T) {
	n := addrsOnly{node: addrs("2001:db8::5", "10.0.0.5", "10.0.0.6", "fd00::7")}
	if got, err := DetectNodeIPs(n, false); err != nil || got != "10.0.0.5" {
		t.Fatalf("single stack = %q, %v", got, err)
	}
	if got, err := DetectNodeIPs(n, true); err != nil || got != "10.0.0.5,2001:db8::5" {
		t.Fatalf("dual stack = %q, %v", got, err)
	}
	if _, err := DetectNodeIPs(addrsOnly{node: addrs("10.0.0.5")}, true); err == nil {
		t.Fatal("dual stack without IPv6 detected something")
	}
	if _, err := DetectNodeIPs(addrsOnly{node: addrs("2001:db8::5")}, false); err == nil {
		t.Fatal("an IPv6-only host detected an IPv4 address")
	}
}

// TestDetectRefusesLoopbackOnlyHost: a host whose only addresses are
// loopback ones is refused with advice to pass --node-ip, instead of
// publishing 127.0.0.1 as its etcd peer URL; an explicit --node-ip
// 127.0.0.1 is still taken.
func TestDetectRefusesLoopbackOnlyHost(t *testing.T) {
	t.Setenv("NODE_IP", "")
	for _, n := range []addrsOnly{
		{all: addrs("127.0.0.1", "::1")},
		{all: []netip.Addr{}},
	} {
		_, err := DetectNodeIPs(n, false)
		if !errors.Is(err, ErrNoNodeAddress) {
			t.Fatalf("detection on %v = %v, want ErrNoNodeAddress", n.all, err)
		}
		detect := func() (string, error) { return DetectNodeIPs(n, false) }
		_, err = ResolveNodeIP("", "", "", detect)
		if err == nil || !strings.Contains(err.Error(), "no non-loopback address; pass --node-ip") {
			t.Fatalf("resolution on %v = %v, want a refusal asking for --node-ip", n.all, err)
		}
		if len(n.all) > 0 && !strings.Contains(err.Error(), "127.0.0.1, ::1") {
			t.Errorf("refusal %q does not name the host's addresses", err)
		}
		got, err := ResolveNodeIP("127.0.0.1", "", "", detect)
		if err != nil || got != (NodeIPChoice{"127.0.0.1", "flag"}) {
			t.Fatalf("--node-ip 127.0.0.1 = %v, %v; want it taken", got, err)
		}
	}
}

// TestNodeAddressOrder: ChooseHostInterface's rules over a host's
// interfaces: the default route's choice first, then global unicast
// addresses of up, non-loopback, non-point-to-point interfaces; never a
// loopback or link-local address.
func TestNodeAddressOrder(t *testing.T) {
	lo := netInterface{Name: "lo", Up: true, Loopback: true, Addrs: addrs("127.0.0.1", "::1")}
	eth0 := netInterface{Name: "eth0", Up: true, Addrs: addrs("fe80::1", "192.0.2.2", "fd00::2")}
	eth1 := netInterface{Name: "eth1", Up: true, Addrs: addrs("169.254.0.9", "198.51.100.7")}
	down := netInterface{Name: "eth2", Addrs: addrs("203.0.113.1")}
	tun := netInterface{Name: "tun0", Up: true, PointToPoint: true, Addrs: addrs("100.64.0.1")}
	for _, tc := range []struct {
		name      string
		preferred []netip.Addr
		ifaces    []netInterface
		want      string
	}{
		{"loopback only", nil, []netInterface{lo}, ""},
		{"loopback and link-local only", nil, []netInterface{lo, {Name: "eth0", Up: true, Addrs: addrs("fe80::1", "169.254.1.1")}}, ""},
		{"no default route: interface order", nil, []netInterface{lo, eth0, eth1}, "192.0.2.2 fd00::2 198.51.100.7"},
		{"the default route's interface first", addrs("198.51.100.7"), []netInterface{lo, eth0, eth1}, "198.51.100.7 192.0.2.2 fd00::2"},
		{"down and point-to-point skipped", nil, []netInterface{down, tun, lo}, ""},
		{"a loopback choice is not taken", addrs("127.0.0.1"), []netInterface{lo}, ""},
		{"mapped IPv4 unmapped, listed once", addrs("::ffff:192.0.2.2"), []netInterface{eth0}, "192.0.2.2 fd00::2"},
	} {
		got := nodeAddressOrder(tc.preferred, tc.ifaces)
		if s := strings.TrimSpace(strings.ReplaceAll(fmt.Sprint(got), ",", "")); strings.Trim(s, "[]") != tc.want {
			t.Errorf("%s: %v, want [%s]", tc.name, got, tc.want)
		}
	}
}

// TestLocalNodeAddressesNeverLoopback: this machine's candidates are
// global unicast addresses only, whatever its interfaces.
func TestLocalNodeAddressesNeverLoopback(t *testing.T) {
	got, err := (&Local{}).NodeAddresses()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range got {
		if !a.IsGlobalUnicast() || a.IsLoopback() || a.IsLinkLocalUnicast() {
			t.Errorf("candidate %s in %v", a, got)
		}
	}
}

type trustRecorder struct {
	addrsOnly
	trusted []string
}

func (r *trustRecorder) TrustCIDR(p netip.Prefix) error {
	r.trusted = append(r.trusted, p.String())
	return nil
}

func TestTrustPodCIDRs(t *testing.T) {
	r := &trustRecorder{}
	err := TrustPodCIDRs(r, "10.244.0.0/16, fd00::/56,bogus")
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("err = %v, want the bad range named", err)
	}
	if strings.Join(r.trusted, " ") != "10.244.0.0/16 fd00::/56" {
		t.Fatalf("trusted %v", r.trusted)
	}

	// A range holding the node's address (Calico's default over a
	// 192.168.1.0/24 network) is not trusted: it would open the host to its
	// own network. The others still are, and another address of the host
	// inside a range (a CNI bridge's, by design) is not judged.
	r = &trustRecorder{addrsOnly: addrsOnly{all: addrs("192.168.1.11", "10.244.0.1", "127.0.0.1")}}
	err = TrustPodCIDRs(r, "192.168.0.0/16,10.244.0.0/16,fd00::/56", "192.168.1.11", "192.168.1.10")
	if err == nil || !strings.Contains(err.Error(), "pod CIDR 192.168.0.0/16 holds the node's address 192.168.1.11") {
		t.Fatalf("err = %v, want the range over the host's address named", err)
	}
	if strings.Join(r.trusted, " ") != "10.244.0.0/16 fd00::/56" {
		t.Fatalf("trusted %v, want 10.244.0.0/16 fd00::/56", r.trusted)
	}
}

type testHost struct {
	*Dir
	addrsOnly
}

func (testHost) Name() string   { return "t" }
func (testHost) Now() time.Time { return time.Now() }
func (testHost) StartService(context.Context, string) error {
	return nil
}
func (testHost) StopService(context.Context, string) error     { return nil }
func (testHost) RestartService(context.Context, string) error  { return nil }
func (testHost) CheckServices(context.Context, []string) error { return nil }
func (testHost) ServiceStatus(context.Context, string) (ServiceStatus, error) {
	return ServiceStatus{}, nil
}

// fullDisk is a host whose every write fails with ENOSPC.
type fullDisk struct{ testHost }

func (fullDisk) WriteFile(name string, _ []byte, _ fs.FileMode) error {
	return &fs.PathError{Op: "write", Path: name, Err: syscall.ENOSPC}
}

// failingRemove is a host whose removals fail with EIO after removing, as a
// removal whose directory fsync fails does.
type failingRemove struct{ testHost }

func (h failingRemove) Remove(name string) error {
	if err := h.testHost.Remove(name); err != nil {
		return err
	}
	return &fs.PathError{Op: "fsync-dir", Path: path.Dir(name), Err: syscall.EIO}
}

func TestPrereqsAndDirs(t *testing.T) {
	h := testHost{&Dir{Root: t.TempDir()}, addrsOnly{node: addrs("10.0.0.5")}}
	if err := Dirs(h); err != nil {
		t.Fatal(err)
	}
	if err := Prereqs(h, PrereqOptions{Profile: "cis"}); err != nil {
		t.Fatalf("cis profile on a good host: %v", err)
	}
	for _, o := range []PrereqOptions{{Profile: "nope"}, {Profile: "cis", SELinuxOptOut: true}} {
		if err := Prereqs(h, o); !errors.Is(err, ErrPrereq) {
			t.Fatalf("Prereqs(%+v) = %v, want ErrPrereq", o, err)
		}
	}
	// A disk failure stays matchable through the refusal: callers and the
	// disk-fault properties branch on the errno.
	if err := Prereqs(fullDisk{h}, PrereqOptions{}); !errors.Is(err, ErrPrereq) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "cannot write "+version.StateDir) {
		t.Fatalf("a full disk: %v, want ErrPrereq matching ENOSPC and naming %s", err, version.StateDir)
	}
	// So does one that fails only the probe's removal: an fsync error is
	// reported once, and a bring-up that ignored it would go on on a disk
	// that may have lost writes.
	if err := Prereqs(failingRemove{h}, PrereqOptions{}); !errors.Is(err, ErrPrereq) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "fsync-dir "+version.StateDir) {
		t.Fatalf("a disk failing the probe's removal: %v, want ErrPrereq matching EIO and naming the fsync of %s", err, version.StateDir)
	}
	noAddr := testHost{h.Dir, addrsOnly{}}
	if err := Prereqs(noAddr, PrereqOptions{}); !errors.Is(err, ErrPrereq) {
		t.Fatalf("a host without addresses passed: %v", err)
	}
}
