package e2e

// Hosts booted as machines of their own: systemd as PID 1 of a container
// (systemd-nspawn --boot) in the host's network namespace, so the unit
// `stratum install` writes runs under a real service manager.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// machineTools are what booting a machine needs: systemd-nspawn (Debian's
// systemd-container) and systemd itself, which the container runs as its
// PID 1 from this machine's /usr; util-linux's unshare and setpriv.
var machineTools = []string{"systemd-nspawn", "/lib/systemd/systemd", "systemctl", "cp", "unshare", "setpriv"}

// machine is the systemd a host was booted into (host.Boot): the
// systemd-nspawn process and the container's PID 1, which every command in
// the host then joins instead of the namespace holder's namespaces.
type machine struct {
	name   string   // nspawn's machine name: the host's namespace name, unique to the run
	shared []string // paths of this machine bound read-only at the same paths inside

	mu        sync.Mutex
	nspawn    *proc
	init      int    // the container's PID 1 as this machine sees it; 0 when not running
	initStart string // its start time (procStartTime), which a reused pid does not share
}

// requireMachines skips the test, or fails it when CI=true, unless this
// machine can boot namespace hosts into systemd (`make e2e-deps` installs
// what is missing).
func requireMachines(t testing.TB) {
	t.Helper()
	requireNamespaces(t)
	var missing []string
	for _, tool := range machineTools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if target, err := os.Readlink("/bin"); err != nil || strings.TrimPrefix(target, "/") != "usr/bin" {
		missing = append(missing, "a merged /usr (/bin a link to usr/bin), which the booted host's root shares")
	}
	if err := probeMachineCgroups(); err != nil {
		missing = append(missing, "a cgroup of its own for each machine: "+err.Error())
	}
	if len(missing) == 0 {
		return
	}
	msg := "missing " + strings.Join(missing, ", ") + " (Debian's systemd and systemd-container; `make e2e-deps` installs them)"
	if os.Getenv("CI") == "true" {
		t.Fatalf("e2e: this machine cannot boot hosts into systemd (CI=true makes that a failure): %s", msg)
	}
	t.Skipf("e2e: skipped: this machine cannot boot hosts into systemd: %s", msg)
}

// Boot boots h as a machine whose PID 1 is systemd, and waits until its boot
// has finished. Its root is h's directory on this machine (its stratum
// directories, /etc/hosts, and a copy of this machine's /etc with no unit
// enabled and no stratum files), with this machine's /usr and each of
// shared bound read-only at the same paths; /run and /tmp are its own, and a
// boot after a power-off finds /run empty, as a reboot does. From here every
// command in h runs in the machine's namespaces (host.Command), with / as
// its directory, and MachinePath reaches the machine's files through its
// PID 1. systemd-nspawn runs as PID 1 of a PID namespace of its own
// (unshare --kill-child), so the container, its services included, dies
// with the test binary, which a control plane under Restart=always would
// otherwise outlive; teardown kills it with the rest of the host's network
// namespace.
func (h *host) Boot(ctx context.Context, t *testing.T, shared ...string) {
	t.Helper()
	h.PowerOn(ctx, t, shared...)
	h.waitBooted(ctx, t)
}

// PowerOn starts h's machine as Boot does and returns once its PID 1 runs,
// without waiting for its boot to finish: machines powered on together boot
// together (a cluster's control planes after a power failure, each of whose
// stratum units waits for the others' etcd members).
func (h *host) PowerOn(ctx context.Context, t *testing.T, shared ...string) {
	t.Helper()
	if h.machine == nil {
		if err := h.makeMachineRoot(); err != nil {
			t.Fatalf("e2e: %s: make the machine's root: %v", h.name, err)
		}
		h.machine = &machine{name: h.ns, shared: shared}
	}
	m := h.machine
	_ = h.removeMachineLeftovers() // a cgroup left is made again below
	args := []string{"unshare", "--pid", "--fork", "--kill-child", "--",
		"systemd-nspawn", "--quiet", "--boot", "--directory=" + h.root, "--machine=" + m.name,
		"--hostname=" + h.name, "--register=no", "--keep-unit", "--console=read-only",
		"--network-namespace-path=" + filepath.Join(netnsDir, h.ns), "--bind-ro=/usr",
		// A machine's root may change its network (the VIP); nspawn
		// grants that only to containers with a network of their own.
		"--capability=CAP_NET_ADMIN"}
	for _, p := range m.shared {
		args = append(args, "--bind-ro="+p)
	}
	cmd := exec.Command(args[0], args[1:]...)
	// The unified cgroup hierarchy, as current distributions boot: on a
	// machine that boots the legacy one, systemd in a container hears of
	// no cgroup running empty and waits out TimeoutStopSec instead.
	cmd.Env = append(os.Environ(), "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1")
	// A cgroup of its own: nspawn --keep-unit puts its container under its
	// own cgroup, so machines started from one test process would share
	// one tree, each one's systemd seeing the others' processes in its
	// units' cgroups (stratum.service's among them).
	cg, err := h.machineCgroup()
	if err != nil {
		t.Fatalf("e2e: %s: %v", h.name, err)
	}
	defer cg.Close()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	p := h.startCmd(args, cmd, false)
	m.mu.Lock()
	m.nspawn, m.init = p, 0
	m.mu.Unlock()
	init, err := waitContainerInit(ctx, p)
	if err != nil {
		t.Fatalf("e2e: %s: boot systemd: %v\n%s", h.name, err, p.Tail(20))
	}
	m.mu.Lock()
	m.init, m.initStart = init, procStartTime(init)
	m.mu.Unlock()
	go func() {
		<-p.Done()
		m.mu.Lock()
		if m.nspawn == p {
			m.init = 0
		}
		m.mu.Unlock()
	}()
}

// waitBooted waits until h's systemd answers and has reached its default
// target.
func (h *host) waitBooted(ctx context.Context, t *testing.T) {
	t.Helper()
	m := h.machine
	m.mu.Lock()
	p, init := m.nspawn, m.init
	m.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithDeadline(ctx, deadline)
		out, _, err := h.Run(cctx, "systemctl", "is-system-running", "--wait")
		cancel()
		state := strings.TrimSpace(out)
		if state == "running" || state == "degraded" {
			if state == "degraded" {
				failed, _, _ := h.Run(ctx, "systemctl", "--failed", "--no-pager", "--plain")
				t.Logf("e2e: %s booted degraded (no unit of stratum's; the copy of this machine's /etc):\n%s", h.name, failed)
			}
			t.Logf("e2e: %s booted into systemd (PID 1 here %d)", h.name, init)
			return
		}
		select {
		case <-p.Done():
			t.Fatalf("e2e: %s: systemd-nspawn exited during the boot: %v\n%s", h.name, p.Wait(), p.Tail(20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e: %s: not booted within a minute (systemctl is-system-running: %q, %v)\n%s", h.name, state, err, p.Tail(20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// booted is h's machine and its systemd-nspawn process, failing t when h
// was never booted.
func (h *host) booted(t *testing.T) (*machine, *proc) {
	t.Helper()
	m := h.machine
	if m == nil {
		t.Fatalf("e2e: %s was never booted", h.name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m, m.nspawn
}

// shutDown powers h's machine off in order, as an operator's `systemctl
// poweroff` does: systemd stops every unit (stratum's supervisor its
// services, newest first), then the container ends. It returns once it has,
// failing t unless it ended cleanly within the bound.
func (h *host) shutDown(ctx context.Context, t *testing.T, within time.Duration) {
	t.Helper()
	m, p := h.booted(t)
	if o, e, err := h.Run(ctx, "systemctl", "poweroff", "--no-block"); err != nil {
		t.Fatalf("e2e: %s: systemctl poweroff: %v\n%s%s", h.name, err, o, e)
	}
	// Its PID 1 ends only once every process of its PID namespace is
	// reaped, those this binary adopted included.
	ns := m.pidNS()
	for deadline := time.After(within); ; {
		reapAdopted(ns, h.nw.isChild)
		select {
		case <-p.Done():
		case <-deadline:
			t.Fatalf("e2e: %s: still running %s after systemctl poweroff\n%s", h.name, within, p.Tail(20))
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	m.mu.Lock()
	m.init = 0
	m.mu.Unlock()
	if err := p.Wait(); err != nil {
		t.Fatalf("e2e: %s: systemd-nspawn after the poweroff: %v\n%s", h.name, err, p.Tail(20))
	}
}

// powerCut ends the machines at once, as a power failure does: each
// container and every process in it are killed together (SIGKILL to each
// nspawn's PID namespace), nothing is stopped in order, and what a
// machine's processes added to its network (the VIP) goes with its power, as
// a boot starts with the configured addresses only. Their disks (each host's
// root) stay as they were.
func powerCut(ctx context.Context, t *testing.T, hosts ...*host) {
	t.Helper()
	type cut struct {
		h                *host
		init             int
		initStart, pidNS string
	}
	var cuts []cut
	for _, h := range hosts {
		m, p := h.booted(t)
		c := cut{h: h, init: m.initPid(), pidNS: m.pidNS()}
		if c.init != 0 {
			c.initStart = procStartTime(c.init)
		}
		if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("e2e: %s: cut the machine's power: %v", h.name, err)
		}
		cuts = append(cuts, c)
	}
	for _, c := range cuts {
		h := c.h
		m, p := h.booted(t)
		<-p.Done()
		m.mu.Lock()
		m.init = 0
		m.mu.Unlock()
		// nspawn dies by its parent-death signal, and its container with
		// it: gone once its PID 1 is.
		for deadline := time.Now().Add(30 * time.Second); c.init != 0 && procStartTime(c.init) == c.initStart; time.Sleep(50 * time.Millisecond) {
			// The dying PID 1 waits until every process of its PID
			// namespace is reaped, those this test process adopted
			// included (a command whose nsenter was killed first:
			// this process is their subreaper).
			reapAdopted(c.pidNS, h.nw.isChild)
			if time.Now().After(deadline) {
				status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.init))
				wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", c.init))
				stack, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stack", c.init))
				ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c.init))
				var in []string
				entries, _ := os.ReadDir("/proc")
				for _, e := range entries {
					pid, err := strconv.Atoi(e.Name())
					if err != nil || pid == c.init {
						continue
					}
					if other, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); other == ns {
						st, ppid, _ := procState(pid)
						cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
						in = append(in, fmt.Sprintf("pid %d state %s ppid %d: %s", pid, st, ppid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
					}
				}
				t.Fatalf("e2e: %s: the machine's PID 1 (%d) still runs 30 s after its power was cut (wchan %s); in its PID namespace:\n%s\n%s\n%s", h.name, c.init, wchan, strings.Join(in, "\n"), status, stack)
			}
		}
		waitNoServers(t, h)
		out, err := ipOut(ctx, "-n", h.ns, "-o", "addr", "show", "dev", hostIf)
		if err != nil {
			t.Fatalf("e2e: %s: its addresses: %v", h.name, err)
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 4 || (f[2] != "inet" && f[2] != "inet6") {
				continue
			}
			if addr, _, _ := strings.Cut(f[3], "/"); addr == h.ip.String() || strings.HasPrefix(addr, "fe80:") {
				continue
			}
			if err := ipRun(ctx, "-n", h.ns, "addr", "del", f[3], "dev", hostIf); err != nil {
				t.Fatalf("e2e: %s: remove %s, which its power took: %v", h.name, f[3], err)
			}
		}
	}
}

// reapAdopted reaps the zombies adoptedIn lists.
func reapAdopted(pidNS string, known func(int) bool) {
	for _, pid := range adoptedIn(pidNS, known) {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// adoptedIn lists the zombies in the PID namespace pidNS (a readlink of
// /proc/<pid>/ns/pid) whose parent is this test process but which it did
// not start (known): orphans it adopted as their subreaper, which nothing
// else waits for.
func adoptedIn(pidNS string, known func(int) bool) []int {
	if pidNS == "" {
		return nil
	}
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || known(pid) {
			continue
		}
		if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); ns != pidNS {
			continue
		}
		if state, ppid, ok := procState(pid); ok && state == "Z" && ppid == os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// pidNS is the PID namespace of machine m (a readlink of
// /proc/<pid>/ns/pid), "" when it does not run.
func (m *machine) pidNS() string {
	init := m.initPid()
	if init == 0 {
		return ""
	}
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	return ns
}

// initPid is the machine's PID 1 as this machine sees it, or 0: also when
// that pid is no longer a PID namespace's first process (the container ended
// and the pid went to another process, whose namespaces a command must not
// join).
func (m *machine) initPid() int {
	m.mu.Lock()
	pid, start := m.init, m.initStart
	m.mu.Unlock()
	if pid == 0 || start == "" || procStartTime(pid) != start {
		return 0
	}
	return pid
}

// machineCgroup makes the cgroup h's machine runs in, on the unified
// hierarchy (cgroup v2), named as its network namespace (so the stale sweep
// knows a dead run's), and opens it for clone3's CLONE_INTO_CGROUP.
func (h *host) machineCgroup() (*os.File, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return nil, fmt.Errorf("the machine's cgroup: %w", err)
	}
	dir := filepath.Join(mount, h.ns)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("make the machine's cgroup: %w", err)
	}
	return os.Open(dir)
}

// cgroup2Mount is where this machine's unified cgroup hierarchy is mounted
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside the legacy one).
func cgroup2Mount() (string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if f, g := strings.Fields(pre), strings.Fields(post); ok && len(f) >= 5 && len(g) > 0 && g[0] == "cgroup2" {
			return f[4], nil
		}
	}
	return "", errors.New("no cgroup2 file system is mounted")
}

// probeMachineCgroups checks that a process can be started into a cgroup
// of its own on the unified hierarchy (clone3's CLONE_INTO_CGROUP: Linux
// 5.7), as Boot starts each machine's nspawn.
func probeMachineCgroups() error {
	mount, err := cgroup2Mount()
	if err != nil {
		return err
	}
	dir := filepath.Join(mount, fmt.Sprintf("%sprobe-%d", nsPrefix, os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make a cgroup: %w", err)
	}
	defer removeCgroupTree(dir)
	fd, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer fd.Close()
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start a process into a cgroup (clone3, Linux 5.7): %w", err)
	}
	return nil
}

// removeCgroupTree removes the cgroup dir and every cgroup below it,
// deepest first (a cgroup goes with rmdir once no process is in it).
func removeCgroupTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil && p != dir && errors.Is(err, fs.ErrNotExist) {
			return nil // a cgroup below went meanwhile
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}

// removeMachineLeftovers removes what systemd-nspawn keeps on this
// machine's /run for h's machine while it runs, which a killed nspawn
// leaves: its propagation directory and the lock on its root's inode; and
// the machine's cgroup tree, whose removal's failure it returns. It is
// called with no nspawn of h's running (before a boot, at teardown).
func (h *host) removeMachineLeftovers() (err error) {
	if h.machine == nil {
		return nil
	}
	if mount, merr := cgroup2Mount(); merr == nil {
		err = removeCgroupTree(filepath.Join(mount, h.ns))
	}
	_ = os.RemoveAll(filepath.Join("/run/systemd/nspawn/propagate", h.machine.name))
	var st unix.Stat_t
	if unix.Stat(h.root, &st) == nil {
		_ = os.Remove(fmt.Sprintf("/run/systemd/nspawn/locks/inode-%d:%d", st.Dev, st.Ino))
	}
	return err
}

// path maps a path as the machine sees it to the same file here: through
// its PID 1's root while it runs, else on its root's disk (its /run then
// gone); shared paths and /usr are the same on both sides.
func (m *machine) path(h *host, p string) string {
	for _, s := range append([]string{"/usr"}, m.shared...) {
		if p == s || strings.HasPrefix(p, s+"/") {
			return p
		}
	}
	if pid := m.initPid(); pid != 0 {
		return fmt.Sprintf("/proc/%d/root%s", pid, p)
	}
	return h.root + p
}

// makeMachineRoot turns h's directory into a root systemd boots: the merged
// /usr's links, empty mount points, and a copy of this machine's /etc with
// its own machine ID, hostname and hosts file, no fstab entries and no unit
// enabled (this machine's services are not the host's).
func (h *host) makeMachineRoot() error {
	r := h.root
	hosts, err := os.ReadFile(r + "/etc/hosts")
	if err != nil {
		return err
	}
	for _, d := range []string{"usr", "dev", "proc", "sys", "run", "tmp", "var/tmp", "root", "etc"} {
		if err := os.MkdirAll(filepath.Join(r, d), 0o755); err != nil {
			return err
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if target, err := os.Readlink("/" + l); err == nil {
			if err := os.Symlink(target, filepath.Join(r, l)); err != nil {
				return err
			}
		}
	}
	// This machine's /etc, but what is stratum's: on a machine that is a
	// control plane itself, its keys, kubeconfigs and unit stay out.
	etc, err := os.ReadDir("/etc")
	if err != nil {
		return err
	}
	for _, e := range etc {
		if e.Name() == "stratum" || e.Name() == "hosts" {
			continue
		}
		if out, err := exec.Command("cp", "-a", "/etc/"+e.Name(), r+"/etc/").CombinedOutput(); err != nil {
			return fmt.Errorf("copy /etc/%s: %w: %s", e.Name(), err, out)
		}
	}
	units, _ := filepath.Glob(r + "/etc/systemd/system/stratum.service*") // the unit and its drop-ins
	for _, u := range units {
		if err := os.RemoveAll(u); err != nil {
			return err
		}
	}
	// systemd-nspawn looks for os-release before /usr is bound.
	osRelease, err := os.ReadFile("/usr/lib/os-release")
	if err != nil {
		return err
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"etc/hosts":      hosts,
		"etc/hostname":   []byte(h.name + "\n"),
		"etc/machine-id": []byte(hex.EncodeToString(id) + "\n"),
		"etc/os-release": osRelease,
		"etc/fstab":      nil,
	} {
		p := filepath.Join(r, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	wants, _ := filepath.Glob(filepath.Join(r, "etc/systemd/system/*.wants"))
	for _, w := range wants {
		if err := os.RemoveAll(w); err != nil {
			return err
		}
	}
	return nil
}

// waitContainerInit waits for the container's PID 1 under p (unshare, then
// systemd-nspawn, PID 1 of the PID namespace unshare made): the process one
// PID namespace below nspawn's whose pid there is 1. nspawn's own helper
// children live in nspawn's namespace and are not taken for it.
func waitContainerInit(ctx context.Context, p *proc) (int, error) {
	for {
		if nspawn := childOf(p.Pid()); nspawn != 0 {
			if outer, err := nsPids(nspawn); err == nil {
				for _, c := range childrenOf(nspawn) {
					if ns, err := nsPids(c); err == nil && len(ns) == len(outer)+1 && ns[len(ns)-1] == 1 {
						return c, nil
					}
				}
			}
		}
		select {
		case <-p.Done():
			return 0, fmt.Errorf("systemd-nspawn exited: %v", p.Wait())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// childOf is a live child of pid, or 0.
func childOf(pid int) int {
	if c := childrenOf(pid); len(c) > 0 {
		return c[0]
	}
	return 0
}

// childrenOf are pid's live children.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ppid, ok := procState(c); ok && ppid == pid && st != "Z" {
			out = append(out, c)
		}
	}
	return out
}

// nsPids is a process's NSpid: its pid in each PID namespace it is in, the
// outermost first.
func nsPids(pid int) ([]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "NSpid:")
		if !ok {
			continue
		}
		var out []int
		for _, f := range strings.Fields(rest) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
		}
		return out, nil
	}
	return nil, fmt.Errorf("pid %d: no NSpid in its status", pid)
}

// pidInMachine is the pid of this machine's process pid as the machine's
// own processes (and its systemd) see it: the last of its NSpid.
func pidInMachine(pid int) (int, error) {
	ns, err := nsPids(pid)
	if err != nil {
		return 0, err
	}
	if len(ns) == 0 {
		return 0, fmt.Errorf("pid %d: an empty NSpid", pid)
	}
	return ns[len(ns)-1], nil
}
