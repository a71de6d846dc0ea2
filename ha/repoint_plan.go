package ha

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// RepointPlan is NodeRepoint's dry run (and, with cilium, RepointCiliumWith's
// over cs, the admin client when nil): it makes the same VIP check and
// writes to w what a repoint would change on this node, namely the VIP
// recorded in the node state, the apiserver certificate reissued, each
// kubeconfig rewritten and each service restarted, and for Cilium which
// objects would be updated, checked with a server-side dry run. It changes
// nothing. The refusal the repoint would meet is returned, so a dry run
// exits as the repoint would, but for the node's maintenance lock: the dry
// run does not take it (even for a moment it could refuse a start), so
// another operation holding the node refuses only the repoint.
func (n *Node) RepointPlan(ctx context.Context, w io.Writer, cs kubernetes.Interface, vip string, cilium bool) error {
	if err := n.checkServes(ctx, vip, n.VIPServes); err != nil {
		fmt.Fprintf(w, "repoint would be refused: %v\n", err)
		return err
	}
	fmt.Fprintf(w, "the VIP %s serves this cluster's apiserver\n", vip)
	h := n.env.Host
	server := apiServerURL(vip)
	st, err := nodestate.Load(h)
	switch {
	case errors.Is(err, nodestate.ErrNoState):
		st = nil
	case err != nil:
		return fmt.Errorf("repoint plan: %w", err)
	}
	if st != nil && st.Role == nodestate.RoleControlPlane {
		if st.VIP.Address != vip {
			fmt.Fprintf(w, "would record the VIP %s in the node state (was %q)\n", vip, st.VIP.Address)
		}
		covered := *st
		covered.VIP.Address = vip
		if why := n.apiServerCoversVIP(&covered); why != nil {
			fmt.Fprintf(w, "would reissue the apiserver certificate to cover the VIP (%v), and restart a running kube-apiserver onto it\n", why)
		}
	}
	kcs, err := nodeKubeconfigs(h)
	if err != nil {
		return Refusal(fmt.Errorf("repoint would be refused: %w; nothing was changed", err))
	}
	var rewrite, already []string
	for _, kc := range kcs {
		name := path.Base(kc.path)
		cur, err := kubeconfig.Server(kc.data)
		if err != nil {
			return Refusal(fmt.Errorf("repoint would be refused: %s: %w; nothing was changed", kc.path, err))
		}
		if cur == server {
			already = append(already, name)
		} else {
			rewrite = append(rewrite, fmt.Sprintf("%s (%s)", name, cur))
		}
	}
	if len(rewrite) > 0 {
		fmt.Fprintf(w, "would rewrite to %s: %s\n", server, strings.Join(rewrite, ", "))
	}
	if len(already) > 0 {
		fmt.Fprintf(w, "already at %s: %s\n", server, strings.Join(already, ", "))
	}
	if st != nil && st.Server != server {
		fmt.Fprintf(w, "would record %s as the node state's server (was %s)\n", server, st.Server)
	}
	if restart := runningServices(ctx, h, repointConsumers); len(restart) > 0 {
		fmt.Fprintf(w, "would restart: %s\n", strings.Join(restart, ", "))
	}
	if !cilium {
		return nil
	}
	return n.repointCiliumPlan(ctx, w, cs, vip)
}

// CheckRepointCilium makes RepointCiliumWith's checks and changes nothing:
// NodeRepoint's VIP check, then the update of each Cilium object as a
// server-side dry run through cs (the admin client when nil). `stratum
// repoint --cilium` runs it before NodeRepoint moves this node's clients, so
// a cluster without Cilium, or one whose apiserver would refuse the update,
// refuses the whole repoint rather than failing it midway.
func (n *Node) CheckRepointCilium(ctx context.Context, cs kubernetes.Interface, vip string) error {
	if err := n.checkServes(ctx, vip, n.VIPServes); err != nil {
		return err
	}
	if err := n.repointCiliumPlan(ctx, io.Discard, cs, vip); err != nil {
		// A dry run: nothing was changed, whatever failed.
		return Refusal(fmt.Errorf("%w; nothing was changed: repoint without --cilium to move only this node's clients", err))
	}
	return nil
}

// repointCiliumPlan is repointCilium's dry run: the objects it would update,
// each update checked by the apiserver as a server-side dry run.
func (n *Node) repointCiliumPlan(ctx context.Context, w io.Writer, cs kubernetes.Interface, vip string) error {
	if cs == nil {
		var err error
		if cs, err = n.adminClient(); err != nil {
			return fmt.Errorf("repoint Cilium plan: %w", err)
		}
	}
	port := strconv.Itoa(version.APIServerPort)
	apps := cs.AppsV1()
	dry := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	ds, err := apps.DaemonSets(ciliumNamespace).Get(ctx, ciliumAgent, metav1.GetOptions{})
	if err != nil {
		return Refusal(fmt.Errorf("repoint Cilium would be refused: read daemonset %s/%s: %w", ciliumNamespace, ciliumAgent, err))
	}
	dep, err := apps.Deployments(ciliumNamespace).Get(ctx, ciliumOperator, metav1.GetOptions{})
	if err != nil {
		return Refusal(fmt.Errorf("repoint Cilium would be refused: read deployment %s/%s: %w", ciliumNamespace, ciliumOperator, err))
	}
	if setAPIServerEnv(&ds.Spec.Template.Spec, vip, port) {
		if _, err := apps.DaemonSets(ciliumNamespace).Update(ctx, ds, dry); err != nil {
			return Refusal(fmt.Errorf("repoint Cilium would be refused: update daemonset %s/%s (dry run): %w", ciliumNamespace, ciliumAgent, err))
		}
		fmt.Fprintf(w, "would point daemonset %s/%s at %s:%s (the apiserver accepts the update)\n", ciliumNamespace, ciliumAgent, vip, port)
	} else {
		fmt.Fprintf(w, "daemonset %s/%s already points at %s:%s\n", ciliumNamespace, ciliumAgent, vip, port)
	}
	if setAPIServerEnv(&dep.Spec.Template.Spec, vip, port) {
		if _, err := apps.Deployments(ciliumNamespace).Update(ctx, dep, dry); err != nil {
			return Refusal(fmt.Errorf("repoint Cilium would be refused: update deployment %s/%s (dry run): %w", ciliumNamespace, ciliumOperator, err))
		}
		fmt.Fprintf(w, "would point deployment %s/%s at %s:%s (the apiserver accepts the update)\n", ciliumNamespace, ciliumOperator, vip, port)
	} else {
		fmt.Fprintf(w, "deployment %s/%s already points at %s:%s\n", ciliumNamespace, ciliumOperator, vip, port)
	}
	return nil
}
