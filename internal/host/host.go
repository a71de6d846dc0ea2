// Package host is everything the ha code touches on a machine: files under the
// host's root, exclusive locks, named services, firewall trust, the node's
// addresses, a dialer and a clock.
//
// Paths are absolute paths inside the host (internal/version names them); a
// host resolves them under its own root. Local is the real Linux machine with
// root "/". The simulator's hosts implement the same interface over a
// directory of their own, which is how several nodes run in one process.
package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"time"
)

// Host is one machine as the ha code sees it. Keep it small and domain-level:
// anything that can be built from these methods belongs in a helper, not here.
type Host interface {
	// Name is the host's name: its node name and etcd member name.
	Name() string

	Files
	Services
	Network
	Clock
}

// Files are the host's files, named by absolute paths inside the host.
type Files interface {
	// ReadFile reads a whole file. A missing file is an error matching fs.ErrNotExist.
	ReadFile(path string) ([]byte, error)
	// Open opens a file for reading, streamed: a file of any size (an etcd
	// database of gigabytes) is read without holding it in memory. A
	// missing file is an error matching fs.ErrNotExist.
	Open(path string) (io.ReadCloser, error)
	// WriteFile replaces path atomically: the data is written to a temporary
	// file in the same directory, fsync'd, renamed over path, and the directory
	// fsync'd, so a crash leaves either the old contents or the new, never a
	// mix. Missing parent directories are created (0700).
	WriteFile(path string, data []byte, perm fs.FileMode) error
	// WriteFrom is WriteFile with the contents read from r, streamed: a
	// file of any size (an etcd database of gigabytes) is never held in
	// memory. It is as atomic as WriteFile; a read error leaves the old
	// contents, or no file.
	WriteFrom(path string, r io.Reader, perm fs.FileMode) error
	// Remove removes a file or empty directory. A missing path is not an error.
	Remove(path string) error
	// RemoveAll removes path and everything under it, durably.
	RemoveAll(path string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(path string, perm fs.FileMode) error
	// ReadDir lists a directory, sorted by name.
	ReadDir(path string) ([]fs.DirEntry, error)
	// Stat describes a file.
	Stat(path string) (fs.FileInfo, error)
	// Lock takes the named exclusive lock for holder without waiting. While
	// another holder has it, the error is a *LockedError naming that holder.
	// The lock is released by the returned function or when the holder's
	// process dies.
	Lock(name, holder string) (release func() error, err error)
}

// Services are the host's named services: "etcd", "kube-apiserver",
// "kube-vip", "stratum-operator".
type Services interface {
	StartService(ctx context.Context, name string) error
	StopService(ctx context.Context, name string) error
	RestartService(ctx context.Context, name string) error
	ServiceStatus(ctx context.Context, name string) (ServiceStatus, error)
	// CheckServices reports, without starting or changing anything, whether
	// each named service could be started on this host now: its binary
	// present, its ports free (unless it is this host's own running
	// instance), its manager able to run it. A join runs it before its etcd
	// member-add, so a host that could not start its services is refused
	// while the cluster is still unchanged.
	CheckServices(ctx context.Context, names []string) error
}

// ServiceStatus is what a service manager reports of one service.
type ServiceStatus struct {
	Name    string
	Running bool
	// Detail is the manager's own words ("active (running)", "exited 1").
	Detail string
	// Version is the version the service runs, or runs when started next
	// ("v3.7.3"); empty when the manager does not say, which means the
	// version this stratum pins (a real host's binaries are checked to be
	// exactly those).
	Version string `json:",omitempty"`
	// Since is when the running service's present run began; zero when it
	// does not run or the manager does not say. A different Since is a
	// restart, which a caller that keeps what it read of the service
	// (its etcd member's ID) reads again for.
	Since time.Time `json:",omitzero"`
}

// Network is the host's view of the network.
type Network interface {
	// Addresses are the host's unicast addresses, routable ones first and
	// loopback last: a node IP given explicitly (127.0.0.1 for a
	// single-node cluster) is this host's when it is among them.
	Addresses() ([]netip.Addr, error)
	// NodeAddresses are the addresses node-IP detection may choose, best
	// first; none is not an error (detection refuses, asking for
	// --node-ip). A real machine's are apimachinery's ChooseHostInterface
	// choices: global unicast addresses only (never loopback or
	// link-local), the default route's interface first. A simulated host's
	// is its own loopback address, which is its routable one in the
	// simulation.
	NodeAddresses() ([]netip.Addr, error)
	// DialContext dials from this host. An isolated simulated host refuses.
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
	// TrustCIDR opens the host firewall to traffic from cidr. Idempotent.
	TrustCIDR(cidr netip.Prefix) error
	// UntrustCIDR takes back what TrustCIDR opened for cidr (a refused
	// join's, a reset node's). Idempotent.
	UntrustCIDR(cidr netip.Prefix) error
}

// Clock is the host's clock. stratum's own expiry decisions read it, so the
// simulator can skew one host's time.
type Clock interface {
	Now() time.Time
}

// ErrLocked matches a *LockedError.
var ErrLocked = errors.New("lock held")

// LockedError is a lock refused because another holder has it.
type LockedError struct {
	Lock   string
	Holder string
}

func (e *LockedError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "an unnamed holder"
	}
	return fmt.Sprintf("lock %q is held by %s", e.Lock, holder)
}

// Is makes errors.Is(err, ErrLocked) true for a *LockedError.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// ErrServicesUnavailable matches a CheckServices that found a service this
// host could not start now.
var ErrServicesUnavailable = errors.New("services cannot be started on this host")

// ErrUnknownService matches a service name the host does not run.
var ErrUnknownService = errors.New("unknown service")

// NotRunHere reports whether a service call's error means the service does
// not run on this host at all: the host does not know it, or no service
// manager runs anything here (ErrNoServiceManager, which a node without a
// running stratum supervisor answers). A caller that would stop or restart
// the service has nothing to do.
func NotRunHere(err error) bool {
	return errors.Is(err, ErrUnknownService) || errors.Is(err, ErrNoServiceManager)
}

// NotRunning reports whether a ServiceStatus answer says the service is not
// running: stopped, or not run here at all (NotRunHere). Any other error is
// not an answer and reports false.
func NotRunning(ss ServiceStatus, err error) bool {
	return err == nil && !ss.Running || NotRunHere(err)
}
