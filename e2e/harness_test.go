package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nsPrefix starts the name of everything a run makes: its host namespaces
// st-e2e-<pid>-<seq>-<host>, its bridge namespace st-e2e-<pid>-<seq>-bridge
// and its run directory $TMPDIR/st-e2e-<pid>-<seq>. The creating pid in the
// name is what the stale sweep checks.
const nsPrefix = "st-e2e-"

// bridgeSuffix ends the bridge namespace's name; no host may be called so.
const bridgeSuffix = "bridge"

// netnsDir is where `ip netns` keeps its named namespaces.
const netnsDir = "/run/netns"

// privateDirs are the directories each host has to itself: bind mounts, in
// the host's mount namespace, of directories under the host's root in the run
// directory. The host also gets its own /etc/hosts naming every host.
var privateDirs = []string{"/etc/stratum", "/var/lib/stratum", "/run/stratum", "/var/log/stratum"}

// testRange is where each run takes its /24: 198.18.0.0/15 is reserved for
// benchmarking networks (RFC 2544), so it is the address of nothing real.
var testRange = netip.MustParsePrefix("198.18.0.0/15")

const (
	firstHostOctet = 11 // the i-th host (from 0) is .11+i
	vipOctet       = 100
	maxHosts       = vipOctet - firstHostOctet
	hostIf         = "eth0" // the host's end of its veth pair
	bridgeIf       = "br0"  // the bridge, in the bridge namespace
)

// runSeq numbers the networks of this process, so two in one test binary
// get distinct names.
var runSeq atomic.Int64

var (
	hostNameRE      = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)
	unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)
)

// network is one run's hosts on one bridge and one /24. Make it with
// newNetwork; it tears itself down in t.Cleanup.
type network struct {
	t      testing.TB
	id     string // <pid>-<seq>
	dir    string // the run directory on the machine
	subnet netip.Prefix
	bridge string // the bridge namespace's name
	hosts  []*host
	lock   *runLock

	mu       sync.Mutex
	closed   bool
	procs    []*proc
	children map[int]bool // pids of our exec.Cmds in the hosts, waited by them
	seq      int

	closeOnce sync.Once
}

// host is one namespace host: a network namespace named ns, plus the mount
// and UTS namespaces of its holder process, which every command joins.
type host struct {
	nw   *network
	name string
	ns   string
	ip   netip.Addr
	port string // the bridge's end of the veth pair, in the bridge namespace
	root string // the host's private directories live under here, on the machine

	holder     *exec.Cmd
	holderDone chan struct{}
	holderErr  error // set before holderDone closes

	// machine, once the host is booted into systemd (Boot), is whose
	// namespaces its commands join instead of the holder's.
	machine *machine
}

// proc is a long-running command started in a host with host.Start. Its
// stdout and stderr go to one log file under the run directory.
type proc struct {
	host *host
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done closes
	// forked: nsenter forked the command into a PID namespace (a booted
	// host's) and waits for it, passing on its exit, not its signals.
	forked bool
}

// newNetwork makes n hosts named cp1..cpN on one bridge, or skips the test
// (fails it under CI=true) when this machine cannot: see requireNamespaces.
func newNetwork(t testing.TB, n int) *network {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("cp%d", i+1)
	}
	return newNetworkNamed(t, names...)
}

// newNetworkNamed makes one host per name (lower-case letters, digits and
// dashes), each with an address on a /24 of 198.18.0.0/15 that no other run
// on this machine uses, .11 for the first host, .12 for the second, ...
// Everything it makes is removed in t.Cleanup, also when the test fails or
// panics; a run killed outright is swept by the next run.
func newNetworkNamed(t testing.TB, names ...string) *network {
	t.Helper()
	requireNamespaces(t)
	if len(names) == 0 || len(names) > maxHosts {
		t.Fatalf("e2e: newNetwork wants 1 to %d hosts, not %d", maxHosts, len(names))
	}
	seen := map[string]bool{}
	for _, name := range names {
		if !hostNameRE.MatchString(name) || name == bridgeSuffix || seen[name] {
			t.Fatalf("e2e: host name %q: want lower-case letters, digits and dashes (at most 32), unique, and not %q", name, bridgeSuffix)
		}
		seen[name] = true
	}
	nw := &network{t: t, id: fmt.Sprintf("%d-%d", os.Getpid(), runSeq.Add(1))}
	nw.dir = runDir(nw.id)
	registerNetwork(nw)
	t.Cleanup(nw.cleanup)
	if err := nw.setup(names); err != nil {
		t.Fatalf("e2e: build the namespace network %s: %v (everything made so far is removed at cleanup)", nw.id, err)
	}
	return nw
}

func runDir(id string) string { return filepath.Join(os.TempDir(), nsPrefix+id) }

func (nw *network) nsName(suffix string) string { return nsPrefix + nw.id + "-" + suffix }

func (nw *network) setup(names []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lk, err := acquireRunLock(ctx)
	if err != nil {
		return err
	}
	nw.lock = lk
	// The setup lock serialises the stale sweep, the choice of subnet and the
	// mountpoints across concurrent runs.
	if err := lk.lockSetup(ctx); err != nil {
		return err
	}
	defer lk.unlockSetup()

	sweepStale(ctx, nw.t.Logf)
	if err := os.MkdirAll(filepath.Join(nw.dir, "logs"), 0o755); err != nil {
		return err
	}
	owner := fmt.Sprintf("%d %s\n", os.Getpid(), procStartTime(os.Getpid()))
	if err := os.WriteFile(filepath.Join(nw.dir, "owner"), []byte(owner), 0o644); err != nil {
		return err
	}
	if nw.subnet, err = pickSubnet(ctx, nw.id); err != nil {
		return err
	}
	for _, d := range privateDirs {
		if err := ensureDir(lk, d); err != nil {
			return fmt.Errorf("make the mountpoint %s: %w", d, err)
		}
	}
	if err := lk.noteNetnsDir(); err != nil {
		return err
	}

	nw.bridge = nw.nsName(bridgeSuffix)
	for _, args := range [][]string{
		{"netns", "add", nw.bridge},
		{"-n", nw.bridge, "link", "set", "lo", "up"},
		{"-n", nw.bridge, "link", "add", bridgeIf, "type", "bridge"},
		{"-n", nw.bridge, "link", "set", bridgeIf, "up"},
	} {
		if err := ipRun(ctx, args...); err != nil {
			return err
		}
	}
	base := nw.subnet.Addr().As4()
	var hostsFile strings.Builder
	hostsFile.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for i, name := range names {
		a := base
		a[3] = byte(firstHostOctet + i)
		h := &host{
			nw:   nw,
			name: name,
			ns:   nw.nsName(name),
			ip:   netip.AddrFrom4(a),
			port: fmt.Sprintf("h%d", i+1),
			root: filepath.Join(nw.dir, "hosts", name),
		}
		nw.hosts = append(nw.hosts, h)
		fmt.Fprintf(&hostsFile, "%s\t%s\n", h.ip, name)
	}
	for _, h := range nw.hosts {
		if err := h.create(ctx, hostsFile.String()); err != nil {
			return fmt.Errorf("host %s: %w", h.name, err)
		}
	}
	nw.t.Logf("e2e: network %s: %d hosts on %s (bridge namespace %s, run directory %s)", nw.id, len(nw.hosts), nw.subnet, nw.bridge, nw.dir)
	return nil
}

func (h *host) create(ctx context.Context, hostsFile string) error {
	for _, args := range [][]string{
		{"netns", "add", h.ns},
		{"-n", h.ns, "link", "set", "lo", "up"},
		{"-n", h.nw.bridge, "link", "add", h.port, "type", "veth", "peer", "name", hostIf, "netns", h.ns},
		{"-n", h.nw.bridge, "link", "set", h.port, "master", bridgeIf, "up"},
		{"-n", h.ns, "addr", "add", netip.PrefixFrom(h.ip, 24).String(), "dev", hostIf},
		{"-n", h.ns, "link", "set", hostIf, "up"},
	} {
		if err := ipRun(ctx, args...); err != nil {
			return err
		}
	}
	for _, d := range privateDirs {
		if err := os.MkdirAll(h.root+d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(h.root+"/etc/hosts", []byte(hostsFile), 0o644); err != nil {
		return err
	}
	return h.startHolder(ctx)
}

// startHolder starts the process whose mount and UTS namespaces are the
// host's: `ip netns exec` (which mounts a sysfs of the host's network
// namespace on /sys), then unshare, then the bind mounts and the hostname,
// then sleep. None of them forks, so the holder's pid is the sleep's.
func (h *host) startHolder(ctx context.Context) error {
	var script strings.Builder
	var args []string
	script.WriteString("set -e\n")
	bind := func(src, dst string) {
		args = append(args, src)
		fmt.Fprintf(&script, "mount --bind \"${%d}\" %s\n", len(args), dst)
	}
	for _, d := range privateDirs {
		bind(h.root+d, d)
	}
	bind(h.root+"/etc/hosts", "/etc/hosts")
	args = append(args, h.name)
	fmt.Fprintf(&script, "printf '%%s' \"${%d}\" > /proc/sys/kernel/hostname\n", len(args))
	script.WriteString("echo ready\nexec sleep infinity\n")

	cmdline := append([]string{"netns", "exec", h.ns, "unshare", "--mount", "--uts", "--propagation", "private",
		"--", "sh", "-c", script.String(), "st-e2e-holder"}, args...)
	cmd := exec.Command("ip", cmdline...)
	// Its own process group keeps a terminal's ^C for the harness's signal
	// handler; Pdeathsig takes it down if the test binary dies outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logPath := filepath.Join(h.nw.dir, "logs", h.name+"-holder.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start the namespace holder: %w", err)
	}
	h.holder = cmd
	h.nw.addChild(cmd.Process.Pid)
	h.holderDone = make(chan struct{})
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- strings.TrimSpace(line) == "ready"
		h.holderErr = cmd.Wait()
		logFile.Close()
		close(h.holderDone)
	}()
	select {
	case ok := <-ready:
		if ok {
			return nil
		}
		<-h.holderDone
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-h.holderDone
	}
	msg, _ := os.ReadFile(logPath)
	return fmt.Errorf("the namespace holder (mounts, hostname) did not come up: %v: %s", h.holderErr, bytes.TrimSpace(msg))
}

// Hosts returns the hosts in the order they were named.
func (nw *network) Hosts() []*host { return nw.hosts }

// Host returns the host called name, or nil.
func (nw *network) Host(name string) *host {
	for _, h := range nw.hosts {
		if h.name == name {
			return h
		}
	}
	return nil
}

// Subnet is the run's /24.
func (nw *network) Subnet() netip.Prefix { return nw.subnet }

// VIP is an address on the subnet that no host has: .100.
func (nw *network) VIP() netip.Addr {
	a := nw.subnet.Addr().As4()
	a[3] = vipOctet
	return netip.AddrFrom4(a)
}

// Dir is the run directory on the machine: logs/ (the output of every
// started command) and hosts/<name>/ (each host's private directories).
func (nw *network) Dir() string { return nw.dir }

// ID is the run's id, <pid>-<seq>, part of every name the run makes.
func (nw *network) ID() string { return nw.id }

// BridgeNS is the name of the namespace holding the bridge.
func (nw *network) BridgeNS() string { return nw.bridge }

// Name is the host's name, which is also its hostname.
func (h *host) Name() string { return h.name }

// IP is the host's address on the subnet.
func (h *host) IP() netip.Addr { return h.ip }

// NetNS is the name of the host's network namespace (for `ip -n`).
func (h *host) NetNS() string { return h.ns }

// Root is the directory on the machine under which the host's private
// directories live: Root()+"/etc/stratum" is its /etc/stratum.
func (h *host) Root() string { return h.root }

// MachinePath maps a path as the host sees it to the same file as the
// machine (and the test) sees it: paths in the private directories and
// /etc/hosts move under Root; any other path is shared and stays.
func (h *host) MachinePath(p string) string {
	p = filepath.Clean(p)
	if h.machine != nil {
		return h.machine.path(h, p)
	}
	if p == "/etc/hosts" {
		return h.root + p
	}
	for _, d := range privateDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return h.root + p
		}
	}
	return p
}

func (h *host) String() string { return h.name }

// Command returns a command that runs args in the host (its network, mount
// and UTS namespaces, in the test's working directory; a booted host's
// machine's, in its /) for callers wanting
// exec.Cmd's control over stdin and environment. ctx may be nil. The command
// is in its own process group and is killed if the test binary dies.
func (h *host) Command(ctx context.Context, args ...string) *exec.Cmd {
	wd, err := os.Getwd()
	if err != nil {
		wd = "/"
	}
	target := 0 // never set up, or a machine not running: nsenter fails, saying so
	ns := []string{"--mount", "--uts", "--net"}
	switch {
	case h.machine != nil:
		// Its PID namespace too, or /proc/self would be nobody's there:
		// nsenter then forks (proc.forked).
		target, wd, ns = h.machine.initPid(), "/", append(ns, "--pid")
	case h.holder != nil:
		target = h.holder.Process.Pid
	}
	full := append(append([]string{"--target", strconv.Itoa(target)}, ns...), "--wdns="+wd, "--")
	if h.machine != nil {
		// nsenter's child, not nsenter, runs the command: it dies with
		// nsenter (which dies with the test binary) all the same.
		full = append(full, "setpriv", "--pdeathsig", "KILL", "--")
	}
	full = append(full, args...)
	var cmd *exec.Cmd
	if ctx != nil {
		cmd = exec.CommandContext(ctx, "nsenter", full...)
	} else {
		cmd = exec.Command("nsenter", full...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A child left running with our pipes must not hold Run up for good.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Run runs a short command in the host and returns its output. The error
// names the host and command and ends with the command's stderr.
func (h *host) Run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	if err := h.usable(); err != nil {
		return "", "", err
	}
	var out, errb bytes.Buffer
	cmd := h.Command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Start()
	if err == nil {
		h.nw.addChild(cmd.Process.Pid)
		err = cmd.Wait()
	}
	if err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg != "" {
			msg = ": " + tail(msg, 10)
		}
		return out.String(), errb.String(), fmt.Errorf("%s: %s: %w%s", h.name, strings.Join(args, " "), err, msg)
	}
	return out.String(), errb.String(), nil
}

func (h *host) usable() error {
	h.nw.mu.Lock()
	closed := h.nw.closed
	h.nw.mu.Unlock()
	if closed {
		return fmt.Errorf("%s: the e2e network %s is torn down", h.name, h.nw.id)
	}
	if h.holder == nil {
		return fmt.Errorf("%s: the host was never set up", h.name)
	}
	return nil
}

// Start starts a long-running command in the host (stratum up, a server),
// its stdout and stderr going to a log file under the run directory. It
// never fails: if the command cannot start, the proc is already done and
// Wait returns why. Teardown kills it (and all it started) if it still runs.
func (h *host) Start(args ...string) *proc {
	return h.startCmd(args, h.Command(nil, args...), h.machine != nil)
}

// startCmd starts cmd, which runs args, as Start does: logged, waited, and
// killed at teardown if it still runs. forked: cmd is nsenter forking args
// into a booted host's PID namespace (proc.forked).
func (h *host) startCmd(args []string, cmd *exec.Cmd, forked bool) *proc {
	nw := h.nw
	nw.mu.Lock()
	nw.seq++
	seq := nw.seq
	nw.mu.Unlock()
	base := "cmd"
	if len(args) > 0 {
		base = unsafeFileChars.ReplaceAllString(filepath.Base(args[0]), "_")
	}
	p := &proc{host: h, args: args, done: make(chan struct{}), forked: forked,
		log: filepath.Join(nw.dir, "logs", fmt.Sprintf("%s-%02d-%s.log", h.name, seq, base))}
	fail := func(err error) *proc {
		p.err = fmt.Errorf("%s: start %s: %w", h.name, strings.Join(args, " "), err)
		close(p.done)
		return p
	}
	if len(args) == 0 {
		return fail(errors.New("no command"))
	}
	if err := h.usable(); err != nil {
		return fail(err)
	}
	f, err := os.Create(p.log)
	if err != nil {
		return fail(err)
	}
	p.cmd = cmd
	if p.cmd.SysProcAttr == nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	nw.mu.Lock()
	if nw.closed {
		nw.mu.Unlock()
		f.Close()
		return fail(errors.New("the e2e network is torn down"))
	}
	err = p.cmd.Start()
	if err == nil {
		nw.procs = append(nw.procs, p)
		nw.addChildLocked(p.cmd.Process.Pid)
	}
	nw.mu.Unlock()
	if err != nil {
		f.Close()
		return fail(err)
	}
	go func() {
		err := p.cmd.Wait()
		f.Close()
		if err != nil {
			err = fmt.Errorf("%s: %s: %w", h.name, strings.Join(args, " "), err)
		}
		p.err = err
		close(p.done)
	}()
	return p
}

// KillAll kills every process in the host but its namespace holder, children
// and grandchildren included: the host crashes, its files and addresses stay.
func (h *host) KillAll(ctx context.Context) error {
	if err := h.usable(); err != nil {
		return err
	}
	killed, err := killNS(ctx, filepath.Join(netnsDir, h.ns), h.holder.Process.Pid)
	reapOrphans(killed, h.nw.isChild)
	return err
}

func (nw *network) addChild(pid int) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.addChildLocked(pid)
}

func (nw *network) addChildLocked(pid int) {
	if nw.children == nil {
		nw.children = map[int]bool{}
	}
	nw.children[pid] = true
}

// isChild says whether pid is one of the network's exec.Cmds, which reap
// their own.
func (nw *network) isChild(pid int) bool {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.children[pid]
}

// AddAddr adds an address (e.g. the VIP as a /32) to the host's interface.
func (h *host) AddAddr(ctx context.Context, p netip.Prefix) error {
	return ipRun(ctx, "-n", h.ns, "addr", "add", p.String(), "dev", hostIf)
}

// DelAddr removes an address AddAddr (or stratum) added.
func (h *host) DelAddr(ctx context.Context, p netip.Prefix) error {
	return ipRun(ctx, "-n", h.ns, "addr", "del", p.String(), "dev", hostIf)
}

// LinkDown takes the host's interface down: the host sees it, and loses its
// subnet route until LinkUp.
func (h *host) LinkDown(ctx context.Context) error {
	return ipRun(ctx, "-n", h.ns, "link", "set", hostIf, "down")
}

// LinkUp brings the host's interface back up (with its subnet route).
func (h *host) LinkUp(ctx context.Context) error {
	return ipRun(ctx, "-n", h.ns, "link", "set", hostIf, "up")
}

// Disconnect unplugs the host from the bridge while its link stays up: a
// silent partition, as a cut cable beyond the switch port looks.
func (h *host) Disconnect(ctx context.Context) error {
	return ipRun(ctx, "-n", h.nw.bridge, "link", "set", h.port, "nomaster")
}

// Reconnect plugs the host back into the bridge.
func (h *host) Reconnect(ctx context.Context) error {
	return ipRun(ctx, "-n", h.nw.bridge, "link", "set", h.port, "master", bridgeIf)
}

// DialContext dials from the host's network namespace, for clients living in
// the test process (a clientv3 or client-go dialer). The address must be an
// IP literal: a name would be resolved on other threads, outside the host.
func (h *host) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	hostPart, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(hostPart); err != nil {
		return nil, fmt.Errorf("%s: dial %s: the e2e dialer wants an IP address, not a name", h.name, address)
	}
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The socket is made on this thread, moved into the host's namespace
		// and back; a thread that cannot be moved back stays locked and dies
		// with the goroutine.
		runtime.LockOSThread()
		c, restored, err := dialInNetns(ctx, filepath.Join(netnsDir, h.ns), network, address)
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// dialInNetns dials from the network namespace at nsPath on the calling
// (locked) thread; restored is false when the thread is left in it.
func dialInNetns(ctx context.Context, nsPath, network, address string) (c net.Conn, restored bool, err error) {
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, err
	}
	defer unix.Close(orig)
	target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, err
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("enter %s: %w", nsPath, err)
	}
	var d net.Dialer
	c, dialErr := d.DialContext(ctx, network, address)
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		if c != nil {
			c.Close()
		}
		return nil, false, fmt.Errorf("leave %s: %w", nsPath, err)
	}
	return c, true, dialErr
}

// Pid is the command's pid: nsenter execs it, so it is the command's own,
// but on a booted host, where nsenter forks it, nsenter's child; 0 before
// that child exists and once the command has exited.
func (p *proc) Pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	if !p.forked {
		return p.cmd.Process.Pid
	}
	select {
	case <-p.done: // nsenter reaped: its pid may be another's now
		return 0
	default:
		return childOf(p.cmd.Process.Pid)
	}
}

// Signal sends sig to the command (not to its children). On a booted host
// it waits, a few seconds at most, for nsenter to have forked the command.
func (p *proc) Signal(sig os.Signal) error {
	if p.cmd == nil || p.cmd.Process == nil {
		return os.ErrProcessDone
	}
	if !p.forked {
		return p.cmd.Process.Signal(sig)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if pid := p.Pid(); pid != 0 {
			return syscall.Kill(pid, sig.(syscall.Signal))
		}
		select {
		case <-p.done:
			return os.ErrProcessDone
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: nsenter has not started the command within 5 s", p.host.name)
		}
	}
}

// Wait waits for the command to exit and returns its error (nil on exit 0).
// Any number of callers may wait.
func (p *proc) Wait() error {
	<-p.done
	return p.err
}

// Done is closed when the command has exited.
func (p *proc) Done() <-chan struct{} { return p.done }

// Kill kills the command with SIGKILL and waits for it. Its children live
// on (host.KillAll takes them too).
func (p *proc) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-p.done
	return nil
}

// LogPath is the file holding the command's stdout and stderr.
func (p *proc) LogPath() string { return p.log }

// Output is what the command has written so far.
func (p *proc) Output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// Tail is the last n lines of Output.
func (p *proc) Tail(n int) string { return tail(p.Output(), n) }

func (p *proc) String() string {
	return fmt.Sprintf("%s: %s (pid %d)", p.host.name, strings.Join(p.args, " "), p.Pid())
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ipRun runs ip on the machine with args.
func ipRun(ctx context.Context, args ...string) error {
	_, err := ipOut(ctx, args...)
	return err
}

func ipOut(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ip", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}
