package sim

import (
	"context"
	"fmt"
	"sync"
)

// What the simulation does when an operation on a host reaches a checkpoint.
type checkpointAction int

const (
	actCrash checkpointAction = iota + 1
	actKillCommand
	actPause
	actFail
)

type armed struct {
	action checkpointAction
	err    error
	// loseUnsynced makes a crash lose unsynced data (CrashLosingUnsynced).
	loseUnsynced bool
	// reached is closed when the checkpoint is reached; release ends a pause.
	reached chan struct{}
	release chan struct{}
}

type checkpointKey struct{ host, name string }

// checkpoints holds what is armed at which (host, checkpoint). Each arming
// fires once.
type checkpoints struct {
	c  *Cluster
	mu sync.Mutex
	at map[checkpointKey]*armed
	// seen counts every checkpoint reached, by name, for coverage checks.
	seen map[string]int
}

// Armed is a handle on an armed checkpoint.
type Armed struct{ a *armed }

// Reached is closed once an operation reaches the checkpoint.
func (a Armed) Reached() <-chan struct{} { return a.a.reached }

// Release lets a paused operation go on. It is a no-op for other actions.
func (a Armed) Release() {
	select {
	case <-a.a.release:
	default:
		close(a.a.release)
	}
}

func (c *Cluster) arm(hostName, name string, a *armed) Armed {
	a.reached = make(chan struct{})
	a.release = make(chan struct{})
	c.checkpoints.mu.Lock()
	c.checkpoints.at[checkpointKey{hostName, name}] = a
	c.checkpoints.mu.Unlock()
	return Armed{a}
}

// CrashAt arms a crash of hostName at the named checkpoint: the operation that
// reaches it freezes there for good and the host crashes (Host.Crash).
func (c *Cluster) CrashAt(hostName, checkpoint string) Armed {
	c.events.Record(hostName, "action", "armed crash at checkpoint %s", checkpoint)
	return c.arm(hostName, checkpoint, &armed{action: actCrash})
}

// CrashCommandAt arms the kill of the operation's own process at the named
// checkpoint (a SIGKILL of `stratum reset`, say), its host running on: the
// operation freezes there for good, its locks are released and its
// connections closed, and every service goes on as the operation left it, as
// a real host's supervisor keeps them. CrashAt crashes the whole host
// instead: a re-run then starts from everything stopped.
func (c *Cluster) CrashCommandAt(hostName, checkpoint string) Armed {
	c.events.Record(hostName, "action", "armed the kill of the operation's process at checkpoint %s", checkpoint)
	return c.arm(hostName, checkpoint, &armed{action: actKillCommand})
}

// PauseAt arms a pause: the operation blocks at the checkpoint until Release
// (or its context ends).
func (c *Cluster) PauseAt(hostName, checkpoint string) Armed {
	c.events.Record(hostName, "action", "armed pause at checkpoint %s", checkpoint)
	return c.arm(hostName, checkpoint, &armed{action: actPause})
}

// FailAt arms a fault: the checkpoint returns err to the operation.
func (c *Cluster) FailAt(hostName, checkpoint string, err error) Armed {
	c.events.Record(hostName, "action", "armed fault at checkpoint %s: %v", checkpoint, err)
	return c.arm(hostName, checkpoint, &armed{action: actFail, err: err})
}

// Disarm removes whatever is armed at (hostName, checkpoint).
func (c *Cluster) Disarm(hostName, checkpoint string) {
	c.checkpoints.mu.Lock()
	delete(c.checkpoints.at, checkpointKey{hostName, checkpoint})
	c.checkpoints.mu.Unlock()
}

// CheckpointsSeen counts every checkpoint reached so far, by name.
func (c *Cluster) CheckpointsSeen() map[string]int {
	c.checkpoints.mu.Lock()
	defer c.checkpoints.mu.Unlock()
	out := make(map[string]int, len(c.checkpoints.seen))
	for k, v := range c.checkpoints.seen {
		out[k] = v
	}
	return out
}

// frozen is where crashed operations wait forever. Nothing ever sends on it.
var frozen = make(chan struct{})

func (cp *checkpoints) reach(ctx context.Context, d *Handle, name string) error {
	key := checkpointKey{d.h.name, name}
	cp.mu.Lock()
	cp.seen[name]++
	a := cp.at[key]
	delete(cp.at, key)
	cp.mu.Unlock()
	cp.c.events.Record(d.h.name, "checkpoint", "%s", name)
	if a == nil {
		return nil
	}
	if a.action == actCrash {
		// The crash is complete (services stopped, locks dropped) before
		// anyone waiting on Reached goes on, so a re-run started at once
		// never races the crash's own stops.
		if a.loseUnsynced {
			d.h.CrashLosingUnsynced()
		} else {
			d.h.Crash()
		}
	}
	if a.action == actKillCommand {
		cp.c.events.Record(d.h.name, "crash", "the operation's process was killed at checkpoint %s; the host runs on", name)
		d.kill()
	}
	close(a.reached)
	switch a.action {
	case actCrash, actKillCommand:
		// Freeze: no return, so no deferred cleanup or rollback runs, as
		// after a SIGKILL. The goroutine is parked for the process's life.
		<-frozen
		panic("unreachable")
	case actPause:
		cp.c.events.Record(d.h.name, "checkpoint", "paused at %s", name)
		select {
		case <-a.release:
			cp.c.events.Record(d.h.name, "checkpoint", "released at %s", name)
		case <-ctx.Done():
			return ctx.Err()
		}
		return d.live()
	case actFail:
		cp.c.events.Record(d.h.name, "fault", "checkpoint %s fails: %v", name, a.err)
		return fmt.Errorf("checkpoint %s: %w", name, a.err)
	}
	return nil
}
