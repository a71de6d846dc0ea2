package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/units"
)

// etcdDefragCmd is `stratum etcd defrag`.
func (a *app) etcdDefragCmd() *cobra.Command {
	var dryRun bool
	var out *output
	cmd := &cobra.Command{
		Use:   "defrag [--dry-run]",
		Short: "Give back the space etcd's databases hold free, one member at a time; clears a NOSPACE alarm",
		Long: `Defragment every etcd member's database, one member at a time and the leader last, so
the space compaction freed goes back to the disk: etcd reuses freed space but its
database file never shrinks, and its quota (2 GiB by default) counts the file. At the
quota etcd raises NOSPACE and refuses every write, Lease renewals with them, so the VIP
is held nowhere; "stratum etcd health" and "stratum status" warn from 80% of it.

A member answers nothing while it is defragmented (milliseconds for a small database,
about a minute for 2 GiB on a slow disk), and its node's kube-apiserver, which talks to it
alone, waits with it. So a cluster that is not healthy is refused, changing nothing
(a NOSPACE alarm is allowed: clearing it is what this is for), and each next member
waits until the cluster is healthy again. With a NOSPACE alarm raised, the history is
first compacted to the current revision (the apiservers cannot compact while writes
are refused), and the alarm is disarmed once every member's database is under its
quota. Interrupted, run it again: it defragments every member again.
--dry-run prints the plan (the order, each database's size and what of it is in use).
-o json (or yaml) prints {compactRevision, members, noSpace, disarmed, warnings}.
Exits 3 when refused (nothing was asked of etcd), 1 when it failed after the first
compaction or defragmentation was asked for (run it again).`,
		Example: `  stratum etcd defrag --dry-run
  stratum etcd defrag

  # writes refused with "etcdserver: mvcc: database space exceeded":
  stratum etcd health      # names the NOSPACE alarm
  stratum etcd defrag      # compacts, defragments, disarms`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			n, _, st, err := a.controlPlaneNode()
			if err != nil {
				return err
			}
			human := out.format == "text"
			progress := func(d ha.EtcdMemberDefrag) {
				if human {
					fmt.Fprintf(a.stdout, "  %s: %s -> %s in %s\n", d.Name, units.Bytes(d.Before), units.Bytes(d.After), d.Took.Round(10*time.Millisecond))
				}
			}
			if human && !dryRun {
				// The plan first, so a long run says what it is doing.
				plan, err := n.DefragmentEtcd(cmd.Context(), etcdVia(st), true, nil)
				if err != nil {
					return fmt.Errorf("etcd defrag: %w", err)
				}
				fmt.Fprintf(a.stdout, "defragmenting %d etcd members, one at a time, the leader last\n", len(plan.Members))
				if plan.NoSpace {
					fmt.Fprintln(a.stdout, "a NOSPACE alarm is raised: compacting the history to the current revision first")
				}
			}
			rep, derr := n.DefragmentEtcd(cmd.Context(), etcdVia(st), dryRun, progress)
			if derr != nil && len(rep.Members) == 0 {
				return fmt.Errorf("etcd defrag: %w", derr)
			}
			if err := a.write(out, rep, func() error { return writeDefrag(a.stdout, rep, dryRun, derr != nil) }); err != nil {
				return err
			}
			if derr != nil {
				return fmt.Errorf("etcd defrag: %w", derr)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan, change nothing")
	out = addOutput(cmd, "text")
	return cmd
}

// writeDefrag prints the plan of a dry run, or the end of a run whose
// members were printed as each was done; failed, how far it got.
func writeDefrag(w io.Writer, rep ha.EtcdDefrag, dryRun, failed bool) error {
	if dryRun {
		fmt.Fprintf(w, "would defragment %d etcd members, one at a time, the leader last:\n", len(rep.Members))
		for _, m := range rep.Members {
			role := ""
			if m.Leader {
				role = " (leader)"
			}
			fmt.Fprintf(w, "  %s%s: %s, %s of it in use\n", m.Name, role, units.Bytes(m.Before), units.Bytes(m.InUse))
		}
		if rep.NoSpace {
			fmt.Fprintln(w, "a NOSPACE alarm is raised: the history would be compacted to the current revision first, and the alarm disarmed after")
		}
		return nil
	}
	var done int
	var before, after int64
	for _, m := range rep.Members {
		if m.Done {
			done, before, after = done+1, before+m.Before, after+m.After
		}
	}
	if failed {
		fmt.Fprintf(w, "stopped: %d of %d etcd members defragmented\n", done, len(rep.Members))
		return nil
	}
	fmt.Fprintf(w, "etcd defragmented: %d members, %s -> %s in all\n", done, units.Bytes(before), units.Bytes(after))
	if rep.CompactRevision != 0 {
		fmt.Fprintf(w, "the history was compacted to revision %d\n", rep.CompactRevision)
	}
	if rep.Disarmed {
		fmt.Fprintln(w, "NOSPACE alarm disarmed: etcd takes writes again")
	}
	for _, warning := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
	return nil
}

// etcdQuotaCmd is `stratum etcd quota SIZE`.
func (a *app) etcdQuotaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "quota SIZE",
		Short: "Set this control plane's etcd quota (the database size at which etcd refuses writes); run it on each",
		Long: `Set this node's etcd member's quota (etcd's --quota-backend-bytes): the database size at
which etcd raises NOSPACE and refuses every write. SIZE is a quantity such as 8Gi or
512Mi, from 16Mi to 8Gi (etcd's suggested maximum), or "default" for etcd's 2 GiB.
Each member enforces its own, so run it on every control plane in turn; a join takes
the cluster's (its members' largest), and "stratum up --etcd-quota" or spec.etcd.quota
sets it at a cluster's bring-up.

It refuses, changing nothing, when this node's database fills 80% of SIZE or more
(etcd would raise NOSPACE at once, or soon: "stratum etcd defrag" first) or the cluster
is not healthy apart from a NOSPACE alarm (this node's etcd restarts, and with another
member down its vote could cost the quorum). Then it records the quota in the node
state, restarts etcd onto it, and waits until the member serves with it and the cluster
is healthy again. Run it on one control plane at a time, never on several at once; on a
single control plane the cluster does not answer during the restart. A quota raised on
every member does not clear a NOSPACE alarm by itself: "stratum etcd defrag" then
disarms it. Interrupted, run it again. Exits 2 for a SIZE that is no quantity from 16Mi
to 8Gi nor "default", 3 when refused (nothing changed), 1 when it failed once it had
begun to change this node (run it again).`,
		Example: `  stratum etcd quota 8Gi          # on each control plane in turn
  stratum etcd quota default      # back to etcd's 2 GiB`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var quota int64
			if args[0] != "default" {
				q, err := controlplane.ParseEtcdQuota(args[0])
				if err != nil {
					return usagef("%v", err)
				}
				if q == 0 {
					return usagef("etcd quota %q: give a size such as 8Gi, or \"default\"", args[0])
				}
				quota = q
			}
			n, _, _, err := a.controlPlaneNode()
			if err != nil {
				return err
			}
			changed, restarted, err := n.SetEtcdQuota(cmd.Context(), quota)
			if err != nil {
				return fmt.Errorf("etcd quota: %w", err)
			}
			size := units.Bytes(quota)
			if quota == 0 {
				size = "etcd's default, 2.0 GiB"
			}
			if !changed {
				fmt.Fprintf(a.stdout, "this node's etcd quota is %s already: nothing was changed\n", size)
				return nil
			}
			if restarted {
				fmt.Fprintf(a.stdout, "this node's etcd quota is %s: recorded in %s, etcd restarted onto it, the cluster healthy\n", size, nodestate.Path)
			} else {
				fmt.Fprintf(a.stdout, "this node's etcd quota is %s: recorded in %s; etcd, not running here, starts with it\n", size, nodestate.Path)
			}
			fmt.Fprintln(a.stdout, "run `stratum etcd quota` on every other control plane too: each member enforces its own")
			return nil
		},
	}
}
