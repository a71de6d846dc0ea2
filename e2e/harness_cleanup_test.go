package e2e

// The harness's preflight, teardown, stale sweep, subnet choice and the
// lock that coordinates concurrent runs on one machine.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// preflight is the verdict of requireNamespaces' checks, made once.
var preflight struct {
	once    sync.Once
	missing string
}

// requireNamespaces skips the test, or fails it when CI=true, unless this
// machine can make namespace hosts: root, the tools (ip, unshare, nsenter,
// mount, sh, sleep), and network, mount and UTS namespaces with a bridge and
// a veth pair in them.
func requireNamespaces(t testing.TB) {
	t.Helper()
	preflight.once.Do(func() { preflight.missing = checkNamespaces() })
	if preflight.missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("e2e: this machine cannot run the namespace hosts (CI=true makes that a failure): %s", preflight.missing)
	}
	t.Skipf("e2e: skipped: this machine cannot run the namespace hosts: %s", preflight.missing)
}

func checkNamespaces() string {
	if runtime.GOOS != "linux" {
		return "they need Linux, this is " + runtime.GOOS
	}
	if os.Geteuid() != 0 {
		return fmt.Sprintf("they need root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and this runs as uid %d; run the tests as root", os.Geteuid())
	}
	var missing []string
	for _, tool := range []string{"ip", "unshare", "nsenter", "mount", "mountpoint", "sh", "sleep"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return "missing tools: " + strings.Join(missing, ", ") + " (iproute2, util-linux, coreutils)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Everything the probe makes dies with its namespaces when it exits.
	probe := exec.CommandContext(ctx, "unshare", "--net", "--mount", "--uts", "--propagation", "private", "--",
		"sh", "-c", `set -e
ip link set lo up
ip link add name br0 type bridge
ip link add name pv0 type veth peer name pv1
ip link set pv0 master br0
mount --bind /tmp /tmp
printf st-e2e-probe > /proc/sys/kernel/hostname`)
	if out, err := probe.CombinedOutput(); err != nil {
		return fmt.Sprintf("network, mount and UTS namespaces with a bridge and a veth pair are unavailable (unshare probe: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "list").CombinedOutput(); err != nil {
		return fmt.Sprintf("`ip netns` does not work: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return ""
}

// liveNets holds this process's networks not yet torn down: for the signal
// handler, and for the sweep, to which a namespace carrying this pid but no
// live run id is a leftover.
var liveNets struct {
	sync.Mutex
	byID    map[string]*network
	handler sync.Once
}

func registerNetwork(nw *network) {
	liveNets.handler.Do(func() {
		installSignalTeardown()
		// Orphans of the hosts' processes come to the test binary, which
		// reaps them at teardown, rather than to an init that may not.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	})
	liveNets.Lock()
	defer liveNets.Unlock()
	if liveNets.byID == nil {
		liveNets.byID = map[string]*network{}
	}
	liveNets.byID[nw.id] = nw
}

func unregisterNetwork(nw *network) {
	liveNets.Lock()
	defer liveNets.Unlock()
	delete(liveNets.byID, nw.id)
}

func isLiveRun(id string) bool {
	liveNets.Lock()
	defer liveNets.Unlock()
	return liveNets.byID[id] != nil
}

// installSignalTeardown tears every live network down when the test binary
// is interrupted or terminated, then dies of the same signal. (A binary
// killed outright, or one panicking on -timeout, leaves its namespaces to
// the next run's sweep; its direct children die with it through Pdeathsig.)
func installSignalTeardown() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		sig := <-ch
		liveNets.Lock()
		var nets []*network
		for _, nw := range liveNets.byID {
			nets = append(nets, nw)
		}
		liveNets.Unlock()
		for _, nw := range nets {
			for _, err := range nw.teardown(nil) {
				fmt.Fprintf(os.Stderr, "e2e: teardown of %s on %v: %v\n", nw.id, sig, err)
			}
		}
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		time.Sleep(time.Second)
		os.Exit(2)
	}()
}

// cleanup is the network's t.Cleanup: on failure it logs the tail of every
// command's output first; a leftover is a test error.
func (nw *network) cleanup() {
	var dump func()
	if nw.t.Failed() {
		dump = nw.dumpLogs
	}
	for _, err := range nw.teardown(dump) {
		nw.t.Errorf("e2e: teardown of network %s: %v", nw.id, err)
	}
}

// dumpLogs logs the last lines of every started command's output, of the
// namespace holders' stderr and of each host's /var/log/stratum files.
func (nw *network) dumpLogs() {
	const n = 40
	nw.mu.Lock()
	procs := slices.Clone(nw.procs)
	nw.mu.Unlock()
	for _, p := range procs {
		nw.t.Logf("e2e: %s exited (%v); last %d lines of %s:\n%s", p, p.err, n, p.log, p.Tail(n))
	}
	for _, h := range nw.hosts {
		if b, err := os.ReadFile(filepath.Join(nw.dir, "logs", h.name+"-holder.log")); err == nil && len(b) > 0 {
			nw.t.Logf("e2e: %s's namespace holder said:\n%s", h.name, tail(string(b), n))
		}
		logDir := h.root + "/var/log/stratum"
		_ = filepath.WalkDir(logDir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if b, err := os.ReadFile(path); err == nil {
				nw.t.Logf("e2e: %s:%s, last %d lines:\n%s", h.name, strings.TrimPrefix(path, h.root), n, tail(string(b), n))
			}
			return nil
		})
	}
}

// teardown kills every process in the run's namespaces (holders, started
// commands and whatever they started), deletes the namespaces (which takes
// the bridge and veths along), removes the run directory and, as the last
// run out, the mountpoints the harness made. It runs once; later calls
// return nil. dump, if set, runs after the processes are dead and before the
// run directory goes.
func (nw *network) teardown(dump func()) (errs []error) {
	nw.closeOnce.Do(func() {
		defer unregisterNetwork(nw)
		nw.mu.Lock()
		nw.closed = true
		procs := slices.Clone(nw.procs)
		nw.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		// A machine's dying PID 1 waits until every process of its PID
		// namespace is reaped, those this process adopted as their
		// subreaper included (a kubectl whose nsenter a cancelled probe
		// killed): they are reaped during the waits below.
		var machineNS []string
		for _, h := range nw.hosts {
			if h.machine != nil {
				machineNS = append(machineNS, h.machine.pidNS())
			}
		}
		reapAdoptedInMachines := func() {
			for _, ns := range machineNS {
				reapAdopted(ns, nw.isChild)
			}
		}
		names := runNamespaces(nw.id)
		var killed []int
		for _, ns := range names {
			k, err := killNS(ctx, filepath.Join(netnsDir, ns), 0)
			killed = append(killed, k...)
			if err != nil {
				errs = append(errs, err)
			}
		}
		for _, p := range procs {
			if err := waitDone(p.done, 10*time.Second, reapAdoptedInMachines); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p, err))
			}
		}
		for _, h := range nw.hosts {
			if h.holderDone != nil {
				if err := waitDone(h.holderDone, 10*time.Second, reapAdoptedInMachines); err != nil {
					errs = append(errs, fmt.Errorf("%s's namespace holder: %w", h.name, err))
				}
			}
		}
		reapOrphans(killed, nw.isChild)
		for _, h := range nw.hosts {
			if err := h.removeMachineLeftovers(); err != nil { // its nspawn is dead by now
				errs = append(errs, fmt.Errorf("%s's machine: %w", h.name, err))
			}
		}
		for _, ns := range names {
			if err := ipRun(ctx, "netns", "del", ns); err != nil {
				errs = append(errs, err)
			}
		}
		if left := runNamespaces(nw.id); len(left) > 0 {
			errs = append(errs, fmt.Errorf("namespaces left behind: %s", strings.Join(left, " ")))
		}
		if dump != nil {
			dump()
		}
		if nw.dir != "" {
			if err := removeRunDir(nw.dir); err != nil {
				errs = append(errs, err)
			}
		}
		if nw.lock != nil {
			nw.lock.release(func(format string, args ...any) {
				errs = append(errs, fmt.Errorf(format, args...))
			})
		}
	})
	return errs
}

// waitDone waits up to d for done, calling reap every 50 ms meanwhile.
func waitDone(done <-chan struct{}, d time.Duration, reap func()) error {
	deadline := time.After(d)
	for {
		reap()
		select {
		case <-done:
			return nil
		case <-deadline:
			return fmt.Errorf("not reaped %v after SIGKILL", d)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runNamespaces lists the named namespaces of run id.
func runNamespaces(id string) []string {
	var names []string
	for _, name := range prefixedNamespaces() {
		if strings.HasPrefix(name, nsPrefix+id+"-") {
			names = append(names, name)
		}
	}
	return names
}

// prefixedNamespaces lists every named namespace with nsPrefix, any run's.
func prefixedNamespaces() []string {
	entries, _ := os.ReadDir(netnsDir)
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), nsPrefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// netnsPids lists the processes whose network namespace is the one mounted
// at nsPath, as `ip netns pids` does; never this process (a thread of which
// may be dialing from there).
func netnsPids(nsPath string) ([]int, error) {
	var want unix.Stat_t
	if err := unix.Stat(nsPath, &want); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/net", &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// killNS SIGKILLs every process in the network namespace at nsPath but
// spare (0 for none), again until none is left, forks racing the kill
// included. It returns every pid it signalled.
func killNS(ctx context.Context, nsPath string, spare int) (killed []int, err error) {
	for {
		pids, err := netnsPids(nsPath)
		if errors.Is(err, os.ErrNotExist) {
			return killed, nil
		}
		if err != nil {
			return killed, err
		}
		pids = slices.DeleteFunc(pids, func(p int) bool { return p == spare })
		if len(pids) == 0 {
			return killed, nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if !slices.Contains(killed, pid) {
				killed = append(killed, pid)
			}
		}
		select {
		case <-ctx.Done():
			var desc []string
			for _, pid := range pids {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				desc = append(desc, fmt.Sprintf("%d (%s)", pid, strings.TrimSpace(string(comm))))
			}
			return killed, fmt.Errorf("processes in %s survive SIGKILL: %s", filepath.Base(nsPath), strings.Join(desc, ", "))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// reapOrphans reaps those of killed that end up zombies of this process with
// no exec.Cmd to wait for them (known says which have one): grandchildren
// orphaned to the test binary, which is their subreaper. Others' zombies
// are left to their parents.
func reapOrphans(killed []int, known func(int) bool) {
	pending := slices.DeleteFunc(slices.Clone(killed), known)
	for deadline := time.Now().Add(2 * time.Second); len(pending) > 0 && time.Now().Before(deadline); {
		pending = slices.DeleteFunc(pending, func(pid int) bool {
			state, ppid, ok := procState(pid)
			switch {
			case !ok:
				return true // gone
			case state != "Z":
				return false // still dying
			case ppid == os.Getpid():
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
				return true
			default:
				// A zombie whose parent is dying too comes to us next.
				pstate, _, palive := procState(ppid)
				return !(palive && pstate != "Z" && slices.Contains(killed, ppid))
			}
		})
		if len(pending) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// procState reads a process's state letter and parent pid.
func procState(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid, true
}

// removeRunDir removes a run directory, first unmounting anything mounted
// under it in this mount namespace (nothing is, normally: the bind mounts
// live in the holders' namespaces), so removal never reaches through a mount.
func removeRunDir(dir string) error {
	mounts, err := mountPoints()
	if err != nil {
		return err
	}
	var under []string
	for _, m := range mounts {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			under = append(under, m)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(under)))
	for _, m := range under {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s before removing %s: %w (left in place)", m, dir, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the run directory: %w", err)
	}
	return nil
}

// mountPoints lists the mount points of this process's mount namespace.
func mountPoints() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var mps []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			mps = append(mps, unescapeMountinfo(f[4]))
		}
	}
	return mps, nil
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseRunName splits what follows nsPrefix in a namespace or directory
// name into the run id <pid>-<seq> and the pid.
func parseRunName(rest string) (id string, pid int, ok bool) {
	parts := strings.SplitN(rest, "-", 3)
	if len(parts) < 2 {
		return "", 0, false
	}
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	if _, err := strconv.Atoi(parts[1]); err != nil {
		return "", 0, false
	}
	return parts[0] + "-" + parts[1], pid, true
}

// runIsStale says whether run id, made by pid, is over: its process is dead,
// or the pid now names another process (its start time differs from the one
// the run recorded), or it is this process's and not live here.
func runIsStale(id string, pid int) bool {
	if pid == os.Getpid() {
		return !isLiveRun(id)
	}
	if !pidAlive(pid) {
		return true
	}
	owner, err := os.ReadFile(filepath.Join(runDir(id), "owner"))
	if err != nil {
		return false // no record: the live process keeps it
	}
	return strings.TrimSpace(string(owner)) != fmt.Sprintf("%d %s", pid, procStartTime(pid))
}

func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// procStartTime is field 22 of /proc/<pid>/stat: when the process started,
// in clock ticks since boot. With the pid, it names one process for good.
func procStartTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// sweepStale removes what dead runs left: their namespaces (after killing
// every process still in them) and their run directories. Live runs' are
// never touched. Callers hold the setup lock.
func sweepStale(ctx context.Context, logf func(format string, args ...any)) {
	for _, ns := range prefixedNamespaces() {
		id, pid, ok := parseRunName(strings.TrimPrefix(ns, nsPrefix))
		if !ok || !runIsStale(id, pid) {
			continue
		}
		logf("e2e: removing namespace %s, left by run %s whose process is gone", ns, id)
		if _, err := killNS(ctx, filepath.Join(netnsDir, ns), 0); err != nil {
			logf("e2e: stale sweep: %v", err)
			continue
		}
		if err := ipRun(ctx, "netns", "del", ns); err != nil {
			logf("e2e: stale sweep: %v", err)
		}
		// A host booted into systemd is a machine of the namespace's name,
		// whose nspawn, killed with its run, left this on /run, and its
		// cgroup of the same name.
		_ = os.RemoveAll(filepath.Join("/run/systemd/nspawn/propagate", ns))
	}
	// Their cgroups, named as the namespaces, which a teardown that could
	// not remove one (or a killed run) leaves after its namespace is gone.
	if mount, err := cgroup2Mount(); err == nil {
		cgroups, _ := filepath.Glob(filepath.Join(mount, nsPrefix+"*"))
		for _, cg := range cgroups {
			id, pid, ok := parseRunName(strings.TrimPrefix(filepath.Base(cg), nsPrefix))
			if !ok || !runIsStale(id, pid) {
				continue
			}
			logf("e2e: removing cgroup %s, left by run %s whose process is gone", cg, id)
			if err := removeCgroupTree(cg); err != nil {
				logf("e2e: stale sweep: %v", err)
			}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), nsPrefix+"*"))
	for _, dir := range dirs {
		rest := strings.TrimPrefix(filepath.Base(dir), nsPrefix)
		id, pid, ok := parseRunName(rest)
		if !ok || id != rest || !runIsStale(id, pid) || len(runNamespaces(id)) > 0 {
			continue
		}
		logf("e2e: removing run directory %s, left by run %s whose process is gone", dir, id)
		if err := removeRunDir(dir); err != nil {
			logf("e2e: stale sweep: %v", err)
		}
	}
}

// pickSubnet chooses a /24 of testRange that no namespace with nsPrefix has
// an address on and that none of this machine's own addresses or routes
// overlaps, starting from one derived from the pid and run sequence.
// Callers hold the setup lock, so two runs cannot choose at once.
func pickSubnet(ctx context.Context, id string) (netip.Prefix, error) {
	var used []netip.Prefix
	collect := func(out string) {
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			for i, tok := range f {
				var p netip.Prefix
				var err error
				switch {
				case tok == "inet" && i+1 < len(f):
					p, err = netip.ParsePrefix(f[i+1])
				case i < 2 && strings.Contains(tok, "/"):
					p, err = netip.ParsePrefix(tok)
				case i < 2:
					var a netip.Addr
					if a, err = netip.ParseAddr(tok); err == nil {
						p = netip.PrefixFrom(a, a.BitLen())
					}
				default:
					continue
				}
				if err == nil && p.Addr().Is4() && p.Overlaps(testRange) {
					used = append(used, p.Masked())
				}
			}
		}
	}
	for _, ns := range prefixedNamespaces() {
		if out, err := ipOut(ctx, "-n", ns, "-4", "-o", "addr", "show"); err == nil {
			collect(out)
		}
	}
	for _, args := range [][]string{{"-4", "-o", "addr", "show"}, {"-4", "route", "show", "table", "all"}} {
		out, err := ipOut(ctx, args...)
		if err != nil {
			return netip.Prefix{}, err
		}
		collect(out)
	}
	_, pid, _ := parseRunName(id)
	seq, _ := strconv.Atoi(id[strings.IndexByte(id, '-')+1:])
	n := 1 << (24 - testRange.Bits())
	base := testRange.Addr().As4()
	start := pid + seq
	for i := range n {
		k := (start + i) % n
		a := base
		a[2] += byte(k % 256)
		a[1] += byte(k / 256)
		cand := netip.PrefixFrom(netip.AddrFrom4(a), 24)
		if !slices.ContainsFunc(used, cand.Overlaps) {
			return cand, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("every /24 of %s is in use by another run or this machine's addresses; remove stale %s* namespaces (ip netns list)", testRange, nsPrefix)
}

// lockPath is the lock concurrent runs share. Byte 0: every live run holds a
// read lock from before its setup to the end of its teardown; a run taking
// the write lock at the end of its teardown is the last out, and may remove
// the mountpoints the runs made. Byte 1: the setup lock, held for writing
// around the sweep, the choice of subnet and the mountpoints. The file's
// content lists the directories the harness created on the machine. The
// locks are open-file-description locks, so two runs in one process exclude
// each other too; the last run out removes the file under its lock, so an
// acquirer checks that the file it locked is still the one at lockPath.
const lockPath = "/run/st-e2e.lock"

type runLock struct{ f *os.File }

func acquireRunLock(ctx context.Context) (*runLock, error) {
	for {
		f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open the run lock: %w", err)
		}
		if err := pollLock(ctx, f, unix.F_RDLCK, 0); err != nil {
			f.Close()
			return nil, fmt.Errorf("wait for the run lock %s: %w", lockPath, err)
		}
		var have, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &have) == nil && unix.Stat(lockPath, &now) == nil && have.Ino == now.Ino && have.Dev == now.Dev {
			return &runLock{f}, nil
		}
		f.Close() // removed by the last run out while we waited
	}
}

func setLock(f *os.File, typ int16, start int64) error {
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: start, Len: 1}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}

func pollLock(ctx context.Context, f *os.File, typ int16, start int64) error {
	for {
		err := setLock(f, typ, start)
		if err == nil || !(errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES)) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (l *runLock) lockSetup(ctx context.Context) error {
	if err := pollLock(ctx, l.f, unix.F_WRLCK, 1); err != nil {
		return fmt.Errorf("wait for the setup lock %s: %w", lockPath, err)
	}
	return nil
}

func (l *runLock) unlockSetup() { _ = setLock(l.f, unix.F_UNLCK, 1) }

// registered lists the directories recorded in the lock file.
func (l *runLock) registered() []string {
	b, err := io.ReadAll(io.NewSectionReader(l.f, 0, 1<<20))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// register records that the harness created dir (callers hold the setup lock).
func (l *runLock) register(dir string) error {
	if slices.Contains(l.registered(), dir) {
		return nil
	}
	if _, err := l.f.Seek(0, io.SeekEnd); err != nil {
		return err
	}
	_, err := l.f.WriteString(dir + "\n")
	return err
}

// noteNetnsDir records the `ip netns` directory, if missing, as one the
// harness makes (the first `ip netns add` makes it and bind-mounts it onto
// itself). Callers hold the setup lock.
func (l *runLock) noteNetnsDir() error {
	if _, err := os.Lstat(netnsDir); errors.Is(err, os.ErrNotExist) {
		return l.register(netnsDir)
	}
	return nil
}

// removable says whether dir is one the harness may remove: a private
// directory, a parent of one, or the `ip netns` directory.
func removable(dir string) bool {
	if dir == netnsDir {
		return true
	}
	for _, d := range privateDirs {
		if d == dir || strings.HasPrefix(d, dir+"/") {
			return dir != "/"
		}
	}
	return false
}

// release ends the run's hold on the lock. As the last run out it removes
// the directories the harness created that are still empty (newest first;
// the `ip netns` directory after unmounting the bind mount ip made there),
// then the lock file.
func (l *runLock) release(errf func(format string, args ...any)) {
	defer l.f.Close()
	if setLock(l.f, unix.F_WRLCK, 0) != nil {
		return // another run is live: it, or the last after it, cleans up
	}
	dirs := l.registered()
	for i := len(dirs) - 1; i >= 0; i-- {
		dir := dirs[i]
		if !removable(dir) {
			continue
		}
		if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
			continue // gone, or in use by someone else: no longer ours
		}
		if dir == netnsDir {
			for range 4 {
				if mps, _ := mountPoints(); !slices.Contains(mps, dir) {
					break
				}
				if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
					errf("unmount %s, which ip netns mounted: %v", dir, err)
					break
				}
			}
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errf("remove %s, which the harness created: %v", dir, err)
		}
	}
	if err := os.Remove(lockPath); err != nil {
		errf("remove the run lock: %v", err)
	}
}

// ensureDir makes dir and any missing parents, recording each one it makes
// (before making it) so the last run out can remove it.
func ensureDir(l *runLock, dir string) error {
	var missing []string
	for p := dir; p != "/"; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := l.register(missing[i]); err != nil {
			return err
		}
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}
