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
		Long: `Stream a snapshot of this control plane's etcd member into <file> (written as
<file>.part, its integrity hash checked, then renamed), and print its revision and key
count. Exits 0 once saved, 1 on failure, 2 on bad usage.`,
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
			ss, err := n.SnapshotSave(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "snapshot saved to %s: revision %d, %d keys, %d bytes, hash %08x\n", args[0], ss.Revision, ss.TotalKeys, ss.TotalSize, ss.Hash)
			return nil
		},
	}
	restore := &cobra.Command{
		Use:   "restore <file>",
		Short: "Reset this control plane to a new single-member etcd cluster holding a snapshot",
		Long: `Restore <file> with etcd's own restore (its hash is verified before anything is
touched), then stop this control plane, replace its etcd data with the restored data,
record a new single-member cluster (this node alone) in the node state, and start it
again. This node becomes the seed: run "stratum etcd rejoin --server <this node's IP>"
on every other control plane afterwards. Holds the node's maintenance and etcd-data
locks. Exits 0 once restored and started, 1 when refused or failed, 2 on bad usage.`,
		Example: `  stratum snapshot restore /root/etcd-backup.db
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
			return explainHost(n.SnapshotRestore(cmd.Context(), a.stdout, args[0]))
		},
	}
	cmd.AddCommand(save, restore)
	return cmd
}
