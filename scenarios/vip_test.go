package scenarios

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"pgregory.net/rapid"

	"stratum.dev/stratum/cmd/stratum/cli"
	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// Bounds of TestClientsThroughVIP.
const (
	// vipSettle is how long after a fault or heal a client through the VIP
	// may fail before the invariant is broken: a lease expiry (2 s), an
	// election and an apiserver's etcd reconnect, with room for a busy box.
	vipSettle = 20 * time.Second
	// vipProbeTimeout bounds each request of the client probe.
	vipProbeTimeout = 5 * time.Second
	// cliBound bounds one stratum command run through cli.Run (a join starts
	// an etcd member and a kube-apiserver).
	cliBound = 3 * time.Minute
	// hopelessStartBound bounds a restart whose member cannot make a
	// quorum (its host isolated, or too few peers running): it can never
	// serve, and `up` would wait out its two minutes for etcd to serve
	// (the simulator's start waits on its context alone). The operator's
	// Ctrl-C after a while; the run then goes on with that host down.
	hopelessStartBound = 10 * time.Second
	// vipSentinel is the ConfigMap the clients read through the VIP.
	vipSentinel = "vip-sentinel"
)

// vipWorld is one check of TestClientsThroughVIP: a cluster built by
// stratum's own commands, run through cli.Run on each simulated host, as an
// operator types them.
type vipWorld struct {
	t   *rapid.T
	ctx context.Context
	c   *sim.Cluster
	// cps are the control planes, in the order they came up.
	cps []*sim.Host
	// joiner is the spare that only ever runs joins with bad input.
	joiner *sim.Host
	ca     []byte
	// last is the last step, for messages.
	last  string
	stats *vipStats
	// loads are the clients' workloads (through the VIP with cp1's admin
	// kubeconfig, and etcd on every host's client endpoint), checked for
	// linearizability when the check converges.
	loads []loadOn
}

// vipStats count what the run exercised, for its log.
type vipStats struct {
	mu                                        sync.Mutex
	holderMoves, checksHeld, checksExempt     int
	badJoins                                  map[string]int
	kills, crashes, isolations, heals, starts int
	// upCrashes are first bring-ups crashed at a drawn checkpoint and re-run.
	upCrashes int
	// joinRestarts are control planes restarted under a join, of which
	// joinRestartsOfHolder held the VIP when they crashed.
	joinRestarts, joinRestartsOfHolder int
}

func (s *vipStats) add(f func(*vipStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func TestClientsThroughVIP(t *testing.T) {
	st := &vipStats{badJoins: map[string]int{}}
	t.Cleanup(func() {
		t.Logf("ClientsThroughVIP: VIP checks held %d, exempt (no quorum or no apiserver) %d; faults on the VIP holder %d (kills %d, crashes %d, isolations %d), heals %d, restarts %d; bring-ups crashed and re-run %d; control planes restarted under a join %d (the VIP holder %d); bad joins %v",
			st.checksHeld, st.checksExempt, st.holderMoves, st.kills, st.crashes, st.isolations, st.heals, st.starts, st.upCrashes, st.joinRestarts, st.joinRestartsOfHolder, st.badJoins)
	})
	property(t, func(rt *rapid.T) {
		c := startCluster(rt, sim.Config{Fresh: true, SpareHosts: 4, APIServers: true, VIP: true})
		w := &vipWorld{t: rt, ctx: checkCtx(rt, 20*time.Minute), c: c, joiner: c.Host("cp4"), stats: st}
		w.bringUp()
		// A user's kubectl with cp1's admin kubeconfig: through the VIP.
		vipClient, _, err := w.userClient(c.Host("cp1"))
		if err != nil {
			rt.Fatal(err)
		}
		w.loads = startWorkloads(rt, w.ctx, c, "vip", vipClient, c.Host("cp1"), vipProbeTimeout)
		w.join(c.Host("cp2"), rapid.SampledFrom([]bool{true, false}).Draw(rt, "check between joins"))
		w.join(c.Host("cp3"), true)
		rt.Repeat(explored.actions(map[string]func(*rapid.T){
			"killHolderAPIServer": w.killHolderAPIServer,
			"crashHolder":         w.crashHolder,
			"isolateHolder":       w.isolateHolder,
			"heal":                w.heal,
			"restart":             w.restart,
			"badJoin":             w.badJoin,
			"":                    func(*rapid.T) { w.checkClients() },
		}))
		w.converge()
	}, assets.KubeAPIServerName)
}

// stratum runs `stratum args...` on h through cli.Run, bound to h's current
// incarnation (its Handle is the machine, its Checkpoint the hook), and
// returns the exit code and streams. A command that does not return within
// cliBound fails the check: a hang is an answer too.
func (w *vipWorld) stratum(h *sim.Host, args ...string) (int, string, string) {
	w.t.Helper()
	return w.stratumWithin(cliBound, h, args...)
}

// stratumWithin is stratum with the command's context bounded by bound: a
// command still running then is interrupted, as an operator's Ctrl-C.
func (w *vipWorld) stratumWithin(bound time.Duration, h *sim.Host, args ...string) (int, string, string) {
	w.t.Helper()
	return runStratum(w.t, w.ctx, w.c, bound, h, args...)
}

// runStratum runs `stratum args...` on h of c through cli.Run, bound to h's
// current incarnation, with the command's context bounded by bound, and
// records the exit in c's event log. A command that has not returned 15 s
// after its bound fails the check: a hang is an answer too.
func runStratum(t *rapid.T, ctx context.Context, c *sim.Cluster, bound time.Duration, h *sim.Host, args ...string) (int, string, string) {
	t.Helper()
	return goStratum(ctx, c, bound, h, args...).wait(t)
}

// stratumRun is one `stratum` command running through cli.Run on a host, in
// the background, while the check does something else (restarts another
// host under it).
type stratumRun struct {
	h           *sim.Host
	args        []string
	bound       time.Duration
	start       time.Time
	cancel      context.CancelFunc
	out, errOut syncbuf.Buffer
	// done is closed once cli.Run returned code.
	done chan struct{}
	code int
}

// goStratum starts `stratum args...` on h of c through cli.Run, bound to h's
// current incarnation (its Handle is the machine, its Checkpoint the hook),
// with the command's context bounded by bound; its exit is recorded in c's
// event log.
func goStratum(ctx context.Context, c *sim.Cluster, bound time.Duration, h *sim.Host, args ...string) *stratumRun {
	d := h.Handle()
	o := cli.Options{Host: func() (host.Host, error) { return d, nil }, Checkpoint: d.Checkpoint}
	r := &stratumRun{h: h, args: args, bound: bound, start: time.Now(), done: make(chan struct{})}
	ctx, r.cancel = context.WithTimeout(ctx, bound)
	go func() {
		defer close(r.done)
		r.code = cli.Run(ctx, args, &r.out, &r.errOut, o)
		c.Events().Record(h.Name(), "action", "stratum %s: exit %d in %s", strings.Join(args[:min(2, len(args))], " "), r.code, time.Since(r.start).Round(time.Millisecond))
	}()
	return r
}

// wait returns the command's exit code and streams. A command that has not
// returned 15 s after its bound fails the check: a hang is an answer too.
func (r *stratumRun) wait(t *rapid.T) (int, string, string) {
	t.Helper()
	defer r.cancel()
	hang := r.bound + 15*time.Second
	select {
	case <-r.done: // first, so one done at the deadline is not taken for a hang
		return r.code, r.out.String(), r.errOut.String()
	default:
	}
	select {
	case <-r.done:
		return r.code, r.out.String(), r.errOut.String()
	case <-time.After(time.Until(r.start.Add(hang))):
		// `stratum server` answers signals, not its context: a join that
		// hangs outlives its bound.
		t.Fatalf("stratum %s on %s did not return within %s; stdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.h.Name(), hang, r.out.String(), r.errOut.String())
		return 0, "", ""
	}
}

// bringUp is `stratum up --vip <VIP>` on cp1, then the sentinel written
// through the VIP with cp1's admin kubeconfig.
func (w *vipWorld) bringUp() {
	t := w.t
	cp1 := w.c.Host("cp1")
	up := []string{"up", "--vip", w.c.VIPAddress().String()}
	crashAt := rapid.SampledFrom(append([]string{"none"}, ha.UpCheckpoints...)).Draw(t, "crash the first stratum up at")
	if crashAt != "none" {
		w.crashedRun(cp1, crashAt, up)
		w.stats.add(func(s *vipStats) { s.upCrashes++ })
	}
	code, out, errOut := w.stratum(cp1, up...)
	if code != cli.ExitOK {
		t.Fatalf("stratum up --vip %s on cp1 (after a first run crashed at %s): exit %d\nstdout:\n%s\nstderr:\n%s", w.c.VIPAddress(), crashAt, code, out, errOut)
	}
	w.cps = append(w.cps, cp1)
	var err error
	if w.ca, err = cp1.Files().ReadFile(version.PKIFile("ca.crt")); err != nil {
		t.Fatalf("cp1's cluster CA after stratum up: %v", err)
	}
	w.last = "stratum up on cp1"
	ok, last := eventually(w.ctx, vipSettle, func() (bool, string) {
		cs, _, err := w.userClient(cp1)
		if err != nil {
			return false, err.Error()
		}
		ctx, cancel := context.WithTimeout(w.ctx, vipProbeTimeout)
		defer cancel()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: vipSentinel, Namespace: "default"}, Data: map[string]string{"written": "through the VIP"}}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if !ok {
		t.Fatalf("write the sentinel through the VIP with cp1's admin kubeconfig within %s of stratum up (VIP holder %s): %s", vipSettle, w.holderName(), last)
	}
}

// crashedRun runs `stratum args...` on h until h crashes at checkpoint cp:
// the command's goroutine is frozen there for good, as a SIGKILL leaves it.
func (w *vipWorld) crashedRun(h *sim.Host, cp string, args []string) {
	armed := w.c.CrashAt(h.Name(), cp)
	d := h.Handle()
	o := cli.Options{Host: func() (host.Host, error) { return d, nil }, Checkpoint: d.Checkpoint}
	returned := make(chan int, 1)
	go func() { returned <- cli.Run(w.ctx, args, &syncbuf.Buffer{}, &syncbuf.Buffer{}, o) }()
	select {
	case <-armed.Reached():
	case code := <-returned:
		w.t.Fatalf("stratum %s on %s returned (exit %d) without reaching %s", strings.Join(args, " "), h.Name(), code, cp)
	case <-time.After(cliBound):
		w.t.Fatalf("stratum %s on %s did not reach %s within %s", strings.Join(args, " "), h.Name(), cp, cliBound)
	}
	w.last = "stratum " + args[0] + " on " + h.Name() + " crashed at " + cp
}

// live are the control planes that can serve: etcd, apiserver and kube-vip
// running, not isolated.
func (w *vipWorld) live() []*sim.Host {
	var out []*sim.Host
	for _, h := range w.cps {
		if w.connected(h) && h.EtcdRunning() && h.APIServerRunning() && w.vipRunning(h) {
			out = append(out, h)
		}
	}
	return out
}

func (w *vipWorld) vipRunning(h *sim.Host) bool {
	st, err := h.Handle().ServiceStatus(w.ctx, sim.ServiceVIP)
	return err == nil && st.Running
}

func (w *vipWorld) connected(h *sim.Host) bool {
	_, isolated := w.c.Severed()
	for _, n := range isolated {
		if n == h.Name() {
			return false
		}
	}
	return true
}

// quorum reports whether a majority of the control planes' members run and
// reach each other.
func (w *vipWorld) quorum() bool {
	n := 0
	for _, h := range w.cps {
		if h.EtcdRunning() && w.connected(h) {
			n++
		}
	}
	return n > len(w.cps)/2
}

func (w *vipWorld) holderName() string {
	if h := w.c.VIPHolder(); h != nil {
		return h.Name()
	}
	return "none"
}

// printedJoin runs `stratum token create --control-plane` on minter and
// returns the join command it printed, as arguments (without "stratum").
func (w *vipWorld) printedJoin(minter *sim.Host) []string {
	t := w.t
	t.Helper()
	code, out, errOut := w.stratum(minter, "token", "create", "--control-plane")
	if code != cli.ExitOK {
		t.Fatalf("stratum token create --control-plane on %s (VIP holder %s): exit %d\nstderr:\n%s", minter.Name(), w.holderName(), code, errOut)
	}
	// The flag form; the secret-file form (--token-file, after a shell line
	// writing the files) needs a shell and is run by the e2e test.
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "stratum server ") && !strings.Contains(l, "--token-file") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("token create printed %d flag-form join commands (lines starting `stratum server` without --token-file), want 1:\n%s", len(lines), out)
	}
	if strings.ContainsAny(lines[0], `"'\$`+"`") {
		t.Fatalf("the printed join command has shell quoting or escapes; the scenario runs it split on whitespace, as printed:\n%s", lines[0])
	}
	return strings.Fields(lines[0])[1:]
}

// join mints a grant on a drawn running control plane and runs the printed
// join command verbatim on h; on a healthy cluster it must succeed, also
// while a drawn control plane restarts under it (restartUnderJoin).
func (w *vipWorld) join(h *sim.Host, check bool) {
	t := w.t
	minter := drawHost(t, w.cps, "minter for "+h.Name())
	args := w.printedJoin(minter)
	victim := rapid.OneOf(rapid.Just("none"), rapid.SampledFrom(names(w.cps))).Draw(t, "restart under the join of "+h.Name())
	var code int
	var out, errOut, restarted string
	if victim == "none" {
		code, out, errOut = w.stratum(h, args...)
	} else {
		code, out, errOut, restarted = w.restartUnderJoin(h, w.c.Host(victim), args)
		check = true
	}
	if code != cli.ExitOK {
		t.Fatalf("the join command printed on %s, run as printed on %s%s: exit %d\nstdout:\n%s\nstderr:\n%s", minter.Name(), h.Name(), restarted, code, out, errOut)
	}
	w.cps = append(w.cps, h)
	w.last = "join of " + h.Name() + " with the command printed on " + minter.Name() + restarted
	if check {
		w.checkClients()
	}
}

// restartUnderJoin runs the join command args on h while victim, a control
// plane, restarts (restartUnder) at a drawn checkpoint of the join or of the
// start it goes on to, up to the apiserver's. victim may hold the VIP the
// join talks to; with one or two voters, the cluster has no quorum
// meanwhile. The join must wait the outage out (the caller requires its exit
// 0). It returns the join's exit and streams, and words naming the restart
// for messages.
func (w *vipWorld) restartUnderJoin(h, victim *sim.Host, args []string) (int, string, string, string) {
	r := w.restartUnder("join", h, victim, args, restartCheckpoints)
	w.stats.add(func(s *vipStats) {
		s.joinRestarts++
		if r.held {
			s.joinRestartsOfHolder++
		}
	})
	return r.code, r.out, r.errOut, r.restarted
}

// restarted is a command run while a control plane restarted under it.
type restarted struct {
	code        int
	out, errOut string
	// restarted names the restart for messages; held is whether the
	// victim held the VIP when it crashed.
	restarted string
	held      bool
}

// restartUnder runs `stratum args...` on h, an operation (op: "join",
// "rejoin") that talks to victim, while victim restarts: at checkpoint cp,
// drawn from cps, or a drawn moment after it, victim's host crashes, and
// after a drawn pause `stratum up` brings it back, as its handover to
// systemd's unit, an upgrade or a reboot does. victim's `up` must succeed;
// the caller judges the operation's exit.
func (w *vipWorld) restartUnder(op string, h, victim *sim.Host, args []string, cps []string) restarted {
	t := w.t
	cp := rapid.SampledFrom(cps).Draw(t, "restart at")
	// Half the time the crash comes at the checkpoint itself, before the
	// operation goes on: the step after it meets the outage from its start.
	after := time.Duration(rapid.OneOf(rapid.Just(0), rapid.IntRange(1, 300)).Draw(t, "restart ms after the checkpoint")) * time.Millisecond
	down := time.Duration(rapid.IntRange(0, 4000).Draw(t, "ms down before stratum up")) * time.Millisecond
	pause := w.c.PauseAt(h.Name(), cp)
	run := goStratum(w.ctx, w.c, cliBound, h, args...)
	// A check that fails before the operation returned leaves none parked
	// at the pause, nor one that reaches it later, nor one running on.
	defer func() {
		w.c.Disarm(h.Name(), cp)
		pause.Release()
		run.cancel()
	}()
	select {
	case <-pause.Reached():
	case <-run.done:
		code, out, errOut := run.wait(t)
		t.Fatalf("the %s on %s ended before checkpoint %s, where %s was to restart: exit %d\nstdout:\n%s\nstderr:\n%s", op, h.Name(), cp, victim.Name(), code, out, errOut)
	case <-time.After(cliBound):
		t.Fatalf("the %s on %s never reached checkpoint %s within %s", op, h.Name(), cp, cliBound)
	}
	if after > 0 {
		pause.Release()
		time.Sleep(after)
	}
	held := w.c.VIPHolder() == victim
	role := ""
	if held {
		role = " (the VIP holder)"
	}
	w.c.Events().Record(victim.Name(), "fault", "restarting%s: crashed %s after %s's checkpoint %s; stratum up in %s", role, after, h.Name(), cp, down)
	victim.Crash()
	pause.Release() // a second release is nothing
	time.Sleep(down)
	if code, _, errOut := w.stratum(victim, "up"); code != cli.ExitOK {
		t.Fatalf("stratum up on %s, restarted under the %s of %s (crashed %s after its checkpoint %s, down %s): exit %d\nstderr:\n%s", victim.Name(), op, h.Name(), after, cp, down, code, errOut)
	}
	when := "at "
	if after > 0 {
		when = "just after "
	}
	explored.ran("restart under a " + op + ": a control plane's restart " + when + cp)
	if held {
		explored.ran("restart under a " + op + ": the VIP holder's restart")
	}
	code, out, errOut := run.wait(t)
	return restarted{code: code, out: out, errOut: errOut, held: held,
		restarted: fmt.Sprintf(" while %s%s restarted (crashed %s after the %s's checkpoint %s, down %s before its stratum up)", victim.Name(), role, after, op, cp, down)}
}

// userClient is a clientset from h's admin kubeconfig exactly as h wrote it
// (client-go's clientcmd, as kubectl reads it): it must target the VIP and
// trust the cluster CA only.
func (w *vipWorld) userClient(h *sim.Host) (kubernetes.Interface, string, error) {
	cs, server, err := w.nodeClient(h)
	if err == nil && server != w.c.VIPURL() {
		w.t.Fatalf("%s's admin kubeconfig targets %s, not the VIP %s", h.Name(), server, w.c.VIPURL())
	}
	return cs, server, err
}

// nodeClient is a clientset from h's admin kubeconfig exactly as h wrote it,
// wherever it points; it must trust the cluster CA only.
func (w *vipWorld) nodeClient(h *sim.Host) (kubernetes.Interface, string, error) {
	kc, err := h.Files().ReadFile(version.Kubeconfig("admin"))
	if err != nil {
		return nil, "", fmt.Errorf("%s's admin kubeconfig: %w", h.Name(), err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, "", fmt.Errorf("%s's admin kubeconfig: %w", h.Name(), err)
	}
	if cfg.Insecure || !bytes.Equal(bytes.TrimSpace(cfg.CAData), bytes.TrimSpace(w.ca)) {
		w.t.Fatalf("%s's admin kubeconfig does not trust exactly the cluster CA (insecure %v, CA file %q, CA data %d bytes)", h.Name(), cfg.Insecure, cfg.CAFile, len(cfg.CAData))
	}
	cfg.Timeout = vipProbeTimeout
	cs, err := kubernetes.NewForConfig(cfg)
	return cs, cfg.Host, err
}

// readThroughVIP is what a user of h's kubeconfig does: /readyz and the
// sentinel, through the VIP.
func (w *vipWorld) readThroughVIP(h *sim.Host) error {
	cs, _, err := w.userClient(h)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(w.ctx, vipProbeTimeout)
	defer cancel()
	if body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("GET /readyz: %w (%s)", err, bytes.TrimSpace(body))
	}
	cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, vipSentinel, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get ConfigMap default/%s: %w", vipSentinel, err)
	}
	if cm.Data["written"] != "through the VIP" {
		return fmt.Errorf("ConfigMap default/%s reads %v", vipSentinel, cm.Data)
	}
	return nil
}

// checkClients is the invariant: whenever a quorum of members and one
// control plane that can serve are up, a client with any control plane's
// admin kubeconfig reads through the VIP within vipSettle.
func (w *vipWorld) checkClients() {
	t := w.t
	t.Helper()
	if !w.quorum() || len(w.live()) == 0 {
		w.stats.add(func(s *vipStats) { s.checksExempt++ })
		return
	}
	w.stats.add(func(s *vipStats) { s.checksHeld++ })
	explored.invariant("clients read through the VIP with the cluster CA only")
	for _, h := range w.cps {
		ok, last := eventually(w.ctx, vipSettle, func() (bool, string) {
			if err := w.readThroughVIP(h); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		if !ok {
			t.Fatalf("a client with %s's admin kubeconfig (as the node wrote it: server %s, the cluster CA only) cannot read through the VIP within %s after %s; VIP holder %s; control planes up %v: %s",
				h.Name(), w.c.VIPURL(), vipSettle, w.last, w.holderName(), names(w.live()), last)
		}
	}
}

// drawHost draws one of hs by name (so the draw prints as a name).
func drawHost(t *rapid.T, hs []*sim.Host, label string) *sim.Host {
	name := rapid.SampledFrom(names(hs)).Draw(t, label)
	for _, h := range hs {
		if h.Name() == name {
			return h
		}
	}
	panic("unreachable")
}

func names(hs []*sim.Host) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Name()
	}
	return out
}

// holder is the VIP holder, or skips the action when none holds it.
func (w *vipWorld) holder(t *rapid.T) *sim.Host {
	h := w.c.VIPHolder()
	if h == nil {
		t.Skip("no host holds the VIP")
	}
	return h
}

func (w *vipWorld) noteMove(from *sim.Host) {
	w.stats.add(func(s *vipStats) { s.holderMoves++ })
	w.last = fmt.Sprintf("%s (VIP holder %s)", w.last, from.Name())
}

// killHolderAPIServer kills the VIP holder's kube-apiserver: its kube-vip
// loses the lease and another control plane must take the VIP.
func (w *vipWorld) killHolderAPIServer(t *rapid.T) {
	h := w.holder(t)
	if err := h.KillAPIServer(); err != nil {
		t.Logf("kill %s's kube-apiserver: %v", h.Name(), err)
	}
	w.stats.add(func(s *vipStats) { s.kills++ })
	w.last = "killing " + h.Name() + "'s kube-apiserver"
	w.noteMove(h)
}

// crashHolder crashes the VIP holder's whole host.
func (w *vipWorld) crashHolder(t *rapid.T) {
	h := w.holder(t)
	h.Crash()
	w.stats.add(func(s *vipStats) { s.crashes++ })
	w.last = "crashing " + h.Name()
	w.noteMove(h)
}

// isolateHolder cuts the VIP holder off from every other host: its etcd
// member is in a minority, so its apiserver cannot renew the lease.
func (w *vipWorld) isolateHolder(t *rapid.T) {
	h := w.holder(t)
	w.c.Isolate(h.Name())
	w.stats.add(func(s *vipStats) { s.isolations++ })
	w.last = "isolating " + h.Name()
	w.noteMove(h)
}

// heal removes every isolation.
func (w *vipWorld) heal(t *rapid.T) {
	if _, isolated := w.c.Severed(); len(isolated) == 0 {
		t.Skip("nothing is isolated")
	}
	w.c.Heal()
	w.stats.add(func(s *vipStats) { s.heals++ })
	w.last = "healing the network"
}

// restart brings a drawn control plane with a service down back: `stratum
// up` through cli.Run (the operator's path) or the simulator's Reboot. It
// must succeed when the host is connected and its member makes a quorum
// with the running ones.
func (w *vipWorld) restart(t *rapid.T) {
	var down []*sim.Host
	for _, h := range w.cps {
		if !h.EtcdRunning() || !h.APIServerRunning() || !w.vipRunning(h) {
			down = append(down, h)
		}
	}
	if len(down) == 0 {
		t.Skip("every control plane runs")
	}
	h := drawHost(t, down, "restart")
	running := 0
	for _, o := range w.cps {
		if o != h && o.EtcdRunning() && w.connected(o) {
			running++
		}
	}
	mustStart := w.connected(h) && running+1 > len(w.cps)/2
	how := "stratum up"
	bound := cliBound
	if !mustStart {
		bound = hopelessStartBound
	}
	var err error
	if !h.EtcdRunning() && rapid.Bool().Draw(t, "reboot through the simulator") {
		how = "sim reboot"
		ctx, cancel := context.WithTimeout(w.ctx, bound)
		err = h.Reboot(ctx)
		cancel()
	} else if code, _, errOut := w.stratumWithin(bound, h, "up"); code != cli.ExitOK {
		err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(errOut))
	}
	if err != nil && mustStart {
		t.Fatalf("%s on %s (connected, its member makes a quorum with %d running): %v", how, h.Name(), running, err)
	}
	w.stats.add(func(s *vipStats) { s.starts++ })
	w.last = how + " on " + h.Name()
}

// etcdMember is one member as the member list names it.
type etcdMember struct {
	ID       uint64
	Name     string
	PeerURLs string
	Learner  bool
}

// memberList is the member list, read directly (ground truth) through the
// connected running members, or an error within its own deadline.
func (w *vipWorld) memberList() ([]etcdMember, error) {
	var eps []string
	for _, h := range w.cps {
		if h.EtcdRunning() && w.connected(h) {
			eps = append(eps, h.ClientURL())
		}
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("no member runs")
	}
	ec, err := directEtcd(w.cps[0], eps...)
	if err != nil {
		return nil, err
	}
	defer ec.Close()
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	ml, err := ec.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("member list through %v: %w", eps, err)
	}
	var out []etcdMember
	for _, m := range ml.Members {
		out = append(out, etcdMember{ID: m.ID, Name: m.Name, PeerURLs: strings.Join(m.PeerURLs, ","), Learner: m.IsLearner})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// badJoin runs, on the spare joiner, the join command printed on a running
// control plane with one drawn bad input: --node-ip set to a member's
// address, a wrong (well-formed) certificate-key, or a wrong or expired
// token. It must be refused (exit 3), leave the member list exactly as it
// was, and the VIP must still serve.
func (w *vipWorld) badJoin(t *rapid.T) {
	live := w.live()
	if !w.quorum() || len(live) == 0 {
		t.Skip("no quorum or no control plane to mint on")
	}
	before, err := w.memberList()
	if err != nil {
		t.Skip("member list unreadable: " + err.Error())
	}
	minter := drawHost(t, live, "minter")
	args := w.printedJoin(minter)
	kind := rapid.SampledFrom([]string{"node-ip of a member", "wrong certificate-key", "wrong token", "expired token", "host cannot start services"}).Draw(t, "bad input")
	var detail string
	switch kind {
	case "node-ip of a member":
		victim := drawHost(t, w.cps, "node-ip of")
		args = append(args, "--node-ip", victim.IP().String())
		detail = victim.Name() + "'s address " + victim.IP().String()
	case "wrong certificate-key":
		key, err := ha.NewCertKey()
		if err != nil {
			t.Fatal(err)
		}
		setFlag(t, args, "--certificate-key", key)
		detail = "another key"
	case "wrong token":
		setFlag(t, args, "--token", "abcdef."+strings.Repeat("0", 16))
		detail = "an unknown token"
	case "expired token":
		admin, err := minter.Admin()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
		tok, err := sim.CreateBootstrapToken(ctx, admin, []string{token.ControlPlaneGroup}, time.Now().Add(-time.Hour))
		cancel()
		if err != nil {
			t.Fatalf("create an expired control-plane token on %s: %v", minter.Name(), err)
		}
		setFlag(t, args, "--token", tok)
		detail = "a control-plane token expired an hour ago"
	case "host cannot start services":
		w.joiner.BreakServices(errors.New("the service manager is broken"))
		defer w.joiner.MendServices()
		detail = "its service manager broken"
	}
	code, out, errOut := w.stratum(w.joiner, args...)
	w.stats.add(func(s *vipStats) { s.badJoins[kind]++ })
	w.last = fmt.Sprintf("a join on %s with %s (%s)", w.joiner.Name(), kind, detail)
	if code != cli.ExitRefused {
		t.Fatalf("%s: exit %d, want %d (refused)\nstdout:\n%s\nstderr:\n%s", w.last, code, cli.ExitRefused, out, errOut)
	}
	var after []etcdMember
	ok, last := eventually(w.ctx, 10*time.Second, func() (bool, string) {
		after, err = w.memberList()
		return err == nil, fmt.Sprint(err)
	})
	if !ok {
		t.Fatalf("after %s was refused, the member list is unreadable: %s\nthe join said:\n%s", w.last, last, errOut)
	}
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("%s was refused, yet the member list changed:\nbefore %+v\nafter  %+v\nthe join said:\n%s", w.last, before, after, errOut)
	}
}

// setFlag replaces the value of flag in args.
func setFlag(t *rapid.T, args []string, flag, value string) {
	for i := range args[:len(args)-1] {
		if args[i] == flag {
			args[i+1] = value
			return
		}
	}
	t.Fatalf("the printed join command has no %s: %v", flag, args)
}

// converge heals everything and restarts every control plane with
// `stratum up`; within the bound the members are exactly the control planes,
// all voters, and a client with each control plane's admin kubeconfig reads
// through the VIP.
func (w *vipWorld) converge() {
	t := w.t
	explored.invariant("converges: the control planes are the voters")
	w.c.Heal()
	// Every control plane is brought up at once, as machines come back on
	// their own: one at a time, a member whose peers are still down waits
	// for a quorum that only the later ones bring.
	fails := make([]string, len(w.cps))
	var wg sync.WaitGroup
	for i, h := range w.cps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// w.stratum fails the check by panicking (rapid's Fatalf):
			// carried back to the check's own goroutine.
			defer func() {
				if r := recover(); r != nil {
					fails[i] = fmt.Sprintf("stratum up on %s: %v", h.Name(), r)
				}
			}()
			ok, last := eventually(w.ctx, 2*cliBound, func() (bool, string) {
				if h.EtcdRunning() && h.APIServerRunning() && w.vipRunning(h) {
					return true, ""
				}
				code, _, errOut := w.stratum(h, "up")
				return code == cli.ExitOK, strings.TrimSpace(errOut)
			})
			if !ok {
				fails[i] = fmt.Sprintf("stratum up on %s: %s", h.Name(), last)
			}
		}()
	}
	wg.Wait()
	for _, f := range fails {
		if f != "" {
			t.Fatalf("converge: %s", f)
		}
	}
	w.last = "healing and restarting every control plane"
	ok, last := eventually(w.ctx, 60*time.Second, func() (bool, string) {
		ms, err := w.memberList()
		if err != nil {
			return false, err.Error()
		}
		if len(ms) != len(w.cps) {
			return false, fmt.Sprintf("members %+v, want %v", ms, names(w.cps))
		}
		for _, m := range ms {
			h := w.c.Host(m.Name)
			if h == nil || m.PeerURLs != h.PeerURL() || m.Learner {
				return false, fmt.Sprintf("member %+v is not a control plane's voter", m)
			}
		}
		return true, ""
	})
	if !ok {
		t.Fatalf("converge: the members are not the control planes %v, all voters, within 60s: %s", names(w.cps), last)
	}
	w.checkClients()
	checkHistories(t, w.ctx, w.loads, w.cps[0])
}
