package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/host/faultfs"
	"stratum.dev/stratum/internal/version"
)

// ErrStaleIncarnation matches a host call made by an operation whose host
// crashed since it began: as after a SIGKILL, nothing it does lands.
var ErrStaleIncarnation = errors.New("host crashed since this operation began (stale incarnation)")

// ErrCommandKilled matches a host call made by an operation whose own
// process was killed (CrashCommandAt) while its host ran on.
var ErrCommandKilled = errors.New("this operation's process was killed")

// ErrIsolated matches a dial refused because its host, or the host it dials,
// is isolated.
var ErrIsolated = errors.New("network isolated")

// Host is one simulated machine: its own loopback address, root directory,
// services (an etcd member, a kube-apiserver, a VIP candidate) and clock.
// Operations run on it through a Handle bound to its current incarnation.
type Host struct {
	cluster *Cluster
	name    string
	ip      netip.Addr
	files   *host.Dir
	// disk is the fault layer under files (disk.go).
	disk *faultfs.FS

	mu          sync.Mutex
	incarnation uint64
	clockOffset time.Duration
	// etcdVersion is the etcd binary version this host runs as a separate
	// process, "" for an embedded member.
	etcdVersion string
	etcd        etcdMember
	apiserver   *apiServer
	// apiServerRan: an apiserver has run here (a reboot starts one again
	// on a host Config.WithoutAPIServer names).
	apiServerRan bool
	vip          *vipCandidate
	kcm          *controllerManager
	// brokenServices, when set, is the error every service start and check
	// fails with (BreakServices).
	brokenServices error
	// trusted are the ranges its firewall trusts (TrustCIDR, UntrustCIDR).
	trusted map[netip.Prefix]bool
}

// Name is the host's name (its node and etcd member name).
func (h *Host) Name() string { return h.name }

// IP is the host's own loopback address.
func (h *Host) IP() netip.Addr { return h.ip }

// Root is the real directory that is this host's "/".
func (h *Host) Root() string { return h.files.Root }

// Path maps a path inside the host to the real file system.
func (h *Host) Path(p string) string { return h.files.Path(p) }

// Files is the host's file system for the simulator's own use, not bound to
// an incarnation (a reboot reads what a crash left).
func (h *Host) Files() host.Files { return h.files }

// Incarnation is how many times the host has crashed.
func (h *Host) Incarnation() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.incarnation
}

// SetClockOffset skews the host's clock (Handle.Now) by d, for stratum's own
// expiry logic. The servers' clocks are not moved.
func (h *Host) SetClockOffset(d time.Duration) {
	h.mu.Lock()
	h.clockOffset = d
	h.mu.Unlock()
	h.cluster.events.Record(h.name, "fault", "clock offset %s", d)
}

// ClientURL is the host's etcd client URL.
func (h *Host) ClientURL() string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(h.ip.String(), fmt.Sprint(version.EtcdClientPort)))
}

// PeerURL is the host's etcd peer URL.
func (h *Host) PeerURL() string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(h.ip.String(), fmt.Sprint(version.EtcdPeerPort)))
}

// APIServerURL is the host's own kube-apiserver URL.
func (h *Host) APIServerURL() string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(h.ip.String(), fmt.Sprint(version.APIServerPort)))
}

// Handle returns the host bound to its current incarnation: what an operation
// started now uses. After a crash every call through it fails with
// ErrStaleIncarnation.
func (h *Host) Handle() *Handle {
	return &Handle{h: h, inc: h.Incarnation()}
}

// Handle is a Host as one incarnation sees it; it implements host.Host. It
// is also the process of the operation that uses it: kill ends that process
// alone (CrashCommandAt), the host and its services running on.
type Handle struct {
	h   *Host
	inc uint64

	mu     sync.Mutex
	killed bool
	// locks are the releases of the locks this operation holds, and conns
	// the connections it dialed and has not closed: a killed process's
	// flocks are dropped and its sockets closed by the kernel.
	locks map[*func() error]struct{}
	conns map[net.Conn]struct{}
}

// kill is the operation's process killed (SIGKILL) while its host runs on:
// every later call through the handle fails with ErrCommandKilled, the locks
// it holds are released and the connections it opened are closed, so that a
// goroutine of it still running (a fence renewer) writes nothing more, as a
// killed process writes nothing.
func (d *Handle) kill() {
	d.mu.Lock()
	d.killed = true
	locks, conns := d.locks, d.conns
	d.locks, d.conns = nil, nil
	d.mu.Unlock()
	for release := range locks {
		_ = (*release)()
	}
	for c := range conns {
		_ = c.Close()
	}
}

var _ host.Host = (*Handle)(nil)

// Host is the simulated host behind the handle.
func (d *Handle) Host() *Host { return d.h }

func (d *Handle) live() error {
	if d.h.Incarnation() != d.inc {
		return fmt.Errorf("%s: %w", d.h.name, ErrStaleIncarnation)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.killed {
		return fmt.Errorf("%s: %w", d.h.name, ErrCommandKilled)
	}
	return nil
}

func (d *Handle) Name() string { return d.h.name }

func (d *Handle) Now() time.Time {
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	return time.Now().Add(d.h.clockOffset)
}

func (d *Handle) ReadFile(p string) ([]byte, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	return d.h.files.ReadFile(p)
}

func (d *Handle) Open(p string) (io.ReadCloser, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	return d.h.files.Open(p)
}

func (d *Handle) WriteFile(p string, data []byte, perm fs.FileMode) error {
	if err := d.live(); err != nil {
		return err
	}
	return d.h.files.WriteFile(p, data, perm)
}

func (d *Handle) WriteFrom(p string, r io.Reader, perm fs.FileMode) error {
	if err := d.live(); err != nil {
		return err
	}
	return d.h.files.WriteFrom(p, r, perm)
}

func (d *Handle) Remove(p string) error {
	if err := d.live(); err != nil {
		return err
	}
	return d.h.files.Remove(p)
}

func (d *Handle) RemoveAll(p string) error {
	if err := d.live(); err != nil {
		return err
	}
	return d.h.files.RemoveAll(p)
}

func (d *Handle) MkdirAll(p string, perm fs.FileMode) error {
	if err := d.live(); err != nil {
		return err
	}
	return d.h.files.MkdirAll(p, perm)
}

func (d *Handle) ReadDir(p string) ([]fs.DirEntry, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	return d.h.files.ReadDir(p)
}

func (d *Handle) Stat(p string) (fs.FileInfo, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	return d.h.files.Stat(p)
}

func (d *Handle) Lock(name, holder string) (func() error, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	release, err := d.h.files.Lock(name, holder)
	if err != nil {
		return nil, err
	}
	// Tracked until released, so a kill releases it.
	var once sync.Once
	var rerr error
	tracked := func() error {
		once.Do(func() { rerr = release() })
		return rerr
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.killed {
		_ = tracked()
		return nil, fmt.Errorf("%s: %w", d.h.name, ErrCommandKilled)
	}
	if d.locks == nil {
		d.locks = map[*func() error]struct{}{}
	}
	key := &tracked
	d.locks[key] = struct{}{}
	return func() error {
		d.mu.Lock()
		delete(d.locks, key)
		d.mu.Unlock()
		return tracked()
	}, nil
}

func (d *Handle) StartService(ctx context.Context, name string) error {
	if err := d.live(); err != nil {
		return err
	}
	return d.h.startService(ctx, name)
}

func (d *Handle) StopService(ctx context.Context, name string) error {
	if err := d.live(); err != nil {
		return err
	}
	return d.h.stopService(ctx, name)
}

func (d *Handle) RestartService(ctx context.Context, name string) error {
	if err := d.live(); err != nil {
		return err
	}
	if err := d.h.stopService(ctx, name); err != nil {
		return err
	}
	return d.h.startService(ctx, name)
}

// CheckServices reports, without starting or changing anything, whether each
// named service could be started on this host now (host.Services'
// CheckServices): its binary present, its ports on the host's address free
// unless it is this host's own running instance, and the host's services not
// broken (BreakServices).
func (d *Handle) CheckServices(ctx context.Context, names []string) error {
	if err := d.live(); err != nil {
		return err
	}
	return d.h.checkServices(ctx, names)
}

func (d *Handle) ServiceStatus(ctx context.Context, name string) (host.ServiceStatus, error) {
	if err := d.live(); err != nil {
		return host.ServiceStatus{}, err
	}
	return d.h.serviceStatus(name)
}

func (d *Handle) Addresses() ([]netip.Addr, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	return []netip.Addr{d.h.ip}, nil
}

// NodeAddresses is the host's own loopback address: its routable address
// in the simulation, so node-IP detection picks it as a real machine's
// picks its default route's.
func (d *Handle) NodeAddresses() ([]netip.Addr, error) {
	return d.Addresses()
}

// DialContext dials from this host: refused while this host or the target's
// host is isolated, or the two are on opposite sides of a partition.
func (d *Handle) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	if err := d.h.cluster.network.allowDial(d.h, address); err != nil {
		return nil, err
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.killed {
		conn.Close()
		return nil, fmt.Errorf("%s: %w", d.h.name, ErrCommandKilled)
	}
	if d.conns == nil {
		d.conns = map[net.Conn]struct{}{}
	}
	tc := &trackedConn{Conn: conn, d: d}
	d.conns[tc] = struct{}{}
	return tc, nil
}

// trackedConn is a connection an operation dialed, forgotten by its handle
// once closed.
type trackedConn struct {
	net.Conn
	d *Handle
}

func (c *trackedConn) Close() error {
	c.d.mu.Lock()
	delete(c.d.conns, c)
	c.d.mu.Unlock()
	return c.Conn.Close()
}

// TrustCIDR records the trust; the simulated hosts share loopback, which no
// firewall filters.
func (d *Handle) TrustCIDR(cidr netip.Prefix) error {
	if err := d.live(); err != nil {
		return err
	}
	d.h.mu.Lock()
	if d.h.trusted == nil {
		d.h.trusted = map[netip.Prefix]bool{}
	}
	d.h.trusted[cidr.Masked()] = true
	d.h.mu.Unlock()
	d.h.cluster.events.Record(d.h.name, "action", "firewall trusts %s", cidr)
	return nil
}

// UntrustCIDR records that the trust of cidr is taken back.
func (d *Handle) UntrustCIDR(cidr netip.Prefix) error {
	if err := d.live(); err != nil {
		return err
	}
	d.h.mu.Lock()
	was := d.h.trusted[cidr.Masked()]
	delete(d.h.trusted, cidr.Masked())
	d.h.mu.Unlock()
	if was {
		d.h.cluster.events.Record(d.h.name, "action", "firewall no longer trusts %s", cidr)
	}
	return nil
}

// Trusted are the ranges the host's firewall trusts, sorted: what a
// firewall rule a command left open would show.
func (h *Host) Trusted() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for p := range h.trusted {
		out = append(out, p.String())
	}
	slices.Sort(out)
	return out
}

// Checkpoint is the hook an operation on this host reaches at each named
// checkpoint (ha.Env's Checkpoint). It records the checkpoint and carries out
// whatever the simulation armed there: a crash freezes the caller for good
// (no return, no deferred cleanup, as a SIGKILL); a pause blocks until
// released; a fault returns its error.
func (d *Handle) Checkpoint(ctx context.Context, name string) error {
	if err := d.live(); err != nil {
		return err
	}
	return d.h.cluster.checkpoints.reach(ctx, d, name)
}
