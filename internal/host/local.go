package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Local is the real Linux machine: files under "/", the services of its
// Services (stratum's own supervisor, in process or through its control
// socket), iptables for firewall trust, the kernel's addresses, the system
// dialer and clock.
type Local struct {
	Dir
	// Services runs the control plane's services; nil refuses every call
	// with ErrNoServiceManager.
	Services Services
	hostname string
	// commands runs the firewall tool; nil is os/exec. A test's seam.
	commands commandRunner
}

// commandRunner finds and runs a command (os/exec, or a test's recorder).
type commandRunner interface {
	LookPath(name string) (string, error)
	// Run runs name with args and returns its combined output.
	Run(name string, args ...string) ([]byte, error)
}

// execRunner is commandRunner over os/exec.
type execRunner struct{}

func (execRunner) LookPath(name string) (string, error) { return exec.LookPath(name) }

func (execRunner) Run(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
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
// its loopback ones, so a --node-ip of 127.0.0.1 is still an address of
// this host. Detection does not choose from them (NodeAddresses).
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

// NodeAddresses are the addresses node-IP detection chooses from
// (nodeAddressOrder): first what apimachinery's ResolveBindAddress picks for
// an unspecified IPv4 and an unspecified IPv6 bind address — the global
// unicast address of the interface carrying the default route, IPv4 or
// IPv6 first respectively (ChooseHostInterface) — then the global unicast
// addresses of the up, non-loopback, non-point-to-point interfaces. A host
// with no default route (ResolveBindAddress refuses) is left with the
// latter. Loopback and link-local addresses are never among them.
func (l *Local) NodeAddresses() ([]netip.Addr, error) {
	var preferred []netip.Addr
	for _, unspecified := range []net.IP{net.IPv4zero, net.IPv6zero} {
		if ip, err := utilnet.ResolveBindAddress(unspecified); err == nil {
			if a, ok := netip.AddrFromSlice(ip); ok {
				preferred = append(preferred, a)
			}
		}
	}
	nics, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list this machine's interfaces: %w", err)
	}
	ifaces := make([]netInterface, 0, len(nics))
	for _, nic := range nics {
		addrs, err := nic.Addrs()
		if err != nil {
			return nil, fmt.Errorf("list the addresses of interface %s: %w", nic.Name, err)
		}
		i := netInterface{Name: nic.Name, Up: nic.Flags&net.FlagUp != 0,
			Loopback: nic.Flags&net.FlagLoopback != 0, PointToPoint: nic.Flags&net.FlagPointToPoint != 0}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				i.Addrs = append(i.Addrs, p.Addr())
			}
		}
		ifaces = append(ifaces, i)
	}
	return nodeAddressOrder(preferred, ifaces), nil
}

// xtablesWait is every iptables invocation's -w: wait up to 5 s for the
// xtables lock that kube-proxy, the CNI and firewalld also take, instead
// of failing at once while one of them holds it (kube-proxy waits 5 s too).
var xtablesWait = []string{"-w", "5"}

// trustRule is the rule that trusts cidr, as iptables (ip6tables for an
// IPv6 range) takes it: the runner, the tool's name and path, and the
// arguments of op (-C, -I, -D) on it; ok is false on a machine without the
// tool (toolPath), which has no iptables firewall to open.
func (l *Local) trustRule(cidr netip.Prefix) (run commandRunner, tool, path string, args func(op string) []string, ok bool) {
	run = l.commands
	if run == nil {
		run = execRunner{}
	}
	tool = "iptables"
	if cidr.Addr().Is6() {
		tool = "ip6tables"
	}
	if path, ok = toolPath(run, tool); !ok {
		return nil, "", "", nil, false
	}
	rule := []string{"INPUT", "-s", cidr.Masked().String(), "-m", "comment", "--comment", "stratum", "-j", "ACCEPT"}
	return run, tool, path, func(op string) []string { return slices.Concat(xtablesWait, []string{op}, rule) }, true
}

// TrustCIDR inserts an iptables ACCEPT rule for cidr unless it is already
// there. A machine without the iptables tool (toolPath) has no iptables
// firewall to open: that is not an error.
func (l *Local) TrustCIDR(cidr netip.Prefix) error {
	run, tool, path, args, ok := l.trustRule(cidr)
	if !ok {
		return nil
	}
	// -C answers 1 for a rule that is not there; anything else (4 when the
	// xtables lock did not come within -w's wait) says nothing about it,
	// and inserting then could add it twice.
	out, err := run.Run(path, args("-C")...)
	if err == nil {
		return nil
	}
	if ec, ok := errors.AsType[interface {
		error
		ExitCode() int
	}](err); !ok || ec.ExitCode() != 1 {
		return fmt.Errorf("trust %s in the firewall: check for the rule (%s -C): %w: %s; nothing was changed: run `stratum up` again", cidr, tool, err, strings.TrimSpace(string(out)))
	}
	if out, err := run.Run(path, args("-I")...); err != nil {
		return fmt.Errorf("trust %s in the firewall (%s): %w: %s", cidr, tool, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// UntrustCIDR deletes the ACCEPT rule TrustCIDR inserted for cidr, when
// iptables -C finds it (exit 1: it is not there, nothing to do; any other
// failure says nothing about it, and is the error). A machine without the
// iptables tool has no rule to delete.
func (l *Local) UntrustCIDR(cidr netip.Prefix) error {
	run, tool, path, args, ok := l.trustRule(cidr)
	if !ok {
		return nil
	}
	// Each copy: a stratum before 2026-12-04 could insert the rule twice.
	for range maxRuleCopies {
		out, err := run.Run(path, args("-C")...)
		if err != nil {
			if ec, ok := errors.AsType[interface {
				error
				ExitCode() int
			}](err); ok && ec.ExitCode() == 1 {
				return nil
			}
			return fmt.Errorf("take back the firewall's trust of %s: check for the rule (%s -C): %w: %s", cidr, tool, err, strings.TrimSpace(string(out)))
		}
		if out, err := run.Run(path, args("-D")...); err != nil {
			return fmt.Errorf("take back the firewall's trust of %s (%s -D): %w: %s", cidr, tool, err, strings.TrimSpace(string(out)))
		}
	}
	return fmt.Errorf("take back the firewall's trust of %s: the rule is still there after %d deletions (%s -C)", cidr, maxRuleCopies, tool)
}

// maxRuleCopies bounds UntrustCIDR's deletions of the rule's copies.
const maxRuleCopies = 8

// toolPath finds tool on PATH, then in /usr/sbin and /sbin: a root shell
// from `su` without `-` keeps the user's PATH, which lacks them, and the
// firewall rule was skipped as if the machine had no iptables.
func toolPath(run commandRunner, tool string) (string, bool) {
	for _, p := range []string{tool, "/usr/sbin/" + tool, "/sbin/" + tool} {
		if found, err := run.LookPath(p); err == nil {
			return found, true
		}
	}
	return "", false
}

// StartService, StopService, RestartService, ServiceStatus and
// CheckServices go to l.Services.
func (l *Local) StartService(ctx context.Context, name string) error {
	return l.services().StartService(ctx, name)
}

func (l *Local) StopService(ctx context.Context, name string) error {
	return l.services().StopService(ctx, name)
}

func (l *Local) RestartService(ctx context.Context, name string) error {
	return l.services().RestartService(ctx, name)
}

func (l *Local) ServiceStatus(ctx context.Context, name string) (ServiceStatus, error) {
	return l.services().ServiceStatus(ctx, name)
}

func (l *Local) CheckServices(ctx context.Context, names []string) error {
	return l.services().CheckServices(ctx, names)
}

func (l *Local) services() Services {
	if l.Services == nil {
		return noManager{}
	}
	return l.Services
}

var _ Host = (*Local)(nil)

// ErrNoServiceManager matches a service call on a Local with no manager.
var ErrNoServiceManager = errors.New("no service manager for this host")

// noManager is the Services of a Local nobody gave a manager: every call
// fails naming that.
type noManager struct{}

func (noManager) err(name string) error {
	return fmt.Errorf("%w: %w %q", ErrNoServiceManager, ErrUnknownService, name)
}
func (m noManager) StartService(_ context.Context, name string) error   { return m.err(name) }
func (m noManager) StopService(_ context.Context, name string) error    { return m.err(name) }
func (m noManager) RestartService(_ context.Context, name string) error { return m.err(name) }
func (m noManager) ServiceStatus(_ context.Context, name string) (ServiceStatus, error) {
	return ServiceStatus{}, m.err(name)
}
func (m noManager) CheckServices(_ context.Context, names []string) error {
	return fmt.Errorf("%w: %w: %s", ErrServicesUnavailable, ErrNoServiceManager, strings.Join(names, ", "))
}
