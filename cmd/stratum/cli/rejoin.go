package cli

import (
	"net/url"

	"github.com/spf13/cobra"
)

// withRejoin adds `etcd rejoin` to the etcd command group.
func (a *app) withRejoin(etcd *cobra.Command) *cobra.Command {
	var server string
	var force, dryRun bool
	var out *output
	cmd := &cobra.Command{
		Use:   "rejoin --server <seed-ip> [--force]",
		Short: "Rejoin this control plane's etcd to a cluster restored from a snapshot",
		Long: `After "stratum snapshot restore" made one control plane (the seed) a new single-member
etcd cluster, run this on every other control plane: it stops the local control plane,
removes the stale etcd data, adds this node to the seed's etcd as a learner, records
the new membership in the node state, starts etcd, waits for the learner to catch up
(reporting the wait), promotes it, and starts the apiserver and kube-vip again.

It holds the node's maintenance and etcd-data locks; another maintenance operation in
progress refuses it, naming the holder, with nothing changed. A re-run after a crash or
an interruption resumes from what it finds. It refuses to remove the data while the old
cluster this node belonged to may still have a quorum (one of its members reports a
leader, or too many do not answer); --force removes it anyway, discarding whatever that
cluster wrote since the snapshot.

--dry-run observes the same things and prints the steps a rejoin would run, and whether
its data removal would be refused without --force; it takes no lock and changes nothing.
With -o json (or yaml) it prints {member, seed, seedClusterID, steps, refused}.

Exits 0 once this node is a voter of the seed's cluster, 3 when refused with nothing
changed, 1 when it failed after changing something (re-run the same command: it
resumes), 2 on bad usage; a dry run exits 0 or 3 as the rejoin would.`,
		Example: `  # On cp2, after "stratum snapshot restore backup.db" on cp1 (10.0.0.11)
  stratum etcd rejoin --server 10.0.0.11

  # What it would do, changing nothing
  stratum etcd rejoin --server 10.0.0.11 --dry-run
  stratum etcd rejoin --server 10.0.0.11 --dry-run -o json

  # The old cluster still runs (cp2 and cp3 keep a quorum): discard it
  stratum etcd rejoin --server 10.0.0.11 --force`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if out.machine() && !dryRun {
				return usagef("-o %s prints the plan of a --dry-run; the rejoin itself reports its steps as text", out.format)
			}
			if server == "" {
				return usagef("--server is required: the address of the restored seed control plane")
			}
			server = seedAddress(server)
			if err := checkIP("--server", server); err != nil {
				return err
			}
			n, _, err := a.localNode()
			if err != nil {
				return err
			}
			if dryRun && out.machine() {
				rep, err := n.RejoinPlanOf(cmd.Context(), server, force)
				if rep.Member == "" && rep.Refused == "" {
					return err
				}
				if werr := a.write(out, rep, nil); werr != nil {
					return werr
				}
				return err
			}
			if dryRun {
				return n.RejoinPlan(cmd.Context(), a.stdout, server, force)
			}
			return explainHost(n.RejoinEtcd(cmd.Context(), a.stdout, server, force))
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "the restored seed control plane's `IP` (its etcd client address), or a URL naming it as `stratum server`'s --server does")
	cmd.Flags().BoolVar(&force, "force", false, "remove this node's etcd data even while its old cluster may still have a quorum")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the steps the rejoin would run (and a refusal it would meet), change nothing")
	out = addOutput(cmd, "text")
	cmd.Flags().Lookup("output").Usage = "the --dry-run report's `format`: text, json or yaml (only with --dry-run)"
	etcd.AddCommand(cmd)
	return etcd
}

// seedAddress is the seed's IP from --server, which takes the IP itself or a
// URL naming it (https://10.0.0.11:6443, as `stratum server --server` takes),
// so the two commands' --server accept the same form.
func seedAddress(v string) string {
	if u, err := url.Parse(v); err == nil && u.Scheme != "" && u.Hostname() != "" {
		return u.Hostname()
	}
	return v
}
