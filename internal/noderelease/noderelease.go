// Package noderelease records, in the cluster, which stratum release each
// control plane's supervisor runs: a Lease per control plane in kube-system
// (stratum-release-<member name>), written by the supervisor once its control
// plane is up and renewed while it runs (its renew time says when). etcd tells each member's etcd version and every
// kube-apiserver its own, but only a node's supervisor knows its stratum;
// `stratum upgrade plan` reads these to say, for the whole cluster, which
// control planes run which release during a rolling upgrade.
package noderelease

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// Namespace holds the Leases.
	Namespace = "kube-system"
	// namePrefix starts each Lease's name; the node's name follows.
	namePrefix = "stratum-release-"
	// label marks the Leases, which List selects by.
	label = "stratum.dev/release"
	// Annotations carrying a Release.
	annoStratum   = "stratum.dev/stratum-version"
	annoEtcd      = "stratum.dev/etcd-version"
	annoAPIServer = "stratum.dev/kube-apiserver-version"
	annoBinDir    = "stratum.dev/bin-dir"
	annoMemberID  = "stratum.dev/etcd-member-id"
)

// Release is what one control plane's supervisor runs.
type Release struct {
	// Node is the control plane's etcd member name (its node name).
	Node string `json:"node"`
	// MemberID is its etcd member's ID in hex: a node reset and joined
	// again under its name is another member, whose release this is not.
	MemberID string `json:"memberID,omitempty"`
	// Stratum, Etcd and APIServer are the versions it runs.
	Stratum   string `json:"stratum"`
	Etcd      string `json:"etcd"`
	APIServer string `json:"kubeAPIServer"`
	// BinDir is the directory its etcd and kube-apiserver run from.
	BinDir string `json:"binDir"`
	// Since is when the supervisor last recorded it.
	Since time.Time `json:"since"`
}

// LeaseName is the Lease that records node's release.
func LeaseName(node string) string { return namePrefix + node }

// Record writes r as node r.Node's Lease, created or replaced.
func Record(ctx context.Context, cs kubernetes.Interface, r Release) error {
	if r.Node == "" {
		return fmt.Errorf("record a release: no node named")
	}
	since := metav1.NewMicroTime(r.Since)
	holder := r.Node
	want := coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: LeaseName(r.Node), Namespace: Namespace,
			Labels: map[string]string{label: "true", "app.kubernetes.io/managed-by": "stratum"},
			Annotations: map[string]string{
				annoStratum: r.Stratum, annoEtcd: r.Etcd, annoAPIServer: r.APIServer, annoBinDir: r.BinDir, annoMemberID: r.MemberID,
			},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &since, RenewTime: &since},
	}
	leases := cs.CoordinationV1().Leases(Namespace)
	cur, err := leases.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := leases.Create(ctx, &want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("record this node's release (Lease %s/%s): %w", Namespace, want.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("record this node's release (Lease %s/%s): %w", Namespace, want.Name, err)
	}
	cur.Labels, cur.Annotations, cur.Spec = want.Labels, want.Annotations, want.Spec
	if _, err := leases.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("record this node's release (Lease %s/%s): %w", Namespace, want.Name, err)
	}
	return nil
}

// Forget deletes node's record (a node reset: it no longer runs a
// release); one already gone is not an error.
func Forget(ctx context.Context, cs kubernetes.Interface, node string) error {
	err := cs.CoordinationV1().Leases(Namespace).Delete(ctx, LeaseName(node), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the release record of %s (Lease %s/%s): %w", node, Namespace, LeaseName(node), err)
	}
	return nil
}

// ForgetMember deletes node's record when it is the record of etcd member
// memberID (hex), or names no member: a member removed for good no longer
// runs a release. A record of another member under the same name (the node
// joined again since) is kept. The delete is conditional on the version
// read; a record written meanwhile is read and judged again. It says
// whether it deleted one; none there is not an error.
func ForgetMember(ctx context.Context, cs kubernetes.Interface, node, memberID string) (bool, error) {
	leases := cs.CoordinationV1().Leases(Namespace)
	lease := Namespace + "/" + LeaseName(node)
	for attempt := 0; ; attempt++ {
		cur, err := leases.Get(ctx, LeaseName(node), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("read the release record of %s (Lease %s): %w", node, lease, err)
		}
		if id := cur.Annotations[annoMemberID]; id != "" && id != memberID {
			return false, nil
		}
		rv := cur.ResourceVersion
		err = leases.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case apierrors.IsConflict(err) && attempt < 2:
			continue // written meanwhile: judged again
		}
		return false, fmt.Errorf("delete the release record of %s (Lease %s): %w", node, lease, err)
	}
}

// List is every recorded release, by node name.
func List(ctx context.Context, cs kubernetes.Interface) (map[string]Release, error) {
	list, err := cs.CoordinationV1().Leases(Namespace).List(ctx, metav1.ListOptions{LabelSelector: label + "=true"})
	if err != nil {
		return nil, fmt.Errorf("list the control planes' recorded releases (Leases in %s): %w", Namespace, err)
	}
	out := map[string]Release{}
	for _, l := range list.Items {
		node, ok := strings.CutPrefix(l.Name, namePrefix)
		if !ok {
			continue
		}
		r := Release{Node: node, MemberID: l.Annotations[annoMemberID], Stratum: l.Annotations[annoStratum], Etcd: l.Annotations[annoEtcd],
			APIServer: l.Annotations[annoAPIServer], BinDir: l.Annotations[annoBinDir]}
		if l.Spec.RenewTime != nil {
			r.Since = l.Spec.RenewTime.Time
		}
		out[node] = r
	}
	return out, nil
}

// Nodes are the nodes of releases, sorted.
func Nodes(releases map[string]Release) []string {
	nodes := make([]string, 0, len(releases))
	for n := range releases {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	return nodes
}
