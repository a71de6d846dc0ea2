package scenarios

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"sync"

	"pgregory.net/rapid"

	"stratum.dev/stratum/sim"
)

// warmer starts the next check's simulated cluster while the running check
// goes on. Every check still gets a cluster of its own, started from nothing
// (nothing carries over between checks, so nothing is lost in isolation);
// only its start, the etcd members and kube-apiservers coming up, overlaps
// the check before it, which mostly waits on servers. That start is about
// four seconds of a join property's check (docs/performance.md).
//
// Only clusters whose start costs something are started ahead: ones with
// kube-apiservers started by the simulator. A property runs one warmer
// (property); properties run one at a time.
type warmer struct {
	ctx    context.Context
	cancel context.CancelFunc
	// more reports whether another check is expected after the running
	// one: no cluster is started for a check that will not come.
	more func() bool

	mu   sync.Mutex
	next *warming
}

// warming is one cluster started ahead; done closes when its start has
// ended, with c or err set.
type warming struct {
	cfg  sim.Config
	done chan struct{}
	c    *sim.Cluster
	err  error
}

// runningWarmer is the running property's warmer (nil outside property, and
// when warming is off: warmingEnabled).
var runningWarmer *warmer

func newWarmer(more func() bool) *warmer {
	ctx, cancel := context.WithCancel(context.Background())
	return &warmer{ctx: ctx, cancel: cancel, more: more}
}

// worthWarming reports whether cfg's start is worth overlapping with the
// check before: the simulator starts kube-apiservers for it.
func worthWarming(cfg sim.Config) bool { return cfg.APIServers && !cfg.Fresh && cfg.ControlPlanes > 0 }

// cluster is the check's cluster of cfg: the one started ahead when there is
// one of the same config that started, a new one otherwise. Either way it
// then starts the next check's, when one is expected. The cluster closes
// when t's check ends; a failed check logs its event log.
func (w *warmer) cluster(t *rapid.T, cfg sim.Config) *sim.Cluster {
	t.Helper()
	c := w.take(t, cfg)
	if c == nil {
		c = sim.Start(t, cfg)
	} else {
		sim.Adopt(t, c)
	}
	if worthWarming(cfg) && w.more() {
		w.launch(cfg)
	}
	return c
}

// take waits for the cluster started ahead and returns it when it is of cfg
// and started; otherwise it closes it and returns nil.
func (w *warmer) take(t *rapid.T, cfg sim.Config) *sim.Cluster {
	w.mu.Lock()
	n := w.next
	w.next = nil
	w.mu.Unlock()
	if n == nil {
		return nil
	}
	<-n.done
	switch {
	case n.err != nil:
		t.Logf("the cluster started ahead for this check failed to start (%v); starting one now", n.err)
		return nil
	case !reflect.DeepEqual(n.cfg, cfg):
		n.c.Close()
		return nil
	}
	n.c.Events().Record("", "action", "cluster started ahead; this check takes it over")
	return n.c
}

// launch starts a cluster of cfg in the background for the next check.
func (w *warmer) launch(cfg sim.Config) {
	n := &warming{cfg: cfg, done: make(chan struct{})}
	w.mu.Lock()
	w.next = n
	w.mu.Unlock()
	go func() {
		defer close(n.done)
		ctx, cancel := context.WithTimeout(w.ctx, sim.StartTimeout)
		defer cancel()
		n.c, n.err = sim.New(ctx, cfg)
		if n.err != nil {
			n.err = fmt.Errorf("start simulated cluster: %w", n.err)
		}
	}()
}

// close stops a start under way and closes the cluster no check took, so
// that no process outlives the property.
func (w *warmer) close() {
	w.cancel()
	w.mu.Lock()
	n := w.next
	w.next = nil
	w.mu.Unlock()
	if n == nil {
		return
	}
	<-n.done
	if n.c != nil {
		n.c.Close()
	}
}

// warmingEnabled reports whether clusters may be started ahead: not when
// SCENARIO_COLD is set (each check then starts its own cluster when it
// begins, to rule the overlap out when a failure is suspected of depending
// on it), nor when the event log streams to stderr (SCENARIO_EVENTS), where
// a cluster started ahead would interleave its events with the running
// check's.
func warmingEnabled() bool {
	return os.Getenv("SCENARIO_COLD") == "" && os.Getenv("SCENARIO_EVENTS") == ""
}
