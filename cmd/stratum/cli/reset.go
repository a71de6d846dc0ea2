package cli

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/noderelease"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/internal/version"
)

// resetCmd is `stratum reset`: this control plane leaves its cluster and its
// files go (ha.Node.ResetControlPlane).
func (a *app) resetCmd() *cobra.Command {
	var force, dryRun bool
	var binDir string
	var out *output
	cmd := &cobra.Command{
		Use:   "reset [--force] [--dry-run]",
		Short: "Take this control plane out of its cluster and remove its files, to retire the machine or join it again",
		Long: `Take this control plane out of its cluster, in this order: stop its VIP candidate and
operator (the VIP moves to another control plane), stop its kube-apiserver, remove its
etcd member from the cluster (handing etcd's leadership on first when it leads), stop
etcd, and remove its files: the node state first, then a join's intent journal, the etcd
data, and everything under /var/lib/stratum and /etc/stratum (certificates, keys,
kubeconfigs) but the installed binaries in /var/lib/stratum/bin. Logs stay. The machine
can then be retired, or joined again with a join command. On a real host the node's
stratum supervisor (the "stratum up" or "stratum server" that ran the control plane) is
then ended through its control socket: it has nothing left to run, and its systemd unit
does not start it again without the node state.

It holds the node's maintenance and etcd-data locks, and records itself in
/var/lib/stratum/reset-intent.json until it is done: "stratum up" and a join refuse
while that file is there, and a re-run after a crash or an interruption resumes from
what it finds. A re-run after a crash that stopped this node's etcd before its member
was removed, with no other member answering (two voters: this node's vote is part of
the quorum), starts that etcd again first (under this process, from --bin-dir, when no
supervisor runs) so the cluster has its quorum back, then removes the member. A node whose join crashed
after adding its etcd member is reset too: the member its journal records is removed.

It refuses, with nothing changed, when the remaining voters' healthy members would be
under quorum, when this node's member is the cluster's last voter (a reset there
destroys the cluster), or when no etcd member answers (its member could not be
removed). --force resets anyway: the last voter's cluster goes with its data, and a
member that could not be removed is named with the command to remove it from a running
control plane.

--dry-run observes the same things and prints the steps a reset would run and the
refusal it would meet; it takes no lock and changes nothing. With -o json (or yaml) it
prints {member, peerURL, role, steps, votersAfter, healthyAfter, quorumAfter, refused,
unfinished, remaining}; unfinished is true when an earlier run of the reset left it
unfinished (the services it stopped stay stopped until a reset finishes).

Exits 0 once nothing of a control plane is left here (also when there was nothing), 3
when refused with nothing changed, 1 when it failed after changing something (re-run
it: it resumes), 2 on bad usage; a dry run exits 0 or 3 as the reset would.`,
		Example: `  # What a reset of this control plane would do, changing nothing
  stratum reset --dry-run
  stratum reset --dry-run -o json

  # Retire cp3: on cp3
  stratum reset                      # its supervisor ends too
  systemctl disable stratum          # and stays off at boot

  # Join it again afterwards: the join command as "stratum token create --control-plane" printed it
  stratum server --server https://10.0.0.10:6443 --token abcdef.0123456789abcdef \
    --ca-hash sha256:<64 hex digits> --certificate-key <64 hex digits>`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if out.machine() && !dryRun {
				return usagef("-o %s prints the plan of a --dry-run; the reset itself reports its steps as text", out.format)
			}
			if a.opts.Host == nil {
				why := fmt.Sprintf("it reads this node's state and keys under %s and %s, readable by root alone, and stops its services and removes those files", version.StateDir, version.K8sConfDir)
				if dryRun {
					why = fmt.Sprintf("its plan reads this node's state and keys under %s and %s, readable by root alone", version.StateDir, version.K8sConfDir)
				}
				if err := requireRoot("stratum reset", why); err != nil {
					return err
				}
			}
			n, h, err := a.localNode()
			if err != nil {
				return err
			}
			if a.opts.Host == nil && !dryRun && !(supervisor.Client{Path: supervisor.SocketPath}).Running() {
				// No supervisor answers (a crash, a reboot: its `stratum
				// up` refuses while the reset is unfinished). A reset that
				// must start this node's etcd again, to give the other
				// members their quorum back, runs it under this process.
				var shutdown func()
				if n, shutdown, err = a.resetSupervisor(binDir); err != nil {
					return err
				}
				defer shutdown()
			}
			if dryRun {
				rep, err := n.ResetPlanOf(cmd.Context(), force)
				if err != nil {
					return err
				}
				if out.machine() {
					if err := a.write(out, rep, nil); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(a.stdout, "would run: %s\n", orNothing(rep.Steps))
					if rep.Unfinished {
						fmt.Fprintf(a.stdout, "an earlier run of this reset left it unfinished: the services it stopped stay stopped until a reset finishes\n")
					}
					if rep.Refused != "" {
						fmt.Fprintf(a.stdout, "refused without --force: %s\n", rep.Refused)
						if rep.Remaining != "" {
							fmt.Fprintf(a.stdout, "with --force, afterwards: %s\n", rep.Remaining)
						}
					}
				}
				if !force {
					return rep.RefusedError()
				}
				return nil
			}
			var forget func(context.Context)
			if a.opts.Host == nil { // the simulator's supervisors record no release
				forget = a.releaseForgetter(h)
			}
			if err := n.ResetControlPlane(cmd.Context(), a.stdout, force); err != nil {
				return explainHost(err)
			}
			if forget != nil {
				forget(cmd.Context())
			}
			if a.opts.Host == nil {
				a.endIdleSupervisor(cmd.Context())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "reset even when the remaining cluster would be under quorum, this node is its last voter, or its member cannot be removed")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the steps the reset would run (and a refusal it would meet), change nothing")
	cmd.Flags().StringVar(&binDir, "bin-dir", controlplane.DefaultBinDir, "the `directory` holding the pinned etcd binary, as `stratum up --bin-dir` (or the unit `stratum install --bin-dir` wrote) runs it: used only when no supervisor runs and the reset must start this node's etcd again")
	out = addOutput(cmd, "text")
	cmd.Flags().Lookup("output").Usage = "the --dry-run report's `format`: text, json or yaml (only with --dry-run)"
	return cmd
}

// releaseForgetter is what deletes this node's release record
// (internal/noderelease) once its reset is done: the admin credential and
// the member name are read before the reset removes them, and the record is
// deleted through the admin kubeconfig's server (the VIP, served by
// another control plane). nil on a node without them (a reset run again
// after its files went). A failure is said, not an error: the reset is
// done, and `stratum upgrade plan` lists the record as stale.
func (a *app) releaseForgetter(h host.Host) func(context.Context) {
	st, err := nodestate.Load(h)
	if err != nil {
		return nil
	}
	cfg, err := adminRESTConfig(h, a.waitNotice())
	if err != nil {
		return nil
	}
	cfg.Timeout = 10 * time.Second
	name := cmp.Or(st.Etcd.Name, st.NodeName)
	lease := noderelease.Namespace + "/" + noderelease.LeaseName(name)
	return func(ctx context.Context) {
		cs, err := kubernetes.NewForConfig(cfg)
		if err == nil {
			err = noderelease.Forget(ctx, cs, name)
		}
		if err != nil {
			fmt.Fprintf(a.stdout, "this node's release record (Lease %s) was not deleted (%v): `stratum upgrade plan` lists it as stale; delete it from a running control plane (kubectl -n kube-system delete lease %s)\n", lease, err, noderelease.LeaseName(name))
			return
		}
		fmt.Fprintf(a.stdout, "this node's release record (Lease %s) deleted\n", lease)
	}
}

func orNothing(steps []string) string {
	if len(steps) == 0 {
		return "nothing (nothing of a control plane is left on this node)"
	}
	return strings.Join(steps, ", ")
}

// resetSupervisor is the node a reset runs on when no stratum supervisor
// answers: its services are run by a supervisor in this process (etcd from
// binDir, only if the reset starts it), stopped by shutdown.
func (a *app) resetSupervisor(binDir string) (*ha.Node, func(), error) {
	l, err := host.NewLocal()
	if err != nil {
		return nil, nil, err
	}
	n := ha.NewNode(ha.Env{Host: l, Checkpoint: a.opts.Checkpoint, Log: a.log, Progress: a.progress})
	sup, err := a.nodeSupervisor(l, n, binDir, false)
	if err != nil {
		return nil, nil, refusedf("reset refused: %w; nothing was changed", err)
	}
	l.Services = sup
	return n, sup.Shutdown, nil
}

// endIdleSupervisor ends the stratum supervisor of this machine, which a
// finished reset left with nothing to run, and says so; one that refuses
// (or none answering the socket) is left as it is, with what to do.
func (a *app) endIdleSupervisor(ctx context.Context) {
	c := supervisor.Client{Path: supervisor.SocketPath}
	if !c.Running() {
		return
	}
	if err := c.Exit(ctx); err != nil {
		fmt.Fprintf(a.stdout, "the stratum supervisor on this node was not ended (%v): stop it (`systemctl disable --now stratum`, or Ctrl-C the `stratum up` or `stratum server` running it)\n", err)
		return
	}
	fmt.Fprintf(a.stdout, "the stratum supervisor on this node ended, with nothing left to run; its systemd unit does not start it again while %s is gone (`systemctl disable stratum` keeps it off at boot too)\n", nodestate.Path)
}
