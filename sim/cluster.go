// Package sim is the simulator: simulated control-plane hosts, each with its
// own loopback address and root directory, running real servers (embedded
// etcd members or etcd processes, real kube-apiservers through envtest, a
// leader-elected VIP), with faults injected one method each and every action
// recorded in an event log.
//
// The ha code runs on a simulated host through the host.Host a Handle
// implements, exactly as it runs on host.Local in production.
package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"stratum.dev/stratum/internal/clusteradmins"
	"stratum.dev/stratum/internal/discovery"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// Config says what cluster to simulate.
type Config struct {
	// ControlPlanes is how many hosts are brought up as a running cluster
	// (etcd members from the start). Default 3.
	ControlPlanes int
	// SpareHosts are further hosts with nothing on them: join targets.
	SpareHosts int
	// Fresh lays out no control plane: every host starts empty, and the
	// first control plane is made by stratum's own bring-up (ha's Up) on a
	// host's Handle, as `stratum sim up` does. ControlPlanes is then ignored.
	Fresh bool
	// APIServers runs a kube-apiserver on each control plane.
	APIServers bool
	// WithoutAPIServer names control planes that start (and reboot) without
	// the apiserver APIServers runs on the others: hosts a test never reads
	// through, whose apiserver would only load the machine (after a
	// snapshot restore, a stale member's apiserver retries a leaderless etcd
	// for the rest of the test). stratum's own starts there (a join, a
	// rejoin, `up`) still start one, and a reboot after one starts it
	// again. Not the first control plane, which publishes cluster-info; not
	// with VIP.
	WithoutAPIServer []string
	// VIP runs the VIP and a kube-vip candidate on each control plane
	// (requires APIServers).
	VIP bool
	// ControllerManager runs kube-controller-manager (garbage collector and
	// token cleaner) on the first control plane (requires APIServers).
	ControllerManager bool
	// EtcdVersions runs the named hosts' etcd as a separate process of the
	// given version (version.Etcd or version.EtcdPrevious) instead of embedded.
	EtcdVersions map[string]string
	// Dir is where host roots live; "" makes a temporary one, removed on Close.
	Dir string
	// EventsTo, when set, receives each event as it is recorded.
	EventsTo io.Writer
	// Cluster network; defaults as a stock cluster's.
	PodCIDR, ServiceCIDR, ClusterDomain string
	// Etcd is the members' raft timing; zero is DefaultEtcdTiming.
	Etcd EtcdTiming
}

func (cfg *Config) defaults() error {
	if cfg.Fresh {
		cfg.ControlPlanes = 0
		if cfg.SpareHosts < 1 {
			return errors.New("sim: a fresh cluster needs at least one spare host")
		}
		if cfg.ControllerManager {
			return errors.New("sim: a fresh cluster starts no controller manager; start it on a host once it runs an apiserver")
		}
	} else if cfg.ControlPlanes == 0 {
		cfg.ControlPlanes = 3
	}
	if cfg.ControlPlanes < 0 || cfg.ControlPlanes+cfg.SpareHosts > 200 || !cfg.Fresh && cfg.ControlPlanes < 1 {
		return fmt.Errorf("sim: %d control planes and %d spare hosts is out of range", cfg.ControlPlanes, cfg.SpareHosts)
	}
	if (cfg.VIP || cfg.ControllerManager) && !cfg.APIServers {
		return errors.New("sim: the VIP and the controller manager need APIServers")
	}
	for _, name := range cfg.WithoutAPIServer {
		switch {
		case !cfg.APIServers || cfg.VIP:
			return fmt.Errorf("sim: WithoutAPIServer %s needs APIServers and no VIP (kube-vip follows its host's apiserver)", name)
		case name == "cp1":
			return errors.New("sim: the first control plane publishes cluster-info; it cannot be WithoutAPIServer")
		case !isControlPlaneName(name, cfg.ControlPlanes):
			return fmt.Errorf("sim: WithoutAPIServer %s is not one of the %d control planes", name, cfg.ControlPlanes)
		}
	}
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = "10.244.0.0/16"
	}
	if cfg.ServiceCIDR == "" {
		cfg.ServiceCIDR = "10.96.0.0/12"
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	if cfg.Etcd == (EtcdTiming{}) {
		cfg.Etcd = DefaultEtcdTiming
	}
	if cfg.Etcd.HeartbeatMs < 1 || cfg.Etcd.ElectionMs < 5*cfg.Etcd.HeartbeatMs {
		return fmt.Errorf("sim: etcd timing %+v: the heartbeat must be at least 1 ms and the election timeout at least 5 heartbeats", cfg.Etcd)
	}
	return nil
}

// isControlPlaneName: name is one of the first n hosts' (cp1 to cpN).
func isControlPlaneName(name string, n int) bool {
	for i := 1; i <= n; i++ {
		if name == "cp"+strconv.Itoa(i) {
			return true
		}
	}
	return false
}

// Cluster is a running simulation.
type Cluster struct {
	cfg         Config
	dir         string
	ownDir      bool
	hosts       []*Host
	shared      *pki.Shared
	events      *EventLog
	network     network
	checkpoints checkpoints
	vip         vip
	// subnet is the cluster's 127.a.b.0/24, held in subnetsInUse until Close.
	subnet netip.Addr

	stopTick  chan struct{}
	closeOnce sync.Once
}

// New builds and starts a simulated cluster: hosts on a free loopback /24, one
// cluster's PKI, the first ControlPlanes hosts laid out as `stratum up` lays
// out a control plane (shared CAs, leaves, kubeconfigs, node state) and their
// services started; with VIP, it returns once a control plane holds the VIP.
// On error everything started is stopped.
func New(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	ReapOrphans()
	QuietKlog()
	c := &Cluster{cfg: cfg, dir: cfg.Dir, events: newEventLog(cfg.EventsTo), stopTick: make(chan struct{})}
	c.network = network{c: c, isolated: map[string]bool{}, cut: map[[2]string]bool{}}
	c.checkpoints = checkpoints{c: c, at: map[checkpointKey]*armed{}, seen: map[string]int{}}
	if c.dir == "" {
		c.dir, err = os.MkdirTemp("", "stratum-sim-")
		if err != nil {
			return nil, err
		}
		c.ownDir = true
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	n := cfg.ControlPlanes + cfg.SpareHosts
	base, err := freeSubnet(n)
	if err != nil {
		return nil, err
	}
	c.subnet = base
	c.vip.addr = base.Next().Next().Next().Next().Next().Next().Next().Next().Next().Next() // .10
	ip := c.vip.addr
	for i := 1; i <= n; i++ {
		ip = ip.Next()
		name := "cp" + strconv.Itoa(i)
		root := filepath.Join(c.dir, name)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
		files, disk := c.newHostFiles(name, root)
		h := &Host{cluster: c, name: name, ip: ip, files: files, disk: disk, etcdVersion: cfg.EtcdVersions[name]}
		c.hosts = append(c.hosts, h)
	}
	c.events.Record("", "action", "cluster of %d hosts on %s/24, VIP %s, in %s", n, base, c.vip.addr, c.dir)
	if c.shared, err = pki.NewShared(time.Now()); err != nil {
		return nil, err
	}
	cps := c.hosts[:cfg.ControlPlanes]
	var initial []string
	for _, h := range cps {
		initial = append(initial, h.name+"="+h.PeerURL())
	}
	for _, h := range cps {
		if err := c.layOut(h, strings.Join(initial, ","), "new"); err != nil {
			return nil, err
		}
	}
	go c.tick()
	if cfg.Fresh {
		if cfg.VIP {
			if err := c.startVIP(); err != nil {
				return nil, fmt.Errorf("sim: VIP %s: %w", c.vip.addr, err)
			}
		}
		return c, nil
	}
	start := time.Now()
	// Launch one after another (each finds the ones before it serving), then
	// wait for all: a new cluster is ready only once a quorum has started.
	waits := map[*Host]func(context.Context) error{}
	for _, h := range cps {
		wait, err := h.launchEtcd(ctx)
		if err != nil {
			return nil, err
		}
		waits[h] = wait
	}
	if err := c.each(ctx, cps, func(ctx context.Context, h *Host) error { return waits[h](ctx) }); err != nil {
		return nil, err
	}
	c.events.Record("", "action", "etcd cluster of %d ready in %s", len(cps), time.Since(start).Round(time.Millisecond))
	if cfg.VIP {
		if err := c.startVIP(); err != nil {
			return nil, fmt.Errorf("sim: VIP %s: %w", c.vip.addr, err)
		}
	}
	if cfg.APIServers {
		var withAPIServer []*Host
		for _, h := range cps {
			if h.startsAPIServer() {
				withAPIServer = append(withAPIServer, h)
			}
		}
		if err := c.each(ctx, withAPIServer, func(ctx context.Context, h *Host) error { return h.StartAPIServer(ctx) }); err != nil {
			return nil, err
		}
		c.events.Record("", "action", "%d apiservers ready %s after start", len(withAPIServer), time.Since(start).Round(time.Millisecond))
		// What `stratum up` binds before its admin credential can act, and
		// publishes for joiners: the CA in cluster-info.
		adminCfg, err := cps[0].AdminConfig()
		if err != nil {
			return nil, err
		}
		if _, err := clusteradmins.Ensure(ctx, adminCfg, func() (*pki.CA, error) { return c.shared.Cluster, nil }, time.Now()); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		admin, err := kubernetes.NewForConfig(adminCfg)
		if err != nil {
			return nil, err
		}
		server := cps[0].APIServerURL()
		if cfg.VIP {
			server = c.VIPURL()
		}
		if err := discovery.Publish(ctx, admin, server, c.shared.Cluster.CertPEM); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
	}
	if cfg.VIP && len(cps) > 0 {
		for _, h := range cps {
			if err := h.StartVIPCandidate(); err != nil {
				return nil, err
			}
		}
		// A cluster with a VIP is started once the VIP answers: until a
		// candidate wins the lease the forwarder closes every connection,
		// and a client's first request (a POST, which client-go does not
		// retry) would meet a reset.
		holder, err := c.WaitVIP(ctx)
		if err != nil {
			return nil, fmt.Errorf("sim: VIP %s: %w", c.vip.addr, err)
		}
		c.events.Record("", "action", "VIP %s held by %s %s after start", c.vip.addr, holder.name, time.Since(start).Round(time.Millisecond))
	}
	if cfg.ControllerManager {
		if err := cps[0].StartControllerManager(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

var klogOnce sync.Once

// QuietKlog keeps client-go's leader election (the VIP candidates) from
// writing to the test output; the event log says what happened. New calls
// it; only its first call in a process acts, so a caller that routes klog
// itself (the stratum CLI at --log-level debug) calls it first, and its
// route then stays.
func QuietKlog() {
	klogOnce.Do(func() {
		// A logger replaces every klog output, stderr for errors included
		// (LogToStderr(false) alone still sends errors there).
		klog.SetLogger(logr.Discard())
	})
}

// each runs f on every host concurrently and returns the first error.
func (c *Cluster) each(ctx context.Context, hosts []*Host, f func(context.Context, *Host) error) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, h := range hosts {
		g.Go(func() error { return f(gctx, h) })
	}
	return g.Wait()
}

// layOut writes what `stratum up` leaves on a control plane: the shared CAs,
// the node's leaves, its kubeconfigs and its node state.
func (c *Cluster) layOut(h *Host, initialCluster, state string) error {
	files := c.shared.Files()
	sans := &pki.APISANs{IPs: []net.IP{net.IP(c.vip.addr.AsSlice()), firstServiceIP(c.cfg.ServiceCIDR)}}
	leaves, err := pki.NodeLeaves(c.shared, h.name, net.IP(h.ip.AsSlice()), sans, time.Now())
	if err != nil {
		return err
	}
	for name, data := range leaves {
		files[name] = data
	}
	for name, data := range files {
		if err := h.files.WriteFile(version.PKIFile(name), data, 0o600); err != nil {
			return err
		}
	}
	server := h.APIServerURL()
	if c.cfg.VIP {
		server = c.VIPURL()
	}
	kcs, err := kubeconfig.NodeKubeconfigs(c.shared.Cluster, server, time.Now())
	if err != nil {
		return err
	}
	for name, data := range kcs {
		if err := h.files.WriteFile(version.Kubeconfig(name), data, 0o600); err != nil {
			return err
		}
	}
	st := &nodestate.NodeState{
		Role: nodestate.RoleControlPlane, NodeName: h.name, NodeIP: h.ip.String(), Server: server,
		PodCIDR: c.cfg.PodCIDR, ServiceCIDR: c.cfg.ServiceCIDR, ClusterDomain: c.cfg.ClusterDomain,
		Etcd: nodestate.Etcd{Name: h.name, PeerURL: h.PeerURL(), ClientURL: h.ClientURL(),
			InitialCluster: initialCluster, InitialClusterState: state},
	}
	if c.cfg.VIP {
		st.VIP = nodestate.VIP{Address: c.vip.addr.String(), Interface: "lo"}
	}
	return nodestate.Save(h.files, st)
}

func firstServiceIP(cidr string) net.IP {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil
	}
	return net.IP(p.Masked().Addr().Next().AsSlice())
}

// subnetsInUse are the /24s this process's open clusters hold. The probe in
// freeSubnet alone cannot see them: a fresh cluster, or a spare host waiting
// to join, listens on nothing yet, and a parallel test's cluster could be
// given the same addresses.
var subnetsInUse = struct {
	sync.Mutex
	m map[netip.Addr]bool
	// locks are the /24s' lock files (subnetLockDir), flock'ed while held:
	// how another process's clusters see them before they listen.
	locks map[netip.Addr]*os.File
}{m: map[netip.Addr]bool{}, locks: map[netip.Addr]*os.File{}}

// subnetLockDir holds a lock file per /24 a simulated cluster of any process
// on this machine holds: `make test` runs test binaries at once (./ha beside
// the CLI's and the simulator's), and a /24 one of them drew but does not
// listen on yet was free to the others' probe. A fixed path, not TMPDIR,
// which a test binary may set to a directory of its own.
const subnetLockDir = "/tmp/stratum-sim-subnets"

// lockSubnet takes base's lock file without waiting; false when another
// process holds it. A lock that cannot be taken for another reason (no /tmp)
// is not in the way: the probe still judges.
func lockSubnet(base netip.Addr) (*os.File, bool) {
	if err := os.MkdirAll(subnetLockDir, 0o1777); err != nil {
		return nil, true
	}
	f, err := os.OpenFile(filepath.Join(subnetLockDir, base.String()), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, !errors.Is(err, syscall.EWOULDBLOCK)
	}
	return f, true
}

// pickSubnet draws a candidate 127.a.b.0/24; a test replaces it.
var pickSubnet = func() netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(64 + rand.IntN(180)), byte(rand.IntN(256)), 0})
}

// releaseSubnet hands a closed cluster's /24 back.
func releaseSubnet(base netip.Addr) {
	subnetsInUse.Lock()
	defer subnetsInUse.Unlock()
	delete(subnetsInUse.m, base)
	if f := subnetsInUse.locks[base]; f != nil {
		f.Close()
		delete(subnetsInUse.locks, base)
	}
}

// freeSubnet picks 127.a.b.0/24 at random until one is not held by another
// cluster of this process and every address the cluster will bind (hosts
// from .11, the VIP at .10) is free on the standard ports. Clusters of this
// process never share a /24; one of another process is seen only once it
// listens, so each /24 is also locked across processes (lockSubnet): two
// test binaries drawing the same /24 at once do not both take it. The /24
// is held until releaseSubnet.
func freeSubnet(hosts int) (netip.Addr, error) {
	subnetsInUse.Lock()
	defer subnetsInUse.Unlock()
	for try := 0; try < 50; try++ {
		base := pickSubnet()
		if subnetsInUse.m[base] {
			continue
		}
		lock, free := lockSubnet(base)
		if !free {
			continue
		}
		ok := true
		ip := base
		for i := 0; i < 10; i++ {
			ip = ip.Next()
		}
		for i := 0; i <= hosts && ok; i++ {
			for _, port := range []int{version.EtcdClientPort, version.EtcdPeerPort, version.APIServerPort} {
				ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(port)))
				if err != nil {
					ok = false
					break
				}
				ln.Close()
			}
			ip = ip.Next()
		}
		if ok {
			subnetsInUse.m[base] = true
			if lock != nil {
				subnetsInUse.locks[base] = lock
			}
			return base, nil
		}
		if lock != nil {
			lock.Close()
		}
	}
	return netip.Addr{}, errors.New("sim: no free loopback /24 found in 50 tries")
}

// tick re-applies the network's cuts, since a membership change adds peers to
// a member's transport unpaused.
func (c *Cluster) tick() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.stopTick:
			return
		case <-t.C:
			c.applyNetwork()
		}
	}
}

// Hosts are every host, control planes first.
func (c *Cluster) Hosts() []*Host { return append([]*Host(nil), c.hosts...) }

// Host is the named host, nil when there is none.
func (c *Cluster) Host(name string) *Host {
	for _, h := range c.hosts {
		if h.name == name {
			return h
		}
	}
	return nil
}

// Events is the simulation's event log.
func (c *Cluster) Events() *EventLog { return c.events }

// Shared is the cluster's shared PKI (what a join downloads).
func (c *Cluster) Shared() *pki.Shared { return c.shared }

// Config is the configuration the cluster runs with, defaults filled in.
func (c *Cluster) Config() Config { return c.cfg }

// Dir is where the host roots live.
func (c *Cluster) RootDir() string { return c.dir }

// Close stops everything the simulation started (kube-vip candidates,
// controller managers and apiservers first, then etcd members) and removes
// the host roots it created. Safe to call more than once.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		close(c.stopTick)
		var wg sync.WaitGroup
		for _, h := range c.hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.StopVIPCandidate()
				h.StopControllerManager()
				// Hard, as for etcd below: nothing is left to serve.
				if a := h.takeAPIServer(); a != nil {
					a.kill()
					c.events.Record(h.name, "service", "cluster close: kube-apiserver killed%s", a.usage())
				}
			}()
		}
		wg.Wait()
		c.vip.close()
		for _, h := range c.hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Hard: a teardown has no data to keep and no one to hand
				// leadership to.
				h.stopEtcd(true)
			}()
		}
		wg.Wait()
		c.events.Record("", "action", "cluster closed")
		if c.subnet.IsValid() {
			releaseSubnet(c.subnet)
		}
		if c.ownDir {
			os.RemoveAll(c.dir)
		}
	})
}
