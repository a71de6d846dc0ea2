package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/interrupt"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/noderelease"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/quietlog"
	"stratum.dev/stratum/internal/sdnotify"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/internal/vip"
)

// On a real host stratum is its own supervisor, as `k0s controller` and
// `k3s server` are: `stratum up` and `stratum server` prepare the node with
// the ha code, running its services (etcd, kube-apiserver, the VIP, the
// operator) as children of this process through internal/supervisor, then
// stay in the foreground serving the control socket until SIGINT, SIGTERM or
// SIGHUP stops them all. Every other command reaches that supervisor through the
// socket.

// Service names the supervisor runs beyond ha's.
const serviceOperator = "stratum-operator"

// Timing of the real host's elections and passes.
const (
	// operatorEvery is how often the operator's leader runs a pass.
	operatorEvery = 30 * time.Second
	// OperatorLeaseName is the Lease the control planes' operators elect
	// through.
	OperatorLeaseName = "stratum-operator"
)

// requireRoot refuses a real-host control-plane command run by another
// user; why says what it does that needs root.
func requireRoot(verb, why string) error {
	if os.Geteuid() != 0 {
		return rootRefusal(verb, why)
	}
	return nil
}

// rootRefusal is requireRoot's refusal of verb, which needs root for why.
func rootRefusal(verb, why string) error {
	return refusedf("%s must run as root: %s; nothing was changed", verb, why)
}

// superviseNeedsRoot is why up and server run as root.
var superviseNeedsRoot = fmt.Sprintf("it writes %s and %s, binds the etcd and apiserver ports and manages the VIP address", version.K8sConfDir, version.StateDir)

// localServices is what the real-host commands other than up and server use
// for services: the running supervisor's control socket.
func localServices() host.Services { return supervisor.Client{Path: supervisor.SocketPath} }

// waitedServices are a command's services through the running supervisor,
// saying through progress, every ha.WaitReportEvery, what it still waits
// for while a start, restart or stop has not returned: each waits for its
// service to be ready (etcd answering with a leader, the apiserver's
// /readyz: up to supervisor.ServiceReadyWithin) or gone (its SIGTERM
// grace), which a silent terminal would hide for minutes.
type waitedServices struct {
	host.Services
	progress func(string)
	// every is the pace of the lines (zero: ha.WaitReportEvery).
	every time.Duration
}

func (s waitedServices) StartService(ctx context.Context, name string) error {
	return s.waiting("start", name, func() error { return s.Services.StartService(ctx, name) })
}

func (s waitedServices) RestartService(ctx context.Context, name string) error {
	return s.waiting("restart", name, func() error { return s.Services.RestartService(ctx, name) })
}

func (s waitedServices) StopService(ctx context.Context, name string) error {
	return s.waiting("stop", name, func() error { return s.Services.StopService(ctx, name) })
}

func (s waitedServices) waiting(verb, name string, do func() error) error {
	return sayWhile(s.progress, cmp.Or(s.every, ha.WaitReportEvery), func(waited time.Duration) string {
		return fmt.Sprintf("waiting for the supervisor to %s %s (%s so far)", verb, name, waited.Round(time.Second))
	}, do)
}

// sayWhile runs do and, until it returns, says through progress every
// every what it waits for (line, given how long it has waited).
func sayWhile(progress func(string), every time.Duration, line func(waited time.Duration) string, do func() error) error {
	done := make(chan error, 1)
	go func() { done <- do() }()
	began := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			progress(line(time.Since(began)))
		}
	}
}

// nodeSupervisor is the supervisor of this machine's control plane: etcd and
// kube-apiserver from binDir with flags rendered from the node state at each
// start, the VIP candidate and, with operator, the operator in process. A
// supervisor without the operator does not know the service, so a start
// (ha's StartControlPlane) skips it and status leaves it out.
func (a *app) nodeSupervisor(h host.Host, n *ha.Node, binDir string, operator bool) (*supervisor.Supervisor, error) {
	bins := controlplane.Binaries{Dir: binDir}
	etcdVersion := &binaryVersion{bins: bins, name: controlplane.EtcdBinary, last: version.Etcd, state: h}
	check := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			if err := bins.Check(ctx, name); err != nil {
				return err
			}
			return controlplane.PortsFree(controlplane.Ports[name])
		}
	}
	services := []supervisor.Spec{
		{
			Name:    ha.ServiceEtcd,
			Command: etcdCommand(h, etcdVersion),
			Ready:   func(ctx context.Context) error { return waitEtcdServes(ctx, h, n) },
			Check: func(ctx context.Context) error {
				if err := etcdVersion.check(ctx); err != nil {
					return err
				}
				return controlplane.PortsFree(controlplane.Ports[controlplane.EtcdBinary])
			},
			VersionOf: etcdVersion.get,
		},
		{
			Name: ha.ServiceAPIServer,
			Command: func() (supervisor.Command, error) {
				// Checked at every launch, as etcd's is (etcdCommand).
				if err := bins.Check(context.Background(), controlplane.APIServerBinary); err != nil {
					return supervisor.Command{}, err
				}
				st, err := nodestate.Load(h)
				if err != nil {
					return supervisor.Command{}, err
				}
				args, err := controlplane.APIServerArgs(st, h)
				return supervisor.Command{Path: bins.Path(controlplane.APIServerBinary), Args: args}, err
			},
			Ready:   func(ctx context.Context) error { return waitAPIServerServes(ctx, h) },
			Check:   check(controlplane.APIServerBinary),
			Version: version.Kubernetes,
		},
		{Name: ha.ServiceVIP, Run: func(ctx context.Context) error { return a.runVIP(ctx, h) }, Check: func(context.Context) error { return vipCheck(h) }, Version: inProcessVersion()},
	}
	if operator {
		// The operator's passes run in the background for months: their
		// waits ("waiting for learner ... to catch up") are not the
		// terminal's progress lines, so its node has no Progress.
		quiet := ha.NewNode(ha.Env{Host: h, Checkpoint: a.opts.Checkpoint, Log: a.log})
		services = append(services, supervisor.Spec{Name: serviceOperator, Run: func(ctx context.Context) error { return a.runOperator(ctx, h, quiet) }, Version: inProcessVersion()})
	}
	absBinDir, err := filepath.Abs(binDir)
	if err != nil {
		return nil, fmt.Errorf("--bin-dir: %w", err)
	}
	cfg := supervisor.Config{LogDir: controlplane.LogDir, Log: a.log, Services: services, OnShutdownStop: func(name string) {
		fmt.Fprintf(a.stdout, "  stopping %s ...\n", name)
	}, Identity: supervisor.Identity{Version: Version, BinDir: absBinDir, Operator: operator}}
	var sup *supervisor.Supervisor
	if a.opts.Exec != nil {
		cfg.CheckReplacement = func(r supervisor.Replacement) error {
			if err := checkReplacement(r); err != nil {
				return err
			}
			// Held through the stops and released by the exec: no
			// restore, renewal or reset starts on the node during the
			// stops; the new stratum's start takes them itself, as at a
			// boot.
			release, err := nodelock.AcquireBoth(h, "stratum upgrade node (this supervisor's replacement)")
			if err != nil {
				return err
			}
			a.replacementLocks = release
			return nil
		}
	}
	sup, err = supervisor.New(cfg)
	return sup, err
}

// checkReplacement is what a supervisor accepts to be replaced by (`stratum
// upgrade node`; the supervisor itself accepts one only while it supervises
// a control plane that is up): a stratum root alone may change
// (controlplane.RootOnlyWritable, as every supervisor's start requires of
// itself), run as the node's supervisor (up --as-supervisor), so the exec
// cannot end the node in a program that is not its supervisor.
func checkReplacement(r supervisor.Replacement) error {
	fi, err := os.Stat(r.Path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o100 == 0 {
		return fmt.Errorf("%s is not an executable file", r.Path)
	}
	if err := controlplane.RootOnlyWritable(r.Path); err != nil {
		return err
	}
	if len(r.Args) < 3 || r.Args[1] != "up" || !slices.Contains(r.Args[2:], "--as-supervisor") {
		return fmt.Errorf("it would run %q, not the node's supervisor (up --as-supervisor)", strings.Join(r.Args, " "))
	}
	return nil
}

// inProcessVersion is the version a service running inside the supervisor
// (kube-vip's election, the operator) reports: the supervisor's own stratum,
// which `stratum status` from a newer binary on disk tells apart.
func inProcessVersion() string { return "stratum " + Version }

// binaryVersion is the version a service's binary said it is at its last
// check: etcd's may be the pinned one or the previous minor (a member
// downgraded by `stratum etcd downgrade`), and its status, which the join's
// and the rejoin's version checks read (ha's localEtcdVersion), must say
// which.
type binaryVersion struct {
	bins  controlplane.Binaries
	name  string
	state host.Files // the node state: whether its member has served
	mu    sync.Mutex
	last  string
}

// check checks the binary (controlplane.Binaries.Version) and records the
// version it says. The previous minor's etcd is a downgraded member's: it
// is refused for a member that has not served yet (a bring-up or a join,
// which run the pinned etcd), so a mis-installed binary does not start a
// cluster of the older version.
func (v *binaryVersion) check(ctx context.Context) error {
	return v.judge(ctx, func(got string) error {
		if got != version.EtcdPrevious {
			return nil
		}
		if st, serr := nodestate.Load(v.state); serr != nil || !st.Etcd.Started {
			return fmt.Errorf("%w: %s is etcd %s, the previous minor, which only a member downgraded by `stratum etcd downgrade` runs; this node's member has not served yet, and a new member runs the pinned etcd %s: install the dist's bin/etcd there", controlplane.ErrBinary, v.bins.Path(v.name), version.EtcdPrevious, version.Etcd)
		}
		return nil
	})
}

// launchable checks the binary at a launch: a version this stratum runs
// (the pinned one, or etcd's previous minor), recorded as check does. The
// rule that a member that has not served runs the pinned etcd is check's,
// made before anything changes (the supervisor's start, a join's or a
// rejoin's checks): a rejoin of a downgraded member records its member as
// not yet served after its wipe and member-add, and its launch of the
// previous minor's etcd must then go through.
func (v *binaryVersion) launchable(ctx context.Context) error {
	return v.judge(ctx, func(string) error { return nil })
}

// judge asks the binary its version, refuses it with rule's error, and
// otherwise records it.
func (v *binaryVersion) judge(ctx context.Context, rule func(got string) error) error {
	got, err := v.bins.Version(ctx, v.name)
	if err != nil {
		return err
	}
	if err := rule(got); err != nil {
		return err
	}
	v.mu.Lock()
	v.last = got
	v.mu.Unlock()
	return nil
}

func (v *binaryVersion) get() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
}

// etcdCommand renders etcd's command line from the node state at each
// launch, after checking the binary (binaryVersion.launchable): binaries swapped
// on disk under a running supervisor (a release installed in place before
// the restart) are never launched unchecked by a relaunch after a crash or a
// renewal's restart, and the version etcd's status reports, which the join's
// and the rejoin's version checks read, is the one launched. A member that
// has served before is not launched on a data directory without its data
// (ha.RefuseMissingEtcdData): a relaunch after a crash is checked as a start
// through `stratum up` is, so a data disk that went away under a running
// member does not become a new, empty member; the supervisor retries the
// launch with its backoff, and the member starts once the data is back.
func etcdCommand(h host.Files, binary *binaryVersion) func() (supervisor.Command, error) {
	return func() (supervisor.Command, error) {
		if err := binary.launchable(context.Background()); err != nil {
			return supervisor.Command{}, err
		}
		st, err := nodestate.Load(h)
		if err != nil {
			return supervisor.Command{}, err
		}
		if err := ha.RefuseMissingEtcdData(h, st); err != nil {
			return supervisor.Command{}, err
		}
		args, err := controlplane.EtcdArgs(st)
		return supervisor.Command{Path: binary.bins.Path(controlplane.EtcdBinary), Args: args}, err
	}
}

// readyProbeTimeout bounds one readiness probe of a starting service.
const readyProbeTimeout = 500 * time.Millisecond

// waitEtcdServes waits until the local member answers with a leader.
func waitEtcdServes(ctx context.Context, h host.Host, n *ha.Node) error {
	st, err := nodestate.Load(h)
	if err != nil {
		return err
	}
	self := controlplane.ClientHost(st.Etcd.ClientURL)
	ctx, cancel := context.WithTimeout(ctx, controlplane.ServiceReadyWithin)
	defer cancel()
	for {
		// A member that listens but does not serve yet (etcd accepts
		// connections before it has published itself) holds a probe until
		// its timeout: short probes see it serving soon after it does.
		pctx, pcancel := context.WithTimeout(ctx, readyProbeTimeout)
		m := n.EtcdMemberStatus(pctx, self)
		pcancel()
		if m.Err == nil && m.Leader != 0 {
			return nil
		}
		why := "it knows no leader"
		if m.Err != nil {
			why = m.Err.Error()
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("etcd at %s does not serve within %s: %s (%w)", st.Etcd.ClientURL, controlplane.ServiceReadyWithin, why, ctx.Err())
			}
			return fmt.Errorf("etcd at %s does not serve: %s (%w)", st.Etcd.ClientURL, why, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitAPIServerServes waits until the local apiserver's /readyz answers 200.
func waitAPIServerServes(ctx context.Context, h host.Host) error {
	st, err := nodestate.Load(h)
	if err != nil {
		return err
	}
	ca, err := h.ReadFile(version.PKIFile("ca.crt"))
	if err != nil {
		return err
	}
	ip := nodestate.FirstIP(st.NodeIP)
	ctx, cancel := context.WithTimeout(ctx, controlplane.ServiceReadyWithin)
	defer cancel()
	return controlplane.WaitAPIServerReady(ctx, ip, ca)
}

// apiServerURL is the kube-apiserver URL at ip (a node's address or the VIP).
func apiServerURL(ip string) string {
	return "https://" + net.JoinHostPort(ip, strconv.Itoa(version.APIServerPort))
}

// localAdminClient is a clientset with the admin kubeconfig's credentials
// aimed at this node's own apiserver, not the VIP: the elections that decide
// who holds the VIP cannot go through it.
func localAdminClient(h host.Host, timeout time.Duration, waiting func(string)) (kubernetes.Interface, error) {
	st, err := nodestate.Load(h)
	if err != nil {
		return nil, err
	}
	cfg, err := adminRESTConfig(h, waiting)
	if err != nil {
		return nil, err
	}
	ip := nodestate.FirstIP(st.NodeIP)
	cfg.Host = apiServerURL(ip)
	cfg.Timeout = timeout
	return kubernetes.NewForConfig(cfg)
}

// vipCheck refuses a VIP service on a node whose state has no VIP.
func vipCheck(h host.Host) error {
	st, err := nodestate.Load(h)
	if errors.Is(err, nodestate.ErrNoState) {
		return nil // a join checks before it saves its state
	}
	if err != nil {
		return err
	}
	if st.VIP.Address != "" {
		if _, err := netip.ParseAddr(st.VIP.Address); err != nil {
			return fmt.Errorf("node state VIP %q: %w", st.VIP.Address, err)
		}
	}
	return nil
}

// runVIP is the kube-vip service: a candidate for the VIP Lease through the
// local apiserver; while it holds the lease the VIP is a /32 on the
// interface that carries the node's address, announced by gratuitous ARP.
// It takes the VIP only while the apiserver certificate covers it.
func (a *app) runVIP(ctx context.Context, h host.Host) error {
	st, err := nodestate.Load(h)
	if err != nil {
		return err
	}
	if st.VIP.Address == "" {
		<-ctx.Done() // a cluster without a VIP: nothing to hold
		return nil
	}
	addr, err := netip.ParseAddr(st.VIP.Address)
	if err != nil {
		return fmt.Errorf("node state VIP %q: %w", st.VIP.Address, err)
	}
	iface := st.VIP.Interface
	if iface == "" {
		ip := nodestate.FirstIP(st.NodeIP)
		nodeIP, err := netip.ParseAddr(ip)
		if err != nil {
			return fmt.Errorf("node state node IP %q: %w", st.NodeIP, err)
		}
		if iface, err = vip.InterfaceOf(nodeIP); err != nil {
			return err
		}
	}
	cs, err := localAdminClient(h, 5*time.Second, nil)
	if err != nil {
		return err
	}
	// The address lives a short lifetime in the kernel unless renewed, so a
	// stratum killed while it held the VIP has lost it before another node
	// can win the Lease (vip.DefaultAddressLifetime).
	announcer := &vip.NetlinkAnnouncer{Interface: iface, Addr: addr, Lifetime: vip.DefaultAddressLifetime, Reannounce: vip.DefaultReannounce}
	return vip.Run(ctx, vip.Config{
		Client:    cs,
		Identity:  nodeIdentity(st, h),
		Lease:     vip.DefaultLease, // kube-vip's timings: the defaults
		CanHold:   func() error { return apiServerCovers(h, addr) },
		Announcer: announcer,
		Log:       a.log.With("service", ha.ServiceVIP),
	})
}

// nodeIdentity is the name this node holds the VIP and operator Leases as:
// the node name its state records (its etcd member's, unique in the cluster:
// a join refuses a name a member has), not the hostname now, which may have
// changed since the join, or be a transient "localhost" before DHCP named
// the machine. Two candidates of one identity each take the other's lease
// for their own, and both hold the VIP.
func nodeIdentity(st *nodestate.NodeState, h host.Host) string {
	return cmp.Or(st.NodeName, h.Name())
}

// apiServerCovers reports an error unless the node's apiserver certificate
// names ip among its IP SANs.
func apiServerCovers(h host.Host, ip netip.Addr) error {
	crt, err := h.ReadFile(version.PKIFile("apiserver.crt"))
	if err != nil {
		return err
	}
	if err := pki.CheckLeafCovers(crt, net.IP(ip.AsSlice())); err != nil {
		return fmt.Errorf("the apiserver certificate %s does not cover the VIP %s (%w): run `stratum up` again, which reissues it", version.PKIFile("apiserver.crt"), ip, err)
	}
	return nil
}

// runOperator is the stratum-operator service: the control planes elect one
// through a Lease on their local apiservers, and the leader runs ha's
// OperatorPass every operatorEvery, so a stranded learner is promoted and
// expired tokens and their grants go with no one minting.
func (a *app) runOperator(ctx context.Context, h host.Host, n *ha.Node) error {
	st, err := nodestate.Load(h)
	if err != nil {
		return err
	}
	cs, err := localAdminClient(h, 30*time.Second, nil)
	if err != nil {
		return err
	}
	log := a.log.With("service", serviceOperator)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: OperatorLeaseName, Namespace: "kube-system"},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: nodeIdentity(st, h)},
		},
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Name:            serviceOperator,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { operatorLoop(ctx, n, cs, log) },
			OnStoppedLeading: func() { log.Info("operator lease lost or released") },
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx) // returns when the lease is lost; the supervisor restarts it
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("operator lease lost")
}

// operatorLoop runs an operator pass now and every operatorEvery until ctx
// ends.
func operatorLoop(ctx context.Context, n *ha.Node, cs kubernetes.Interface, log *slog.Logger) {
	log.Info("operator leading: passes every " + operatorEvery.String())
	var spaceAt time.Time
	// A pass failing the same way every 30 s (a learner whose machine is
	// gone, a refusal that stays) says so once.
	failed := quietlog.Repeats{Log: log}
	for {
		if time.Since(spaceAt) >= etcdSpaceEvery {
			spaceAt = time.Now()
			warnings, err := n.EtcdSpaceWarnings(ctx)
			for _, w := range warnings {
				log.Warn(w)
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("the etcd members' database sizes could not be read", "err", err)
			}
		}
		rep, err := n.OperatorPass(ctx, cs)
		if len(rep.Promoted) > 0 {
			log.Warn("operator promoted stranded etcd learners", "members", rep.Promoted)
		}
		if len(rep.TokensDeleted) > 0 {
			log.Info("operator deleted expired join tokens", "tokens", rep.TokensDeleted)
		}
		if len(rep.Pruned) > 0 {
			log.Info("operator dropped the grants of expired or deleted tokens", "tokens", rep.Pruned)
		}
		if line := collectedLine(rep); line != "" {
			log.Info("operator " + line)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			failed.Warn("operator pass", err)
		case err == nil && failed.Repeating():
			log.Info("operator pass succeeded again")
			failed.Reset()
		case err == nil:
			failed.Reset()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(operatorEvery):
		}
	}
}

// superviseFlags are the flags of up and server on a real host.
type superviseFlags struct {
	binDir   string
	operator bool
	// install: once the control plane serves, hand it to systemd's unit
	// (as `stratum install --now`) and exit.
	install bool
}

func (f *superviseFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.binDir, "bin-dir", controlplane.DefaultBinDir, "the `directory` holding the pinned etcd and kube-apiserver binaries (the bin/ of `make dist`)")
	fl.BoolVar(&f.operator, "operator", true, "run the stratum-operator on this control plane (leader-elected, every 30 s: promotes stranded etcd learners, deletes expired join tokens and their grants, publishes the etcd members, deletes stale release records; see \"stratum operator pass --help\")")
	fl.BoolVar(&f.install, "install", false, "once the control plane serves, hand it to systemd's stratum.service (written and enabled, as \"stratum install --now\" does) and exit 0 when the unit serves it: a command that returns, for automation")
}

// supervise is `stratum up` and `stratum server` on a real host: refusals
// first (not root, a supervisor already running, a control-plane binary
// missing or wrong), then prepare (ha's bring-up or join) with this process
// as the node's supervisor, then the operator, then the foreground: the
// control socket is served until ctx ends (SIGINT, SIGTERM), when every
// service is stopped, newest first, or until a caller of the socket asks an
// idle supervisor to end (`stratum reset`, supervisor.Client.Exit). o are
// the command's bring-up options, which a retried start (keepVoterAndRetry,
// waitForEtcdData) takes again.
func (a *app) supervise(ctx context.Context, verb, done string, f superviseFlags, o ha.BootstrapOptions, prepare func(context.Context, *ha.Node) (*nodestate.NodeState, error)) (rerr error) {
	if err := requireRoot(verb, superviseNeedsRoot); err != nil {
		return err
	}
	if err := refuseReplaceableSelf(os.Args[0]); err != nil {
		return refusedf("%s refused: %w; nothing was changed", verb, err)
	}
	// The supervisor handles a second signal itself (forceOnSecondSignal,
	// the join's held window): it must not end the process.
	defer interrupt.Hold()()
	// A replacement asked through the control socket (`stratum upgrade
	// node`) runs last: once every service has stopped and the socket and
	// its lock are closed (the defers below run before this one).
	var replacement *supervisor.Replacement
	var identity supervisor.Identity
	// A handover to systemd's unit (--install) runs last too: the unit's
	// supervisor starts only once this one's socket and locks are closed.
	var handoff *unitHandoff
	handOver := false
	defer func() {
		switch {
		case replacement != nil:
			rerr = a.finishReplacement(ctx, *replacement, identity)
		case handOver:
			rerr = a.finishHandover(ctx, handoff)
		}
	}()
	if f.install {
		var err error
		if handoff, err = a.installHandoff(ctx, verb, f); err != nil {
			return err
		}
	}
	l, err := host.NewLocal()
	if err != nil {
		return refused(err)
	}
	n := ha.NewNode(ha.Env{Host: l, Checkpoint: a.opts.Checkpoint, Log: a.log, Progress: a.progress})
	sup, err := a.nodeSupervisor(l, n, f.binDir, f.operator)
	if err != nil {
		return refusedf("%s refused: %w; nothing was changed", verb, err)
	}
	l.Services = startProgress{Supervisor: sup, w: a.stdout}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, interrupt.Signals()...)
	endForce := forceOnSecondSignal(sigs, sup.Force, a.stdout)
	defer func() { signal.Stop(sigs); endForce() }() // after the shutdown below
	ln, err := supervisor.Listen(supervisor.SocketPath)
	if err != nil {
		return refusedf("%s refused: %w; nothing was changed", verb, err)
	}
	defer ln.Close() // unlinks the socket, then releases its lock
	if err := sup.CheckServices(ctx, []string{ha.ServiceEtcd, ha.ServiceAPIServer}); err != nil {
		return refusedf("%s refused: this host cannot run its control plane: %w; nothing was changed", verb, err)
	}
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- sup.Serve(serveCtx, ln) }()
	// The services stop while the socket still answers (a status says
	// what still runs, and no start is accepted once the stops began), so
	// no restore or reset takes an etcd that is still stopping for one
	// that is stopped; the socket and its lock go last.
	defer func() { sup.Shutdown(); stopServing(); <-served }()

	st, err := prepare(ctx, n)
	if errors.Is(err, ha.ErrEtcdDataMissing) {
		st, err = a.waitForEtcdData(ctx, verb, l, n, sup, o, err)
	}
	if err != nil && !errors.Is(err, errNodeReset) {
		st, err = a.keepVoterAndRetry(ctx, verb, n, sup, o, err)
	}
	if errors.Is(err, errNodeReset) {
		return nil
	} else if err != nil {
		return explainHost(err)
	}
	if f.operator {
		if err := l.StartService(ctx, serviceOperator); err != nil {
			return fmt.Errorf("start the operator: %w", err)
		}
	}
	a.printState(done, st)
	a.settle(sup, supervisor.StateSupervising, "supervising this control plane: etcd, kube-apiserver and what the node runs are up")
	recording, stopRecording := context.WithCancel(ctx)
	defer stopRecording() // before a replacement's exec, or the end
	go a.recordRelease(recording, l, n, sup, st)
	hint := ""
	if systemdRuns() && !inStratumUnit() && f.operator && handoff == nil {
		install := "stratum install --now"
		if self, err := unitExecPath(os.Args[0]); err == nil {
			if abs, err := filepath.Abs(f.binDir); err == nil {
				install = installNowCommand(self, abs)
			}
		}
		hint = "\nsystemd's stratum.service does not run it: `" + install + "`, from another shell, hands it over, and systemd then starts it at every boot"
	}
	fmt.Fprintf(a.stdout, "supervising this control plane (logs in %s, control socket %s); SIGINT, SIGTERM or SIGHUP stops it (a second SIGINT or SIGTERM kills what still runs)%s\n", controlplane.LogDir, supervisor.SocketPath, hint)
	// --install: the restart's gate, as install --now judges it, then
	// the handover; a gate that refuses is asked again every
	// startRetryEvery while this supervisor goes on.
	gate := installGate{a: a, every: startRetryEvery, check: func(ctx context.Context) (string, error) {
		_, note, err := restartKeepsQuorum(ctx, n, st)
		return note, err
	}}
	handOverNow := func() bool {
		if !gate.open(ctx) {
			return false
		}
		a.beginStop(sup, "this supervisor was handing its control plane to systemd's unit (--install)")
		handOver = true
		return true
	}
	var gateRetry <-chan time.Time
	if handoff != nil {
		if handOverNow() {
			return nil
		}
		retry := time.NewTicker(gate.every)
		defer retry.Stop()
		gateRetry = retry.C
	}
	a.warnCertsDue(l)
	daily := time.NewTicker(certsDueEvery)
	defer daily.Stop()
	for {
		select {
		case <-gateRetry:
			if handOverNow() {
				return nil
			}
		case <-ctx.Done():
			a.beginStop(sup, "a stop signal came as it was accepted")
			a.notify(sdnotify.Stopping())
			fmt.Fprintln(a.stdout, "stopping the control plane (a second SIGINT or SIGTERM kills what still runs at once)")
			return nil
		case r := <-sup.ReplaceRequested():
			identity = sup.About().Identity
			a.notify(sdnotify.Status("stopping every service to run " + r.Path + " in this process's place (an upgrade)"))
			fmt.Fprintf(a.stdout, "stopping the control plane to run %s in this process's place (an upgrade of this node's stratum)\n", r.Path)
			replacement = &r
			return nil
		case <-sup.ExitRequested():
			fmt.Fprintln(a.stdout, "nothing is left to run on this node (its control plane was reset): the supervisor ends")
			return nil
		case <-daily.C:
			a.warnCertsDue(l)
		}
	}
}

// installGate is --install's wait for the restart's gate (check, as
// install --now judges it: restartKeepsQuorum) once the control plane
// serves. A gate that refuses (a member down, another node's join under
// way) is asked again at each tick of every while the supervisor goes on; each new
// refusal is said once on stderr, not at every ask.
type installGate struct {
	a       *app
	every   time.Duration
	check   func(context.Context) (note string, err error)
	refused string // the last refusal said
}

// open asks the gate, and reports whether the handover may begin: then its
// note, if any, and the handover are said on stdout. It is false when ctx
// ended.
func (g *installGate) open(ctx context.Context) bool {
	note, err := g.check(ctx)
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		if msg := err.Error(); msg != g.refused {
			fmt.Fprintf(g.a.stderr, "not yet handed to systemd's stratum.service (--install): %v; this supervisor goes on, and asks again every %s\n", err, g.every)
			g.refused = msg
		}
		return false
	}
	if note != "" {
		fmt.Fprintf(g.a.stdout, "note: %s\n", note)
	}
	fmt.Fprintln(g.a.stdout, "handing this control plane to systemd's stratum.service (--install): its services stop here, then systemctl start runs them under the unit")
	return true
}

// installHandoff makes --install's refusals before anything is brought up or
// joined: not the unit's own supervisor, the operator on (the unit runs
// it), systemd running and loading the unit this writes, and the unit's
// paths (as `stratum install` checks them).
func (a *app) installHandoff(ctx context.Context, verb string, f superviseFlags) (*unitHandoff, error) {
	refuse := func(format string, args ...any) error {
		return refusedf("%s --install refused: "+format+"; nothing was changed", append([]any{verb}, args...)...)
	}
	if inStratumUnit() || os.Getenv(sdnotify.SocketEnv) != "" {
		return nil, refuse("this runs under a service manager already (stratum.service, or another unit's notify socket): --install hands a supervisor started by hand to systemd")
	}
	if !f.operator {
		return nil, refuse("the unit `stratum install` writes runs the operator, and --operator=false was given")
	}
	self, err := unitExecPath(os.Args[0])
	if err != nil {
		return nil, err
	}
	binDir, err := filepath.Abs(f.binDir)
	if err != nil {
		return nil, usagef("--bin-dir: %v", err)
	}
	for _, p := range []string{self, binDir} {
		if c := unitUnsafe(p); c != "" {
			return nil, refuse("%q holds %q, which a systemd ExecStart would split or expand", p, c)
		}
	}
	h := newUnitHandoff(a, verb+" --install", filepath.Join(systemdUnitDirs[0], unitName), self, binDir, 10*time.Minute)
	if err := h.checkSystemd(ctx); err != nil {
		return nil, err
	}
	// The unit is written after every service stopped: a directory that
	// cannot take it, or a stratum.service stratum did not write, is
	// found now.
	if data, err := os.ReadFile(h.unitPath); err == nil && !strings.HasPrefix(string(data), unitHeader) {
		return nil, refuse("%s was not written by `stratum install`, and --install would replace it: move it away, or hand over by hand (Ctrl-C, then systemctl enable --now stratum)", h.unitPath)
	}
	if err := checkDirWritable(filepath.Dir(h.unitPath)); err != nil {
		return nil, refuse("the unit cannot be written to %s: %v", filepath.Dir(h.unitPath), err)
	}
	return h, nil
}

// installNowCommand is the `stratum install --now` that hands a control
// plane of this stratum (self, this binary's path as the unit names it) and
// binDir to systemd's unit: another stratum on PATH may be another release,
// and another --bin-dir another etcd.
func installNowCommand(self, binDir string) string {
	cmd := self + " install --now"
	if binDir != controlplane.DefaultBinDir {
		cmd += " --bin-dir " + binDir
	}
	return cmd
}

// checkDirWritable checks that a file can be made in dir (a read-only or
// missing /etc/systemd/system cannot take the unit).
func checkDirWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".stratum-install-check-")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// finishHandover is --install's end, once this supervisor has stopped every
// service and closed its socket: the unit written, reloaded and enabled,
// then started, as `stratum install --now` does with nothing running.
func (a *app) finishHandover(ctx context.Context, h *unitHandoff) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: a stop signal came while the services stopped to be handed to systemd: this control plane is stopped and the unit was not written; `%s` writes it and starts it", h.command, h.restart)
	}
	if err := writeFileAtomic(h.unitPath, []byte(systemdUnit(h.self, h.binDir)), 0o644); err != nil {
		return fmt.Errorf("%s: every service stopped to be handed to systemd, and %s could not be written: %w; this control plane is stopped: `%s` writes it and starts it once that is mended", h.command, h.unitPath, err, h.restart)
	}
	fmt.Fprintf(a.stdout, "wrote %s (runs %s up --as-supervisor --bin-dir %s)\n", h.unitPath, h.self, h.binDir)
	h.stoppedHere = true
	return h.run(ctx)
}

// recordRelease records in the cluster which release this control plane
// runs (internal/noderelease), for `stratum upgrade plan`: this stratum, the
// etcd and kube-apiserver it runs and where from, and its etcd member's ID.
// It runs beside the supervision, through this node's own apiserver, until
// ctx ends: written once the control plane is up, then renewed every
// releaseRenewEvery, so a record the plan finds older than that is one no
// supervisor stands behind. What it records is read again every
// releaseCheckEvery (its etcd member's ID only when etcd began a new run,
// host.ServiceStatus.Since) and written at once when it changed: a snapshot
// restore or an etcd rejoin run through this supervisor gives its node a
// new member (and a restored cluster holds the records of the snapshot's
// time), and a downgrade another etcd. A write that fails is tried again
// after a wait that doubles from releaseCheckEvery up to releaseRenewEvery,
// logged once when the failures begin and once when a write succeeds again.
func (a *app) recordRelease(ctx context.Context, h host.Host, n *ha.Node, sup *supervisor.Supervisor, st *nodestate.NodeState) {
	var recorded noderelease.Release
	var failing time.Duration // the wait after the last failed write; 0 while writes succeed
	var retryAt time.Time
	// memberID is the member ID last read of etcd, and idRead when the etcd
	// it was read of began its run: kept apart from what was recorded, so
	// an ID read while a write fails is still written by the next attempt.
	var memberID string
	var idRead time.Time
	for {
		r := noderelease.Release{Node: cmp.Or(st.Etcd.Name, st.NodeName), Stratum: Version, APIServer: version.Kubernetes,
			BinDir: sup.About().BinDir, MemberID: memberID, Etcd: recorded.Etcd}
		etcd, serr := sup.ServiceStatus(ctx, ha.ServiceEtcd)
		if serr == nil && etcd.Version != "" {
			r.Etcd = etcd.Version
		}
		renewDue := time.Since(recorded.Since) >= releaseRenewEvery
		// The member ID changes only with a new run of etcd (a restore or
		// a rejoin through this supervisor restarts it), so it is asked of
		// etcd (a TLS dial and two requests) only then, not every
		// releaseCheckEvery for months.
		if memberID == "" || renewDue || etcd.Since.IsZero() || !etcd.Since.Equal(idRead) {
			if m := n.EtcdMemberStatus(ctx, urlHost(st.Etcd.ClientURL)); m.Err == nil && m.ID != 0 {
				memberID, idRead = fmt.Sprintf("%x", m.ID), etcd.Since
				r.MemberID = memberID
			}
		}
		r.Since = recorded.Since
		due := r != recorded || renewDue
		if due && !time.Now().Before(retryAt) {
			r.Since = time.Now()
			err := recordReleaseOnce(ctx, h, r)
			switch {
			case err == nil:
				if failing > 0 {
					a.log.Info("this control plane's release is recorded in the cluster again")
				}
				recorded, failing, retryAt = r, 0, time.Time{}
			case ctx.Err() != nil:
				return
			default:
				if failing == 0 {
					a.log.Warn("this control plane's release was not recorded in the cluster: `stratum upgrade plan` shows its stratum as not known until a write succeeds; tried again with a growing wait", "err", err)
				}
				failing = min(max(2*failing, releaseCheckEvery), releaseRenewEvery)
				retryAt = time.Now().Add(failing)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(releaseCheckEvery):
		}
	}
}

// recordReleaseOnce writes r through this node's own apiserver, bounded.
func recordReleaseOnce(ctx context.Context, h host.Host, r noderelease.Release) error {
	cs, err := localAdminClient(h, 10*time.Second, nil)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return noderelease.Record(rctx, cs, r)
}

// releaseRenewEvery is how often a supervisor renews its record, and
// releaseCheckEvery how often it reads again what it would record (and the
// first wait after a failed write).
const (
	releaseRenewEvery = 10 * time.Minute
	releaseCheckEvery = 10 * time.Second
)

// settle records the supervisor's state (its About) and tells the service
// manager it is ready, saying status: the control plane is up, or the
// supervisor settled into a wait.
func (a *app) settle(sup *supervisor.Supervisor, state, status string) {
	sup.SetState(state)
	a.notify(sdnotify.Ready(status))
}

// finishReplacement is the end of a supervisor that accepted r and has
// stopped every service for it: r run in this process's place
// (replaceProcess), unless a stop signal came meanwhile (ctx ended): the
// node is then stopped, as asked, and nothing new starts.
func (a *app) finishReplacement(ctx context.Context, r supervisor.Replacement, id supervisor.Identity) error {
	// From here a stop signal ends the process (its default action), as
	// it asks: none is caught for a context nobody reads any more.
	signal.Reset(interrupt.Signals()...)
	if ctx.Err() != nil {
		a.dropReplacement(r, "a stop signal came while its services stopped")
		return nil
	}
	return a.replaceProcess(r, id)
}

// replaceProcess runs r in this process's place (execve, through
// Options.Exec), once the supervisor stopped every service for it: the
// process, its PID and what systemd knows of it are kept, and the new
// stratum starts the control plane from the node's state, as at a boot.
// When that exec fails, it runs this stratum again as it was started, so
// the node comes back as it was; it returns only when that fails too.
func (a *app) replaceProcess(r supervisor.Replacement, id supervisor.Identity) error {
	fmt.Fprintf(a.stdout, "every service stopped: running %s\n", strings.Join(r.Args, " "))
	err := a.opts.Exec(r.Path, r.Args, os.Environ())
	// Itself as the unit runs it: a supervisor started by `stratum
	// server` would run its join again.
	self := []string{os.Args[0], "up", "--as-supervisor", "--bin-dir", id.BinDir, "--operator=" + strconv.FormatBool(id.Operator)}
	a.log.Error("could not run the replacement; running this stratum again", "path", r.Path, "err", err, "args", self)
	fmt.Fprintf(a.stdout, "could not run %s (%v): running this stratum (%s) again: %s\n", r.Path, err, Version, strings.Join(self, " "))
	again := a.opts.Exec("", self, os.Environ())
	return fmt.Errorf("the supervisor stopped every service to run %s in its place and could not (%w), nor run itself again (%v): start it again (`systemctl restart stratum`, or `stratum up`)", r.Path, err, again)
}

// dropReplacement says that an accepted replacement is not run (why), and
// releases the node's locks it took.
// beginStop marks the supervisor stopping, and drops an upgrade's
// replacement accepted meanwhile (it holds the node's locks until its exec,
// which will not come), saying why.
func (a *app) beginStop(sup *supervisor.Supervisor, why string) {
	sup.SetState(supervisor.StateStopping)
	select {
	case r := <-sup.ReplaceRequested():
		a.dropReplacement(r, why)
	default:
	}
}

func (a *app) dropReplacement(r supervisor.Replacement, why string) {
	a.log.Warn("the accepted replacement is not run: "+why, "path", r.Path)
	fmt.Fprintf(a.stdout, "not running %s in this process's place: %s\n", r.Path, why)
	if a.replacementLocks != nil {
		a.replacementLocks()
		a.replacementLocks = nil
	}
}

// notify logs err, what a call telling a service manager speaking systemd's
// notify protocol returned (the unit `stratum install` writes is
// Type=notify): sdnotify.Ready once the control plane is up or the
// supervisor has settled into a wait it says (keepVoterAndRetry,
// waitForEtcdData), so `systemctl start` returns then and not at the fork.
// A failure to tell is logged, never a reason to stop.
func (a *app) notify(err error) {
	if err != nil {
		a.log.Warn("the service manager was not told the supervisor's state", "err", err)
	}
}

// errNodeReset ends a supervisor whose node was reset while it retried its
// start: an end, not a failure.
var errNodeReset = errors.New("the node was reset")

// startRetryEvery is how often a supervisor that kept a voter's etcd
// running after a failed start tries the start again.
const startRetryEvery = 10 * time.Second

// keepVoterAndRetry is what the supervisor does when its start (a join's
// start after the member-add, or `stratum up`) failed: it returns failed,
// and the deferred shutdown stops what runs, unless this node's etcd runs
// and its member is a voter among others (ha's OtherVotersCountOnThisMember).
// Stopping that member would take from the cluster's quorum (a first join
// whose kube-apiserver does not come up left a cluster of two voters with
// one stopped: no writes anywhere, the VIP held nowhere, and `stratum reset`
// refused for want of quorum), so etcd keeps running and the start is tried
// again (ha's Restart: `stratum up` on a node with state, never a
// bootstrap) every startRetryEvery until it succeeds, the supervisor is
// stopped (failed is returned) or asked to end by a reset (errNodeReset).
// An attempt holds the node's locks; a maintenance command run during one
// waits for it to end (nodelock.YieldMark) and runs between attempts.
func (a *app) keepVoterAndRetry(ctx context.Context, verb string, n *ha.Node, sup *supervisor.Supervisor, o ha.BootstrapOptions, failed error) (*nodestate.NodeState, error) {
	if ctx.Err() != nil {
		return nil, failed
	}
	if s, err := sup.ServiceStatus(ctx, ha.ServiceEtcd); err != nil || !s.Running {
		return nil, failed
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	counts, voters, err := n.OtherVotersCountOnThisMember(qctx)
	cancel()
	if err != nil || !counts {
		return nil, failed
	}
	fmt.Fprintf(a.stderr, "%s: %v\n", verb, explainHost(failed))
	fmt.Fprintf(a.stdout, "this node's etcd member is one of the cluster's %d voters, and stopping it would take from the cluster's quorum (with two voters, or three with one down, every write would be refused), so etcd keeps running and the start is tried again every %s: fix the cause meanwhile (`stratum status` shows each service, their logs are in %s); SIGINT, SIGTERM or SIGHUP stops everything (a maintenance command run during an attempt waits for it to end, and runs between attempts)\n", voters, startRetryEvery, controlplane.LogDir)
	a.settle(sup, "retrying its start", fmt.Sprintf("the start failed; this node's etcd voter is kept and the start is tried again every %s: %v", startRetryEvery, failed))
	for attempt := 1; ; attempt++ {
		if err := a.nextAttempt(ctx, sup); errors.Is(err, errNodeReset) {
			return nil, err
		} else if err != nil {
			return nil, retriesStopped(failed)
		}
		fmt.Fprintf(a.stdout, "trying the start again (attempt %d) ...\n", attempt)
		st, err := n.Restart(ctx, o, ha.RetriedStartHolder)
		if err == nil {
			fmt.Fprintf(a.stdout, "the start succeeded on attempt %d\n", attempt)
			return st, nil
		}
		if ctx.Err() != nil {
			return nil, retriesStopped(failed)
		}
		failed = err
		fmt.Fprintf(a.stderr, "attempt %d: %v\n", attempt, explainHost(err))
	}
}

// retriesStopped is the error of a supervisor stopped while it retried its
// start: the last attempt's failure, never a refusal (exit 3) even when that
// attempt was refused (a maintenance command held the node's locks), since
// this supervisor ran the node's etcd voter between the attempts, and its
// shutdown stops it.
func retriesStopped(last error) error {
	return ha.Midway(fmt.Errorf("%w; and the supervisor was stopped while it retried its start: this node's etcd, kept running between the attempts, stops with it (`systemctl restart stratum` under its unit, or `stratum up`, starts the control plane again)", last))
}

// waitForEtcdData is what the supervisor does when its start was refused
// because this node's etcd member has served and its data directory holds
// none (ha.ErrEtcdDataMissing: a disk not mounted, or one that died and was
// replaced). Ending then would leave nothing for the commands the refusal
// advises: `stratum etcd rejoin` and `stratum snapshot restore` start etcd
// through this node's supervisor, and under systemd the unit's restarts
// leave one up for a moment in every 5 s, so the rejoin failed after its
// member-add. The supervisor stays up with nothing started, serving its
// control socket, and once the data directory holds data again (a disk
// mounted late, a rejoin or restore run through it) tries the start every
// startRetryEvery until it succeeds. It returns the error of a start that
// fails for another reason (the caller's keepVoterAndRetry judges it),
// missing when the supervisor is stopped, and errNodeReset when a reset asks
// it to end.
func (a *app) waitForEtcdData(ctx context.Context, verb string, h host.Files, n *ha.Node, sup *supervisor.Supervisor, o ha.BootstrapOptions, missing error) (*nodestate.NodeState, error) {
	fmt.Fprintf(a.stderr, "%s: %v\n", verb, missing)
	fmt.Fprintf(a.stdout, "the supervisor stays up with nothing started, so the commands that bring the data back run through it (`stratum etcd rejoin --server IP`; on the only control plane `stratum snapshot restore FILE`); it starts this control plane once the data directory holds data again (looked at every %s); SIGINT, SIGTERM or SIGHUP stops it\n", startRetryEvery)
	a.settle(sup, "waiting for its etcd data", "waiting, with nothing started, for this node's etcd data (`stratum etcd rejoin --server IP` brings it back): "+missing.Error())
	said := ""
	for attempt := 1; ; attempt++ {
		if err := a.nextAttempt(ctx, sup); errors.Is(err, errNodeReset) {
			return nil, err
		} else if err != nil {
			return nil, missing
		}
		if st, err := nodestate.Load(h); err == nil && ha.RefuseMissingEtcdData(h, st) != nil {
			continue
		}
		st, err := n.Restart(ctx, o, ha.WaitedStartHolder)
		switch {
		case err == nil:
			fmt.Fprintf(a.stdout, "the etcd data is back: the start succeeded (attempt %d)\n", attempt)
			return st, nil
		case ctx.Err() != nil:
			return nil, missing
		case errors.Is(err, nodelock.ErrBusy), errors.Is(err, ha.ErrEtcdDataReplacing), errors.Is(err, ha.ErrEtcdDataMissing),
			errors.Is(err, ha.ErrResetUnderWay), errors.Is(err, nodestate.ErrNoState):
			// A rejoin or a restore under way through this supervisor:
			// its end is the start's turn. A reset (under way, or done
			// and its node state gone) asks the supervisor to end.
			if msg := err.Error(); msg != said {
				fmt.Fprintf(a.stderr, "%s: not yet (attempt %d): %v\n", verb, attempt, err)
				said = msg
			}
		default:
			return st, err
		}
	}
}

// nextAttempt waits startRetryEvery for a retried start's next attempt. It
// returns nil when the attempt is due, errNodeReset when a reset asked the
// supervisor to end meanwhile (said on stdout), and ctx's error when the
// supervisor is stopped.
func (a *app) nextAttempt(ctx context.Context, sup *supervisor.Supervisor) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-sup.ExitRequested():
		fmt.Fprintln(a.stdout, "nothing is left to run on this node (its control plane was reset): the supervisor ends")
		return errNodeReset
	case <-time.After(startRetryEvery):
		return nil
	}
}

// etcdSpaceEvery is how often the operator looks at how full the etcd
// members' databases are (ha.EtcdSpaceWarnings), besides at its start.
const etcdSpaceEvery = time.Hour

// certsDueEvery is how often the supervisor looks at its certificates'
// expiry (certsDue), besides at its start.
const certsDueEvery = 24 * time.Hour

// warnCertsDue logs this node's certificates that expire within 30 days (a
// warning), have expired or are not valid yet (an error), with what to do,
// so the journal says so a month ahead.
func (a *app) warnCertsDue(h host.Host) {
	soon, expired, notYet, err := nodeCertsDue(h)
	if err != nil {
		a.log.Warn("the certificates' expiry could not be read", "err", err)
		return
	}
	if len(expired) > 0 {
		a.log.Error("certificates expired: "+strings.Join(expired, "; ")+": "+certsRenewAdvice, "expired", len(expired))
	}
	if len(notYet) > 0 {
		a.log.Error("certificates not valid yet: "+strings.Join(notYet, "; ")+": "+certsClockAdvice, "notYetValid", len(notYet))
	}
	if len(soon) > 0 {
		a.log.Warn("certificates expire soon: "+strings.Join(soon, "; ")+": "+certsRenewAdvice, "soon", len(soon))
	}
}

// forceOnSecondSignal calls force (Supervisor.Force) on the second signal
// that comes on sigs, which receives every SIGINT, SIGTERM and SIGHUP of the
// command: the first ends the command's context and starts the orderly
// shutdown, which may wait out each service's SIGTERM grace (tens of seconds
// in all); an operator who presses Ctrl-C again means now, and should not
// have to kill -9 stratum itself, which would leave its children to their
// parent-death signal and its control socket behind. A SIGHUP after the
// first signal is no second one: a terminal (an SSH session) that closes
// sends two, its shell's to its jobs and the kernel's to the foreground
// process group, and the orderly shutdown it began (the VIP released) must
// go on. end stops watching.
func forceOnSecondSignal(sigs <-chan os.Signal, force func(), w io.Writer) (end func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		seen := 0
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				if seen++; seen < 2 || s == syscall.SIGHUP {
					continue
				}
				fmt.Fprintf(w, "second signal (%s): killing what still runs at once (SIGKILL, no grace); the VIP lease is left to expire\n", s)
				force()
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }); <-ended }
}

// progress prints a long operation's step and waiting lines (ha's
// Env.Progress) on stdout, indented under the command's own output; on
// stderr under -o json or yaml, whose stdout is the document alone (a
// token create -o json meeting an API server that just started would
// print its wait before the document).
func (a *app) progress(line string) {
	w := a.stdout
	if a.machineOutput {
		w = a.stderr
	}
	if w != nil {
		fmt.Fprintf(w, "  %s\n", line)
	}
}

// startProgress prints a line as each service starts, so a long start (etcd
// finding its leader, the apiserver's first readiness) is visible before the
// step's "done" line.
type startProgress struct {
	*supervisor.Supervisor
	w io.Writer
	// every is the pace of the waiting lines (zero: ha.WaitReportEvery).
	every time.Duration
}

func (p startProgress) StartService(ctx context.Context, name string) error {
	if st, err := p.ServiceStatus(ctx, name); err == nil && st.Running {
		return p.Supervisor.StartService(ctx, name)
	}
	fmt.Fprintf(p.w, "  starting %s ...\n", name)
	// A start returns once the service is ready (etcd with a leader, the
	// apiserver's /readyz), which may take up to ServiceReadyWithin: one
	// node of three started after a power cut, its peers still down, waits
	// for a leader. It is said every WaitReportEvery, not only at the end.
	return sayWhile(func(line string) { fmt.Fprintf(p.w, "  %s\n", line) }, cmp.Or(p.every, ha.WaitReportEvery), func(waited time.Duration) string {
		return fmt.Sprintf("waiting for %s to be ready (%s so far, up to %s)", name, waited.Round(time.Second), controlplane.ServiceReadyWithin)
	}, func() error { return p.Supervisor.StartService(ctx, name) })
}

// The environment variables a join's secrets can come from, so they stay out
// of the process list for the life of the supervisor.
const (
	envToken   = "STRATUM_TOKEN"
	envCertKey = "STRATUM_CERTIFICATE_KEY"
)

// secret is a join secret from its flag, its file flag or its environment
// variable, in that order; giving both the flag and the file is refused.
func secret(flag, value, fileFlag, file, env string) (string, error) {
	if value != "" && file != "" {
		return "", bothGiven(flag, fileFlag)
	}
	if value != "" {
		return value, nil
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return "", usagef("%s: %v", fileFlag, err)
		}
		v := strings.TrimSpace(string(data))
		if v == "" {
			return "", usagef("%s %s is empty", fileFlag, file)
		}
		return v, nil
	}
	return strings.TrimSpace(os.Getenv(env)), nil
}

// secretsOutOfArgv runs this `stratum server` again (Options.Exec) when the
// join's token or certificate-key came as flags: the same command line
// without them, each moved into the environment (replacing a variable of
// the same name, which the flag overrode), where only root reads it and
// which the children do not inherit (the re-run unsets them once read). It
// runs before anything is read or changed, so the re-run reads every file
// (--config, --token-file, a pipe among them) and variable itself, once. A
// flag given beside its file is refused first, as secret refuses it. An
// exec that fails (no /proc) leaves the secrets where they are, with a
// warning, and the join goes on. Without Exec, or with no secret in a flag,
// it returns at once.
func (a *app) secretsOutOfArgv(f *serverFlags) error {
	if a.opts.Exec == nil || f.token == "" && f.certKey == "" {
		return nil
	}
	moved := map[string]string{}
	for _, s := range []struct{ flag, value, fileFlag, file, env string }{
		{"--token", f.token, "--token-file", f.tokenFile, envToken},
		{"--certificate-key", f.certKey, "--certificate-key-file", f.certKeyFile, envCertKey},
	} {
		if s.value != "" && s.file != "" {
			return bothGiven(s.flag, s.fileFlag)
		}
		if s.value != "" {
			moved[s.env] = s.value
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); moved[k] == "" {
			env = append(env, kv)
		}
	}
	for k, v := range moved {
		env = append(env, k+"="+v)
	}
	a.log.Debug("running again with the join secrets in the environment, out of the process list")
	argv := append([]string{os.Args[0]}, withoutSecretFlags(a.args)...)
	err := a.opts.Exec("", argv, env)
	a.log.Warn("could not run stratum server again with the join secrets out of its command line: they stay in it, where every local user can read them; pass them with --token-file and --certificate-key-file (or $"+envToken+" and $"+envCertKey+") to avoid that", "err", err)
	return nil
}

// bothGiven is the usage error of a secret given as a flag and a file.
func bothGiven(flag, fileFlag string) error {
	return usagef("%s and %s both given: pass one", flag, fileFlag)
}

// withoutSecretFlags is args without --token and --certificate-key and
// their values (given as "--flag value" or "--flag=value"); arguments after
// "--" are kept as they are.
func withoutSecretFlags(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--" {
			return append(out, args[i:]...)
		}
		name, _, inline := strings.Cut(args[i], "=")
		if name == "--token" || name == "--certificate-key" {
			if !inline {
				i++ // its value
			}
			continue
		}
		out = append(out, args[i])
	}
	return out
}
