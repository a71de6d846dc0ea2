// Package nodelock is the node's exclusive locks: the maintenance lock that
// the join (its preparation and its start, under one hold), the rejoin, up, a snapshot
// restore, a reset, an upgrade, a certificate renewal, a quota change and a
// repoint take so they never race on one node,
// the etcd data lock held while anything stops, wipes or rewrites the
// local etcd member's data, and the fence lock a publication holds while it
// holds the cluster's maintenance fence as this node. All are non-blocking: a
// second operation fails at once, naming the holder, before it has touched
// anything.
package nodelock

import (
	"errors"
	"fmt"
	"os"
	"time"

	"stratum.dev/stratum/internal/host"
)

// The node's locks, by name.
const (
	Maintenance = "maintenance"
	EtcdData    = "etcd-data"
	// Fence is held by a publication (a mint's upload, a rekey, a
	// re-upload) for as long as it holds the cluster's maintenance fence
	// as <operation>@<node>: two of them at once on one node would hold it
	// under one name, the second taking the first's as its own.
	Fence = "fence"
)

// ErrBusy matches a lock another operation holds.
var ErrBusy = errors.New("node busy")

// Acquire takes the named lock for operation (for example "stratum server
// (join)"). The holder recorded, and named to anyone refused, is the
// operation, this process's pid and the time it was taken by the host's
// clock. A refusal wraps ErrBusy and host.ErrLocked and says what to do.
func Acquire(h interface {
	host.Files
	host.Clock
}, name, operation string) (release func() error, err error) {
	holder := fmt.Sprintf("%s (pid %d, since %s)", operation, os.Getpid(), h.Now().UTC().Format(time.RFC3339))
	release, err = h.Lock(name, holder)
	var locked *host.LockedError
	if errors.As(err, &locked) {
		return nil, fmt.Errorf("%w: the node's %s lock is held by %s; nothing was changed: wait for it to finish (a holder that died has released it)", ErrBusy, name, locked.Holder)
	}
	if err != nil {
		return nil, fmt.Errorf("take the node's %s lock: %w", name, err)
	}
	return release, nil
}

// AcquireBoth takes the maintenance lock, then the etcd data lock, in that
// order always (so two operations never deadlock), and releases the first if
// the second is refused.
func AcquireBoth(h interface {
	host.Files
	host.Clock
}, operation string) (release func(), err error) {
	relM, err := Acquire(h, Maintenance, operation)
	if err != nil {
		return nil, err
	}
	relD, err := Acquire(h, EtcdData, operation)
	if err != nil {
		_ = relM()
		return nil, err
	}
	return func() { _ = relD(); _ = relM() }, nil
}
