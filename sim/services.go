package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/version"
)

// Service names a simulated host runs, the same names a real host's service
// manager knows.
const (
	ServiceEtcd              = "etcd"
	ServiceAPIServer         = "kube-apiserver"
	ServiceVIP               = "kube-vip"
	ServiceControllerManager = "kube-controller-manager"
)

// startsAPIServer: the simulator itself starts an apiserver on this host
// (at the cluster's start and a reboot): Config.APIServers, unless
// Config.WithoutAPIServer names it and none has run here yet.
func (h *Host) startsAPIServer() bool {
	h.mu.Lock()
	ran := h.apiServerRan
	h.mu.Unlock()
	return h.cluster.cfg.APIServers && (ran || !slices.Contains(h.cluster.cfg.WithoutAPIServer, h.name))
}

func (h *Host) startService(ctx context.Context, name string) error {
	if err := h.servicesBroken("start " + name); err != nil {
		return err
	}
	switch name {
	case ServiceEtcd:
		return h.StartEtcd(ctx)
	case ServiceAPIServer:
		return h.StartAPIServer(ctx)
	case ServiceVIP:
		return h.StartVIPCandidate()
	case ServiceControllerManager:
		return h.StartControllerManager(ctx)
	}
	return fmt.Errorf("%s: %w %q", h.name, host.ErrUnknownService, name)
}

func (h *Host) stopService(ctx context.Context, name string) error {
	switch name {
	case ServiceEtcd:
		h.StopEtcd()
		return nil
	case ServiceAPIServer:
		return h.StopAPIServer()
	case ServiceVIP:
		h.StopVIPCandidate()
		return nil
	case ServiceControllerManager:
		h.StopControllerManager()
		return nil
	}
	return fmt.Errorf("%s: %w %q", h.name, host.ErrUnknownService, name)
}

func (h *Host) serviceStatus(name string) (host.ServiceStatus, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := host.ServiceStatus{Name: name}
	switch name {
	case ServiceEtcd:
		st.Version = h.etcdVersionLocked()
		if h.etcd != nil {
			select {
			case <-h.etcd.exited():
				st.Detail = "exited"
			default:
				st.Running, st.Detail = true, "running ("+h.etcd.describe()+")"
			}
		}
	case ServiceAPIServer:
		st.Running = h.apiserver != nil
	case ServiceVIP:
		st.Running = h.vip != nil
	case ServiceControllerManager:
		st.Running = h.kcm != nil
	default:
		return st, fmt.Errorf("%s: %w %q", h.name, host.ErrUnknownService, name)
	}
	if st.Detail == "" {
		st.Detail = map[bool]string{true: "running", false: "stopped"}[st.Running]
	}
	return st, nil
}

// StartEtcd starts the host's etcd member from its node state, embedded or as
// a process of the host's etcd version, and waits until it is ready. Starting
// a running member is a no-op.
func (h *Host) StartEtcd(ctx context.Context) error {
	wait, err := h.launchEtcd(ctx)
	if err != nil {
		return err
	}
	return wait(ctx)
}

// launchEtcd starts the member and returns how to wait for it to be ready.
func (h *Host) launchEtcd(ctx context.Context) (wait func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	h.mu.Lock()
	if h.etcd != nil {
		select {
		case <-h.etcd.exited():
			h.etcd = nil
		default:
			h.mu.Unlock()
			return noop, nil
		}
	}
	etcdVersion := h.etcdVersion
	h.mu.Unlock()
	spec, err := h.etcdSpec()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	started := func(m etcdMember) {
		h.mu.Lock()
		h.etcd = m
		h.mu.Unlock()
		h.cluster.events.Record(h.name, "service", "etcd started (%s, state=%s) in %s", m.describe(), spec.state, time.Since(start).Round(time.Millisecond))
		h.cluster.applyNetwork()
	}
	if etcdVersion != "" {
		tlsCfg, err := h.etcdClientTLS()
		if err != nil {
			return nil, fmt.Errorf("start etcd on %s: client TLS: %w", h.name, err)
		}
		pm, err := launchProcessEtcd(spec, etcdVersion, h.Path("/var/log/etcd.log"))
		if err != nil {
			h.cluster.events.Record(h.name, "error", "etcd start failed: %v", err)
			return nil, err
		}
		h.mu.Lock()
		h.etcd = pm
		h.mu.Unlock()
		return func(ctx context.Context) error {
			if err := pm.waitReady(ctx, tlsCfg); err != nil {
				h.mu.Lock()
				if h.etcd == pm {
					h.etcd = nil
				}
				h.mu.Unlock()
				h.recordEtcdStartFailed(err)
				return err
			}
			started(pm)
			return nil
		}, nil
	}
	em, err := launchEmbeddedEtcd(spec, func(m *embeddedEtcd) { h.etcdRemoved(m) })
	if err != nil {
		h.cluster.events.Record(h.name, "error", "etcd start failed: %v", err)
		return nil, err
	}
	h.mu.Lock()
	h.etcd = em
	h.mu.Unlock()
	return func(ctx context.Context) error {
		if err := em.waitReady(ctx); err != nil {
			h.mu.Lock()
			if h.etcd == em {
				h.etcd = nil
			}
			h.mu.Unlock()
			h.recordEtcdStartFailed(err)
			return err
		}
		started(em)
		return nil
	}, nil
}

// recordEtcdStartFailed records a start that did not become ready: an error,
// unless its caller gave up on it (a cancelled start is stopped on purpose).
func (h *Host) recordEtcdStartFailed(err error) {
	if errors.Is(err, context.Canceled) {
		h.cluster.events.Record(h.name, "service", "etcd start cancelled by its caller; stopped")
		return
	}
	h.cluster.events.Record(h.name, "error", "etcd start failed: %v", err)
}

// etcdRemoved forgets a member that was stopped because it was removed from
// its cluster, as a supervisor forgets an exited process, and records why.
func (h *Host) etcdRemoved(m etcdMember) {
	h.mu.Lock()
	if h.etcd == m {
		h.etcd = nil
	}
	h.mu.Unlock()
	h.cluster.events.Record(h.name, "service", "etcd member removed from the cluster; stopped")
}

// StopEtcd stops the member gracefully.
func (h *Host) StopEtcd() { h.stopEtcd(false) }

// CrashEtcd stops the member without coordination, as a SIGKILL would.
func (h *Host) CrashEtcd() { h.stopEtcd(true) }

func (h *Host) stopEtcd(hard bool) {
	h.mu.Lock()
	m := h.etcd
	h.etcd = nil
	h.mu.Unlock()
	if m == nil {
		return
	}
	if hard {
		// Recorded as the crash begins: the member stops taking part in
		// raft at once, while closing its listeners and client streams can
		// take a second, and the event log (and the timeline drawn from it)
		// should show the leader change after the crash, not before it.
		h.cluster.events.Record(h.name, "fault", "etcd crashed")
		m.stop(true)
		return
	}
	m.stop(false)
	h.cluster.events.Record(h.name, "service", "etcd stopped")
}

// WipeEtcd removes the member's data directory; the member must be stopped.
func (h *Host) WipeEtcd() error {
	h.mu.Lock()
	running := h.etcd != nil
	h.mu.Unlock()
	if running {
		return fmt.Errorf("wipe etcd on %s: the member is running; stop it first", h.name)
	}
	h.cluster.events.Record(h.name, "action", "etcd data wiped")
	return h.files.RemoveAll(version.EtcdDataDir)
}

// SetEtcdVersion makes the host's next etcd start run the given version as a
// separate process ("" for the embedded member). For downgrades and skew.
func (h *Host) SetEtcdVersion(v string) {
	h.mu.Lock()
	h.etcdVersion = v
	h.mu.Unlock()
}

// EtcdVersion is the etcd version the host's etcd runs from its next start
// (the one SetEtcdVersion chose, the pinned version for the embedded member).
func (h *Host) EtcdVersion() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.etcdVersionLocked()
}

// etcdVersionLocked is EtcdVersion with h.mu held.
func (h *Host) etcdVersionLocked() string {
	if h.etcdVersion == "" {
		return version.Etcd // the embedded member is the pinned etcd
	}
	return h.etcdVersion
}

func (h *Host) embedded() *embeddedEtcd {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, _ := h.etcd.(*embeddedEtcd)
	if m == nil {
		return nil
	}
	select {
	case <-m.exited():
		return nil
	default:
		return m
	}
}

// StartAPIServer starts the host's kube-apiserver. A running one is left as is.
func (h *Host) StartAPIServer(ctx context.Context) error {
	h.mu.Lock()
	running := h.apiserver != nil
	h.mu.Unlock()
	if running {
		return nil
	}
	start := time.Now()
	a, err := h.startAPIServer(ctx)
	if err != nil {
		h.cluster.events.Record(h.name, "error", "kube-apiserver start failed: %v", err)
		return err
	}
	h.mu.Lock()
	h.apiserver, h.apiServerRan = a, true
	h.mu.Unlock()
	h.cluster.events.Record(h.name, "service", "kube-apiserver ready in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// StopAPIServer stops the host's kube-apiserver.
func (h *Host) StopAPIServer() error {
	a := h.takeAPIServer()
	if a == nil {
		return nil
	}
	if a.stop() {
		h.cluster.events.Record(h.name, "service", "kube-apiserver stopped%s (killed: it did not stop within %s of SIGTERM)", a.usage(), apiServerStopTimeout)
		return nil
	}
	h.cluster.events.Record(h.name, "service", "kube-apiserver stopped%s", a.usage())
	return nil
}

// takeAPIServer detaches the host's apiserver, nil when none runs.
func (h *Host) takeAPIServer() *apiServer {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.apiserver
	h.apiserver = nil
	return a
}

// KillAPIServer is the fault form of StopAPIServer: SIGKILL, no graceful
// shutdown.
func (h *Host) KillAPIServer() error {
	a := h.takeAPIServer()
	if a == nil {
		return nil
	}
	a.kill()
	h.cluster.events.Record(h.name, "fault", "kube-apiserver killed (SIGKILL)%s", a.usage())
	return nil
}

// RestartAPIServerUnready kills the host's kube-apiserver and starts it
// again, returning as soon as its port accepts a connection: serving, its
// informers not yet synced, not ready. It is for tests of the clients that
// meet an API server just started. ready receives the start's result once
// the server is ready (or its start failed); a start that ends before its
// port was seen to accept is returned as err when it failed.
func (h *Host) RestartAPIServerUnready(ctx context.Context) (ready <-chan error, err error) {
	if err := h.KillAPIServer(); err != nil {
		return nil, err
	}
	started := make(chan error, 1)
	go func() { started <- h.StartAPIServer(ctx) }()
	addr := net.JoinHostPort(h.ip.String(), fmt.Sprint(version.APIServerPort))
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return started, nil
		}
		select {
		case err := <-started:
			if err != nil {
				return nil, err
			}
			done := make(chan error, 1)
			done <- nil
			return done, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: the restarted kube-apiserver never listened on %s: %w", h.name, addr, context.Cause(ctx))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// APIServerRunning reports whether the host's apiserver is up.
func (h *Host) APIServerRunning() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.apiserver != nil
}

// EtcdRunning reports whether the host's etcd member is running.
func (h *Host) EtcdRunning() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.etcd == nil {
		return false
	}
	select {
	case <-h.etcd.exited():
		return false
	default:
		return true
	}
}

// Crash crashes the whole host: its incarnation is bumped so every later call
// from an operation already running fails, its locks are released, and every
// service is stopped hard. Files stay as they were written.
func (h *Host) Crash() {
	h.mu.Lock()
	h.incarnation++
	inc := h.incarnation
	h.mu.Unlock()
	h.cluster.events.Record(h.name, "crash", "host crashed (incarnation %d)", inc)
	h.files.DropLocks()
	h.StopVIPCandidate()
	h.StopControllerManager()
	_ = h.KillAPIServer()
	h.stopEtcd(true)
}

// Reimage is a machine replaced or re-installed under the same name and
// address: the host crashes, then every file on it is removed (node state,
// certificates, journals, etcd data), as on a new disk. The cluster's view of
// it, its etcd member above all, is left as the crash left it.
func (h *Host) Reimage() error {
	h.Crash()
	entries, err := h.files.ReadDir("/")
	if err != nil {
		return fmt.Errorf("re-image %s: %w", h.name, err)
	}
	for _, e := range entries {
		if err := h.files.RemoveAll("/" + e.Name()); err != nil {
			return fmt.Errorf("re-image %s: %w", h.name, err)
		}
	}
	h.cluster.events.Record(h.name, "fault", "host re-imaged: every file removed")
	return nil
}

// Reboot starts a crashed (or stopped) host's services again from what is on
// its disk: etcd when it has node state, then its apiserver and VIP candidate
// when the cluster runs them (on a host WithoutAPIServer names, only once one
// has run there). A fresh Handle sees the new incarnation.
func (h *Host) Reboot(ctx context.Context) error {
	h.cluster.events.Record(h.name, "action", "reboot")
	if err := h.StartEtcd(ctx); err != nil {
		return err
	}
	if h.startsAPIServer() {
		if err := h.StartAPIServer(ctx); err != nil {
			return err
		}
		if h.cluster.cfg.VIP {
			return h.StartVIPCandidate()
		}
	}
	return nil
}
