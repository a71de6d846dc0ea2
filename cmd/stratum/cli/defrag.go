package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/ha"
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

A member answers nothing while it is defragmented (seconds for a small database, about
a minute for 2 GiB on a slow disk), and its node's kube-apiserver, which talks to it
alone, waits with it. So a cluster that is not healthy is refused, changing nothing
(a NOSPACE alarm is allowed: clearing it is what this is for), and each next member
waits until the cluster is healthy again. With a NOSPACE alarm raised, the history is
first compacted to the current revision (the apiservers cannot compact while writes
are refused), and the alarm is disarmed once every member's database is under its
quota. Interrupted, run it again: it defragments every member again.
--dry-run prints the plan (the order, each database's size and what of it is in use).
-o json (or yaml) prints {compactRevision, members, noSpace, disarmed}.`,
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
			if err := a.write(out, rep, func() error { return writeDefrag(a.stdout, rep, dryRun) }); err != nil {
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
// members were printed as each was done.
func writeDefrag(w io.Writer, rep ha.EtcdDefrag, dryRun bool) error {
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
	var before, after int64
	for _, m := range rep.Members {
		before, after = before+m.Before, after+m.After
	}
	fmt.Fprintf(w, "etcd defragmented: %d members, %s -> %s in all\n", len(rep.Members), units.Bytes(before), units.Bytes(after))
	if rep.CompactRevision != 0 {
		fmt.Fprintf(w, "the history was compacted to revision %d\n", rep.CompactRevision)
	}
	if rep.Disarmed {
		fmt.Fprintln(w, "NOSPACE alarm disarmed: etcd takes writes again")
	}
	return nil
}
