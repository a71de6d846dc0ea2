// Package nodelock is the node's exclusive locks: the maintenance lock that
// the join (its preparation and its start, under one hold), the rejoin, up, a snapshot
// restore, a reset, an upgrade, a certificate renewal, a quota change and a
// repoint take so they never race on one node,
// the etcd data lock held while anything stops, wipes or rewrites the
// local etcd member's data, and the fence lock a publication holds while it
// holds the cluster's maintenance fence as this node. A second operation
// fails at once, naming the holder, before it has touched anything, but for
// a holder that takes the locks again and again (YieldMark: the supervisor's
// retried start), which it waits for.
package nodelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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

// YieldMark starts the operation of a holder that takes the node's locks
// again and again, each time for a while (the supervisor's retried start:
// an attempt every few seconds, each up to minutes): an operation that finds
// such a holder waits for its hold to end (up to YieldWait) instead of
// being refused, since between the holds there is only a moment to run in.
const YieldMark = "(commands wait for it) "

// YieldWait bounds the wait for a holder marked YieldMark: one attempt of a
// retried start (its kube-apiserver's readiness wait is 2 minutes).
const YieldWait = 3 * time.Minute

// yieldPoll is how often a waiting Acquire tries the lock again.
const yieldPoll = 200 * time.Millisecond

// unnamedTries bounds how often Acquire asks again a lock whose holder has
// no name (taking it or letting it go right then).
const unnamedTries = 5

// Option is an option of Acquire and AcquireBoth.
type Option func(*options)

type options struct {
	waiting func(holder string, waited time.Duration)
	until   context.Context
}

// Until ends a wait for a holder marked YieldMark when ctx ends (the
// command's Ctrl-C), with the lock not taken and nothing changed.
func Until(ctx context.Context) Option {
	return func(o *options) { o.until = ctx }
}

// WhileWaiting has Acquire call say, with the holder, when it begins to
// wait for a holder marked YieldMark (waited 0), and again every
// WaitSaidEvery while it waits, with how long it has: the waiting command
// says why it does not go on, and does not fall silent for minutes.
func WhileWaiting(say func(holder string, waited time.Duration)) Option {
	return func(o *options) { o.waiting = say }
}

// WaitSaidEvery is how often a wait for a yielding holder is said again
// (WhileWaiting).
var WaitSaidEvery = 15 * time.Second

// Acquire takes the named lock for operation (for example "stratum server
// (join)"). The holder recorded, and named to anyone refused, is the
// operation, this process's pid and the time it was taken by the host's
// clock. A refusal wraps ErrBusy and host.ErrLocked and says what to do.
// A holder marked YieldMark is waited for, up to YieldWait, and refused
// after that.
func Acquire(h interface {
	host.Files
	host.Clock
}, name, operation string, opts ...Option) (release func() error, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	holder := fmt.Sprintf("%s (pid %d, since %s)", operation, os.Getpid(), h.Now().UTC().Format(time.RFC3339))
	var locked *host.LockedError
	var waitStart, saidAt time.Time
	unnamed := 0
	for {
		release, err = h.Lock(name, holder)
		if !errors.As(err, &locked) {
			break
		}
		if strings.Contains(locked.Holder, YieldMark) {
			switch now := time.Now(); {
			case waitStart.IsZero():
				waitStart, saidAt = now, now
				if o.waiting != nil {
					o.waiting(locked.Holder, 0)
				}
			case now.Sub(saidAt) >= WaitSaidEvery:
				saidAt = now
				if o.waiting != nil {
					o.waiting(locked.Holder, now.Sub(waitStart))
				}
			}
			if time.Since(waitStart) > YieldWait {
				break
			}
		} else if locked.Holder != "" || unnamed >= unnamedTries {
			break // any other holder is refused at once
		} else {
			// A holder taking the lock or letting it go: its name not
			// written yet, or cleared. Asked again, it is named or free.
			unnamed++
		}
		var stop <-chan struct{}
		if o.until != nil {
			stop = o.until.Done()
		}
		select {
		case <-stop:
			return nil, fmt.Errorf("%w: stopped while waiting for the node's %s lock, held by %s: %w; nothing was changed", ErrBusy, name, locked.Holder, context.Cause(o.until))
		case <-time.After(yieldPoll):
		}
	}
	if errors.As(err, &locked) {
		waited := ""
		if !waitStart.IsZero() {
			waited = fmt.Sprintf(" (waited %s for its hold to end)", time.Since(waitStart).Round(time.Second))
		}
		return nil, fmt.Errorf("%w: the node's %s lock is held by %s%s; nothing was changed: wait for it to finish (a holder that died has released it)", ErrBusy, name, locked.Holder, waited)
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
}, operation string, opts ...Option) (release func(), err error) {
	relM, err := Acquire(h, Maintenance, operation, opts...)
	if err != nil {
		return nil, err
	}
	relD, err := Acquire(h, EtcdData, operation, opts...)
	if err != nil {
		_ = relM()
		return nil, err
	}
	return func() { _ = relD(); _ = relM() }, nil
}
