package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/assets"
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
kube-vip-style VIP candidate. The binaries come from "make assets".`,
		Example: `  # Bring up three control planes, check them, tear them down
  stratum sim up --control-planes 3`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(a.simUpCmd())
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
		Long: `Bring up a simulated HA cluster on this machine and check it: an etcd cluster of
--control-planes members, a real kube-apiserver on every control plane, and a VIP held
by one of them through a leader-elected lease. Each step is printed with its duration
as it completes; then the etcd member table (from the members themselves), the VIP,
and a smoke check that writes a ConfigMap through the VIP and reads it back through
another control plane's own apiserver.

Without --keep the cluster is torn down at once; with --keep it runs until Ctrl-C
(SIGINT) or SIGTERM. Ctrl-C at any point tears down everything started so far.

The control planes are laid out directly by the simulator, as "stratum up" lays out a
control plane (shared CAs, leaf certificates, kubeconfigs, node state), and started
as one etcd cluster. They are not joined through the HA join flow (grant, certificate
download, learner add and promotion): once that flow lands, the simulated control
planes after the first will join with it. --spare-hosts adds empty hosts as join
targets.

The kube-apiserver and etcd binaries come from "make assets".`,
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
	cmd.Flags().StringVar(&f.events, "events", "", "write the simulation's event log to `FILE` as JSON at the end")
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
	for _, name := range []string{assets.KubeAPIServerName} {
		if _, err := assets.Path(name); err != nil {
			return fmt.Errorf("cannot start the simulator, which runs real servers: %w", err)
		}
	}
	var eventsFile *os.File
	if f.events != "" {
		if eventsFile, err = os.Create(f.events); err != nil {
			return fmt.Errorf("event log file: %w (nothing was started)", err)
		}
		defer eventsFile.Close()
	}

	p := &progress{out: a.stdout, last: time.Now()}
	tee := &lineWriter{line: func(line string) {
		a.log.Debug("sim event", "event", line)
		p.event(line)
	}}
	setupCtx, cancel := context.WithTimeout(ctx, simSetupTimeout)
	c, err := sim.New(setupCtx, sim.Config{
		ControlPlanes: f.controlPlanes,
		SpareHosts:    f.spareHosts,
		APIServers:    true,
		VIP:           true,
		EventsTo:      tee,
	})
	cancel()
	if err != nil {
		if eventsFile != nil {
			eventsFile.Close()
			os.Remove(f.events)
		}
		if ctx.Err() != nil {
			return errors.New("interrupted while bringing the cluster up; everything started was stopped")
		}
		return fmt.Errorf("bring up the simulated cluster: %w (everything started was stopped)", err)
	}
	defer func() {
		start := time.Now()
		dir := c.RootDir()
		c.Close()
		p.step(start, fmt.Sprintf("torn down: every server stopped, %s removed", dir))
		if eventsFile != nil {
			if werr := writeEvents(eventsFile, c.Events()); werr != nil && err == nil {
				err = werr
			}
		}
	}()
	if a.opts.onCluster != nil {
		a.opts.onCluster(c)
	}
	interrupted := func(what string, err error) error {
		if ctx.Err() != nil {
			return errors.New("interrupted; the cluster was torn down")
		}
		return fmt.Errorf("%s: %w", what, err)
	}

	start := time.Now()
	vctx, cancel := context.WithTimeout(ctx, simStepTimeout)
	holder, err := c.WaitVIP(vctx)
	cancel()
	if err != nil {
		return interrupted("VIP", err)
	}
	p.step(start, fmt.Sprintf("VIP %s held by %s", c.VIPAddress(), holder.Name()))

	cps := c.Hosts()[:f.controlPlanes]
	var table bytes.Buffer
	if err := memberTable(ctx, &table, cps); err != nil {
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

// memberTable writes the etcd member table as the members report it: the
// member list, and each member's own status (voter or learner, whether it is
// the leader, whether it answered). It fails unless every member is healthy
// and exactly one reports itself leader.
func memberTable(ctx context.Context, w io.Writer, cps []*sim.Host) error {
	var endpoints []string
	for _, h := range cps {
		endpoints = append(endpoints, h.ClientURL())
	}
	cli, err := cps[0].EtcdClient(endpoints...)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, simStepTimeout)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("member list: %w", err)
	}
	members := list.Members
	sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tPEER URL\tROLE\tLEADER\tHEALTH")
	var problems []string
	leaders := 0
	for _, m := range members {
		role := "voter"
		if m.IsLearner {
			role = "learner"
		}
		leader, health := "-", "healthy"
		switch {
		case len(m.ClientURLs) == 0:
			health = "unhealthy: not started (no client URL)"
		default:
			sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := cli.Status(sctx, m.ClientURLs[0])
			scancel()
			switch {
			case err != nil:
				health = "unhealthy: " + err.Error()
			case len(st.Errors) > 0:
				health = "unhealthy: " + strings.Join(st.Errors, "; ")
			case st.Leader == 0:
				health = "unhealthy: no leader"
			}
			if err == nil && st.Leader == st.Header.MemberId {
				leader = "leader"
				leaders++
			}
		}
		if health != "healthy" {
			problems = append(problems, m.Name+" "+health)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Name, strings.Join(m.PeerURLs, ","), role, leader, health)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	if leaders != 1 {
		return fmt.Errorf("%d members report themselves leader, want exactly 1", leaders)
	}
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

func writeEvents(f *os.File, log *sim.EventLog) error {
	data, err := json.MarshalIndent(log, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the event log: %w", err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("write the event log to %s: %w", f.Name(), err)
	}
	return f.Close()
}

// progress prints the steps of a run as they complete, each with its
// duration. It is fed by the simulator's event log (through lineWriter) and by
// the command itself, from several goroutines.
type progress struct {
	mu   sync.Mutex
	out  io.Writer
	last time.Time // when the last step completed

	hostsAt time.Time // when the simulator announced its hosts
}

// Simulator events that complete a step (sim.Cluster records them in New).
var (
	evHosts      = regexp.MustCompile(`cluster of (\d+) hosts on (\S+), VIP (\S+),`)
	evEtcd       = regexp.MustCompile(`etcd cluster of (\d+) ready in (\S+)$`)
	evAPIServers = regexp.MustCompile(`(\d+) apiservers ready `)
)

// event turns one event line into a step when it completes one.
func (p *progress) event(line string) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case evEtcd.MatchString(line):
		m := evEtcd.FindStringSubmatch(line)
		// The event says how long etcd took to start; the rest since the
		// hosts were announced was making the PKI and laying out the hosts.
		etcd, err := time.ParseDuration(m[2])
		if err == nil && !p.hostsAt.IsZero() && now.Add(-etcd).After(p.last) {
			layout := now.Add(-etcd)
			p.stepLocked(layout, p.last, "cluster PKI, certificates, kubeconfigs and node state laid out")
		}
		p.stepLocked(now, p.last, fmt.Sprintf("etcd cluster of %s members ready", m[1]))
	case evAPIServers.MatchString(line):
		m := evAPIServers.FindStringSubmatch(line)
		p.stepLocked(now, p.last, fmt.Sprintf("%s kube-apiservers ready", m[1]))
	case evHosts.MatchString(line):
		m := evHosts.FindStringSubmatch(line)
		p.hostsAt = now
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
