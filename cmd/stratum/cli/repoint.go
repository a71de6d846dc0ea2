package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/ha"
)

func (a *app) repointCmd() *cobra.Command {
	var vip string
	var cilium, dryRun bool
	var rollout time.Duration
	cmd := &cobra.Command{
		Use:   "repoint --vip <ip> [--cilium]",
		Short: "Move this node's clients (and optionally Cilium) onto the cluster VIP",
		Long: `Move this node's clients onto the cluster VIP, for a cluster that started as a single
controller (clients on its own address) and has grown into HA. Nothing changes unless the
VIP already serves this cluster's apiserver with a certificate, from this node's cluster
CA, that covers the VIP. A VIP where nothing answers (between holders) is asked again for
10 s first.

Every kubeconfig under /etc/stratum (bootstrap.conf included) is rewritten to
https://<vip>:6443, credentials kept, and the node state records the VIP so the next
"stratum up" keeps it. The running local services that read kubeconfigs (kube-vip,
stratum-operator) are restarted through the supervisor; one that fails to restart is
printed as a warning. A service not running (no supervisor runs here) reads the
repointed kubeconfig when it starts.

With --cilium, the Cilium agent DaemonSet and operator Deployment (kube-system/cilium,
kube-system/cilium-operator) are also pointed at the VIP (KUBERNETES_SERVICE_HOST/PORT),
with this node's admin credentials, and their rollout is awaited for --rollout-timeout
(5 min by default); a rollout still going then is a warning.

--dry-run makes the same VIP check and prints what would change: the VIP recorded, the
apiserver certificate reissued, each kubeconfig rewritten, each service restarted, and
with --cilium each object updated (checked by the apiserver as a server-side dry run).

The node's maintenance lock is held from this node's first change to its last, as a start,
a join, a restore and a renewal hold it: a repoint while one of them runs here is refused,
naming it.

Exits 0 once repointed (warnings included), 3 when refused with nothing changed (the
VIP does not serve the cluster, or another operation holds the node), 1 when it failed
after changing something (re-run it), 2 on bad usage; a dry run exits 0 or 3 as the
repoint would, the lock aside (it takes none).`,
		Example: `  # Clients of this node onto the VIP
  stratum repoint --vip 10.0.0.10

  # ...and Cilium too (run once, on one control plane)
  stratum repoint --vip 10.0.0.10 --cilium

  # ...waiting at most 30 s for Cilium's rollout
  stratum repoint --vip 10.0.0.10 --cilium --rollout-timeout 30s

  # What it would change, changing nothing
  stratum repoint --vip 10.0.0.10 --cilium --dry-run`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if vip == "" {
				return usagef("--vip is required")
			}
			if err := checkVIP(vip); err != nil {
				return err
			}
			if rollout <= 0 {
				return usagef("--rollout-timeout must be positive, got %s", rollout)
			}
			if cmd.Flags().Changed("rollout-timeout") && !cilium {
				return usagef("--rollout-timeout bounds Cilium's rollout; it applies only with --cilium")
			}
			n, _, err := a.localNode()
			if err != nil {
				return err
			}
			if dryRun {
				return n.RepointPlan(cmd.Context(), a.stdout, nil, vip, cilium)
			}
			if cilium {
				// Before this node's clients move: Cilium's refusals
				// refuse the whole repoint.
				if err := n.CheckRepointCilium(cmd.Context(), nil, vip); err != nil {
					return err
				}
			}
			warnings, err := n.NodeRepoint(cmd.Context(), a.stdout, vip)
			if err != nil {
				return explainHost(err)
			}
			if cilium {
				w, err := n.RepointCiliumWithin(cmd.Context(), a.stdout, nil, vip, rollout)
				if err != nil {
					// This node's clients were already moved.
					return ha.Midway(fmt.Errorf("this node's clients point at the VIP, but Cilium's repoint did not finish: %w; re-run the same command", err))
				}
				warnings = append(warnings, w...)
			}
			for _, w := range warnings {
				fmt.Fprintf(a.stderr, "warning: %s\n", w)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&vip, "vip", "", "the cluster VIP's `IP`")
	cmd.Flags().BoolVar(&cilium, "cilium", false, "also point the Cilium agent and operator at the VIP")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would change, change nothing")
	cmd.Flags().DurationVar(&rollout, "rollout-timeout", 5*time.Minute, "with --cilium, how long to wait for Cilium's rollout before warning")
	return cmd
}
