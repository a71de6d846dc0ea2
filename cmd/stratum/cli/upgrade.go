package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/internal/version"
)

// mkdirDurable makes dir and its missing parents on this machine, each
// parent's entry fsynced (host.Dir's MkdirAll): a snapshot or unit copy
// kept in it must not lose its directory to a power loss while the
// control plane restarts.
func mkdirDurable(dir string) error { return (&host.Dir{Root: "/"}).MkdirAll(dir, 0o700) }

// upgradeBackupDir is where `stratum upgrade node` saves its snapshot unless
// told otherwise: under the node's state directory, root's alone.
const upgradeBackupDir = version.StateDir + "/backups"

// upgradeFlags are `stratum upgrade node`'s flags.
type upgradeFlags struct {
	binDir, snapshot, unitDir string
	timeout                   time.Duration
	dryRun                    bool
}

func (a *app) upgradeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Upgrade this node's stratum and its control-plane binaries, one control plane at a time",
		Example: `  # What runs where, and the order to upgrade in
  stratum upgrade plan

  # Then on each control plane in turn, with the new release's stratum
  /opt/stratum/v2/bin/stratum upgrade node --bin-dir /opt/stratum/v2/bin --dry-run
  /opt/stratum/v2/bin/stratum upgrade node --bin-dir /opt/stratum/v2/bin`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(a.upgradePlanCmd(), a.upgradeNodeCmd())
	return cmd
}

func (a *app) upgradeNodeCmd() *cobra.Command {
	var f upgradeFlags
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Restart this control plane's supervisor as this stratum, running the binaries in --bin-dir",
		Long: `Upgrade this control plane to the stratum running this command and the etcd and
kube-apiserver in --bin-dir: run it with the new release's stratum, on one control plane
at a time, while the others serve.

It refuses, with nothing changed (exit 3), unless all of these hold:
  - this machine is a control plane (node state, no interrupted join or reset);
  - this stratum and --bin-dir's etcd and kube-apiserver are the ones this release pins
    and only root may change them (as "stratum install" checks);
  - its stratum supervisor runs, can be replaced in place (this release or later; an
    older one is upgraded by hand: docs/real-hosts.md) and supervises a control plane
    that is up;
  - --bin-dir's etcd fits the cluster's etcd version as etcd judges a start (no
    downgrade under way) and is at most one minor above the lowest member's; every
    control plane's kube-apiserver answers its version and stays within one minor
    version of this release's, which is not below any of them;
  - every etcd member is healthy and none is a learner (a join under way), so the
    cluster keeps its quorum while this member restarts (with fewer than three voters
    it cannot: the command says so and goes on, as any restart of this node would).
Then, in order, each step said as it runs:
  1. a snapshot of the cluster's etcd is saved (--snapshot, by default under
     /var/lib/stratum/backups), to fall back on;
  2. the running supervisor takes the node's locks, stops its services, newest first
     (the VIP's lease is released, so another control plane takes the VIP within about
     a second), and runs this stratum in its own process, keeping its PID (systemd's
     unit, or the terminal running "stratum up", keeps it), which starts the control
     plane from the node's state with the new binaries, as at a boot;
  3. it waits (--timeout) until a new supervisor supervises as this stratum from
     --bin-dir; one that runs the previous stratum again or retries its start fails it;
  4. it waits until this node's etcd member is a healthy voter of a healthy cluster;
  5. the systemd unit "stratum install" wrote (in --unit-dir) is rewritten to run this
     stratum with --bin-dir (its previous text kept under /var/lib/stratum/backups), and
     systemd reads it ("systemctl daemon-reload") where it runs; a unit stratum did not
     write is left as it is.
Re-running the command after any interruption finishes the upgrade: a node that already
runs this stratum from --bin-dir, or is on its way to it, is only waited for and its unit
updated. --dry-run makes every check and prints the steps, changing nothing.
Exits 0 once upgraded, 1 when a step failed, 2 on bad usage, 3 when refused.`,
		Example: `  # The new release unpacked under /opt/stratum/v2 (make dist's layout):
  /opt/stratum/v2/bin/stratum upgrade node --bin-dir /opt/stratum/v2/bin --dry-run
  /opt/stratum/v2/bin/stratum upgrade node --bin-dir /opt/stratum/v2/bin

  # Then the next control plane, once this one's "stratum status" exits 0`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.timeout <= 0 {
				return usagef("--timeout must be positive (got %s)", f.timeout)
			}
			return a.upgradeNode(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.binDir, "bin-dir", controlplane.DefaultBinDir, "the `directory` of the etcd and kube-apiserver this release pins (the bin/ of `make dist`)")
	fl.StringVar(&f.snapshot, "snapshot", "", "save the etcd snapshot taken before the restart to this `FILE` (default "+upgradeBackupDir+"/etcd-before-upgrade-<version>-<time>.db)")
	fl.StringVar(&f.unitDir, "unit-dir", "/etc/systemd/system", "the `directory` holding the systemd unit `stratum install` wrote")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long to wait for the upgraded control plane to serve")
	fl.BoolVar(&f.dryRun, "dry-run", false, "make every check and print the steps; change nothing")
	return cmd
}

// nodeUpgrade is one `stratum upgrade node`: what its checks found, which
// its steps then use.
type nodeUpgrade struct {
	a      *app
	f      upgradeFlags
	n      *ha.Node
	h      host.Host
	st     *nodestate.NodeState
	client supervisor.Client
	// running is the supervisor as found; self and binDir are what it is
	// to run as (self: this stratum as invoked, what the unit names).
	running      supervisor.About
	self, binDir string
	// fromAPIServer is the kube-apiserver version the supervisor runs.
	fromAPIServer string
	// etcdVersion is the version of --bin-dir's etcd.
	etcdVersion string
	// members are the etcd members as checkHealth listed them.
	members []memberRow
	// done: the supervisor already runs this stratum from binDir (an
	// upgrade finished or interrupted after its restart); only the wait
	// and the unit are left. replacing: the supervisor found accepted this
	// stratum as its replacement and is on its way to it (an upgrade
	// interrupted right after it asked).
	done, replacing bool
	// unitPath is the unit to rewrite ("" when none is to be), with
	// unitText, from unitWas.
	unitPath  string
	unitText  string
	unitWas   []byte
	snapshot  string
	notes     []string
	startedAt time.Time
	askedAt   time.Time // when the supervisor was asked to be replaced
}

// upgradeNode is `stratum upgrade node`: the refusals, then the steps in
// order. Each step is idempotent or skipped once done, so a re-run after an
// interruption converges.
func (a *app) upgradeNode(ctx context.Context, f upgradeFlags) error {
	u := &nodeUpgrade{a: a, f: f, client: supervisor.Client{Path: supervisor.SocketPath}, startedAt: time.Now()}
	if err := upgradeChecks(ctx, u.checkNode, u.checkRelease, u.checkSupervisor, u.checkHealth, u.checkVersions, u.checkUnit); err != nil {
		return err
	}
	u.printPlan()
	if f.dryRun {
		return nil
	}
	for _, step := range []func(context.Context) error{u.saveSnapshot, u.replaceSupervisor, u.waitServing, u.waitHealthy, u.writeUnit} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(a.stdout, "node %s upgraded to stratum %s (etcd %s, kube-apiserver %s from %s) in %s", u.st.NodeName, Version, u.etcdVersion, version.Kubernetes, u.binDir, time.Since(u.startedAt).Round(100*time.Millisecond))
	if u.snapshot != "" {
		fmt.Fprintf(a.stdout, "; the snapshot taken before is %s", u.snapshot)
	}
	fmt.Fprintln(a.stdout, "\nnext: the next control plane, one at a time (`stratum status` and `stratum etcd health` exit 0 here first)")
	return nil
}

// upgradeChecks runs checks in order until one fails. They only read, so
// every failure is a refusal (exit 3: the node and the cluster as they
// were), a member list or a supervisor that did not answer as much as a
// rule broken; bad usage stays bad usage.
func upgradeChecks(ctx context.Context, checks ...func(context.Context) error) error {
	for _, check := range checks {
		err := check(ctx)
		var usage usageError
		switch {
		case err == nil:
			continue
		case ha.IsRefusal(err), errors.As(err, &usage):
			return err
		default:
			return upgradeRefusedf("%w", err)
		}
	}
	return nil
}

func upgradeRefusedf(format string, args ...any) error {
	return refusedf("upgrade refused: "+format+"; nothing was changed", args...)
}

// checkNode: root, a control plane, no join or reset left unfinished.
func (u *nodeUpgrade) checkNode(ctx context.Context) error {
	if err := requireRoot("stratum upgrade node", "it stops and starts this node's control plane through its supervisor"); err != nil {
		return err
	}
	n, h, err := u.a.localNode()
	if err != nil {
		return err
	}
	u.n, u.h = n, h
	if u.st, err = loadState(h); err != nil {
		return err
	}
	if what, err := unfinishedWork(ctx, n, h); err != nil {
		return err
	} else if what != "" {
		return upgradeRefusedf("%s", what)
	}
	return nil
}

// unfinishedWork says what a join or a reset left unfinished on this node,
// with what to run ("" when nothing is): the commands that restart its
// control plane refuse until it is done.
func unfinishedWork(ctx context.Context, n *ha.Node, h host.Host) (string, error) {
	if survives, err := n.JoinIntentSurvives(ctx); err != nil {
		return "", err
	} else if survives {
		return fmt.Sprintf("an interrupted join's intent journal survives on this node (%s): re-run that join command first", ha.JoinIntentPath()), nil
	}
	if _, err := h.Stat(ha.ResetJournalPath()); err == nil {
		return fmt.Sprintf("a `stratum reset` began on this node and has not finished (%s): run it again", ha.ResetJournalPath()), nil
	}
	return "", nil
}

// checkSupervisor: a supervisor runs, can be replaced, and supervises a
// control plane that is up.
func (u *nodeUpgrade) checkSupervisor(ctx context.Context) error {
	about, err := u.client.About(ctx)
	switch {
	case errors.Is(err, supervisor.ErrNotRunning):
		return upgradeRefusedf("no stratum supervisor runs on this node (%v): with nothing running, upgrading is installing: put the new binaries in place, run `stratum install --bin-dir DIR` with the new stratum, then start it", err)
	case errors.Is(err, supervisor.ErrUnsupported):
		return upgradeRefusedf("this node's supervisor is a stratum from before `upgrade node` (it cannot be replaced in place): upgrade this node by hand (docs/real-hosts.md, upgrading)")
	case err != nil:
		return upgradeRefusedf("ask this node's supervisor about itself: %w", err)
	}
	if about.PID == 0 {
		return upgradeRefusedf("this node's supervisor runs in a PID namespace this command does not see into (a container of its own?): run upgrade node where it runs")
	}
	u.running = about
	u.done = about.Version == Version && about.BinDir == u.binDir && sameFile(about.Exe, u.self)
	u.replacing = about.State == supervisor.StateReplacing+u.self+" in its place"
	if u.done || u.replacing {
		return nil
	}
	if about.State != supervisor.StateSupervising {
		return upgradeRefusedf("this node's supervisor (stratum %s, pid %d) is %s, not supervising a control plane that is up: `stratum status` says why; fix that first, or upgrade by hand (docs/real-hosts.md, upgrading)", about.Version, about.PID, about.State)
	}
	sctx, cancel := context.WithTimeout(ctx, supervisorCallTimeout)
	defer cancel()
	st, err := u.client.ServiceStatus(sctx, ha.ServiceAPIServer)
	if err != nil {
		return upgradeRefusedf("status of this node's kube-apiserver: %w", err)
	}
	u.fromAPIServer = st.Version
	return nil
}

// checkRelease: this stratum and --bin-dir's binaries are the ones this
// release pins, root's alone, in paths a unit can name.
func (u *nodeUpgrade) checkRelease(ctx context.Context) error {
	self, err := unitExecPath(os.Args[0])
	if err != nil {
		return err
	}
	if err := refuseReplaceableSelf(os.Args[0]); err != nil {
		return upgradeRefusedf("%v", err)
	}
	if c := unitUnsafe(self); c != "" {
		return upgradeRefusedf("this stratum's path %q holds %q, which a systemd ExecStart would split or expand: install it under a path without it", self, c)
	}
	if u.binDir, err = filepath.Abs(u.f.binDir); err != nil {
		return usagef("--bin-dir: %v", err)
	}
	if c := unitUnsafe(u.binDir); c != "" {
		return usagef("--bin-dir %q holds %q, which a systemd ExecStart would split or expand; nothing was changed: use a directory without it", u.binDir, c)
	}
	bins := controlplane.Binaries{Dir: u.binDir}
	// etcd may be the pinned one or the previous minor (a downgraded
	// node's): the version rules judge the one that is there.
	if u.etcdVersion, err = bins.Version(ctx, controlplane.EtcdBinary); err != nil {
		return upgradeRefusedf("the new supervisor would not start: %v", err)
	}
	if err := bins.Check(ctx, controlplane.APIServerBinary); err != nil {
		return upgradeRefusedf("the new supervisor would not start: %v", err)
	}
	u.self = self
	return nil
}

// checkVersions: etcd's and the kube-apiserver's version rules for a
// member restarted on other binaries.
func (u *nodeUpgrade) checkVersions(ctx context.Context) error {
	if u.done || u.replacing {
		return nil
	}
	var etcdVersions, ips []string
	for _, r := range u.members {
		if r.Version != "" {
			etcdVersions = append(etcdVersions, r.Version)
		}
		if r.ClientIP != "" {
			ips = append(ips, r.ClientIP)
		}
	}
	if err := u.n.EtcdVersionFits(ctx, ips, u.etcdVersion); err != nil {
		return refused(fmt.Errorf("upgrade refused: %w", err))
	}
	if err := etcdStep(etcdVersions, u.etcdVersion); err != nil {
		return upgradeRefusedf("%v", err)
	}
	admin, err := adminRESTConfig(u.h, u.a.waitNotice())
	if err != nil {
		return err
	}
	running := map[string]string{urlHost(u.st.Etcd.ClientURL): u.fromAPIServer}
	for _, ip := range ips {
		if _, ok := running[ip]; ok {
			continue
		}
		v, err := apiServerVersionAt(admin, ip)
		if err != nil {
			return upgradeRefusedf("the kube-apiserver at %s did not tell its version (%v), and Kubernetes keeps every kube-apiserver of a cluster within one minor version of the others: bring it up first (`stratum status` there), or remove that control plane (`stratum reset` on it, or `stratum etcd member remove` for a machine that is gone)", ip, err)
		}
		running[ip] = v
	}
	for ip, v := range running {
		if _, _, ok := version.MajorMinor(v); !ok {
			return upgradeRefusedf("the kube-apiserver at %s says it is %q, which is no version this stratum reads: its version step cannot be judged", ip, v)
		}
		if err := apiServerStep(v, version.Kubernetes); err != nil {
			return upgradeRefusedf("%v (the kube-apiserver at %s); Kubernetes keeps every kube-apiserver of a cluster within one minor version of the others", err, ip)
		}
	}
	return nil
}

// apiServerVersionAt is the gitVersion the kube-apiserver at ip answers on
// /version, asked with admin (the admin kubeconfig's credential and its
// cluster CA) aimed at ip.
func apiServerVersionAt(admin *rest.Config, ip string) (string, error) {
	cfg := rest.CopyConfig(admin)
	cfg.Host, cfg.Timeout = apiServerURL(ip), 5*time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// checkHealth: every member healthy and a voter, so stopping this one
// keeps the quorum (said, not refused, when fewer than three voters make
// that impossible).
func (u *nodeUpgrade) checkHealth(ctx context.Context) error {
	if u.done || u.replacing {
		return nil
	}
	rows, note, err := restartKeepsQuorum(ctx, u.n, u.st)
	switch {
	case ha.IsRefusal(err):
		return refused(fmt.Errorf("upgrade refused: %w; nothing was changed", err))
	case err != nil:
		return upgradeRefusedf("%w", err)
	}
	u.members = rows
	if note != "" {
		u.notes = append(u.notes, note)
	}
	return nil
}

// restartKeepsQuorum checks that this node's etcd member may stop for a
// restart: every member healthy and none a learner (a join under way), so
// the others keep the quorum. With fewer than three voters they cannot, and
// no other order of steps helps: that is said in the note, not refused, as
// any restart of this node would do the same. It returns the member list it
// judged; its refusals are marked (ha.IsRefusal), apart from a failure to
// list the members.
func restartKeepsQuorum(ctx context.Context, n *ha.Node, st *nodestate.NodeState) ([]memberRow, string, error) {
	if rep, err := etcdHealth(ctx, n, st); err != nil {
		return nil, "", refused(fmt.Errorf("stopping this etcd member while the cluster is unhealthy could take its quorum (members %s): %w; `stratum etcd members` shows each member", strings.Join(rep.Members, ", "), err))
	}
	rows, err := etcdMembers(ctx, n, st.Etcd.ClientURL)
	if err != nil {
		return nil, "", err
	}
	voters := 0
	for _, r := range rows {
		if r.Learner {
			return nil, "", refusedf("etcd member %s is a learner (a join under way, or one that stopped): let the join finish, or remove it (`stratum etcd member remove`)", r.Name)
		}
		voters++
	}
	switch {
	case voters == 1:
		return rows, "this is the cluster's only control plane: the cluster does not serve while it restarts", nil
	case voters < 3:
		return rows, fmt.Sprintf("the cluster has %d etcd voters: while this member restarts the others are no quorum, and every write waits", voters), nil
	}
	return rows, "", nil
}

// unitHeader starts every unit `stratum install` writes (systemdUnit).
const unitHeader = "# Written by \"stratum install\"."

// checkUnit finds the systemd unit to rewrite: one stratum wrote, which
// does not yet run this stratum from binDir. A unit that is not stratum's
// is left alone, and said so.
func (u *nodeUpgrade) checkUnit(context.Context) error {
	p := filepath.Join(u.f.unitDir, unitName)
	data, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return upgradeRefusedf("read the systemd unit %s: %v", p, err)
	case !strings.HasPrefix(string(data), unitHeader):
		u.notes = append(u.notes, fmt.Sprintf("%s was not written by `stratum install`: it is left as it is; make its ExecStart run %s up --as-supervisor --bin-dir %s", p, u.self, u.binDir))
		return nil
	}
	dropins, _ := filepath.Glob(filepath.Join(u.f.unitDir, unitName+".d", "*.conf"))
	for _, d := range dropins {
		if b, err := os.ReadFile(d); err == nil && setsExecStart(b) {
			u.notes = append(u.notes, fmt.Sprintf("the drop-in %s sets ExecStart, over the unit's: make it run %s up --as-supervisor --bin-dir %s", d, u.self, u.binDir))
		}
	}
	want := systemdUnit(u.self, u.binDir)
	if string(data) == want {
		return nil
	}
	if err := checkWritableFile(p); err != nil {
		return upgradeRefusedf("the systemd unit %s cannot be rewritten: %v", p, err)
	}
	u.unitPath, u.unitText, u.unitWas = p, want, data
	return nil
}

// printPlan says what was found and the steps that follow.
func (u *nodeUpgrade) printPlan() {
	w := u.a.stdout
	r := u.running
	fmt.Fprintf(w, "node %s: supervisor pid %d runs stratum %s (%s) from %s, %s\n", u.st.NodeName, r.PID, r.Version, r.Exe, r.BinDir, r.State)
	fmt.Fprintf(w, "this release: stratum %s (%s) with etcd %s and kube-apiserver %s from %s\n", Version, u.self, u.etcdVersion, version.Kubernetes, u.binDir)
	for _, n := range u.notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	verb := "steps"
	if u.f.dryRun {
		verb = "steps it would take (--dry-run: nothing is changed)"
	}
	fmt.Fprintf(w, "%s:\n", verb)
	i := 0
	step := func(format string, args ...any) {
		i++
		fmt.Fprintf(w, "  %d. %s\n", i, fmt.Sprintf(format, args...))
	}
	switch {
	case u.done:
		step("nothing to restart: the supervisor already runs this stratum from %s", u.binDir)
	case u.replacing:
		step("nothing to ask: the supervisor is on its way to run this stratum (it is %s)", u.running.State)
	default:
		step("save an etcd snapshot to %s", u.snapshotPath())
		step("ask the supervisor to stop its services (the operator and the VIP candidate first) and run %s up --as-supervisor --bin-dir %s in its place", u.self, u.binDir)
	}
	step("wait up to %s for the supervisor to serve as stratum %s, then for its etcd member to be a healthy voter of a healthy cluster", u.f.timeout, Version)
	if u.unitPath != "" {
		step("rewrite %s to run %s up --as-supervisor --bin-dir %s", u.unitPath, u.self, u.binDir)
	}
}

// snapshotPath is where the snapshot is saved: --snapshot, or a new file
// under upgradeBackupDir named for the version and the time.
func (u *nodeUpgrade) snapshotPath() string {
	if u.snapshot == "" {
		u.snapshot = u.f.snapshot
	}
	if u.snapshot == "" {
		u.snapshot = filepath.Join(upgradeBackupDir, fmt.Sprintf("etcd-before-upgrade-%s-%s.db", Version, u.startedAt.UTC().Format("20060102T150405Z")))
	}
	return u.snapshot
}

// saveSnapshot is step 1: the cluster's data, to fall back on.
func (u *nodeUpgrade) saveSnapshot(ctx context.Context) error {
	if u.done || u.replacing {
		u.snapshot = ""
		return nil
	}
	p := u.snapshotPath()
	if u.f.snapshot == "" {
		if err := mkdirDurable(upgradeBackupDir); err != nil {
			return upgradeRefusedf("make %s for the snapshot: %w", upgradeBackupDir, err)
		}
	}
	u.a.progress("saving an etcd snapshot to " + p)
	ss, err := u.n.SnapshotSave(ctx, p)
	switch {
	case errors.Is(err, ha.ErrSnapshotUnsynced):
		// The file was written: not "nothing was changed".
		return fmt.Errorf("upgrade: %w; the control plane was not touched: run this command again", err)
	case err != nil:
		// Before the supervisor is asked: the control plane runs as it
		// did, and no snapshot was written.
		return refusedf("upgrade refused: %w; the control plane was not touched: mend that and run this command again", err)
	}
	u.a.progress(fmt.Sprintf("snapshot saved: revision %d, %d keys", ss.Revision, ss.TotalKeys))
	return nil
}

// replacementArgs is the command line the supervisor is replaced by: the
// unit's (systemdUnit), with the operator as the running supervisor has it.
func (u *nodeUpgrade) replacementArgs() []string {
	return []string{u.self, "up", "--as-supervisor", "--bin-dir", u.binDir, "--operator=" + strconv.FormatBool(u.running.Operator)}
}

// replaceSupervisor is step 2: the supervisor stops its services and runs
// this stratum in its place.
func (u *nodeUpgrade) replaceSupervisor(ctx context.Context) error {
	u.askedAt = time.Now()
	if u.done || u.replacing {
		return nil
	}
	args := u.replacementArgs()
	u.a.progress(fmt.Sprintf("asking the supervisor (pid %d) to stop its services and run %s in its place", u.running.PID, strings.Join(args, " ")))
	rctx, cancel := context.WithTimeout(ctx, supervisorCallTimeout)
	defer cancel()
	err := u.client.Replace(rctx, supervisor.Replacement{Path: u.self, Args: args})
	switch {
	case err == nil:
		return nil
	case supervisor.Answered(err):
		return refusedf("upgrade refused by this node's supervisor: %w; nothing was changed but the snapshot saved to %s", err, u.snapshot)
	default:
		return fmt.Errorf("upgrade: asked this node's supervisor to run %s in its place, and its answer was lost (%w): it may be upgrading; run this command again, which finishes the upgrade or says what the supervisor does", u.self, err)
	}
}

// waitServing is step 3: a supervisor answers as this stratum, from
// binDir, supervising a control plane that is up; when it was asked to be
// replaced, another instance than the one asked (the PID stays, and the
// version may not change). Another instance of the previous stratum (the
// replacement's exec failed and it ran itself again, or its service manager
// started the unit's previous stratum) fails at once, as does one settled
// into a retried start or a wait, saying what it does.
func (u *nodeUpgrade) waitServing(parent context.Context) error {
	ctx, cancel := context.WithDeadline(parent, u.askedAt.Add(u.f.timeout))
	defer cancel()
	u.a.progress(fmt.Sprintf("waiting for the supervisor to serve as stratum %s", Version))
	said := time.Now()
	asked := ""
	if !u.done {
		asked = u.running.Instance
	}
	var last string
	var exited time.Time // when the supervisor's process was first seen gone
	for {
		about, err := u.client.About(ctx)
		switch {
		case err != nil && ctx.Err() == nil && processStart(u.running.PID) == "":
			// The exec failed and so did the run of itself, or the new
			// stratum exited: only a service manager (systemd's unit,
			// with the previous stratum) starts a supervisor now.
			if exited.IsZero() {
				exited = time.Now()
			}
			if time.Since(exited) > supervisorGoneFor {
				return fmt.Errorf("upgrade failed: this node's supervisor (pid %d) exited, and no supervisor answered within %s: its log (journalctl -u stratum, or the terminal that ran it) says why; start it again (`systemctl restart stratum` runs the stratum its unit names, still the previous one; or `stratum up`)%s", u.running.PID, supervisorGoneFor, u.snapshotNote())
			}
			last = err.Error()
		case err != nil:
			last = err.Error()
		case asked != "" && about.Instance == asked:
			last = fmt.Sprintf("stratum %s is %s", about.Version, about.State)
		case about.Version != Version || about.BinDir != u.binDir || !sameFile(about.Exe, u.self):
			return fmt.Errorf("upgrade failed: this node's supervisor did not run stratum %s from %s: it runs stratum %s (%s) from %s again, and is %s; its log (journalctl -u stratum, or the terminal that ran it) says why%s", Version, u.binDir, about.Version, about.Exe, about.BinDir, about.State, u.snapshotNote())
		case about.State == supervisor.StateSupervising:
			u.a.progress(fmt.Sprintf("the supervisor (pid %d) serves as stratum %s, %s after it was asked", about.PID, Version, time.Since(u.askedAt).Round(100*time.Millisecond)))
			return nil
		case about.State == supervisor.StateStarting:
			last = fmt.Sprintf("stratum %s is %s", about.Version, about.State)
		default:
			return fmt.Errorf("upgrade failed: this node's supervisor, now stratum %s, is %s: `stratum status` and its log say why; it goes on by itself, and this command, run again once it supervises, finishes the upgrade. To go back instead: the unit was not rewritten, so `systemctl restart stratum` runs the previous stratum (%s from %s; without systemd, stop this supervisor and run that stratum's `up`), unless this member's etcd has raised the cluster's etcd version since, which the previous etcd refuses (`stratum etcd downgrade` first)%s", Version, about.State, u.running.Exe, u.running.BinDir, u.snapshotNote())
		}
		if time.Since(said) >= ha.WaitReportEvery {
			said = time.Now()
			u.a.progress(fmt.Sprintf("still waiting for the supervisor to serve as stratum %s (%s so far; last: %s)", Version, time.Since(u.askedAt).Round(time.Second), last))
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("upgrade stopped while it waited for the supervisor to serve as stratum %s (last: %s): %w; the supervisor goes on by itself: this command, run again, finishes the upgrade once it serves%s", Version, last, context.Cause(parent), u.snapshotNote())
			}
			return fmt.Errorf("upgrade failed: no supervisor served as stratum %s within %s (last: %s): `stratum status` and its log say why; this command, run again, finishes the upgrade once it does%s", Version, u.f.timeout, last, u.snapshotNote())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// snapshotNote names the snapshot saved before, for a failure's message.
func (u *nodeUpgrade) snapshotNote() string {
	if u.snapshot == "" {
		return ""
	}
	return "; the snapshot taken before is " + u.snapshot
}

// systemdUnitDirs are the directories systemd's system manager reads units
// from, in its order of precedence: only a unit written there is worth a
// daemon-reload.
var systemdUnitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// supervisorCallTimeout bounds a call to the supervisor outside the
// waits: one that accepts the connection and never answers (stopped,
// wedged) does not hold the command up.
const supervisorCallTimeout = 30 * time.Second

// supervisorGoneFor is how long waitServing waits for a supervisor to answer
// once the replaced process has exited: systemd's unit starts one again
// after its RestartSec (5 s), then its start takes a few seconds.
const supervisorGoneFor = 30 * time.Second

// waitHealthy is step 4: this node's etcd member is a healthy voter and
// every member is healthy (a restarted member takes a moment to be heard).
func (u *nodeUpgrade) waitHealthy(parent context.Context) error {
	ctx, cancel := context.WithDeadline(parent, u.askedAt.Add(u.f.timeout))
	defer cancel()
	u.a.progress("waiting for the etcd cluster to be healthy")
	said := time.Now()
	for {
		_, err := etcdHealth(ctx, u.n, u.st)
		own := u.n.EtcdMemberStatus(ctx, urlHost(u.st.Etcd.ClientURL))
		switch {
		case err != nil:
		case own.Err != nil:
			err = own.Err
		case own.IsLearner:
			err = errors.New("this node's member is a learner")
		default:
			u.a.progress("the etcd cluster is healthy")
			return nil
		}
		if time.Since(said) >= ha.WaitReportEvery {
			said = time.Now()
			u.a.progress(fmt.Sprintf("still waiting for the etcd cluster to be healthy (%v)", err))
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("upgrade stopped while it waited for the etcd cluster to be healthy (last: %v): %w; this node serves as stratum %s: this command, run again, finishes the upgrade once the cluster is healthy", err, context.Cause(parent), Version)
			}
			return fmt.Errorf("upgrade failed: this node serves as stratum %s, but the etcd cluster was not healthy within %s: %w", Version, u.f.timeout, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// writeUnit is step 5: the unit runs this stratum from binDir at the next
// boot.
func (u *nodeUpgrade) writeUnit(ctx context.Context) error {
	if u.unitPath == "" {
		return nil
	}
	// What it was, edits by hand included, is kept beside the snapshot.
	was := filepath.Join(upgradeBackupDir, fmt.Sprintf("%s-before-upgrade-%s-%s", unitName, Version, u.startedAt.UTC().Format("20060102T150405Z")))
	if err := mkdirDurable(upgradeBackupDir); err != nil {
		return fmt.Errorf("upgrade: the control plane runs stratum %s; make %s to keep the unit's previous text: %w; %s was not rewritten: run `stratum install --bin-dir %s` with this stratum", Version, upgradeBackupDir, err, u.unitPath, u.binDir)
	}
	if err := writeFileAtomic(was, u.unitWas, 0o600); err != nil {
		return fmt.Errorf("upgrade: the control plane runs stratum %s; keep the unit's previous text in %s: %w; %s was not rewritten: run `stratum install --bin-dir %s` with this stratum", Version, was, err, u.unitPath, u.binDir)
	}
	if err := writeFileAtomic(u.unitPath, []byte(u.unitText), 0o644); err != nil {
		return fmt.Errorf("upgrade: the control plane runs stratum %s, and its unit could not be rewritten: write %s: %w; it still runs the previous stratum at the next boot: run `stratum install --bin-dir %s` with this stratum", Version, u.unitPath, err, u.binDir)
	}
	u.a.progress(fmt.Sprintf("rewrote %s (runs %s up --as-supervisor --bin-dir %s; its previous text is in %s)", u.unitPath, u.self, u.binDir, was))
	if !systemdRuns() {
		return nil // no systemd runs here: it reads the unit when it starts
	}
	if !slices.Contains(systemdUnitDirs, filepath.Clean(u.f.unitDir)) {
		u.a.progress(fmt.Sprintf("%s is not a directory systemd reads units from: systemd was not asked to read it", u.f.unitDir))
		return nil
	}
	// Until systemd reads it, a crash's restart would run the previous
	// stratum, whose etcd may no longer start under the cluster's version.
	if out, err := systemctl(ctx, time.Minute, "daemon-reload"); err != nil {
		return fmt.Errorf("upgrade: the control plane runs stratum %s and %s names it, but `systemctl daemon-reload` failed (%w: %s): run it, or systemd restarts the previous stratum if this one stops", Version, u.unitPath, err, out)
	}
	u.a.progress("systemd read the unit (systemctl daemon-reload)")
	return nil
}

// apiServerStep refuses a kube-apiserver change Kubernetes does not
// support: a minor version down, or more than one up.
func apiServerStep(from, to string) error {
	fmaj, fmin, fok := version.MajorMinor(from)
	tmaj, tmin, tok := version.MajorMinor(to)
	if !fok || !tok {
		return nil // not judged: the running version is not known
	}
	switch {
	case tmaj < fmaj || tmaj == fmaj && tmin < fmin:
		return fmt.Errorf("this release's kube-apiserver %s is older than the running %s: Kubernetes does not go back a minor version", to, from)
	case tmaj > fmaj || tmin > fmin+1:
		return fmt.Errorf("this release's kube-apiserver %s is more than one minor version above the running %s: upgrade through each minor version's release in turn", to, from)
	}
	return nil
}

// etcdStep refuses an etcd that cannot take this member's place among
// members running versions: below the lowest's minor version (etcd would
// refuse to start under a cluster version above its own; going down is
// `stratum etcd downgrade`), or more than one minor above it.
func etcdStep(versions []string, to string) error {
	tmaj, tmin, ok := version.MajorMinor(to)
	if !ok {
		return nil
	}
	lowest := ""
	lmaj, lmin := 0, 0
	for _, v := range versions {
		maj, min, ok := version.MajorMinor(v)
		if ok && (lowest == "" || maj < lmaj || maj == lmaj && min < lmin) {
			lowest, lmaj, lmin = v, maj, min
		}
	}
	switch {
	case lowest == "":
		return nil
	case tmaj < lmaj || tmaj == lmaj && tmin < lmin:
		return fmt.Errorf("this release's etcd %s is below the lowest member's %s: etcd would refuse to start it; an etcd is taken down a minor version with `stratum etcd downgrade` first", to, lowest)
	case tmaj > lmaj || tmin > lmin+1:
		return fmt.Errorf("this release's etcd %s is more than one minor version above the lowest member's %s: upgrade every member through each minor version in turn", to, lowest)
	}
	return nil
}
