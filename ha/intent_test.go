package ha

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/internal/host"
)

// dirHost is a host.Host over a temp dir, for tests that need only files.
type dirHost struct{ *host.Dir }

func (dirHost) Name() string                                  { return "t" }
func (dirHost) Now() time.Time                                { return time.Now() }
func (dirHost) StartService(context.Context, string) error    { return nil }
func (dirHost) StopService(context.Context, string) error     { return nil }
func (dirHost) RestartService(context.Context, string) error  { return nil }
func (dirHost) CheckServices(context.Context, []string) error { return nil }
func (dirHost) ServiceStatus(context.Context, string) (host.ServiceStatus, error) {
	return host.ServiceStatus{}, nil
}
func (dirHost) Addresses() ([]netip.Addr, error)     { return nil, nil }
func (dirHost) NodeAddresses() ([]netip.Addr, error) { return nil, nil }
func (dirHost) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no network")
}
func (dirHost) TrustCIDR(netip.Prefix) error   { return nil }
func (dirHost) UntrustCIDR(netip.Prefix) error { return nil }

func newDirNode(t *testing.T) (*Node, *host.Dir) {
	d := &host.Dir{Root: t.TempDir()}
	return NewNode(Env{Host: dirHost{d}}), d
}

func TestJoinIntentRoundTripAndClear(t *testing.T) {
	n, _ := newDirNode(t)
	ctx := context.Background()
	if ok, err := n.JoinIntentSurvives(ctx); ok || err != nil {
		t.Fatalf("fresh node: survives=%v err=%v", ok, err)
	}
	if _, err := n.readJoinIntent(); !errors.Is(err, errNoIntent) {
		t.Fatalf("read on a fresh node = %v", err)
	}
	want := joinIntent{Name: "cp2", PeerURL: "https://10.0.0.2:2380", ClusterID: "abc", Endpoints: []string{"https://10.0.0.1:2379"}, Started: time.Now().UTC().Truncate(time.Second)}
	if err := n.writeJoinIntent(want); err != nil {
		t.Fatal(err)
	}
	if ok, err := n.JoinIntentSurvives(ctx); !ok || err != nil {
		t.Fatalf("after write: survives=%v err=%v", ok, err)
	}
	got, err := n.readJoinIntent()
	if err != nil || got.PeerURL != want.PeerURL || got.Version != joinIntentVersion || !got.Started.Equal(want.Started) {
		t.Fatalf("read back %+v, %v", got, err)
	}
	if err := n.ClearJoinIntent(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.ClearJoinIntent(ctx); err != nil {
		t.Fatalf("clearing an absent journal: %v", err)
	}
	if ok, _ := n.JoinIntentSurvives(ctx); ok {
		t.Fatal("journal survives its clear")
	}
}

func TestDamagedJoinIntentIsNeverAbsent(t *testing.T) {
	n, d := newDirNode(t)
	if err := d.WriteFile(joinIntentPath, []byte("{half"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := n.readJoinIntent()
	if err == nil || errors.Is(err, errNoIntent) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged journal read = %v", err)
	}
	if ok, err := n.JoinIntentSurvives(context.Background()); !ok || err != nil {
		t.Fatalf("a damaged journal must survive: %v %v", ok, err)
	}
}

func TestUnreadableJoinIntentIsAnError(t *testing.T) {
	if os.Geteuid() == 0 {
		// root reads a 0000 file; make the path a directory instead.
		n, d := newDirNode(t)
		if err := d.MkdirAll(joinIntentPath, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := n.readJoinIntent(); err == nil || errors.Is(err, errNoIntent) {
			t.Fatalf("unreadable journal = %v", err)
		}
		return
	}
	n, d := newDirNode(t)
	if err := d.WriteFile(joinIntentPath, []byte("{}"), 0o000); err != nil {
		t.Fatal(err)
	}
	if _, err := n.readJoinIntent(); err == nil || errors.Is(err, errNoIntent) {
		t.Fatalf("unreadable journal = %v", err)
	}
}

func TestJoinIntentPathIsTheJournal(t *testing.T) {
	if JoinIntentPath() != joinIntentPath || !strings.HasPrefix(JoinIntentPath(), "/var/lib/stratum/") {
		t.Fatalf("JoinIntentPath = %s", JoinIntentPath())
	}
}
