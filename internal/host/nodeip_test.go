package host

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
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

type addrsOnly struct{ addrs []netip.Addr }

func (a addrsOnly) Addresses() ([]netip.Addr, error) { return a.addrs, nil }
func (addrsOnly) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no")
}
func (addrsOnly) TrustCIDR(netip.Prefix) error { return nil }

func TestDetectNodeIPs(t *testing.T) {
	n := addrsOnly{[]netip.Addr{netip.MustParseAddr("fe80::1"), netip.MustParseAddr("2001:db8::5"), netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")}}
	if got, err := DetectNodeIPs(n, false); err != nil || got != "10.0.0.5" {
		t.Fatalf("single stack = %q, %v", got, err)
	}
	if got, err := DetectNodeIPs(n, true); err != nil || got != "10.0.0.5,2001:db8::5" {
		t.Fatalf("dual stack = %q, %v", got, err)
	}
	if _, err := DetectNodeIPs(addrsOnly{[]netip.Addr{netip.MustParseAddr("10.0.0.5")}}, true); err == nil {
		t.Fatal("dual stack without IPv6 detected something")
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

func TestPrereqsAndDirs(t *testing.T) {
	h := testHost{&Dir{Root: t.TempDir()}, addrsOnly{[]netip.Addr{netip.MustParseAddr("10.0.0.5")}}}
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
	noAddr := testHost{h.Dir, addrsOnly{}}
	if err := Prereqs(noAddr, PrereqOptions{}); !errors.Is(err, ErrPrereq) {
		t.Fatalf("a host without addresses passed: %v", err)
	}
}
