package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// Bounds of a `stratum sim up` run.
const (
	// simSetupTimeout bounds bringing the cluster up (etcd, apiservers).
	simSetupTimeout = 3 * time.Minute
	// simStepTimeout bounds each check after that (VIP, members, smoke).
	simStepTimeout = time.Minute
	// maxSimHosts is the simulator's limit on hosts in one cluster.
	maxSimHosts = 200
	// smokeConfigMap is the sentinel the smoke check writes in kube-system.
	smokeConfigMap = "stratum-sim-smoke"
)

func (a *app) simCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run simulated control planes on this machine",
		Long: `Run a simulated stratum cluster on this machine, with no root and no network access.
Each simulated host gets its own loopback address (127.a.b.N) and its own root
directory, and runs real servers: an embedded etcd member, a real kube-apiserver and a
kube-vip-style VIP candidate. "stratum sim timeline" draws a simulation's event log as
a page you can look at.

"stratum sim up" needs the stratum repository checkout: it finds the kube-apiserver
that "make assets" built there through the checkout's tools/versions.mk (above the
working directory or this binary), so run it inside the checkout or as its
bin/stratum. A "make dist" install on another machine has no checkout and cannot run it.`,
		Example: `  # Bring up three control planes, check them, tear them down
  stratum sim up --control-planes 3

  # Keep the event log, then draw it (/tmp/run.html)
  stratum sim up --control-planes 3 --events /tmp/run.json
  stratum sim timeline /tmp/run.json`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(a.simUpCmd(), a.simTimelineCmd())
	return cmd
}

// simUpFlags are `stratum sim up`'s flags.
type simUpFlags struct {
	controlPlanes, spareHosts int
	keep                      bool
	events                    string
}

func (a *app) simUpCmd() *cobra.Command {
	var f simUpFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring up a simulated HA control plane, check it, and tear it down",
		Long: `Bring up a simulated HA cluster on this machine by running stratum's own bring-up and
join on simulated hosts, then check it. Every host starts empty. On cp1 it runs
"stratum up" (bootstrap: the cluster's CAs, leaves, kubeconfigs, a single-member etcd,
the kube-apiserver, kube-vip holding the VIP); then, for each further control plane,
"stratum token create --control-plane" on cp1 (bootstrap token, certificate-key, shared
certificates uploaded encrypted) and "stratum server" on the new host with that join
command (certificate download, leaves, etcd learner add, node state, start, learner
promotion, kube-apiserver, kube-vip). These are the same code paths the real-host
commands run, on each simulated host's handle instead of this machine.

Each step is printed with its duration as it completes; then the etcd member table
(name, peer URL, voter or learner, leader, health, from the members themselves), the
VIP, and a smoke check that writes a ConfigMap through the VIP and reads it back through
another control plane's own apiserver. The run fails (exit 1) unless every member is a
healthy voter and exactly one is leader.

Without --keep the cluster is torn down at once; with --keep it runs until Ctrl-C
(SIGINT) or SIGTERM. Ctrl-C at any point tears down everything started so far.
--spare-hosts adds further empty hosts.

It needs the stratum repository checkout: the kube-apiserver comes from "make assets",
found through the checkout's tools/versions.mk (above the working directory or this
binary). Run it inside the checkout or as its bin/stratum; a "make dist" install on
another machine has no checkout and cannot run it.`,
		Example: `  # Three control planes: bring up, check, tear down
  stratum sim up --control-planes 3

  # Keep a five-node cluster running until Ctrl-C, and save its event log
  stratum sim up --control-planes 5 --keep --events /tmp/stratum-events.json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.simUp(cmd.Context(), f) },
	}
	cmd.Flags().IntVar(&f.controlPlanes, "control-planes", 3, "control planes to bring up (etcd member, kube-apiserver, VIP candidate each)")
	cmd.Flags().IntVar(&f.spareHosts, "spare-hosts", 0, "further hosts with nothing on them (join targets)")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "keep the cluster running until Ctrl-C or SIGTERM")
	cmd.Flags().StringVar(&f.events, "events", "", "write the simulation's event log to `FILE` as JSON, rewritten as events arrive (follow a --keep run live) and once more at the end")
	return cmd
}

// simUp is `stratum sim up`.
func (a *app) simUp(ctx context.Context, f simUpFlags) (err error) {
	switch {
	case f.controlPlanes < 1:
		return usagef("--control-planes %d: a cluster needs at least one control plane", f.controlPlanes)
	case f.spareHosts < 0:
		return usagef("--spare-hosts %d: cannot be negative", f.spareHosts)
	case f.controlPlanes+f.spareHosts > maxSimHosts:
		return usagef("--control-planes %d and --spare-hosts %d: the simulator runs at most %d hosts", f.controlPlanes, f.spareHosts, maxSimHosts)
	}
	// Refusals first: nothing has been started yet.
	if f.events != "" {
		if err := checkWritableFile(f.events); err != nil {
			return refusedf("--events %s: %w: pass the path of a file in a directory that exists and is writable (nothing was started)", f.events, err)
		}
		if err := checkReplaceable(f.events, "a stratum event log from an earlier run", isEventLog); err != nil {
			return refusedf("--events %s: %w (nothing was started)", f.events, err)
		}
	}
	for _, name := range []string{assets.KubeAPIServerName} {
		if _, err := assets.Path(name); err != nil {
			return refusedf("cannot start the simulator, which runs real servers: %w", err)
		}
	}

	p := &progress{out: a.stdout, last: time.Now()}
	tee := &lineWriter{line: func(line string) {
		a.log.Debug("sim event", "event", line)
		p.event(line)
	}}
	setupCtx, cancel := context.WithTimeout(ctx, simSetupTimeout)
	defer cancel()
	c, err := sim.New(setupCtx, sim.Config{
		Fresh:      true,
		SpareHosts: f.controlPlanes + f.spareHosts,
		APIServers: true,
		VIP:        true,
		EventsTo:   tee,
	})
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted while bringing the cluster up; everything started was stopped")
		}
		return fmt.Errorf("bring up the simulated cluster: %w (everything started was stopped)", err)
	}
	var live *liveEvents
	if f.events != "" {
		live = startLiveEvents(f.events, c.Events(), a.log)
	}
	defer func() {
		start := time.Now()
		dir := c.RootDir()
		c.Close()
		p.step(start, fmt.Sprintf("torn down: every server stopped, %s removed", dir))
		if live != nil {
			if werr := live.stop(); werr != nil && err == nil {
				err = werr
			}
		}
	}()
	if a.opts.OnCluster != nil {
		a.opts.OnCluster(c)
	}
	interrupted := func(what string, err error) error {
		if ctx.Err() != nil {
			return errors.New("interrupted; the cluster was torn down")
		}
		// The error's advice is a real node's; this one is gone.
		return fmt.Errorf("%s: %w (in the simulation, now torn down: run `stratum sim up` again)", what, err)
	}

	// The bring-up, as an operator runs it: `stratum up` on cp1, then a
	// grant minted on cp1 and `stratum server` for each further control
	// plane, each an ha.Node on the simulated host's handle.
	cps := c.Hosts()[:f.controlPlanes]
	nodes := make([]*ha.Node, len(cps))
	for i, h := range cps {
		d := h.Handle()
		nodes[i] = ha.NewNode(ha.Env{Host: d, Checkpoint: d.Checkpoint, Log: a.log})
	}
	start := time.Now()
	vip := nodestate.VIP{Address: c.VIPAddress().String(), Interface: "lo"}
	if _, err := nodes[0].Up(setupCtx, ha.BootstrapOptions{VIP: vip}); err != nil {
		return interrupted(cps[0].Name()+": stratum up", err)
	}
	p.step(start, cps[0].Name()+": stratum up (bootstrap)")
	for i := 1; i < len(cps); i++ {
		start = time.Now()
		m, server, err := mintGrant(setupCtx, nodes[0], cps[0].Handle(), token.DefaultTTL, true, a.waitNotice())
		if err != nil {
			return interrupted(cps[0].Name()+": token create --control-plane", err)
		}
		p.step(start, "token create --control-plane")
		start = time.Now()
		o := ha.JoinOptions{Server: server, Token: m.Token, CAHash: m.CAHash, CertKey: m.CertKey}
		if _, err := join(setupCtx, nodes[i], o); err != nil {
			return interrupted(cps[i].Name()+": stratum server (join)", err)
		}
		p.step(start, cps[i].Name()+": stratum server (join)")
	}

	start = time.Now()
	vctx, vcancel := context.WithTimeout(ctx, simStepTimeout)
	holder, err := c.WaitVIP(vctx)
	vcancel()
	if err != nil {
		return interrupted("VIP", err)
	}
	p.step(start, fmt.Sprintf("VIP %s held by %s", c.VIPAddress(), holder.Name()))

	var table bytes.Buffer
	mctx, mcancel := context.WithTimeout(ctx, simStepTimeout)
	rows, err := etcdMembers(mctx, nodes[0], cps[0].ClientURL())
	mcancel()
	if err != nil {
		return interrupted("etcd members", err)
	}
	if err := writeMemberTable(&table, rows); err != nil {
		return err
	}
	if err := tableVerdict(rows); err != nil {
		p.print("\n" + table.String())
		return interrupted("etcd members", err)
	}
	p.print(fmt.Sprintf("\n%s\nVIP %s (%s), held by %s\n\n", table.String(), c.VIPAddress(), c.VIPURL(), holder.Name()))

	start = time.Now()
	reader, err := smokeCheck(ctx, c, cps)
	if err != nil {
		return interrupted("smoke check", err)
	}
	p.step(start, fmt.Sprintf("smoke check: ConfigMap kube-system/%s written through the VIP, read back from %s's apiserver", smokeConfigMap, reader))

	if !f.keep {
		return nil
	}
	p.print(fmt.Sprintf("\nThe cluster is up; Ctrl-C (or SIGTERM) tears it down.\n"+
		"  apiserver  %s\n  kubectl    kubectl --kubeconfig %s get --raw /readyz\n  host roots %s\n\n",
		c.VIPURL(), cps[0].Path(version.Kubeconfig("admin")), c.RootDir()))
	<-ctx.Done()
	return nil
}

// smokeCheck writes the sentinel ConfigMap through the VIP and reads it back
// through the own apiserver of a control plane other than the VIP holder (the
// only one, with one control plane), so the write went through the VIP,
// etcd, and another apiserver's read. It returns the reader's name.
func smokeCheck(ctx context.Context, c *sim.Cluster, cps []*sim.Host) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, simStepTimeout)
	defer cancel()
	vcfg, err := c.VIPConfig()
	if err != nil {
		return "", err
	}
	vcfg.Timeout = 10 * time.Second
	vcs, err := kubernetes.NewForConfig(vcfg)
	if err != nil {
		return "", err
	}
	stamp := time.Now().UTC().Format(time.RFC3339Nano)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: smokeConfigMap, Namespace: "kube-system"},
		Data:       map[string]string{"written-at": stamp, "written-through": c.VIPURL()},
	}
	// The VIP can move (closing its connections) while the holders settle;
	// retry the write until the step's deadline.
	for {
		_, err = vcs.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{})
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("write ConfigMap kube-system/%s through the VIP %s: %w", smokeConfigMap, c.VIPURL(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	reader := cps[0]
	if holder := c.VIPHolder(); holder != nil && len(cps) > 1 {
		for _, h := range cps {
			if h != holder {
				reader = h
				break
			}
		}
	}
	rcs, err := reader.Admin()
	if err != nil {
		return "", err
	}
	got, err := rcs.CoreV1().ConfigMaps("kube-system").Get(ctx, smokeConfigMap, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read ConfigMap kube-system/%s back from %s (%s): %w", smokeConfigMap, reader.Name(), reader.APIServerURL(), err)
	}
	if got.Data["written-at"] != stamp {
		return "", fmt.Errorf("ConfigMap kube-system/%s read back from %s has written-at %q, want %q", smokeConfigMap, reader.Name(), got.Data["written-at"], stamp)
	}
	return reader.Name(), nil
}

// liveEventsEvery is how often a running `sim up --events` rewrites its
// event log file when events were recorded since the last write.
const liveEventsEvery = 250 * time.Millisecond

// liveEvents keeps a running simulation's event log in a file, rewritten
// whole (atomically: a reader sees the old log or the new one, never a torn
// one) as events are recorded, so the MCP sim_events tool and a person with
// jq can follow a `sim up --keep` while it runs.
type liveEvents struct {
	path    string
	log     *sim.EventLog
	written int // events in the file
	done    chan struct{}
	stopped chan struct{}
}

func startLiveEvents(path string, log *sim.EventLog, lg *slog.Logger) *liveEvents {
	l := &liveEvents{path: path, log: log, written: -1, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(l.stopped)
		t := time.NewTicker(liveEventsEvery)
		defer t.Stop()
		for {
			select {
			case <-l.done:
				return
			case <-t.C:
				if err := l.flush(); err != nil {
					lg.Warn("event log not written", "file", path, "err", err)
				}
			}
		}
	}()
	return l
}

// flush writes the log when it has events the file lacks.
func (l *liveEvents) flush() error {
	evs := l.log.Events()
	if len(evs) == l.written {
		return nil
	}
	if evs == nil {
		evs = []sim.Event{} // an empty array, which readers take; never null
	}
	data, err := json.MarshalIndent(evs, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the event log: %w", err)
	}
	if err := writeFileAtomic(l.path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the event log to %s: %w", l.path, err)
	}
	l.written = len(evs)
	return nil
}

// stop ends the periodic writes and writes the final log.
func (l *liveEvents) stop() error {
	close(l.done)
	<-l.stopped
	return l.flush()
}

// eventLogIs says what an event log is, for a message about a file that is
// not one.
const eventLogIs = "a stratum event log (the JSON array of events `stratum sim up --events` writes)"

// maxEventLog bounds the event log readEvents reads: far above a long
// simulation's (a few MiB), far below what would strain the reader's memory.
const maxEventLog = 256 << 20

// readEvents reads an event log `sim up --events` wrote: a regular file of
// at most maxEventLog bytes holding a JSON array of events, each with a
// time and a kind. Anything else (a device, a pipe that never ends, a
// document of another shape) is an error, never events made up from it.
func readEvents(path string) ([]sim.Event, error) {
	// Stat before the open: opening a pipe no one writes blocks for good.
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist: name the file `stratum sim up --events FILE` writes (a relative path is taken from this process's working directory)", path)
	}
	if err == nil && !fi.IsDir() && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file, so not %s", path, eventLogIs)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err = f.Stat() // the file opened, which a rename may have replaced
	switch {
	case err != nil:
		return nil, err
	case fi.IsDir():
		return nil, fmt.Errorf("%s is a directory, not %s", path, eventLogIs)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file, so not %s", path, eventLogIs)
	case fi.Size() > maxEventLog:
		return nil, fmt.Errorf("%s holds %d bytes, more than the %d an event log is read up to", path, fi.Size(), maxEventLog)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxEventLog+1))
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s is not %s: it is empty", path, eventLogIs)
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil, fmt.Errorf("%s is not %s: it holds a JSON null", path, eventLogIs)
	}
	var evs []sim.Event
	if err := json.Unmarshal(data, &evs); err != nil {
		return nil, fmt.Errorf("%s is not %s: %s", path, eventLogIs, jsonProblem(err))
	}
	for i, e := range evs {
		if !validEvent(e) {
			return nil, fmt.Errorf("event %d of %s has no time or no kind: it is not %s", i+1, path, eventLogIs)
		}
	}
	return evs, nil
}

// jsonProblem says in plain words why a file's JSON is not an event log
// (encoding/json's own error names Go types: "cannot unmarshal object into
// Go value of type []sim.Event").
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("it is not valid JSON (at byte %d)", se.Offset)
	case errors.As(err, &te) && te.Field == "" && te.Type != nil && te.Type.Kind() == reflect.Slice:
		return fmt.Sprintf("it holds a JSON %s, not an array of events", te.Value)
	case errors.As(err, &te) && te.Field == "":
		return fmt.Sprintf("it is an array of JSON %ss, not of events", te.Value)
	case errors.As(err, &te):
		return fmt.Sprintf("an event's %q is a JSON %s", te.Field, te.Value)
	}
	return "its events are not {time, host, kind, what} objects"
}

// validEvent reports whether e has what every recorded event has: a time
// and a kind.
func validEvent(e sim.Event) bool { return !e.Time.IsZero() && e.Kind != "" }

// isEventLog reports whether r holds an event log `sim up --events` wrote
// (a JSON array of events, each with a time and a kind), or only white
// space. It decodes one event at a time, so a large file that is not a log
// is recognised from its start.
func isEventLog(r io.Reader) bool {
	dec := json.NewDecoder(r)
	tok, err := dec.Token()
	if err == io.EOF {
		return true
	}
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '[' {
		return false
	}
	for dec.More() {
		var e sim.Event
		if err := dec.Decode(&e); err != nil || !validEvent(e) {
			return false
		}
	}
	if _, err := dec.Token(); err != nil { // the closing ']'
		return false
	}
	_, err = dec.Token()
	return err == io.EOF
}

// checkReplaceable refuses to let a command replace the file at p unless
// there is none, it is empty, or ours recognises it as one the command wrote
// before (what: "an event log from an earlier run"): a mistyped path must
// not destroy another file. Its error says what to do. It reads the file,
// never writes it.
func checkReplaceable(p, what string, ours func(io.Reader) bool) error {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("the file cannot be checked (%w): pass a new path", pathErrCause(err))
	case !fi.Mode().IsRegular():
		return errors.New("it exists and is not a regular file: pass the path of a new file")
	case fi.Size() == 0:
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("the file exists and cannot be read to check it is %s (%w): pass a new path", what, pathErrCause(err))
	}
	defer f.Close()
	if !ours(bufio.NewReader(f)) {
		return fmt.Errorf("the file exists and is not %s, so it is not overwritten: pass a new path, or remove the file", what)
	}
	return nil
}

// progress prints the steps of a run as they complete, each with its
// duration. It is fed by the simulator's event log (through lineWriter) and by
// the command itself, from several goroutines.
type progress struct {
	mu   sync.Mutex
	out  io.Writer
	last time.Time // when the last step completed
}

// evHosts is the simulator event that completes the first step (sim.New
// records it once the hosts are laid out); the rest are the command's own.
var evHosts = regexp.MustCompile(`cluster of (\d+) hosts on (\S+), VIP (\S+),`)

// event turns one event line into a step when it completes one.
func (p *progress) event(line string) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := evHosts.FindStringSubmatch(line); m != nil {
		p.stepLocked(now, p.last, fmt.Sprintf("%s hosts on %s, VIP %s", m[1], m[2], m[3]))
	}
}

// step prints a step that began at start and completed now.
func (p *progress) step(start time.Time, what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stepLocked(time.Now(), start, what)
}

// stepLocked prints a step that ran from start to done; p.mu is held.
func (p *progress) stepLocked(done, start time.Time, what string) {
	fmt.Fprintf(p.out, "✓ %-64s %6.1fs\n", what, done.Sub(start).Seconds())
	p.last = done
}

func (p *progress) print(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.out, s)
	p.last = time.Now()
}

// lineWriter calls line for each complete line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.buf = append(w.buf, b...)
	var lines []string
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	w.mu.Unlock()
	for _, l := range lines {
		w.line(l)
	}
	return len(b), nil
}
