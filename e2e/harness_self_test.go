package e2e

// Tests of the harness itself: the hosts are isolated as promised, and
// teardown and the stale sweep leave nothing behind.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const helperPort = "7000"

func TestHarnessHosts(t *testing.T) {
	machineName, _ := os.Hostname()
	nw := newNetwork(t, 2)
	cp1, cp2 := nw.Hosts()[0], nw.Hosts()[1]
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	srv := cp1.Start(helperCommand("serve", ":"+helperPort)...)
	waitFor(t, 10*time.Second, "cp1's server to listen", func() bool { return strings.Contains(srv.Output(), "listening") }, srv)
	cp1Addr := net.JoinHostPort(cp1.IP().String(), helperPort)

	t.Run("addresses", func(t *testing.T) {
		if nw.Subnet().Bits() != 24 || !testRange.Contains(nw.Subnet().Addr()) {
			t.Errorf("subnet %s, want a /24 of %s", nw.Subnet(), testRange)
		}
		seen := map[netip.Addr]bool{}
		for _, a := range []netip.Addr{cp1.IP(), cp2.IP(), nw.VIP()} {
			if !nw.Subnet().Contains(a) || seen[a] {
				t.Errorf("address %s: want distinct addresses on %s (cp1 %s, cp2 %s, VIP %s)", a, nw.Subnet(), cp1.IP(), cp2.IP(), nw.VIP())
			}
			seen[a] = true
		}
		for _, h := range nw.Hosts() {
			out := mustRun(ctx, t, h, "ip", "-o", "-4", "addr", "show")
			want := fmt.Sprintf("%s    inet %s/24", hostIf, h.IP())
			if !strings.Contains(out, want) || !strings.Contains(out, "lo    inet 127.0.0.1/8") {
				t.Errorf("%s: ip addr shows\n%s\nwant %q and 127.0.0.1 on lo", h, out, want)
			}
			for _, other := range nw.Hosts() {
				if other != h && strings.Contains(out, other.IP().String()+"/") {
					t.Errorf("%s: ip addr shows %s's address:\n%s", h, other, out)
				}
			}
			// /sys is the host network namespace's sysfs.
			if got := strings.Fields(mustRun(ctx, t, h, "ls", "/sys/class/net")); !slices.Equal(got, []string{hostIf, "lo"}) {
				t.Errorf("%s: /sys/class/net holds %q, want [%s lo]", h, got, hostIf)
			}
			if out := mustRun(ctx, t, h, "ip", "-o", "link", "show", "lo"); !strings.Contains(out, ",UP") {
				t.Errorf("%s: loopback is not up: %s", h, out)
			}
		}
	})

	t.Run("tcp between hosts, not from the machine", func(t *testing.T) {
		if got := mustRun(ctx, t, cp2, helperCommand("dial", cp1Addr)...); got != "hello from cp1\n" {
			t.Errorf("cp2 dialing %s read %q, want %q", cp1Addr, got, "hello from cp1\n")
		}
		if got, err := dialLine(ctx, cp2, cp1Addr); err != nil || got != "hello from cp1" {
			t.Errorf("the test process dialing %s from cp2's namespace: read %q, %v; want %q", cp1Addr, got, err, "hello from cp1")
		}
		if _, err := cp2.DialContext(ctx, "tcp", "cp1:"+helperPort); err == nil {
			t.Errorf("DialContext accepted a host name")
		}
		// The machine has no address or route on the subnet, and cannot connect.
		for _, args := range [][]string{{"-4", "-o", "addr", "show"}, {"-4", "route", "show", "table", "all"}} {
			out, err := ipOut(ctx, args...)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(out, "\n") {
				if p := subnetPrefix(line, nw.Subnet()); p.IsValid() {
					t.Errorf("the machine's `ip %s` has %s on the test subnet: %s", strings.Join(args, " "), p, line)
				}
			}
		}
		// Its default route may lead to a gateway that accepts any connection
		// (a sandbox's proxy does): what matters is that cp1 never answers.
		d := net.Dialer{Timeout: time.Second}
		if c, err := d.DialContext(ctx, "tcp", cp1Addr); err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.Contains(line, "hello from") {
				t.Errorf("the machine's own namespace reached cp1's server at %s: read %q", cp1Addr, line)
			} else {
				t.Logf("the machine's default route accepted a connection to %s, which did not reach cp1 (read %q)", cp1Addr, line)
			}
		}
	})

	t.Run("private directories and hosts file", func(t *testing.T) {
		marker := "marker-" + nw.ID()
		for _, d := range privateDirs {
			p := d + "/" + marker
			mustRun(ctx, t, cp1, "sh", "-c", "echo cp1 > "+p)
			if _, _, err := cp2.Run(ctx, "test", "-e", p); err == nil {
				t.Errorf("cp2 sees %s, written in cp1", p)
			}
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("the machine sees %s, written in cp1", p)
			}
			if b, err := os.ReadFile(cp1.MachinePath(p)); err != nil || string(b) != "cp1\n" {
				t.Errorf("cp1's %s at %s: %q, %v; want \"cp1\\n\"", p, cp1.MachinePath(p), b, err)
			}
		}
		mps, err := mountPoints()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range append(slices.Clone(privateDirs), "/etc/hosts") {
			if slices.Contains(mps, d) {
				t.Errorf("%s is a mount point in the machine's mount namespace", d)
			}
		}
		want := fmt.Sprintf("%s\tcp2", cp2.IP())
		if out := mustRun(ctx, t, cp1, "cat", "/etc/hosts"); !strings.Contains(out, want) {
			t.Errorf("cp1's /etc/hosts lacks %q:\n%s", want, out)
		}
		if b, _ := os.ReadFile("/etc/hosts"); strings.Contains(string(b), cp2.IP().String()) {
			t.Errorf("the machine's /etc/hosts names %s", cp2.IP())
		}
	})

	t.Run("hostname and working directory", func(t *testing.T) {
		for _, h := range nw.Hosts() {
			if got := strings.TrimSpace(mustRun(ctx, t, h, "uname", "-n")); got != h.Name() {
				t.Errorf("%s: hostname %q", h, got)
			}
		}
		wd, _ := os.Getwd()
		if got := strings.TrimSpace(mustRun(ctx, t, cp1, "pwd")); got != wd {
			t.Errorf("cp1 runs commands in %q, want the test's %q", got, wd)
		}
		if now, _ := os.Hostname(); now != machineName {
			t.Errorf("the machine's hostname changed from %q to %q", machineName, now)
		}
	})

	t.Run("extra address, link down, disconnect", func(t *testing.T) {
		vip := netip.PrefixFrom(nw.VIP(), 32)
		vipAddr := net.JoinHostPort(nw.VIP().String(), helperPort)
		expectDial(ctx, t, cp2, vipAddr, false, "before the VIP is added")
		if err := cp1.AddAddr(ctx, vip); err != nil {
			t.Fatal(err)
		}
		expectDial(ctx, t, cp2, vipAddr, true, "with the VIP on cp1")
		if err := cp1.DelAddr(ctx, vip); err != nil {
			t.Fatal(err)
		}
		expectDial(ctx, t, cp2, vipAddr, false, "after the VIP is removed")

		if err := cp1.LinkDown(ctx); err != nil {
			t.Fatal(err)
		}
		if out := mustRun(ctx, t, cp1, "ip", "-o", "link", "show", hostIf); strings.Contains(out, ",UP") {
			t.Errorf("cp1's link is up after LinkDown: %s", out)
		}
		expectDial(ctx, t, cp2, cp1Addr, false, "with cp1's link down")
		if err := cp1.LinkUp(ctx); err != nil {
			t.Fatal(err)
		}
		expectDial(ctx, t, cp2, cp1Addr, true, "after LinkUp")

		if err := cp1.Disconnect(ctx); err != nil {
			t.Fatal(err)
		}
		if out := mustRun(ctx, t, cp1, "ip", "-o", "link", "show", hostIf); !strings.Contains(out, "LOWER_UP") {
			t.Errorf("cp1's link lost its carrier on Disconnect (want a silent partition): %s", out)
		}
		expectDial(ctx, t, cp2, cp1Addr, false, "with cp1 disconnected")
		if err := cp1.Reconnect(ctx); err != nil {
			t.Fatal(err)
		}
		expectDial(ctx, t, cp2, cp1Addr, true, "after Reconnect")
	})

	t.Run("KillAll", func(t *testing.T) {
		p := cp2.Start("sh", "-c", "sleep 1000 & echo $! > /run/stratum/child; wait")
		child := waitPidFile(t, cp2.MachinePath("/run/stratum/child"), p)
		if err := cp2.KillAll(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err == nil {
			t.Errorf("%s exited 0 after KillAll", p)
		}
		waitFor(t, 5*time.Second, "the killed grandchild to go", func() bool { return pidGone(child) }, p)
		if got := strings.TrimSpace(mustRun(ctx, t, cp2, "uname", "-n")); got != "cp2" {
			t.Errorf("cp2 after KillAll: hostname %q (its namespace holder must live on)", got)
		}
	})

	t.Run("Start output, Signal, Wait", func(t *testing.T) {
		p := cp1.Start("sh", "-c", "echo started; echo oops >&2; trap 'echo got TERM; exit 3' TERM; while :; do sleep 0.05; done")
		waitFor(t, 5*time.Second, "the trap to be set", func() bool { return strings.Contains(p.Output(), "oops") }, p)
		time.Sleep(100 * time.Millisecond)
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		err := p.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Errorf("Wait after SIGTERM: %v, want exit status 3", err)
		}
		if out := p.Output(); out != "started\noops\ngot TERM\n" {
			t.Errorf("output %q", out)
		}
		if err := p.Kill(); err != nil {
			t.Errorf("Kill after exit: %v", err)
		}
		bad := cp1.Start("/nonexistent/stratum", "up")
		if err := bad.Wait(); err == nil {
			t.Errorf("starting a missing binary: Wait returned nil")
		}
	})
}

// TestHarnessTeardown checks that a network leaves nothing behind: no
// namespace, mount, process, run directory, nor (when no other run is live)
// mountpoint or lock file the harness made.
func TestHarnessTeardown(t *testing.T) {
	requireNamespaces(t)
	existed := map[string]bool{}
	for _, d := range append(slices.Clone(privateDirs), netnsDir, lockPath) {
		_, err := os.Lstat(d)
		existed[d] = err == nil
	}
	var id, dir string
	var pids []int
	t.Run("network", func(t *testing.T) {
		nw := newNetwork(t, 2)
		id, dir = nw.ID(), nw.Dir()
		for _, h := range nw.Hosts() {
			pids = append(pids, h.holder.Process.Pid)
		}
		p := nw.Hosts()[0].Start("sh", "-c", "sleep 1000 & echo $! > /run/stratum/child; wait")
		pids = append(pids, p.Pid(), waitPidFile(t, nw.Hosts()[0].MachinePath("/run/stratum/child"), p))
		// Left running on purpose: teardown must take it and its child.
	})
	if id == "" {
		t.Fatal("the network subtest made no network")
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	if strings.Contains(string(out), nsPrefix+id+"-") {
		t.Errorf("namespaces of run %s left behind:\n%s", id, out)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if strings.Contains(line, nsPrefix+id) {
			t.Errorf("mount left behind: %s", line)
		}
	}
	// Reaped too, not just dead: the grandchild was orphaned to this binary.
	for _, pid := range pids {
		if state, ppid, ok := procState(pid); ok {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			t.Errorf("process %d (%s, state %s, parent %d) left behind", pid, strings.TrimSpace(string(comm)), state, ppid)
		}
	}
	if _, err := os.Lstat(dir); err == nil {
		t.Errorf("run directory %s left behind", dir)
	}
	if others := prefixedNamespaces(); len(others) > 0 {
		t.Logf("other runs are live (%s); not checking the shared mountpoints", strings.Join(others, " "))
		return
	}
	for d, was := range existed {
		if _, err := os.Lstat(d); !was && err == nil {
			t.Errorf("%s did not exist before the run and is left behind", d)
		}
	}
}

// TestHarnessStaleSweep plants what a killed run leaves (a namespace with a
// process in it, a run directory) and checks that the sweep removes it and
// leaves a live run's namespace alone.
func TestHarnessStaleSweep(t *testing.T) {
	requireNamespaces(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := dead.Process.Pid
	if pidAlive(deadPid) {
		t.Skipf("pid %d was reused at once", deadPid)
	}
	lk, err := acquireRunLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			lk.release(t.Logf)
		}
	})
	if err := lk.lockSetup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lk.noteNetnsDir(); err != nil {
		t.Fatal(err)
	}
	staleID := fmt.Sprintf("%d-1", deadPid)
	staleNS := nsPrefix + staleID + "-cp1"
	liveNS := fmt.Sprintf("%s1-%d-cp1", nsPrefix, os.Getpid()) // pid 1 lives, so its run is live
	for _, ns := range []string{staleNS, liveNS} {
		if err := ipRun(ctx, "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := os.Lstat(filepath.Join(netnsDir, ns)); err == nil {
				_, _ = killNS(context.Background(), filepath.Join(netnsDir, ns), 0)
				_ = ipRun(context.Background(), "netns", "del", ns)
			}
		})
	}
	sleeper := exec.Command("ip", "netns", "exec", staleNS, "sleep", "1000")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	t.Cleanup(func() { _ = sleeper.Process.Kill() })
	waitFor(t, 5*time.Second, "the planted process to enter its namespace", func() bool {
		pids, _ := netnsPids(filepath.Join(netnsDir, staleNS))
		return slices.Contains(pids, sleeper.Process.Pid)
	}, nil)
	staleDir := runDir(staleID)
	if err := os.MkdirAll(filepath.Join(staleDir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(staleDir) })

	sweepStale(ctx, t.Logf)
	lk.unlockSetup()

	if _, err := os.Lstat(filepath.Join(netnsDir, staleNS)); err == nil {
		t.Errorf("stale namespace %s survived the sweep", staleNS)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Errorf("the process in the stale namespace survived the sweep")
	}
	if _, err := os.Lstat(staleDir); err == nil {
		t.Errorf("stale run directory %s survived the sweep", staleDir)
	}
	if _, err := os.Lstat(filepath.Join(netnsDir, liveNS)); err != nil {
		t.Errorf("the sweep removed %s, whose pid 1 lives: %v", liveNS, err)
	}

	if _, err := killNS(ctx, filepath.Join(netnsDir, liveNS), 0); err != nil {
		t.Error(err)
	}
	if err := ipRun(ctx, "netns", "del", liveNS); err != nil {
		t.Error(err)
	}
	released = true
	lk.release(t.Errorf)

	// A live pid whose recorded start time differs is a reused pid: stale.
	reusedID := fmt.Sprintf("1-%d", os.Getpid())
	if err := os.MkdirAll(runDir(reusedID), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir(reusedID)) })
	if runIsStale(reusedID, 1) {
		t.Errorf("run %s without its owner record: want live", reusedID)
	}
	if err := os.WriteFile(filepath.Join(runDir(reusedID), "owner"), []byte("1 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !runIsStale(reusedID, 1) {
		t.Errorf("run %s whose recorded start time is not pid 1's: want stale", reusedID)
	}
	if err := os.WriteFile(filepath.Join(runDir(reusedID), "owner"), []byte("1 "+procStartTime(1)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if runIsStale(reusedID, 1) {
		t.Errorf("run %s whose owner record matches pid 1: want live", reusedID)
	}
}

// TestHarnessTwoNetworks checks that two live networks of one process get
// different names and subnets and cannot reach each other.
func TestHarnessTwoNetworks(t *testing.T) {
	a, b := newNetwork(t, 1), newNetwork(t, 1)
	if a.ID() == b.ID() || a.Subnet().Overlaps(b.Subnet()) {
		t.Fatalf("networks %s (%s) and %s (%s) collide", a.ID(), a.Subnet(), b.ID(), b.Subnet())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	srv := b.Hosts()[0].Start(helperCommand("serve", ":"+helperPort)...)
	waitFor(t, 10*time.Second, "the server to listen", func() bool { return strings.Contains(srv.Output(), "listening") }, srv)
	addr := net.JoinHostPort(b.Hosts()[0].IP().String(), helperPort)
	expectDial(ctx, t, b.Hosts()[0], addr, true, "within network b")
	expectDial(ctx, t, a.Hosts()[0], addr, false, "from network a")
}

func mustRun(ctx context.Context, t *testing.T, h *host, args ...string) string {
	t.Helper()
	out, _, err := h.Run(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dialLine connects from h's namespace and reads one line.
func dialLine(ctx context.Context, h *host, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// expectDial checks that a connection from h to addr succeeds (retrying for
// up to 5 s while links and neighbours settle) or fails.
func expectDial(ctx context.Context, t *testing.T, h *host, addr string, ok bool, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := dialLine(ctx, h, addr)
		switch {
		case ok && err == nil, !ok && err != nil:
			return
		case !ok:
			t.Errorf("%s: %s connected to %s", when, h, addr)
			return
		case time.Now().After(deadline):
			t.Errorf("%s: %s cannot connect to %s: %v", when, h, addr, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor polls cond until it holds, failing the test after d with p's
// output tail (p may be nil).
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool, p *proc) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			if p != nil {
				msg = fmt.Sprintf("; %s wrote:\n%s", p, p.Tail(20))
			}
			t.Fatalf("waited %v for %s%s", d, what, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitPidFile waits for a file holding a pid and returns the pid.
func waitPidFile(t *testing.T, path string, p *proc) int {
	t.Helper()
	var pid int
	waitFor(t, 5*time.Second, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, p)
	return pid
}

// pidGone says whether pid is dead or a zombie (killed, awaiting its reaper).
func pidGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// subnetPrefix returns the first address or prefix on an `ip -o addr` or
// `ip route` line that overlaps subnet, if any (a default route does not
// count).
func subnetPrefix(line string, subnet netip.Prefix) netip.Prefix {
	for _, tok := range strings.Fields(line) {
		p, err := netip.ParsePrefix(tok)
		if err != nil {
			a, err := netip.ParseAddr(tok)
			if err != nil {
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Bits() > 0 && p.Overlaps(subnet) {
			return p
		}
	}
	return netip.Prefix{}
}

// TestHarnessTeardownReapsAMachinesOrphans: a command run in a booted
// machine whose nsenter is killed (a cancelled probe) leaves its process to
// this binary, their subreaper, and the machine's PID 1 cannot end until it
// is reaped. Teardown once waited for the machine first and reaped after:
// "not reaped 10s after SIGKILL", and the machine's cgroup left busy (seen
// in a CI run). Teardown reaps while it waits; any error of it fails the
// subtest.
func TestHarnessTeardownReapsAMachinesOrphans(t *testing.T) {
	requireMachines(t)
	t.Run("machine", func(t *testing.T) {
		nw := newNetworkNamed(t, "m1")
		h := nw.Host("m1")
		ctx := context.Background()
		h.Boot(ctx, t)
		pidFile := "/run/orphan.pid"
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _, _ = h.Run(cctx, "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 2")
		}()
		var pid int
		for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(50 * time.Millisecond) {
			if b, err := os.ReadFile(h.MachinePath(pidFile)); err == nil {
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			}
			if time.Now().After(deadline) {
				t.Fatal("the command in the machine never started")
			}
		}
		cancel() // its nsenter is killed; the sleep lives on, orphaned
		<-done
		// The sleep, in the machine's PID namespace as pid, ends a zombie
		// of this binary's.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if adopted := adoptedIn(h.machine.pidNS(), nw.isChild); len(adopted) > 0 {
				t.Logf("the machine's pid %d ended a zombie of this test binary's (pids here %v): teardown must reap it", pid, adopted)
				break
			}
			if time.Now().After(deadline) {
				t.Skip("no process of the machine's was left to this binary (the kernel reparented it elsewhere): nothing for teardown to reap")
			}
		}
	})
}
