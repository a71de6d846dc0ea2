package scenarios

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"pgregory.net/rapid"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
	"stratum.dev/stratum/sim/timeline"
)

// CI budget: what `go test ./scenarios` runs when no -rapid.checks or
// -rapid.steps is given (rapid's own defaults, 100 checks of ~30 steps, would
// build a hundred simulated clusters per property). `make explore` passes its
// own counts; an explicit flag always wins.
const (
	ciChecks = 3
	ciSteps  = 8
	// shrinkBound bounds rapid's shrinking of a failing case
	// (-rapid.shrinktime, also when a flag sets the counts): rapid checks
	// it between its replays of shrunk cases, so a failing property ends
	// within it and one more check, then reports (property).
	shrinkBound = 30 * time.Second
)

func TestMain(m *testing.M) {
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rapid.checks"] && os.Getenv("RAPID_CHECKS") == "" {
		_ = flag.Set("rapid.checks", fmt.Sprint(ciChecks))
	}
	if !set["rapid.steps"] && os.Getenv("RAPID_STEPS") == "" {
		_ = flag.Set("rapid.steps", fmt.Sprint(ciSteps))
	}
	if !set["rapid.shrinktime"] && os.Getenv("RAPID_SHRINKTIME") == "" {
		_ = flag.Set("rapid.shrinktime", shrinkBound.String())
	}
	// A seed drawn here rather than by rapid is one the harness knows, so
	// a failing check's picture can print the command that replays it.
	if !set["rapid.seed"] && os.Getenv("RAPID_SEED") == "" {
		_ = flag.Set("rapid.seed", fmt.Sprint(rand.Uint64()))
	}
	runChecks = flag.Lookup("rapid.checks").Value.String()
	code := m.Run()
	if testing.Verbose() {
		explored.write(os.Stdout)
	}
	if missing := explored.missing(); len(missing) > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "FAIL: these actions, which every run must exercise, were never run: %v (scenarios/coverage_test.go; each property's require)\n", missing)
		code = 1
	}
	os.Exit(code)
}

// property runs prop as a rapid property under t, after checking the real
// server binaries are there. It counts the checks and logs the rate (for `make
// explore` and docs/performance.md), and on failure logs the exact command
// that replays it: the failfile rapid just wrote (committed under
// testdata/rapid/<TestName>/ it becomes a regression that replays first).
// need names the asset binaries the property runs (every one when none is
// named).
func property(t *testing.T, prop func(*rapid.T), need ...string) {
	t.Helper()
	assetstest.Require(t, need...)
	runningTest.Store(t.Name())
	short := strings.TrimPrefix(t.Name(), "Test")
	var checks atomic.Int64
	start := time.Now()
	fails := &failures{}
	runningFailures.Store(fails)
	if deadline, ok := t.Deadline(); ok {
		testDeadline.Store(deadline)
		// Near go test's own timeout (which panics naming no invariant),
		// say what was found so far and where the running check stands.
		warn := time.AfterFunc(time.Until(deadline)-deadlineMargin, func() {
			fmt.Fprintf(os.Stderr, "%s: go test's -timeout ends in %s and this property is still running.\n%s\n", t.Name(), deadlineMargin, fails.report(t.Name(), start))
		})
		defer warn.Stop()
	}
	t.Cleanup(func() {
		d := time.Since(start)
		n := checks.Load()
		t.Logf("%s: %d checks in %s = %.1f/min", short, n, d.Round(time.Second), float64(n)/d.Minutes())
		if t.Failed() {
			t.Logf("%s", fails.report(t.Name(), start))
		}
	})
	if warmingEnabled() {
		planned := plannedChecks(t.Name())
		// Another check comes after the planned ones only when one
		// failed: rapid then shrinks it, replaying smaller cases.
		w := newWarmer(func() bool { return checks.Load() < planned || fails.failed() })
		runningWarmer = w
		defer func() {
			runningWarmer = nil
			w.close()
		}()
	}
	rapid.Check(t, func(rt *rapid.T) {
		checks.Add(1)
		defer explored.timed(short+": whole check", time.Now())
		defer func() {
			// rapid fails a check by panicking; note what it said,
			// then let the panic go on to rapid.
			if r := recover(); r != nil {
				if !isSkip(r) && budgetSpent() {
					// Cut short by the run's budget (checkCtx), the
					// check judged nothing: dropped as an invalid case,
					// so rapid neither reports nor shrinks it.
					fmt.Fprintf(os.Stderr, "%s: a check failed after go test's -timeout (less %s) ran out; dropped as cut short: %v\n", t.Name(), deadlineMargin, r)
					rt.Skip("cut short by go test's -timeout")
				}
				if rt.Failed() || !isSkip(r) {
					fails.note(fmt.Sprint(r))
				}
				panic(r)
			}
		}()
		prop(rt)
	})
}

// plannedChecks is how many checks rapid runs of test when none fails: the
// failfile named by -rapid.failfile and those committed under
// testdata/rapid/<test>/ replay first, then -rapid.checks new ones (less any
// invalid ones it replaces).
func plannedChecks(test string) int64 {
	n, _ := strconv.ParseInt(flag.Lookup("rapid.checks").Value.String(), 10, 64)
	if flag.Lookup("rapid.failfile").Value.String() != "" {
		n++
	}
	committed, _ := filepath.Glob(filepath.Join("testdata", "rapid", test, test+"-*.fail"))
	return n + int64(len(committed))
}

// deadlineMargin is how long before go test's -timeout the harness reports
// what it found: a check runs for minutes, and rapid stops shrinking only
// between checks.
const deadlineMargin = 2 * time.Minute

// testDeadline is go test's deadline for the running property, when it has
// one: checks end before it (checkCtx).
var testDeadline atomic.Value

// budgetSpent reports whether the running property's time is up: go test's
// deadline less deadlineMargin has passed, so every check's context has
// ended (checkCtx).
func budgetSpent() bool {
	deadline, ok := testDeadline.Load().(time.Time)
	return ok && time.Until(deadline) <= deadlineMargin
}

// runningFailures is the running property's failures, for the files a
// failing check writes.
var runningFailures atomic.Pointer[failures]

// lastFailure is the running property's latest failing check's message.
func lastFailure() string {
	f := runningFailures.Load()
	if f == nil {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// isSkip reports whether a check's panic is rapid's skip (t.Skip: the
// action did not apply), not a failure.
func isSkip(r any) bool {
	return reflect.TypeOf(r).Name() == "invalidData"
}

// failures are what a property's failing checks said: the first (found) and
// the last (the smallest rapid shrank to, which it replays last).
type failures struct {
	mu          sync.Mutex
	first, last string
	n           int
}

// failed reports whether a check has failed.
func (f *failures) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n > 0
}

func (f *failures) note(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.first = msg
	}
	f.last = msg
	f.n++
}

// report says what a failing (or stopped) property found: the violated
// invariant, the pictures written, and the command that replays it.
func (f *failures) report(test string, start time.Time) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	switch f.n {
	case 0:
		fmt.Fprintf(&b, "no check has failed so far.\n")
	case 1:
		fmt.Fprintf(&b, "violated invariant: %s\n", f.last)
	default:
		fmt.Fprintf(&b, "violated invariant (the smallest of %d failing checks; rapid's output above lists its actions, drawn values included): %s\n", f.n, f.last)
		if f.first != f.last {
			fmt.Fprintf(&b, "the first failing check said: %s\n", f.first)
		}
	}
	for _, p := range artifactsSince(test, start) {
		fmt.Fprintf(&b, "written: %s\n", p)
	}
	fmt.Fprintf(&b, "replay: %s", replayCommand(test, start))
	return b.String()
}

// artifactsSince are the files the property's failing checks wrote beside
// rapid's failfiles since start (event logs, timelines, histories).
func artifactsSince(test string, start time.Time) []string {
	files, _ := filepath.Glob(filepath.Join("testdata", "rapid", test, test+".*"))
	var out []string
	for _, p := range files {
		if st, err := os.Stat(p); err == nil && !st.ModTime().Before(start) {
			out = append(out, p)
		}
	}
	return out
}

// runningTest is the name of the property running (they run one at a time),
// for the files a failing check writes.
var runningTest atomic.Value

// artifactPath is where a failing check of the running property writes its
// file of the given kind: beside the failfile rapid writes, named by the
// test, so the last failing check (the smallest, which rapid replays last)
// leaves its own.
func artifactPath(kind string) string {
	test, _ := runningTest.Load().(string)
	return filepath.Join("testdata", "rapid", test, test+"."+kind)
}

// replayCommand is the command that replays the failfile rapid wrote for
// test since start, or the seed form when it wrote none (a committed
// regression failfile that failed is named by rapid's own message above).
func replayCommand(test string, start time.Time) string {
	files, _ := filepath.Glob(filepath.Join("testdata", "rapid", test, "*.fail"))
	newest, at := "", start
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && !st.ModTime().Before(at) {
			newest, at = f, st.ModTime()
		}
	}
	if newest == "" {
		return fmt.Sprintf("go test ./scenarios -run '^%s$' -rapid.failfile=<the failfile rapid named above> (or %s)", test, seedReplay(test))
	}
	return fmt.Sprintf("go test ./scenarios -run '^%s$' -rapid.failfile='%s' (or %s); commit the file as a regression",
		test, newest, seedReplay(test))
}

// runChecks is the run's -rapid.checks as given (a property may run a
// share of it: shareChecks).
var runChecks string

// seedReplay is the command that runs test again from this run's seed and
// counts: the same checks in the same order, the failing one among them.
func seedReplay(test string) string {
	flagValue := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return "?"
	}
	return fmt.Sprintf("go test ./scenarios -run '^%s$' -rapid.seed=%s -rapid.checks=%s -rapid.steps=%s",
		test, flagValue("rapid.seed"), runChecks, flagValue("rapid.steps"))
}

// startCluster is sim.Start for a rapid check: the cluster closes when the
// check ends, and a failed check's output carries the event log.
func startCluster(t *rapid.T, cfg sim.Config) *sim.Cluster {
	t.Helper()
	if os.Getenv("SCENARIO_EVENTS") != "" {
		cfg.EventsTo = os.Stderr
	}
	var c *sim.Cluster
	if w := runningWarmer; w != nil {
		c = w.cluster(t, cfg)
	} else {
		c = sim.Start(t, cfg)
	}
	t.Cleanup(func() { explored.events(c.Events().Events()) })
	t.Cleanup(func() {
		if t.Failed() {
			writeFailurePicture(t, c)
			t.Logf("the simulation event log below is this check's: the smallest failing check rapid found")
		}
	})
	return c
}

// writeFailurePicture writes a failed check's event log and its timeline
// beside rapid's failfile (the last failing check, rapid's smallest, leaves
// its own) and logs where they are.
func writeFailurePicture(t *rapid.T, c *sim.Cluster) {
	test, _ := runningTest.Load().(string)
	dir := filepath.Dir(artifactPath("x"))
	jsonPath, htmlPath, err := timeline.WriteFiles(dir, test, c.Events().Events(), timeline.Options{
		Title:   test + ": a failing check",
		Failure: lastFailure(),
		Replay:  seedReplay(test) + " (or the failfile the run's report names)",
	})
	if err != nil {
		t.Logf("the check's timeline could not be written: %v", err)
		return
	}
	t.Logf("this check's event log: %s; its timeline (open in a browser): %s", jsonPath, htmlPath)
}

// Bounds of one call in the join properties: a call that has not returned
// within its bound fails the check naming it (a hang is an answer), rather
// than waiting out the check's context or go test's timeout.
const (
	// apiCallBound bounds one request of the properties' own API clients
	// (their rest.Config Timeout): above apiretry's 30 s of riding out a
	// lost connection.
	apiCallBound = time.Minute
	// opBound bounds one stratum operation run in a property (a join, a
	// `stratum up`: an etcd member and a kube-apiserver started), as
	// cliBound bounds one run through the CLI.
	opBound = 3 * time.Minute
	// boundGrace is how long past its context's end an operation may take
	// to return before it counts as ignoring its context.
	boundGrace = 15 * time.Second
)

// bounded runs op under a context that ends after d, and fails t naming
// what when op has not returned boundGrace after that: an operation that
// hangs, or ignores its context, is found and named in the check that
// met it.
func bounded[T any](t *rapid.T, ctx context.Context, d time.Duration, what string, op func(context.Context) (T, error)) (T, error) {
	t.Helper()
	octx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := op(octx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(d + boundGrace):
		t.Fatalf("%s did not return within %s: an operator would hang on it", what, d+boundGrace)
		var zero T
		return zero, nil
	}
}

// checkCtx is a context bounded for one check, ending before go test's
// deadline (less deadlineMargin) so a check cut short fails naming its
// step rather than by go test's timeout panic.
func checkCtx(t *rapid.T, d time.Duration) context.Context {
	if deadline, ok := testDeadline.Load().(time.Time); ok {
		d = max(0, min(d, time.Until(deadline)-deadlineMargin))
	}
	if d == 0 {
		// Rapid's replays of a failure (to reproduce it, to shrink it,
		// to print it) run after the budget too: they would fail at
		// their first call and be taken for the failure.
		t.Skip("go test's -timeout leaves this check no time")
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// nodeOn is the ha node on a simulated host, bound to its current incarnation,
// as the simulator builds it.
func nodeOn(h *sim.Host) *ha.Node {
	d := h.Handle()
	return ha.NewNode(ha.Env{Host: d, Checkpoint: d.Checkpoint, Log: quiet})
}

// observer is a host's handle whose dialer ignores the simulated network's
// cuts: an operator who reaches both sides of a partition, so the members'
// own answers (not the dial refusals) are what is judged.
type observer struct{ *sim.Handle }

func (observer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

func observerOn(h *sim.Host, timing sim.EtcdTiming) *ha.Node {
	return ha.NewNode(ha.Env{Host: observer{h.Handle()}, Log: quiet, EtcdReadTimeout: readTimeoutFor(timing)})
}

// readTimeoutFor is how long a check's gate waits on one member's read: three
// election timeouts (a member that does not answer within them is silent,
// not slow: a healthy read takes a heartbeat round trip), at least 150 ms and
// at most ha's 2 s for real networks. A gate sample under a partition waits
// it out on the minority, so it sets the pace of TestSplitBrain's checks; a
// read that a busy machine delays past it makes the gate refuse, the safe
// side of the property.
func readTimeoutFor(timing sim.EtcdTiming) time.Duration {
	return min(2*time.Second, max(150*time.Millisecond, 3*timing.Election()))
}

// ipsOf are the hosts' IPs, as the ha package names members.
func ipsOf(hosts ...*sim.Host) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h.IP().String()
	}
	return out
}

// clientURLsOf are the hosts' etcd client URLs, as an application's etcd
// client names every member.
func clientURLsOf(hosts ...*sim.Host) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h.ClientURL()
	}
	return out
}

// eventually polls cond until it holds or within passes; it returns the last
// detail on timeout. Polling is how a bound is checked, never a sleep standing
// in for an assertion.
func eventually(ctx context.Context, within time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(within)
	var last string
	for {
		ok, detail := cond()
		if ok {
			return true, ""
		}
		last = detail
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false, last
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// directEtcd is an etcd client with h's etcd client certificate that dials
// directly, ignoring the simulated network: the test's own view of the
// members (ground truth), never the code under test's.
func directEtcd(h *sim.Host, endpoints ...string) (*clientv3.Client, error) {
	read := func(name string) ([]byte, error) { return h.Files().ReadFile(version.PKIFile(name)) }
	ca, err := read("etcd/ca.crt")
	if err != nil {
		return nil, err
	}
	cert, err := read("etcd/healthcheck-client.crt")
	if err != nil {
		return nil, err
	}
	key, err := read("etcd/healthcheck-client.key")
	if err != nil {
		return nil, err
	}
	tlsCfg, err := pki.ClientTLS(ca, cert, key, "")
	if err != nil {
		return nil, err
	}
	if len(endpoints) == 0 {
		endpoints = []string{h.ClientURL()}
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsCfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
}

// memberView is one member's own answer: its ID, cluster, term and the leader
// it names, or why it did not answer.
type memberView struct {
	ID, Cluster, Term, Leader uint64
	Err                       error
}

func (v memberView) String() string {
	if v.Err != nil {
		return "no answer"
	}
	return fmt.Sprintf("leader %x (term %d)", v.Leader, v.Term)
}

// viewOf asks one member for its status through cli.
func viewOf(ctx context.Context, cli *clientv3.Client, ep string) memberView {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := cli.Status(rctx, ep)
	if err != nil {
		return memberView{Err: err}
	}
	return memberView{ID: st.Header.MemberId, Cluster: st.Header.ClusterId, Term: st.RaftTerm, Leader: st.Leader}
}
