package sim

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/version"
)

// TestCheckServicesSeesPortsBinariesAndVIP checks a spare host (nothing
// running) and a control plane (its own etcd holds its ports) against the
// real ports and binaries.
func TestCheckServicesSeesPortsBinariesAndVIP(t *testing.T) {
	assetstest.Require(t, "kube-apiserver")
	c := Start(t, Config{ControlPlanes: 1, SpareHosts: 1})
	ctx := context.Background()
	cp1, cp2 := c.Host("cp1"), c.Host("cp2")
	both := []string{ServiceEtcd, ServiceAPIServer}
	if err := cp2.Handle().CheckServices(ctx, both); err != nil {
		t.Fatalf("spare host: %v", err)
	}
	if err := cp1.Handle().CheckServices(ctx, []string{ServiceEtcd}); err != nil {
		t.Fatalf("a host whose own member holds the etcd ports: %v", err)
	}

	addr := net.JoinHostPort(cp2.IP().String(), strconv.Itoa(version.APIServerPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	err = cp2.Handle().CheckServices(ctx, both)
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Fatalf("with %s taken: %v, want a refusal naming the port and kube-apiserver", addr, err)
	}
	if err := cp2.Handle().CheckServices(ctx, []string{ServiceEtcd}); err != nil {
		t.Fatalf("etcd's ports are free: %v", err)
	}
	ln.Close()
	if err := cp2.Handle().CheckServices(ctx, both); err != nil {
		t.Fatalf("after the port was freed: %v", err)
	}

	cp2.SetEtcdVersion("v0.0.0-missing")
	if err := cp2.Handle().CheckServices(ctx, []string{ServiceEtcd}); err == nil {
		t.Fatal("an etcd version with no binary passed the check")
	}
	cp2.SetEtcdVersion("")
	if err := cp2.Handle().CheckServices(ctx, []string{ServiceVIP}); err == nil {
		t.Fatal("kube-vip passed the check in a cluster without a VIP")
	}
	if err := cp2.Handle().CheckServices(ctx, []string{"no-such-service"}); !errors.Is(err, host.ErrUnknownService) {
		t.Fatalf("unknown service: %v, want host.ErrUnknownService", err)
	}
	old := cp2.Handle()
	cp2.Crash()
	if err := old.CheckServices(ctx, both); !errors.Is(err, ErrStaleIncarnation) {
		t.Fatalf("check from a crashed incarnation: %v, want ErrStaleIncarnation", err)
	}
}

// TestBrokenServicesRefuseChecksAndStarts breaks a host's services: checks and
// starts fail with the injected error and are recorded, running services stay
// up, and mending restores both.
func TestBrokenServicesRefuseChecksAndStarts(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp1 := c.Host("cp1")
	d := cp1.Handle()
	broken := errors.New("systemd is wedged")
	cp1.BreakServices(broken)
	if err := d.CheckServices(ctx, []string{ServiceEtcd}); !errors.Is(err, broken) {
		t.Fatalf("check on a broken host: %v, want %v", err, broken)
	}
	if err := d.StopService(ctx, ServiceEtcd); err != nil {
		t.Fatal(err)
	}
	if err := d.StartService(ctx, ServiceEtcd); !errors.Is(err, broken) {
		t.Fatalf("start on a broken host: %v, want %v", err, broken)
	}
	if cp1.EtcdRunning() {
		t.Fatal("etcd started on a host whose services are broken")
	}
	if n := len(c.Events().Find("fault", "services broken")); n != 3 {
		t.Fatalf("fault events = %d, want 3 (break, check, start):\n%s", n, c.Events())
	}
	cp1.MendServices()
	if err := d.CheckServices(ctx, []string{ServiceEtcd}); err != nil {
		t.Fatalf("check after mending: %v", err)
	}
	if err := d.StartService(ctx, ServiceEtcd); err != nil {
		t.Fatalf("start after mending: %v", err)
	}
}
