package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) repointCmd() *cobra.Command {
	var vip string
	var cilium bool
	cmd := &cobra.Command{
		Use:   "repoint --vip <ip> [--cilium]",
		Short: "Move this node's clients (and optionally Cilium) onto the cluster VIP",
		Long: `Move this node's clients onto the cluster VIP, for a cluster that started as a single
controller (clients on its own address) and has grown into HA. Nothing changes unless the
VIP already serves this cluster's apiserver with a certificate, from this node's cluster
CA, that covers the VIP.

Every kubeconfig under /etc/stratum (bootstrap.conf included) is rewritten to
https://<vip>:6443, credentials kept, and the node state records the VIP so the next
"stratum up" keeps it. The running local services that read kubeconfigs (kube-vip, the
controller manager and scheduler, stratum-operator) are restarted; one that fails to
restart is printed as a warning.

With --cilium, the Cilium agent DaemonSet and operator Deployment (kube-system/cilium,
kube-system/cilium-operator) are also pointed at the VIP (KUBERNETES_SERVICE_HOST/PORT),
with this node's admin credentials, and their rollout is awaited for a bounded time; a
rollout still going then is a warning.

Exits 0 once repointed (warnings included), 1 when refused or failed, 2 on bad usage.`,
		Example: `  # Clients of this node onto the VIP
  stratum repoint --vip 10.0.0.10

  # ...and Cilium too (run once, on one control plane)
  stratum repoint --vip 10.0.0.10 --cilium`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if vip == "" {
				return usagef("--vip is required")
			}
			if err := checkIP("--vip", vip); err != nil {
				return err
			}
			n, _, err := a.localNode()
			if err != nil {
				return err
			}
			warnings, err := n.NodeRepoint(cmd.Context(), a.stdout, vip)
			if err != nil {
				return explainHost(err)
			}
			if cilium {
				w, err := n.RepointCiliumWith(cmd.Context(), a.stdout, nil, vip)
				if err != nil {
					return err
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
	return cmd
}
