package sim

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// EtcdTiming is simulated members' raft timing: etcd's --heartbeat-interval
// and --election-timeout, in milliseconds.
type EtcdTiming struct {
	HeartbeatMs, ElectionMs int
}

// Raft timings for Config.Etcd.
var (
	// DefaultEtcdTiming (the zero Config's): elections and failover in a
	// fraction of a second, yet no missed heartbeats while two busy cores
	// start three apiservers.
	DefaultEtcdTiming = EtcdTiming{HeartbeatMs: 50, ElectionMs: 500}
	// FastEtcdTiming is etcd's own integration tests' timing (10 ms
	// heartbeats, 100 ms elections), for clusters on loopback that run no
	// apiserver: elections five times faster than the default.
	FastEtcdTiming = EtcdTiming{HeartbeatMs: 10, ElectionMs: 100}
	// LoopbackEtcdTiming is half of that (5 ms heartbeats, 50 ms
	// elections): for etcd-only clusters whose properties wait on
	// elections at every step (TestSplitBrain), where the election
	// timeout sets the pace. etcd's floor is five heartbeats an election.
	LoopbackEtcdTiming = EtcdTiming{HeartbeatMs: 5, ElectionMs: 50}
	// ProductionEtcdTiming is etcd's defaults, which real hosts run.
	ProductionEtcdTiming = EtcdTiming{HeartbeatMs: 100, ElectionMs: 1000}
)

// Election is the election timeout as a duration.
func (t EtcdTiming) Election() time.Duration { return time.Duration(t.ElectionMs) * time.Millisecond }

// etcdMember is a running etcd member of a host: embedded in this process or a
// separate process of a chosen version.
type etcdMember interface {
	// stop stops the member; hard is a crash (no leadership transfer, no
	// graceful close of client streams).
	stop(hard bool)
	// exited is closed once the member has stopped on its own or been stopped.
	exited() <-chan struct{}
	describe() string
}

type peerInfo struct {
	id      uint64
	peerURL string
}

// etcdSpec is how a host's member boots: the command line a real host's
// supervisor runs (controlplane.EtcdArgs of the host's node state), its
// paths mapped into the host's directory, so a wrong URL, name or path in a
// node state is wrong in the simulator too. A process member runs that
// command line; an embedded one is configured from its flags. The timing is
// the simulator's (Config.Etcd).
type etcdSpec struct {
	// args is the production command line, paths mapped.
	args                               []string
	name, clientURL, peerURL           string
	listenClientURL, listenPeerURL     string
	initialCluster, state, token       string
	dataDir                            string // real path
	caFile, peerCAFile                 string
	serverCert, serverKey              string
	peerCert, peerKey                  string
	clientCertAuth, peerClientCertAuth bool
	quotaBytes                         int64 // 0: etcd's default
	timing                             EtcdTiming
	// onPublishRetry is called with the error when the member logs that its
	// publish failed (embedded members only).
	onPublishRetry func(errText string)
	// onLeader is called each time the member's view of the leader changes
	// (embedded members only: a process member's is not watched).
	onLeader func(leaderView)
}

// modelledEtcdFlags are the etcd flags the simulator's embedded members
// take from the production command line. A flag controlplane.EtcdArgs adds
// that is not here fails the start, naming it, instead of passing unmodelled.
var modelledEtcdFlags = map[string]bool{
	"name": true, "data-dir": true,
	"listen-client-urls": true, "advertise-client-urls": true,
	"listen-peer-urls": true, "initial-advertise-peer-urls": true,
	"initial-cluster": true, "initial-cluster-state": true, "initial-cluster-token": true,
	"cert-file": true, "key-file": true, "trusted-ca-file": true, "client-cert-auth": true,
	"peer-cert-file": true, "peer-key-file": true, "peer-trusted-ca-file": true, "peer-client-cert-auth": true,
	"log-level":           true, // the simulator's own logger (etcdLogger)
	"quota-backend-bytes": true,
}

// hostFlags maps a production command line into host h: a value that is a
// host path ("/etc/stratum/pki/...") becomes h's real path. It returns the
// mapped arguments and the flags by name ("true" for a flag without a value).
func (h *Host) hostFlags(args []string) ([]string, map[string]string, error) {
	out := make([]string, 0, len(args))
	flags := map[string]string{}
	for _, a := range args {
		k, v, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || k == "" {
			return nil, nil, fmt.Errorf("command-line argument %q is not a --flag", a)
		}
		if !hasValue {
			flags[k] = "true"
			out = append(out, a)
			continue
		}
		if strings.HasPrefix(v, "/") {
			v = h.Path(v)
		}
		flags[k] = v
		out = append(out, "--"+k+"="+v)
	}
	return out, flags, nil
}

func (h *Host) etcdSpec() (etcdSpec, error) {
	st, err := nodestate.Load(h.files)
	if err != nil {
		return etcdSpec{}, fmt.Errorf("start etcd on %s: %w", h.name, err)
	}
	prod, err := controlplane.EtcdArgs(st)
	if err != nil {
		return etcdSpec{}, fmt.Errorf("start etcd on %s: %w", h.name, err)
	}
	args, f, err := h.hostFlags(prod)
	if err != nil {
		return etcdSpec{}, fmt.Errorf("start etcd on %s: %w", h.name, err)
	}
	for k := range f {
		if !modelledEtcdFlags[k] {
			return etcdSpec{}, fmt.Errorf("start etcd on %s: the simulator does not model etcd's --%s (controlplane.EtcdArgs): model it in sim/etcd.go", h.name, k)
		}
	}
	var quota int64
	if q, ok := f["quota-backend-bytes"]; ok {
		if quota, err = strconv.ParseInt(q, 10, 64); err != nil {
			return etcdSpec{}, fmt.Errorf("start etcd on %s: --quota-backend-bytes=%s: %w", h.name, q, err)
		}
	}
	return etcdSpec{
		args:               args,
		quotaBytes:         quota,
		name:               f["name"],
		clientURL:          f["advertise-client-urls"],
		listenClientURL:    f["listen-client-urls"],
		peerURL:            f["initial-advertise-peer-urls"],
		listenPeerURL:      f["listen-peer-urls"],
		initialCluster:     f["initial-cluster"],
		state:              f["initial-cluster-state"],
		token:              f["initial-cluster-token"],
		dataDir:            f["data-dir"],
		caFile:             f["trusted-ca-file"],
		peerCAFile:         f["peer-trusted-ca-file"],
		serverCert:         f["cert-file"],
		serverKey:          f["key-file"],
		peerCert:           f["peer-cert-file"],
		peerKey:            f["peer-key-file"],
		clientCertAuth:     f["client-cert-auth"] == "true",
		peerClientCertAuth: f["peer-client-cert-auth"] == "true",
		timing:             h.cluster.cfg.Etcd,
		onPublishRetry: func(errText string) {
			if strings.Contains(errText, "timed out") {
				h.cluster.events.Record(h.name, "service", "etcd: publish of this member timed out (it served no client meanwhile); etcd retries it")
			}
		},
		onLeader: h.recordLeader,
	}, nil
}

// etcdLogger is silent unless STRATUM_SIM_ETCD_LOG names a level ("warn",
// "info", ...): then the members log to stderr, for debugging the simulator.
func etcdLogger(name string) *zap.Logger {
	level := os.Getenv("STRATUM_SIM_ETCD_LOG")
	if level == "" {
		return zap.NewNop()
	}
	cfg := zap.NewDevelopmentConfig()
	if err := cfg.Level.UnmarshalText([]byte(level)); err != nil {
		return zap.NewNop()
	}
	lg, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return lg.Named(name)
}

// embeddedEtcd is an embed.Etcd member.
type embeddedEtcd struct {
	e    *embed.Etcd
	name string
	mu   sync.Mutex
	// cut are the peers this member's transport has paused.
	cut map[uint64]bool
	// adds are the peers its transport added since they were last cut.
	adds *peerAdds
	// stopped is set, under mu, once the member is being stopped: no more
	// cuts (see mendForStop).
	stopped bool
	done    chan struct{}
	once    sync.Once
	// stopOnce: a crash and a failed start may both stop the member.
	stopOnce sync.Once
	// stopping is set once the simulator stops the member, so that its watch
	// tells a stop it asked for from one etcd made on its own.
	stopping atomic.Bool
	// guard refuses client calls once the member is removed (removal.go).
	guard *removalGuard
	// removed is set before done is closed when the member stopped because it
	// was removed from its cluster.
	removed atomic.Bool
}

// removalPoll is how often a member checks its own view of the cluster for
// its removal: a removed member reads as stopped within it.
const removalPoll = 25 * time.Millisecond

// launchEmbeddedEtcd starts a member without waiting for it to be ready:
// members of a new cluster are launched one after another, each finding the
// ones before it serving (etcd asks every peer whether it was bootstrapped
// before, and a peer that listens but does not yet serve costs a 1 s
// timeout), then waited for together. onRemoved is called once, after the
// member has been stopped because it was removed from its cluster.
func launchEmbeddedEtcd(s etcdSpec, onRemoved func(*embeddedEtcd)) (*embeddedEtcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = s.name
	cfg.Dir = s.dataDir
	urls := map[string][]url.URL{}
	for what, v := range map[string]string{"listen client": s.listenClientURL, "advertise client": s.clientURL, "listen peer": s.listenPeerURL, "advertise peer": s.peerURL} {
		us, err := types.NewURLs(strings.Split(v, ","))
		if err != nil {
			return nil, fmt.Errorf("start embedded etcd %s: %s URLs %q: %w", s.name, what, v, err)
		}
		urls[what] = us
	}
	cfg.ListenClientUrls = urls["listen client"]
	cfg.AdvertiseClientUrls = urls["advertise client"]
	cfg.ListenPeerUrls = urls["listen peer"]
	cfg.AdvertisePeerUrls = urls["advertise peer"]
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = s.initialCluster
	cfg.ClusterState = s.state
	cfg.InitialClusterToken = s.token
	cfg.QuotaBackendBytes = s.quotaBytes
	cfg.TickMs = uint(s.timing.HeartbeatMs)
	cfg.ElectionMs = uint(s.timing.ElectionMs)
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: s.serverCert, KeyFile: s.serverKey, TrustedCAFile: s.caFile, ClientCertAuth: s.clientCertAuth}
	cfg.PeerTLSInfo = transport.TLSInfo{CertFile: s.peerCert, KeyFile: s.peerKey, TrustedCAFile: s.peerCAFile, ClientCertAuth: s.peerClientCertAuth}
	adds := &peerAdds{}
	lg := adds.watching(etcdLogger(s.name))
	if s.onPublishRetry != nil {
		lg = onMessage(lg, publishRetryMessage, s.onPublishRetry)
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	cfg.EnableGRPCGateway = false
	guard := newRemovalGuard()
	cfg.GRPCAdditionalServerOptions = guard.serverOptions()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd %s: %w", s.name, err)
	}
	guard.srv.Store(e.Server)
	m := &embeddedEtcd{e: e, name: s.name, done: make(chan struct{}), guard: guard, adds: adds}
	go m.watch(onRemoved)
	if s.onLeader != nil {
		go m.reportLeader(s.onLeader)
	}
	return m, nil
}

// watch waits until the member is stopped by the simulator, stops on its own
// or is seen removed from its own view of the cluster. The last two both mean
// the member was removed (an etcd server stops itself only for that, see
// removal.go): it is then stopped hard, its calls refused from the first
// moment, and onRemoved told.
func (m *embeddedEtcd) watch(onRemoved func(*embeddedEtcd)) {
	tick := time.NewTicker(removalPoll)
	defer tick.Stop()
	for !m.guard.isRemoved() {
		select {
		case <-m.done:
			return
		case <-m.guard.removed:
		case <-m.e.Server.StopNotify():
			if m.stopping.Load() {
				m.once.Do(func() { close(m.done) })
				return
			}
			m.guard.markRemoved()
		case <-tick.C:
		}
	}
	if m.stopping.Load() {
		return
	}
	m.removed.Store(true)
	m.stop(true)
	if onRemoved != nil {
		onRemoved(m)
	}
}

// waitReady waits until the member has joined its cluster and serves clients.
// On failure the member is stopped.
func (m *embeddedEtcd) waitReady(ctx context.Context) error {
	e := m.e
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		m.stop(true)
		return fmt.Errorf("embedded etcd %s failed while starting: %w", m.name, err)
	case <-m.done:
		if m.removed.Load() {
			return fmt.Errorf("embedded etcd %s was removed from its cluster while starting; stopped. Its member ID is gone for good: wipe its data and add it again", m.name)
		}
		return fmt.Errorf("embedded etcd %s stopped while starting (for example: its data belongs to another cluster)", m.name)
	case <-ctx.Done():
		m.stop(true)
		return fmt.Errorf("embedded etcd %s not ready: %w", m.name, ctx.Err())
	}
}

func (m *embeddedEtcd) stop(hard bool) {
	m.stopOnce.Do(func() {
		m.guard.markStopping()
		if !m.removed.Load() {
			m.stopping.Store(true)
		}
		if m.mendForStop() {
			// A graceful stop would hand leadership over, through links the
			// network has cut: a member cut off from a peer stops hard.
			hard = true
		}
		if hard {
			m.e.Server.HardStop()
		}
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			m.e.Close()
		}()
		m.dropConnectionsOnStop(closed)
		<-closed
	})
	m.once.Do(func() { close(m.done) })
}

// dropConnectionsOnStop does to the stopping member's connections what a
// process's exit does to its sockets, once its server has stopped (its data
// and WAL closed) and unless etcd's Close has returned first: it closes the
// client and peer listeners and resets every connection they accepted.
// etcd's Close otherwise waits up to 1 s more, and leaves connections open
// after it: net/http aborts a finished request's pending read by setting a
// read deadline in the past, etcd's peer timeoutConn sets a new 5 s one on
// its next Read, and a peer's keep-alive connection that sends its next
// request within those 5 s (the leader's version monitor asks every 4 s) is
// served by the stopped server for good, after the member has started again
// on the same port. With the connections reset, Close returns within
// milliseconds. Resetting them needs CAP_NET_ADMIN (the sock_diag destroy
// the `ss -K` command uses): without it a stop waits for Close as before.
func (m *embeddedEtcd) dropConnectionsOnStop(closed <-chan struct{}) {
	select {
	case <-m.e.Server.StopNotify():
	case <-closed:
		return
	}
	var addrs []string
	for _, p := range m.e.Peers {
		addrs = append(addrs, p.Listener.Addr().String())
		p.Listener.Close()
	}
	for _, l := range m.e.Clients {
		addrs = append(addrs, l.Addr().String())
		l.Close()
	}
	if err := resetAccepted(addrs); err != nil && !resetRefusedLogged.Swap(true) {
		m.e.GetLogger().Info("cannot reset a stopped member's connections; stops wait for etcd's Close", zap.Error(err))
	}
}

// resetRefusedLogged: a refused reset is logged once per process.
var resetRefusedLogged atomic.Bool

// resetAccepted resets every open TCP connection whose local address is one
// of listeners (the connections those listeners accepted), as the kernel
// does for a process that exits.
func resetAccepted(listeners []string) error {
	want := map[string]bool{}
	for _, a := range listeners {
		want[a] = true
	}
	socks, err := netlink.SocketDiagTCP(unix.AF_INET)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("list TCP sockets: %w", err)
	}
	for _, sk := range socks {
		if sk.State != tcpEstablished && sk.State != tcpCloseWait {
			continue
		}
		local := &net.TCPAddr{IP: sk.ID.Source, Port: int(sk.ID.SourcePort)}
		if !want[local.String()] {
			continue
		}
		remote := &net.TCPAddr{IP: sk.ID.Destination, Port: int(sk.ID.DestinationPort)}
		if err := netlink.SocketDestroy(local, remote); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("reset %s -> %s: %w", local, remote, err)
		}
	}
	return nil
}

// TCP states (include/net/tcp_states.h) of a connection a process still
// owns: one it can read or write.
const (
	tcpEstablished = 1
	tcpCloseWait   = 8
)

// mendForStop resumes every peer the network has cut and keeps the ticks
// from cutting again: etcd's transport stop closes each bootstrap remote's
// pipeline, which panics on one already paused. It reports whether any peer
// was cut.
func (m *embeddedEtcd) mendForStop() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	for id := range m.cut {
		m.e.Server.MendPeer(types.ID(id))
	}
	wasCut := len(m.cut) > 0
	m.cut = nil
	return wasCut
}

func (m *embeddedEtcd) exited() <-chan struct{} { return m.done }

func (m *embeddedEtcd) describe() string { return "embedded etcd " + version.Etcd }

func (m *embeddedEtcd) peers() []peerInfo {
	var out []peerInfo
	self := m.e.Server.MemberID()
	for _, mem := range m.e.Server.Cluster().Members() {
		if mem.ID == self || len(mem.PeerURLs) == 0 {
			continue
		}
		out = append(out, peerInfo{id: uint64(mem.ID), peerURL: mem.PeerURLs[0]})
	}
	return out
}

func (m *embeddedEtcd) setPeerCut(id uint64, cut bool) {
	select {
	case <-m.done:
		return
	default:
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	if m.cut == nil {
		m.cut = map[uint64]bool{}
	}
	if cut {
		// CutPeer pauses the peer and, on a member that joined an existing
		// cluster, its bootstrap remote too; the remote's pause is not
		// idempotent (a second one panics), so a peer is cut once, and again
		// only after the transport added it anew (unpaused): mended first,
		// so that the remote's pauses and resumes stay paired.
		readded := m.adds.take(id)
		if m.cut[id] && !readded {
			return
		}
		if m.cut[id] {
			m.e.Server.MendPeer(types.ID(id))
		}
		m.e.Server.CutPeer(types.ID(id))
		m.cut[id] = true
		return
	}
	// Resuming restarts a peer's pipeline; doing it on every tick leaks its
	// goroutines and hangs the member's stop. Only a cut pair is mended.
	if m.cut[id] {
		m.e.Server.MendPeer(types.ID(id))
		delete(m.cut, id)
	}
}

// processEtcd is an etcd member running as a separate process of a chosen
// version, built by `make assets`.
type processEtcd struct {
	version string
	name    string
	// clientURL and logPath are for the readiness wait and its error.
	clientURL, logPath string
	cmd                *exec.Cmd
	done               chan struct{}
}

// launchProcessEtcd starts the member's process without waiting for it.
func launchProcessEtcd(s etcdSpec, etcdVersion, logPath string) (*processEtcd, error) {
	bin, err := assets.Etcd(etcdVersion)
	if err != nil {
		return nil, err
	}
	// The production command line, then the simulator's timing and a
	// quieter log (a later flag wins).
	args := append(slices.Clone(s.args),
		fmt.Sprintf("--heartbeat-interval=%d", s.timing.HeartbeatMs),
		fmt.Sprintf("--election-timeout=%d", s.timing.ElectionMs),
		"--log-level=error",
	)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := startChild(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	m := &processEtcd{version: etcdVersion, name: s.name, clientURL: s.clientURL, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(m.done)
	}()
	return m, nil
}

// waitReady waits until the member answers with a leader; on failure the
// process is killed.
func (m *processEtcd) waitReady(ctx context.Context, tlsCfg *tls.Config) error {
	if err := waitEtcdAnswers(ctx, m.clientURL, tlsCfg, m.done); err != nil {
		m.stop(true)
		tail, _ := os.ReadFile(m.logPath)
		return fmt.Errorf("etcd %s (%s) not ready: %w; log %s: %s", m.name, m.version, err, m.logPath, etcdLogCause(string(tail)))
	}
	return nil
}

func (m *processEtcd) stop(hard bool) {
	sig := syscall.SIGTERM
	if hard {
		sig = syscall.SIGKILL
	}
	stopChild(m.cmd, m.done, sig, 15*time.Second)
}

func (m *processEtcd) exited() <-chan struct{} { return m.done }

func (m *processEtcd) describe() string { return "etcd process " + m.version }

// waitEtcdAnswers polls the member's status until it answers with a leader.
func waitEtcdAnswers(ctx context.Context, endpoint string, tlsCfg *tls.Config, died <-chan struct{}) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsCfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	var last error
	for {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, endpoint)
		cancel()
		if err == nil && st.Leader != 0 {
			return nil
		}
		if err == nil {
			err = errors.New("member has no leader yet")
		}
		last = err
		select {
		case <-died:
			return fmt.Errorf("process exited (last status: %v)", last)
		case <-ctx.Done():
			return fmt.Errorf("%w (last status: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// etcdLogCause is what an etcd log says of why the process ended: its fatal
// and panic entries as "msg: error" when it has any (etcd logs its shutdown's
// closed listeners after the cause, so the last lines hide it), else its
// last lines.
func etcdLogCause(log string) string {
	var causes []string
	for _, line := range strings.Split(log, "\n") {
		var e struct{ Level, Msg, Error string }
		if json.Unmarshal([]byte(line), &e) != nil || (e.Level != "fatal" && e.Level != "panic") {
			continue
		}
		causes = append(causes, e.Level+" "+e.Msg+": "+e.Error)
	}
	if len(causes) == 0 {
		return "ends: " + lastLines(log, 5)
	}
	return strings.Join(causes, " | ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// etcdClientTLS is the host's etcd client TLS (its healthcheck-client leaf).
func (h *Host) etcdClientTLS() (*tls.Config, error) {
	return pki.EtcdClientTLS(func(name string) ([]byte, error) { return h.files.ReadFile(version.PKIFile(name)) })
}
