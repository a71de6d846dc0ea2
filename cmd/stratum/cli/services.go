package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/internal/version"
)

// unitName is the systemd unit `stratum install` writes.
const unitName = "stratum.service"

// systemdUnit is the unit that runs `stratum up` (the node's supervisor) at
// boot. It starts only on a node with saved state, so a machine meant to
// join a cluster never bootstraps a new one because it booted first.
func systemdUnit(stratumPath, binDir string) string {
	return fmt.Sprintf(`# Written by "stratum install". stratum up is this node's control-plane supervisor:
# it runs etcd, kube-apiserver, the VIP and the operator as its children.
[Unit]
Description=stratum control plane (etcd, kube-apiserver, VIP, operator)
After=network-online.target
Wants=network-online.target
ConditionPathExists=%s

[Service]
# notify: systemctl start returns once the control plane is up (or the
# supervisor settled into a wait it names in systemctl status), not at the fork.
Type=notify
NotifyAccess=main
TimeoutStartSec=30min
ExecStart=%s up --as-supervisor --bin-dir %s
Restart=always
RestartSec=5
KillMode=mixed
TimeoutStopSec=60
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
`, nodestate.Path, stratumPath, binDir)
}

// unitExecPath is the stratum the unit runs: the path this command was
// invoked by (made absolute, or found on PATH), when it is this very binary,
// so a unit installed through a link (/usr/local/bin/stratum to a release's
// directory) follows the link when it is moved to the next release, as the
// user who made the link expects; otherwise this binary's own path, links
// resolved. The unit used to name the resolved path always, so moving the
// link left systemd running the old release.
func unitExecPath(argv0 string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this stratum binary: %w", err)
	}
	invoked := argv0
	if strings.HasPrefix(argv0, "/proc/") || strings.HasPrefix(argv0, "/dev/") {
		invoked = "" // /proc/self/exe is this binary now and systemd at boot
	} else if !strings.Contains(argv0, "/") {
		if p, err := exec.LookPath(argv0); err == nil {
			invoked = p
		}
	}
	if abs, err := filepath.Abs(invoked); invoked != "" && err == nil {
		a, aerr := os.Stat(abs)
		b, berr := os.Stat(self)
		if aerr == nil && berr == nil && os.SameFile(a, b) {
			return abs, nil
		}
	}
	return filepath.Abs(self)
}

// refuseReplaceableSelf refuses, run by root, a stratum another user could
// change or replace (controlplane.RootOnlyWritable): the path it was invoked
// by (what the unit names: unitExecPath, a link's whole chain) and the file
// it is. `stratum install` refused such a binary when it wrote the unit, but
// a link the unit names may since point elsewhere (moved to the next
// release), and root runs it at every boot.
func refuseReplaceableSelf(argv0 string) error {
	invoked, err := unitExecPath(argv0)
	if err != nil {
		return err
	}
	if err := controlplane.RootOnlyWritable(invoked); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this stratum binary: %w", err)
	}
	return controlplane.RootOnlyWritable(self)
}

func (a *app) installCmd() *cobra.Command {
	var unitDir, binDir string
	var dryRun, now bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Write the systemd unit that runs this node's control plane (stratum up) at boot",
		Long: `Write a systemd unit, stratum.service, whose ExecStart is "stratum up": the node's
supervisor, which runs etcd, the kube-apiserver, the VIP and the operator as its
children. The unit starts only on a node with saved state (` + nodestate.Path + `), so
bring the node up or join it by hand first, stop that foreground run, then enable the
unit. Nothing requires systemd: without it, run "stratum up" under any supervisor.

The pinned etcd and kube-apiserver must be in --bin-dir (made absolute) before
anything is written, as "stratum up" checks them; a path holding a space, a quote, a
backslash, %, $ or ; is bad usage (exit 2), since ExecStart would split or expand it. --unit-dir
must be an existing directory (systemd reads units only from its own). --dry-run checks
the same and prints the unit instead.

--now hands this node's control plane to the unit in one command, where systemd runs:
after the checks above it refuses, with nothing written or changed, a machine systemd
does not run, a --unit-dir systemd does not read or empties at boot (/run), a node
without control-plane state (the unit would not start), an unfinished join or reset, a
supervisor that runs another stratum version, another --bin-dir or no operator than the
unit would (use "stratum upgrade node" to change what runs), one not supervising a
control plane that is up, and an etcd cluster that is unhealthy or has a learner (this
member's restart could take the quorum; with fewer than three voters it cannot keep it,
which is said, not refused). Then it writes the unit, runs systemctl daemon-reload
(checking that systemd loads this unit, with no drop-in setting ExecStart) and enable,
stops the supervisor started by hand (SIGTERM, as Ctrl-C; one already stopping is only
waited for), and runs systemctl start, which returns once the unit's supervisor serves
the control plane (--timeout; past it systemd's start goes on). Re-running it after an
interruption finishes the handoff. Exits 2 on bad usage (a --bin-dir systemd would
split or expand), 3 when refused before anything was written, 1 when a step failed
after (it names what to do; run it again).`,
		Example: `  # After "stratum up ..." or "stratum server ..." by hand: hand its control plane to
  # systemd (checked, then the foreground run stops and the unit starts it)
  stratum install --now

  # The same by hand (Ctrl-C the foreground run first)
  stratum install
  systemctl daemon-reload && systemctl enable --now stratum

  # Print the unit, and with --now the steps, changing nothing
  stratum install --now --dry-run`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cmd.Flags().Changed("timeout") && !now:
				return usagef("--timeout bounds --now's start of the unit: give it with --now")
			case timeout <= 0:
				return usagef("--timeout must be positive (got %s)", timeout)
			}
			self, err := unitExecPath(os.Args[0])
			if err != nil {
				return err
			}
			// systemd runs the unit from /, so a relative directory would
			// name another one; and an ExecStart word with a space, a quote
			// or a specifier would be split or expanded.
			if binDir, err = filepath.Abs(binDir); err != nil {
				return usagef("--bin-dir: %v", err)
			}
			if c := unitUnsafe(binDir); c != "" {
				return usagef("--bin-dir %q holds %q, which a systemd ExecStart would split or expand; nothing was written: use a directory without it", binDir, c)
			}
			if c := unitUnsafe(self); c != "" {
				return refusedf("install refused: this stratum binary's path %q holds %q, which a systemd ExecStart would split or expand; nothing was written: install stratum under a path without it", self, c)
			}
			// systemd runs it as root at every boot.
			if err := controlplane.RootOnlyWritable(self); err != nil {
				return refusedf("install refused: %w; nothing was written", err)
			}
			bins := controlplane.Binaries{Dir: binDir}
			for _, name := range []string{controlplane.EtcdBinary, controlplane.APIServerBinary} {
				if err := bins.Check(cmd.Context(), name); err != nil {
					return refusedf("install refused: the unit's stratum up would not start: %w; nothing was written", err)
				}
			}
			// systemd reads units only from its own directories: a missing
			// one is most likely a typo, and a unit made there would never
			// start.
			if fi, err := os.Stat(unitDir); err != nil || !fi.IsDir() {
				why := "is not a directory"
				if err != nil {
					why = "cannot be used: " + err.Error()
					if errors.Is(err, fs.ErrNotExist) {
						why = "does not exist"
					}
				}
				return refusedf("install refused: --unit-dir %s %s; nothing was written: pass systemd's unit directory (/etc/systemd/system by default)", unitDir, why)
			}
			var handoff *unitHandoff
			if now {
				handoff = newUnitHandoff(a, "install --now", filepath.Join(filepath.Clean(unitDir), unitName), self, binDir, timeout)
				if err := handoff.check(cmd.Context()); err != nil {
					return err
				}
			}
			unit := systemdUnit(self, binDir)
			if dryRun {
				fmt.Fprint(a.stdout, unit)
				if handoff != nil {
					handoff.plan(true)
				}
				return nil
			}
			path := filepath.Join(unitDir, unitName)
			// Atomic: a failed write leaves no partial unit or temporary
			// file, and an existing unit as it was.
			if err := writeFileAtomic(path, []byte(unit), 0o644); err != nil {
				return fmt.Errorf("install: write %s: %w; the unit directory is as it was", path, err)
			}
			fmt.Fprintf(a.stdout, "wrote %s (runs %s up --as-supervisor --bin-dir %s)\n", path, self, binDir)
			if handoff != nil {
				handoff.plan(false)
				return handoff.run(cmd.Context())
			}
			if dir := filepath.Clean(unitDir); !slices.Contains(systemdUnitDirs, dir) {
				// Written as asked (an image being built, a directory
				// linked later), but `systemctl enable stratum` would not
				// find it there.
				fmt.Fprintf(a.stdout, "note: systemd reads no units from %s: `systemctl link %s` makes it find this one, then `systemctl enable --now stratum` starts it\n", dir, path)
				return nil
			}
			if !systemdRuns() {
				fmt.Fprintln(a.stdout, "systemd is not running on this machine: the unit is written for when it does; meanwhile run `stratum up` under your own supervisor")
				return nil
			}
			fmt.Fprintln(a.stdout, strings.TrimSpace(`
enable it with: systemctl daemon-reload && systemctl enable --now stratum
(it starts only once this node has saved state: bring it up or join it by hand first;
`+"`stratum install --now`"+` hands a control plane running by hand over to it, checked)`))
			return nil
		},
	}
	cmd.Flags().StringVar(&unitDir, "unit-dir", "/etc/systemd/system", "the `directory` the unit is written to")
	cmd.Flags().StringVar(&binDir, "bin-dir", controlplane.DefaultBinDir, "the `directory` of the control-plane binaries the unit's stratum up uses")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the unit (and with --now the steps), write nothing")
	cmd.Flags().BoolVar(&now, "now", false, "also hand this node's control plane to the unit: daemon-reload, enable, stop the supervisor started by hand, start the unit")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "with --now (only), how long systemctl start may take to serve")
	return cmd
}

// unitUnsafe is the first character of p that a systemd ExecStart would not
// take literally in an unquoted word ("" for none): whitespace, quotes,
// backslashes, and the % and $ of specifiers and variables.
func unitUnsafe(p string) string {
	if i := strings.IndexFunc(p, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune("\"'\\%$;", r) }); i >= 0 {
		return string([]rune(p[i:])[0])
	}
	return ""
}

// supervisedServices are the services `stratum status` reports, in start order.
var supervisedServices = []string{ha.ServiceEtcd, ha.ServiceAPIServer, ha.ServiceVIP, serviceOperator}

// statusReport is `stratum status -o json`: this node's saved state, an
// interrupted join's journal, and the supervisor's services. The JSON names
// are stable (docs/cli.md).
type statusReport struct {
	// Node is the saved control-plane state, absent on a node that has none.
	Node *nodeReport `json:"node,omitempty"`
	// JoinIntentSurvives: a join was interrupted after its etcd member-add
	// and has not been recovered (re-run its join command).
	JoinIntentSurvives bool `json:"joinIntentSurvives"`
	// Supervisor is whether a stratum supervisor answered; SupervisorError
	// says why not.
	Supervisor      bool   `json:"supervisor"`
	SupervisorError string `json:"supervisorError,omitempty"`
	// SupervisorProcess is what the running supervisor says of itself (a
	// supervisor older than this field says nothing): its process, its
	// stratum, its binaries' directory and what it does.
	SupervisorProcess *supervisorProcess `json:"supervisorProcess,omitempty"`
	Services          []serviceReport    `json:"services"`
	// ResetUnderWay: a `stratum reset` began here and has not finished
	// (its journal is there); run it again to finish it.
	ResetUnderWay bool `json:"resetUnderWay"`
	// JoinUnfinished: a join stopped here before its journal and its node
	// state (its bootstrap kubeconfig is left, and maybe the cluster's
	// certificates): run its join command again, or reset the machine.
	JoinUnfinished bool `json:"joinUnfinished,omitempty"`
	// CertificatesExpiring are this control plane's certificates that expire
	// within 30 days, CertificatesExpired those that have, and
	// CertificatesNotYetValid those whose validity begins after this node's
	// clock (status exits 1 for the last two).
	CertificatesExpiring    []string `json:"certificatesExpiring,omitempty"`
	CertificatesExpired     []string `json:"certificatesExpired,omitempty"`
	CertificatesNotYetValid []string `json:"certificatesNotYetValid,omitempty"`
	// EtcdSpace warns that this node's etcd member's database fills 80% of
	// its quota or more (ha.EtcdMemberHealth.SpaceWarning).
	EtcdSpace string `json:"etcdSpace,omitempty"`
	// EtcdDataMissing is ha.RefuseMissingEtcdData's refusal: this node's
	// member has served, and its data directory holds no etcd data (a disk
	// not mounted, or lost). Its supervisor waits for the data with
	// nothing started; the refusal says how to bring it back.
	EtcdDataMissing string `json:"etcdDataMissing,omitempty"`
	// StratumSkew warns that the supervisor runs another stratum than this
	// binary (one installed in its place, an upgrade not yet restarted
	// into): what runs is the supervisor's until it restarts.
	StratumSkew string `json:"stratumSkew,omitempty"`
	// Problem is what status exits 1 for, with what to do; absent when this
	// node is a control plane whose supervisor runs every service.
	Problem string `json:"problem,omitempty"`
}

// judge sets Problem from the report (serr is askSupervisor's error) and
// returns it as the error status exits 1 with.
func (rep *statusReport) judge(serr error) error {
	err := rep.problem(serr)
	if err != nil {
		rep.Problem = err.Error()
	}
	return err
}

func (rep *statusReport) problem(serr error) error {
	// First, node state or not: an unfinished reset may have stopped the
	// services and removed the member, and `stratum up` or a join refuses
	// until it is finished.
	if rep.ResetUnderWay {
		return fmt.Errorf("a `stratum reset` of this machine's control plane began and has not finished (%s): its services may be stopped and its etcd member removed already; run `stratum reset` again to finish it (with --force if it had it)", ha.ResetJournalPath())
	}
	if rep.Node == nil && !rep.JoinIntentSurvives {
		if rep.JoinUnfinished {
			return fmt.Errorf("a control-plane join stopped on this machine before it saved its state (%s is left, maybe with the cluster's certificates; no node state at %s): run the same join command again to finish it, or `stratum reset --force` to clear this machine", version.Kubeconfig("bootstrap"), nodestate.Path)
		}
		// Nothing here to start: advising `stratum up` would make a
		// second, separate cluster on a machine meant to join one.
		return fmt.Errorf("this machine is not a control plane (no node state at %s): join it to a cluster with the join command `stratum token create --control-plane` prints on a control plane (`stratum server ...`), or start a NEW cluster with `stratum up`", nodestate.Path)
	}
	if serr != nil {
		return explainHost(serr)
	}
	var down []string
	for _, s := range rep.Services {
		if !s.Running {
			down = append(down, s.Name)
		}
	}
	if len(down) > 0 && rep.EtcdDataMissing != "" {
		return fmt.Errorf("not running: %s, for %s", strings.Join(down, ", "), rep.EtcdDataMissing)
	}
	if len(down) > 0 {
		return fmt.Errorf("not running: %s (logs in %s)", strings.Join(down, ", "), controlplane.LogDir)
	}
	if len(rep.CertificatesExpired) > 0 {
		return fmt.Errorf("certificates expired: %s: %s", strings.Join(rep.CertificatesExpired, "; "), certsRenewAdvice)
	}
	if len(rep.CertificatesNotYetValid) > 0 {
		return fmt.Errorf("certificates not valid yet: %s: %s", strings.Join(rep.CertificatesNotYetValid, "; "), certsClockAdvice)
	}
	return nil
}

// supervisorProcess is `status`'s word on the running supervisor
// (supervisor.About).
type supervisorProcess struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
	BinDir  string `json:"binDir"`
	// State is "starting", "supervising", or a wait it names ("retrying
	// its start", "waiting for its etcd data"), or "stopping".
	State string `json:"state"`
}

// askAbout fills in SupervisorProcess from the supervisor on this real host
// (none in the simulator, whose hosts have no control socket); one that
// does not say is left out.
func (rep *statusReport) askAbout(ctx context.Context) {
	about, err := (supervisor.Client{Path: supervisor.SocketPath}).About(ctx)
	if err == nil {
		rep.SupervisorProcess = &supervisorProcess{PID: about.PID, Version: about.Version, BinDir: about.BinDir, State: about.State}
	}
}

// nodeReport is a control plane's saved state, as `status` and the MCP
// node_state tool report it.
type nodeReport struct {
	NodeName    string `json:"nodeName"`
	NodeIP      string `json:"nodeIP"`
	Server      string `json:"server"`
	VIP         string `json:"vip,omitempty"`
	EtcdPeerURL string `json:"etcdPeerURL"`
	ClusterID   string `json:"clusterID,omitempty"`
}

// serviceReport is one supervised service in `stratum status`. Version is
// what the supervisor says it runs (etcd's binary as last checked, the
// pinned kube-apiserver, the supervisor's own stratum for kube-vip and the
// operator, which run inside it): after binaries were swapped, it is what
// runs until a restart, not what is on disk.
type serviceReport struct {
	Name    string `json:"name"`
	Running bool   `json:"running"`
	Detail  string `json:"detail"`
	Version string `json:"version,omitempty"`
}

// nodeStatus reads this node's saved state and join journal; a node with
// neither is reported as such, not as an error.
func nodeStatus(ctx context.Context, n *ha.Node, h host.Host) (statusReport, error) {
	rep := statusReport{Services: []serviceReport{}}
	survives, err := n.JoinIntentSurvives(ctx)
	if err != nil {
		return rep, err
	}
	rep.JoinIntentSurvives = survives
	if _, err := h.Stat(ha.ResetJournalPath()); err == nil {
		rep.ResetUnderWay = true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return rep, fmt.Errorf("check the reset journal %s: %w", ha.ResetJournalPath(), err)
	}
	st, err := nodestate.Load(h)
	switch {
	case errors.Is(err, nodestate.ErrNoState):
		if _, err := h.Stat(version.Kubeconfig("bootstrap")); err == nil {
			rep.JoinUnfinished = !survives
		} else if !errors.Is(err, fs.ErrNotExist) {
			return rep, fmt.Errorf("check for a join's bootstrap kubeconfig %s: %w", version.Kubeconfig("bootstrap"), err)
		}
	case err != nil:
		return rep, err
	default:
		rep.Node = &nodeReport{NodeName: st.NodeName, NodeIP: st.NodeIP, Server: st.Server, VIP: st.VIP.Address,
			EtcdPeerURL: st.Etcd.PeerURL, ClusterID: st.Etcd.ClusterID}
		if rep.CertificatesExpiring, rep.CertificatesExpired, rep.CertificatesNotYetValid, err = nodeCertsDue(h); err != nil {
			// Reported, not fatal: the rest of the status still says
			// what runs.
			rep.CertificatesExpired = []string{fmt.Sprintf("the certificates cannot be read (%v)", err)}
		}
		// Its own member only, and an etcd that is not running is said
		// by the services' states.
		rep.EtcdSpace = n.EtcdMemberStatus(ctx, urlHost(st.Etcd.ClientURL)).SpaceWarning()
		if err := ha.RefuseMissingEtcdData(h, st); err != nil {
			rep.EtcdDataMissing = err.Error()
		}
	}
	return rep, nil
}

// statusAskWithin bounds each question status asks the supervisor: one that
// accepts the connection and never answers (stopped by SIGSTOP, hung in I/O)
// held status, the command run to find that out, for ever.
var statusAskWithin = 10 * time.Second

// askSupervisor fills in the supervisor's services, or why no supervisor
// answered (also returned). A service the host's manager does not run (the
// simulator runs no operator, nor does a supervisor started with
// --operator=false) is left out, and so is kube-vip on a control plane
// without a VIP, which never starts it.
func (rep *statusReport) askSupervisor(ctx context.Context, h host.Host) error {
	rep.Services = []serviceReport{}
	for _, name := range supervisedServices {
		if name == ha.ServiceVIP && rep.Node != nil && rep.Node.VIP == "" {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, statusAskWithin)
		st, err := h.ServiceStatus(sctx, name)
		cancel()
		if errors.Is(err, host.ErrUnknownService) && !errors.Is(err, host.ErrNoServiceManager) {
			continue
		}
		if err != nil && ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("the supervisor did not answer within %s (stopped, or hung: see its process's state, or `systemctl status stratum`): %w", statusAskWithin, err)
		}
		if err != nil {
			err = fmt.Errorf("status of %s: %w", name, err)
			rep.Supervisor, rep.SupervisorError, rep.Services = false, err.Error(), []serviceReport{}
			return err
		}
		rep.Services = append(rep.Services, serviceReport{Name: name, Running: st.Running, Detail: st.Detail, Version: st.Version})
		if runs, ok := strings.CutPrefix(st.Version, "stratum "); ok && runs != Version && rep.StratumSkew == "" {
			rep.StratumSkew = fmt.Sprintf("this node's supervisor runs stratum %s, and this binary is stratum %s: the supervisor and what it runs stay %s until it restarts (`systemctl restart stratum`, one control plane at a time: docs/real-hosts.md, upgrading)", runs, Version, runs)
		}
	}
	rep.Supervisor = true
	return nil
}

func (a *app) statusCmd() *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show this node's control-plane state and the services its stratum supervisor runs",
		Long: `Show what this node is: its saved control-plane state (name, address, server, VIP,
etcd member, cluster ID), whether an interrupted join's intent journal survives (re-run
the same join command to recover it), and, from this node's running stratum supervisor
("stratum up" or "stratum server" in the foreground, or under systemd), the state of
each service it runs: etcd, the kube-apiserver, the VIP and the operator. Exits 1 when
a reset began here and has not finished (run "stratum reset" again to finish it), no
supervisor answers, a service is not running, a certificate has expired or is not
valid yet (this machine's clock behind), or the machine is no control plane (saying
how to join it). -o json (or yaml) prints {node: {nodeName, nodeIP, server, vip,
etcdPeerURL, clusterID}, joinIntentSurvives, supervisor, supervisorError,
supervisorProcess: {pid, version, binDir, state}, services: [{name, running, detail,
version}], resetUnderWay, joinUnfinished, certificatesExpiring, certificatesExpired,
certificatesNotYetValid, etcdSpace, etcdDataMissing, stratumSkew, problem}: problem is
what it exits 1 for, with what to do. A certificate of this node that expires within
30 days is a warning; one that has expired, or is not valid yet, exits 1. This node's etcd database at 80% of its quota or
more is a warning (etcdSpace; "stratum etcd defrag" gives back its free space).`,
		Example: `  stratum status
  stratum status -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			n, h, err := a.localNode()
			if err != nil {
				return err
			}
			rep, err := nodeStatus(cmd.Context(), n, h)
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			serr := rep.askSupervisor(cmd.Context(), h)
			if serr == nil && a.opts.Host == nil {
				rep.askAbout(cmd.Context())
			}
			verdict := rep.judge(serr)
			if err := a.write(out, rep, func() error { return writeStatus(a.stdout, rep) }); err != nil {
				return err
			}
			return verdict
		},
	}
	out = addOutput(cmd, "table")
	return cmd
}

// writeStatus is `status`'s human form: the node, then the services table.
func writeStatus(w io.Writer, rep statusReport) error {
	if nd := rep.Node; nd != nil {
		fmt.Fprintf(w, "node %s (%s), etcd member %s, server %s", nd.NodeName, nd.NodeIP, nd.EtcdPeerURL, nd.Server)
		if nd.VIP != "" {
			fmt.Fprintf(w, ", VIP %s", nd.VIP)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "no control-plane state on this node (%s)\n", nodestate.Path)
	}
	if rep.ResetUnderWay {
		fmt.Fprintf(w, "reset unfinished: a `stratum reset` began on this node and has not finished (%s): run `stratum reset` again to finish it\n", ha.ResetJournalPath())
	}
	if rep.JoinIntentSurvives {
		fmt.Fprintf(w, "an interrupted join's intent journal survives (%s): re-run the same join command to recover it\n", ha.JoinIntentPath())
	}
	if len(rep.CertificatesExpiring) > 0 {
		fmt.Fprintf(w, "warning: certificates expire soon: %s: %s\n", strings.Join(rep.CertificatesExpiring, "; "), certsRenewAdvice)
	}
	if rep.StratumSkew != "" {
		fmt.Fprintf(w, "warning: %s\n", rep.StratumSkew)
	}
	if rep.EtcdSpace != "" {
		fmt.Fprintf(w, "warning: %s\n", rep.EtcdSpace)
	}
	if !rep.Supervisor {
		return nil
	}
	if p := rep.SupervisorProcess; p != nil {
		pid := strconv.Itoa(p.PID)
		if p.PID == 0 {
			pid = "unknown (it runs in a PID namespace this command does not see into)"
		}
		fmt.Fprintf(w, "supervisor: pid %s, stratum %s, %s (binaries from %s)\n", pid, p.Version, p.State, p.BinDir)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tVERSION\tSTATE")
	for _, s := range rep.Services {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, cmp.Or(s.Version, "-"), s.Detail)
	}
	return tw.Flush()
}

// checkWritableFile refuses a path whose directory is missing, is not a
// directory or is not writable, or that is itself a directory, without
// creating anything. Its errors name the directory in plain words, never the
// probe file it creates and removes to find out.
func checkWritableFile(p string) error {
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", p)
	}
	dir := filepath.Dir(p)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("the directory %s does not exist", dir)
	case err != nil:
		return fmt.Errorf("the directory %s cannot be used: %w", dir, pathErrCause(err))
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".stratum-probe-*")
	if err != nil {
		return fmt.Errorf("the directory %s is not writable: %w", dir, pathErrCause(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// pathErrCause is the cause of a file operation's error without the
// operation and path it names ("permission denied" for "open
// /x/.stratum-probe-123: permission denied"), for a message that names the
// path itself.
func pathErrCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// writeFileAtomic writes data to p as a node's files are written
// (host.Dir: a temporary file beside it, fsync'd, renamed into place, the
// directory fsync'd), so a reader never sees half a file and a crash leaves
// the old file or the new one.
func writeFileAtomic(p string, data []byte, perm os.FileMode) error {
	return (&host.Dir{Root: filepath.Dir(p)}).WriteFile("/"+filepath.Base(p), data, perm)
}
