package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"stratum.dev/stratum/internal/version"
)

// Local is the real Linux machine: files under "/", systemd units named
// stratum-<service>, iptables for firewall trust, the kernel's addresses, the
// system dialer and clock.
type Local struct {
	Dir
	hostname string
}

// NewLocal returns the local machine as a Host.
func NewLocal() (*Local, error) {
	name, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("read this machine's hostname: %w", err)
	}
	return &Local{Dir: Dir{Root: "/", LockDir: "/run/stratum"}, hostname: strings.ToLower(name)}, nil
}

func (l *Local) Name() string { return l.hostname }

func (l *Local) Now() time.Time { return time.Now() }

func (l *Local) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// Addresses lists the kernel's global unicast and private addresses, then
// its loopback ones: detection takes the first, and a --node-ip of
// 127.0.0.1 is still an address of this host.
func (l *Local) Addresses() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list this machine's addresses: %w", err)
	}
	var global, loop []netip.Addr
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := p.Addr().Unmap()
		switch {
		case ip.IsLoopback():
			loop = append(loop, ip)
		case ip.IsGlobalUnicast() || ip.IsPrivate():
			global = append(global, ip)
		}
	}
	return append(global, loop...), nil
}

// TrustCIDR inserts an iptables ACCEPT rule for cidr unless it is already there.
func (l *Local) TrustCIDR(cidr netip.Prefix) error {
	tool := "iptables"
	if cidr.Addr().Is6() {
		tool = "ip6tables"
	}
	rule := []string{"INPUT", "-s", cidr.Masked().String(), "-m", "comment", "--comment", "stratum", "-j", "ACCEPT"}
	if exec.Command(tool, append([]string{"-C"}, rule...)...).Run() == nil {
		return nil
	}
	if out, err := exec.Command(tool, append([]string{"-I"}, rule...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("trust %s in the firewall (%s): %w: %s", cidr, tool, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func unit(name string) string { return "stratum-" + name + ".service" }

func systemctl(ctx context.Context, verb, name string) error {
	out, err := exec.CommandContext(ctx, "systemctl", verb, unit(name)).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && strings.Contains(string(out), "not found") {
			return fmt.Errorf("%w: systemd has no unit %s", ErrUnknownService, unit(name))
		}
		return fmt.Errorf("systemctl %s %s: %w: %s", verb, unit(name), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (l *Local) StartService(ctx context.Context, name string) error {
	return systemctl(ctx, "start", name)
}

func (l *Local) StopService(ctx context.Context, name string) error {
	return systemctl(ctx, "stop", name)
}

func (l *Local) RestartService(ctx context.Context, name string) error {
	return systemctl(ctx, "restart", name)
}

func (l *Local) ServiceStatus(ctx context.Context, name string) (ServiceStatus, error) {
	out, err := exec.CommandContext(ctx, "systemctl", "is-active", unit(name)).Output()
	state := strings.TrimSpace(string(out))
	if err != nil && state == "" {
		return ServiceStatus{}, fmt.Errorf("systemctl is-active %s: %w", unit(name), err)
	}
	return ServiceStatus{Name: name, Running: state == "active", Detail: state}, nil
}

var _ Host = (*Local)(nil)

// CheckServices checks, for each named service, that systemd knows its unit
// (this release starts services through units named stratum-<name>) and,
// for a service not already active, that the ports it listens on are free.
func (l *Local) CheckServices(ctx context.Context, names []string) error {
	var problems []string
	for _, name := range names {
		out, err := exec.CommandContext(ctx, "systemctl", "cat", unit(name)).CombinedOutput()
		if err != nil {
			why := strings.TrimSpace(string(out))
			if why == "" {
				why = err.Error()
			}
			problems = append(problems, fmt.Sprintf("%s: no systemd unit %s (%s)", name, unit(name), why))
			continue
		}
		if st, err := l.ServiceStatus(ctx, name); err == nil && st.Running {
			continue
		}
		for _, port := range servicePorts[name] {
			if err := portFree(port); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrServicesUnavailable, strings.Join(problems, "; "))
	}
	return nil
}

// servicePorts are the TCP ports each service listens on.
var servicePorts = map[string][]int{
	"etcd":           {version.EtcdClientPort, version.EtcdPeerPort},
	"kube-apiserver": {version.APIServerPort},
}

// portFree reports whether nothing listens on port on any address.
func portFree(port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("port %d is in use: %w", port, err)
	}
	return ln.Close()
}
