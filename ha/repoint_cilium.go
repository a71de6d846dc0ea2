package ha

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/apiretry"
	"stratum.dev/stratum/internal/version"
)

// The Cilium objects a repoint moves onto the VIP.
const (
	ciliumNamespace = "kube-system"
	ciliumAgent     = "cilium"          // DaemonSet
	ciliumOperator  = "cilium-operator" // Deployment
)

// ciliumRolloutTimeout bounds the wait for Cilium's rollout after a repoint.
// A rollout still going at the end is a warning, not a failure: the objects
// were patched, and the rollout goes on without us.
const ciliumRolloutTimeout = 5 * time.Minute

// ciliumRolloutPoll is how often the rollout is read while waiting.
const ciliumRolloutPoll = time.Second

// RepointCilium points Cilium at the VIP with this node's admin credentials.
func RepointCilium(w io.Writer, vip string) ([]string, error) {
	n, err := local()
	if err != nil {
		return nil, err
	}
	return n.repointCilium(context.Background(), w, nil, vip, VIPServes, ciliumRolloutTimeout)
}

// RepointCiliumWith points Cilium at the VIP through cs.
func RepointCiliumWith(ctx context.Context, w io.Writer, cs kubernetes.Interface, vip string) ([]string, error) {
	n, err := local()
	if err != nil {
		return nil, err
	}
	return n.repointCilium(ctx, w, cs, vip, VIPServes, ciliumRolloutTimeout)
}

// RepointCiliumWith is the package-level RepointCiliumWith on this node, with
// the node's own VIPServes check; a nil cs is this node's admin client.
//
// Nothing changes unless the VIP serves this cluster's apiserver. Then the
// Cilium agent DaemonSet (kube-system/cilium) and operator Deployment
// (kube-system/cilium-operator) get KUBERNETES_SERVICE_HOST=<vip> and
// KUBERNETES_SERVICE_PORT=6443 on every container and init container, so
// Cilium reaches the apiserver without kube-proxy's service address. Both
// updates are first made as a server-side dry run: the change is bounded by
// the RBAC of cs, and a Forbidden (or any refusal) on either object is an
// error before anything is changed. After the updates it waits, at most
// ciliumRolloutTimeout, for both rollouts; one that does not finish is a
// warning naming what it last reported, beside a nil error; a wait stopped
// by ctx (Ctrl-C) is an error saying so.
func (n *Node) RepointCiliumWith(ctx context.Context, w io.Writer, cs kubernetes.Interface, vip string) ([]string, error) {
	return n.repointCilium(ctx, w, cs, vip, n.VIPServes, ciliumRolloutTimeout)
}

// RepointCiliumWithin is RepointCiliumWith with the rollout wait bounded by
// rollout instead of five minutes (`stratum repoint --cilium
// --rollout-timeout`): a cluster whose Cilium pods cannot roll out now (no
// schedulable node, an image not pulled yet) gets its warning sooner.
func (n *Node) RepointCiliumWithin(ctx context.Context, w io.Writer, cs kubernetes.Interface, vip string, rollout time.Duration) ([]string, error) {
	return n.repointCilium(ctx, w, cs, vip, n.VIPServes, rollout)
}

func (n *Node) repointCilium(ctx context.Context, w io.Writer, cs kubernetes.Interface, vip string, serves func(context.Context, string) (bool, error), rolloutTimeout time.Duration) ([]string, error) {
	if err := n.checkServes(ctx, vip, serves); err != nil {
		return nil, err
	}
	if cs == nil {
		var err error
		if cs, err = n.adminClient(); err != nil {
			return nil, fmt.Errorf("repoint Cilium: %w; nothing of Cilium's was changed", err)
		}
	}
	port := strconv.Itoa(version.APIServerPort)
	apps := cs.AppsV1()

	ds, err := apps.DaemonSets(ciliumNamespace).Get(ctx, ciliumAgent, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("repoint Cilium: read daemonset %s/%s: %w; nothing of Cilium's was changed", ciliumNamespace, ciliumAgent, err)
	}
	dep, err := apps.Deployments(ciliumNamespace).Get(ctx, ciliumOperator, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("repoint Cilium: read deployment %s/%s: %w; nothing of Cilium's was changed", ciliumNamespace, ciliumOperator, err)
	}
	dsChanged := setAPIServerEnv(&ds.Spec.Template.Spec, vip, port)
	depChanged := setAPIServerEnv(&dep.Spec.Template.Spec, vip, port)
	dry := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	if dsChanged {
		if _, err := apps.DaemonSets(ciliumNamespace).Update(ctx, ds.DeepCopy(), dry); err != nil {
			return nil, fmt.Errorf("repoint Cilium: update daemonset %s/%s (dry run): %w; nothing of Cilium's was changed", ciliumNamespace, ciliumAgent, err)
		}
	}
	if depChanged {
		if _, err := apps.Deployments(ciliumNamespace).Update(ctx, dep.DeepCopy(), dry); err != nil {
			return nil, fmt.Errorf("repoint Cilium: update deployment %s/%s (dry run): %w; nothing of Cilium's was changed", ciliumNamespace, ciliumOperator, err)
		}
	}
	if dsChanged {
		err := apiretry.Ensure(ctx, func() error {
			cur, err := apps.DaemonSets(ciliumNamespace).Get(ctx, ciliumAgent, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !setAPIServerEnv(&cur.Spec.Template.Spec, vip, port) {
				return nil
			}
			_, err = apps.DaemonSets(ciliumNamespace).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("repoint Cilium: update daemonset %s/%s: %w; its deployment was not updated, and the daemonset was not unless an update whose answer was lost landed", ciliumNamespace, ciliumAgent, err)
		}
		fmt.Fprintf(w, "daemonset %s/%s points at %s:%s\n", ciliumNamespace, ciliumAgent, vip, port)
	}
	if depChanged {
		err := apiretry.Ensure(ctx, func() error {
			cur, err := apps.Deployments(ciliumNamespace).Get(ctx, ciliumOperator, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !setAPIServerEnv(&cur.Spec.Template.Spec, vip, port) {
				return nil
			}
			_, err = apps.Deployments(ciliumNamespace).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			what := "nothing of Cilium's was changed, unless an update whose answer was lost landed"
			if dsChanged {
				what = fmt.Sprintf("daemonset %s/%s was already repointed: re-run to finish", ciliumNamespace, ciliumAgent)
			}
			return nil, fmt.Errorf("repoint Cilium: update deployment %s/%s: %w; %s", ciliumNamespace, ciliumOperator, err, what)
		}
		fmt.Fprintf(w, "deployment %s/%s points at %s:%s\n", ciliumNamespace, ciliumOperator, vip, port)
	}
	if !dsChanged && !depChanged {
		fmt.Fprintf(w, "Cilium already points at %s:%s\n", vip, port)
	}
	return n.waitCiliumRollout(ctx, w, cs, rolloutTimeout)
}

// setAPIServerEnv sets KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT
// on every container and init container of spec, and reports whether
// anything changed.
func setAPIServerEnv(spec *corev1.PodSpec, vip, port string) bool {
	changed := false
	set := func(c *corev1.Container, name, value string) {
		for i := range c.Env {
			if c.Env[i].Name == name {
				if c.Env[i].Value != value || c.Env[i].ValueFrom != nil {
					c.Env[i] = corev1.EnvVar{Name: name, Value: value}
					changed = true
				}
				return
			}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
		changed = true
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			set(&cs[i], "KUBERNETES_SERVICE_HOST", vip)
			set(&cs[i], "KUBERNETES_SERVICE_PORT", port)
		}
	}
	return changed
}

// waitCiliumRollout waits, at most timeout, for both rollouts, saying what
// each last reported every WaitReportEvery, and returns a warning for each
// one that did not finish, naming what it last reported. Stopped (Ctrl-C)
// before, it returns an error that says so: the settings are written and
// the rollout goes on in the cluster, and a timeout's warning would read as
// if it had been waited for.
func (n *Node) waitCiliumRollout(ctx context.Context, w io.Writer, cs kubernetes.Interface, timeout time.Duration) ([]string, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	apps := cs.AppsV1()
	// A read that fails (the deadline can cut the last one short) keeps
	// what the last successful read reported: the warning names the state
	// the rollout was last seen in, not the read the deadline interrupted.
	var dsLast, depLast string
	dsDone, depDone := false, false
	report := waitReporter{n: n}
	for {
		if !dsDone {
			if ds, err := apps.DaemonSets(ciliumNamespace).Get(wctx, ciliumAgent, metav1.GetOptions{}); err != nil {
				if dsLast == "" {
					dsLast = fmt.Sprintf("unreadable (%v)", err)
				}
			} else {
				dsDone, dsLast = daemonSetRolledOut(ds)
			}
		}
		if !depDone {
			if dep, err := apps.Deployments(ciliumNamespace).Get(wctx, ciliumOperator, metav1.GetOptions{}); err != nil {
				if depLast == "" {
					depLast = fmt.Sprintf("unreadable (%v)", err)
				}
			} else {
				depDone, depLast = deploymentRolledOut(dep)
			}
		}
		if dsDone && depDone {
			fmt.Fprintf(w, "Cilium rolled out\n")
			return nil, nil
		}
		report.waiting("Cilium's rollout onto the VIP (daemonset %s/%s: %s; deployment %s/%s: %s)", ciliumNamespace, ciliumAgent, dsLast, ciliumNamespace, ciliumOperator, depLast)
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, fmt.Errorf("stopped waiting for Cilium's rollout (daemonset %s/%s: %s; deployment %s/%s: %s): %w; Cilium's settings already point at the VIP and its rollout goes on in the cluster: re-run the same command to wait for it, or watch it with `kubectl -n %s rollout status daemonset/%s`", ciliumNamespace, ciliumAgent, dsLast, ciliumNamespace, ciliumOperator, depLast, context.Cause(ctx), ciliumNamespace, ciliumAgent)
			}
			var warnings []string
			if !dsDone {
				warnings = append(warnings, fmt.Sprintf("daemonset %s/%s: %s (rollout not finished after %s)", ciliumNamespace, ciliumAgent, dsLast, timeout))
			}
			if !depDone {
				warnings = append(warnings, fmt.Sprintf("deployment %s/%s: %s (rollout not finished after %s)", ciliumNamespace, ciliumOperator, depLast, timeout))
			}
			return warnings, nil
		case <-time.After(ciliumRolloutPoll):
		}
	}
}

// daemonSetRolledOut is kubectl rollout status's test for a DaemonSet.
func daemonSetRolledOut(ds *appsv1.DaemonSet) (bool, string) {
	s := ds.Status
	report := fmt.Sprintf("%d of %d updated, %d available", s.UpdatedNumberScheduled, s.DesiredNumberScheduled, s.NumberAvailable)
	if s.ObservedGeneration < ds.Generation {
		return false, report + fmt.Sprintf(", generation %d not yet observed (observed %d)", ds.Generation, s.ObservedGeneration)
	}
	return s.UpdatedNumberScheduled >= s.DesiredNumberScheduled && s.NumberAvailable >= s.DesiredNumberScheduled, report
}

// deploymentRolledOut is kubectl rollout status's test for a Deployment.
func deploymentRolledOut(d *appsv1.Deployment) (bool, string) {
	s := d.Status
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	report := fmt.Sprintf("%d of %d updated, %d available", s.UpdatedReplicas, want, s.AvailableReplicas)
	if s.ObservedGeneration < d.Generation {
		return false, report + fmt.Sprintf(", generation %d not yet observed (observed %d)", d.Generation, s.ObservedGeneration)
	}
	return s.UpdatedReplicas >= want && s.Replicas <= s.UpdatedReplicas && s.AvailableReplicas >= want, report
}
