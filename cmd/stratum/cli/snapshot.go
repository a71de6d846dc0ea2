package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save or restore an etcd snapshot on this control plane",
		Example: `  stratum snapshot save /root/etcd-backup.db
  stratum snapshot restore /root/etcd-backup.db`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	save := &cobra.Command{
		Use:   "save <file>",
		Short: "Save a snapshot of this control plane's etcd member to a file",
		Long: `Stream a snapshot of this control plane's etcd member into <file> (written in a
private directory made beside it, mode 0700, reached through its open descriptor, the
presence of its checksum checked (the restore verifies it) and the file read back, then
renamed onto <file>, mode 0600), and print its revision and key count. It holds every
Secret of the cluster: keep it where only root reads it. Exits 0 once saved, 1 on
failure, 2 on bad usage (an empty <file>), 3 when refused with nothing written (not a
control plane; <file> a directory, or in a directory that is missing or not writable:
judged before the database is streamed).`,
		Example: `  stratum snapshot save /root/etcd-backup.db`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, h, err := a.localNode()
			if err != nil {
				return err
			}
			if _, err := loadState(h); err != nil {
				return err
			}
			// The destination is judged before the database is streamed:
			// a rename onto it would fail only after the whole dump.
			if args[0] == "" {
				return usagef("snapshot save: the file name is empty; nothing was saved")
			}
			if err := checkWritableFile(args[0]); err != nil {
				return refusedf("snapshot save %s: %w: pass the path of a file in a directory that exists and is writable; nothing was saved", args[0], err)
			}
			ss, err := n.SnapshotSave(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "snapshot saved to %s: revision %d, %d keys, %d bytes, hash %08x\n", args[0], ss.Revision, ss.TotalKeys, ss.TotalSize, ss.Hash)
			return nil
		},
	}
	var dryRun bool
	restore := &cobra.Command{
		Use:   "restore <file>",
		Short: "Reset this control plane to a new single-member etcd cluster holding a snapshot",
		Long: `Restore <file> with etcd's own restore (its hash is verified before anything is
touched), then stop this control plane, replace its etcd data with the restored data,
record a new single-member cluster (this node alone) in the node state, and start it
again. This node becomes the seed: run "stratum etcd rejoin --server <this node's IP>"
on every other control plane afterwards. Holds the node's maintenance and etcd-data
locks. From before the stop until the new membership is recorded it keeps
/var/lib/stratum/etcd-data-replacing.json, and "stratum up" (a reboot's) refuses while
it is there: re-run the restore to finish.

--dry-run checks the node state and the snapshot as the restore does, restores the
snapshot into a scratch directory (verifying its hash) and removes it again, and prints
the steps the restore would run; it takes no lock and changes nothing.

Exits 0 once restored and started, 3 when refused with nothing changed (another
operation holds a lock, the snapshot does not restore, or it holds the data of a newer
etcd than this node runs: a snapshot saved before an etcd downgrade), 1 when it failed after stopping
the control plane (re-run it), 2 on bad usage.`,
		Example: `  stratum snapshot restore /root/etcd-backup.db --dry-run
  stratum snapshot restore /root/etcd-backup.db
  # then, on each other control plane:
  stratum etcd rejoin --server 10.0.0.11`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, h, err := a.localNode()
			if err != nil {
				return err
			}
			if _, err := loadState(h); err != nil {
				return err
			}
			if dryRun {
				return n.SnapshotRestorePlan(cmd.Context(), a.stdout, args[0])
			}
			return explainHost(n.SnapshotRestore(cmd.Context(), a.stdout, args[0]))
		},
	}
	restore.Flags().BoolVar(&dryRun, "dry-run", false, "check the snapshot and print the steps, change nothing")
	cmd.AddCommand(save, restore)
	return cmd
}
