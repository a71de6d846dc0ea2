// Package ha implements HA control-plane join (`stratum server --server
// --token --certificate-key`): it securely distributes the shared
// control-plane certificates, adds a live etcd member, brings up an additional
// apiserver, and fronts the control planes with one VIP.
//
// All logic lives in methods of Node, built from an explicit Env (the host it
// runs on, the checkpoint hook, a logger). Each package-level function of the
// seed's API is one line: the same method on the node bound to this machine
// (host.Local). The simulator builds one Node per simulated host, so nothing
// here hangs on a package global.
package ha

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// Env is everything a Node depends on.
type Env struct {
	// Host is the machine the node runs on.
	Host host.Host
	// Checkpoint is reached at every named checkpoint of a multi-step
	// operation (the Checkpoint* constants). Nil in production; the simulator
	// uses it to crash, pause or fail an operation at exactly that point.
	Checkpoint func(ctx context.Context, name string) error
	// Log receives the node's structured logs; nil discards them.
	Log *slog.Logger
	// Progress, when set, hears a line as each step of a long operation
	// (a bring-up, a join, a control-plane start) ends, with how long it
	// took, and, while a step waits on the cluster (a member-add etcd
	// refuses as unhealthy, a learner catching up), what it waits for, at
	// most every WaitReportEvery. The CLI prints them; nil drops them.
	Progress func(line string)
	// EtcdReadTimeout bounds one read from one etcd member (a status, the
	// alarms, the member list): a member that does not answer within it is
	// reported silent. Zero is 2 s, for real networks; the simulator's
	// scenarios on loopback, with etcd's fast test timing, shorten it.
	EtcdReadTimeout time.Duration
}

// WaitReportEvery is how often a waiting step reports through
// Env.Progress.
const WaitReportEvery = 5 * time.Second

// Node is one machine's ha operations.
type Node struct {
	env Env
	log *slog.Logger
}

// NewNode binds the ha operations to env.
func NewNode(env Env) *Node {
	lg := env.Log
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	if say := env.Progress; say != nil {
		// One line at a time: a wait said while a step's own call says
		// another (waitingOn around a call whose client waits too).
		var mu sync.Mutex
		env.Progress = func(line string) {
			mu.Lock()
			defer mu.Unlock()
			say(line)
		}
	}
	return &Node{env: env, log: lg.With("node", env.Host.Name())}
}

// Host is the machine the node runs on.
func (n *Node) Host() host.Host { return n.env.Host }

// readTimeout is Env.EtcdReadTimeout, or etcdReadTimeout when unset.
func (n *Node) readTimeout() time.Duration {
	if n.env.EtcdReadTimeout > 0 {
		return n.env.EtcdReadTimeout
	}
	return etcdReadTimeout
}

// lockOptions are the node-lock options of this node's operations under
// ctx: a wait for a holder that lets commands run between its holds (the
// supervisor's retried start: nodelock.YieldMark) is said through
// Env.Progress, and ends with ctx (a Ctrl-C while it waits changes nothing).
func (n *Node) lockOptions(ctx context.Context) []nodelock.Option {
	return []nodelock.Option{nodelock.Until(ctx), nodelock.WhileWaiting(func(holder string, waited time.Duration) {
		switch {
		case n.env.Progress == nil:
		case waited == 0:
			n.env.Progress(fmt.Sprintf("waiting for the node's locks, held by %s, to be free between its attempts (up to %s)", holder, nodelock.YieldWait))
		default:
			n.env.Progress(fmt.Sprintf("still waiting for the node's locks (%s so far, up to %s)", waited.Round(time.Second), nodelock.YieldWait))
		}
	})}
}

// stepDone reports a finished step through Env.Progress.
func (n *Node) stepDone(step string, took time.Duration) {
	if n.env.Progress != nil {
		n.env.Progress(fmt.Sprintf("%s: done in %s", step, took.Round(100*time.Millisecond)))
	}
}

// stepSkipped is what a step of a long operation returns when it has
// nothing to do on this node (no VIP to hold, no operator to run): the step
// is reported as skipped, with why, rather than as done.
type stepSkipped struct{ reason string }

func (s stepSkipped) Error() string { return "skipped: " + s.reason }

// stepSkip reports a step that had nothing to do through Env.Progress.
func (n *Node) stepSkip(step, reason string) {
	if n.env.Progress != nil {
		n.env.Progress(fmt.Sprintf("%s: skipped (%s)", step, reason))
	}
}

// stepWarned is what a step of a long operation returns when it failed
// but the operation goes on: what it left undone is a warning, not a reason
// to stop (or tear down) what the steps before it started.
type stepWarned struct{ err error }

func (s stepWarned) Error() string { return "warning: " + s.err.Error() }

func (s stepWarned) Unwrap() error { return s.err }

// stepWarn reports a step that failed without stopping its operation, in the
// log and through Env.Progress.
func (n *Node) stepWarn(step string, err error) {
	n.log.Warn(step+": not done", "err", err)
	if n.env.Progress != nil {
		n.env.Progress(fmt.Sprintf("%s: not done (warning: %v)", step, err))
	}
}

// waitReporter reports what a retrying step waits for through Env.Progress:
// the first time at once, then at most every WaitReportEvery; a wait for
// another reason (waitingBecause) is said at once.
type waitReporter struct {
	n      *Node
	last   time.Time
	reason string
}

func (w *waitReporter) waiting(format string, args ...any) {
	if w.n.env.Progress == nil || !w.last.IsZero() && time.Since(w.last) < WaitReportEvery {
		return
	}
	w.last = time.Now()
	w.n.env.Progress("waiting for " + fmt.Sprintf(format, args...))
}

// waitingBecause is waiting for a wait whose reason is named: a reason other
// than the last one's is said at once.
func (w *waitReporter) waitingBecause(reason, format string, args ...any) {
	if reason != w.reason {
		w.last, w.reason = time.Time{}, reason
	}
	w.waiting(format, args...)
}

// slowAnswerAfter is how long a single call that normally answers at once
// may take before waitingOn says what it waits for.
const slowAnswerAfter = time.Second

// waitingOn runs ask, and says through Env.Progress what it waits for
// (waiting for <what>) once ask has not returned within slowAnswerAfter,
// then every WaitReportEvery: a call that blocks rather than fails (an API
// server's read while its etcd has no quorum) otherwise shows as a silent
// terminal. Nothing is said once waitingOn has returned. What ask says
// through Env.Progress itself comes between these lines, never within one
// (NewNode says one line at a time).
func (n *Node) waitingOn(what string, ask func() error) error {
	if n.env.Progress == nil {
		return ask()
	}
	done := make(chan struct{})
	said := make(chan struct{})
	go func() {
		defer close(said)
		report := waitReporter{n: n}
		wait := slowAnswerAfter
		for {
			select {
			case <-done:
				return
			case <-time.After(wait):
				report.waiting("%s", what)
				wait = WaitReportEvery
			}
		}
	}()
	err := ask()
	close(done)
	<-said
	return err
}

// A server that does not answer at all may be between holders for a few
// seconds: a VIP whose kube-vip restarted (a repoint elsewhere restarts it),
// an apiserver whose etcd is restarting. askWhileSilent asks such a server
// again every silentPoll for a while before it gives up: silentWithin for
// an operator's check of a VIP, joinSilentWithin for a join's first contact
// with the cluster, as long as the join's later steps wait for the same
// server (a control plane restarting under it: its etcd, its apiserver and
// a VIP election take more than 10 s on a real machine).
const (
	silentWithin     = 10 * time.Second
	joinSilentWithin = 30 * time.Second
	silentPoll       = 250 * time.Millisecond
)

// askWhileSilent calls ask until it returns an error that does not match
// silent (nil included), within has passed, or ctx ends, and returns its
// last error; while it waits, progress says it waits for what to answer.
// Any answer, a wrong one too, ends the wait at once.
func (n *Node) askWhileSilent(ctx context.Context, what string, within time.Duration, silent error, ask func() error) error {
	report := waitReporter{n: n}
	deadline := time.Now().Add(within)
	for {
		err := ask()
		if !errors.Is(err, silent) || !time.Now().Before(deadline) || ctx.Err() != nil {
			return err
		}
		report.waiting("%s to answer (%v)", what, err)
		select {
		case <-ctx.Done():
		case <-time.After(silentPoll):
		}
	}
}

// checkpoint reaches the named checkpoint through the Env's hook.
func (n *Node) checkpoint(ctx context.Context, name string) error {
	n.log.Debug("checkpoint", "name", name)
	if n.env.Checkpoint == nil {
		return nil
	}
	return n.env.Checkpoint(ctx, name)
}

var localNode = sync.OnceValues(func() (*Node, error) {
	h, err := host.NewLocal()
	if err != nil {
		return nil, err
	}
	return NewNode(Env{Host: h, Log: slog.Default()}), nil
})

// local is the node bound to this machine, for the package-level functions.
func local() (*Node, error) { return localNode() }

// etcdDialTimeout bounds establishing a connection to one etcd endpoint.
const etcdDialTimeout = 3 * time.Second

// EtcdEndpoint is the client URL of the etcd member at cpIP.
func EtcdEndpoint(cpIP string) string {
	return "https://" + net.JoinHostPort(cpIP, strconv.Itoa(version.EtcdClientPort))
}

// etcdTLS is this node's etcd client TLS: the etcd CA and the
// healthcheck-client leaf from its PKI dir.
func (n *Node) etcdTLS() (*tls.Config, error) {
	return pki.EtcdClientTLS(func(name string) ([]byte, error) { return n.env.Host.ReadFile(version.PKIFile(name)) })
}

// etcdConfig is the clientv3 configuration etcdClient builds, for the
// libraries that take a configuration rather than a client.
func (n *Node) etcdConfig(endpoints ...string) (clientv3.Config, error) {
	return n.etcdConfigDialing(nil, endpoints...)
}

// etcdConfigDialing is etcdConfig whose dials also tell onDialErr, when set,
// each error they meet.
func (n *Node) etcdConfigDialing(onDialErr func(error), endpoints ...string) (clientv3.Config, error) {
	tlsCfg, err := n.etcdTLS()
	if err != nil {
		return clientv3.Config{}, err
	}
	h := n.env.Host
	return clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsCfg,
		DialTimeout: etcdDialTimeout,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			conn, err := h.DialContext(ctx, "tcp", addr)
			if err != nil && onDialErr != nil {
				onDialErr(err)
			}
			return conn, err
		})},
	}, nil
}

// EtcdClient is a clientv3 client on endpoints with this node's etcd client
// certificate, dialing through the host's dialer (kubeadm util/etcd's shape:
// a domain API over a client factory). The caller closes it.
func (n *Node) EtcdClient(endpoints ...string) (*clientv3.Client, error) {
	return n.etcdClient(endpoints...)
}

func (n *Node) etcdClient(endpoints ...string) (*clientv3.Client, error) {
	cfg, err := n.etcdConfig(endpoints...)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", endpoints, err)
	}
	return cli, nil
}
