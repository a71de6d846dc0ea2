package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	etcdserverpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// etcdClientURLsAnnotation on stratum-certs lists the client URLs of the
// cluster's started etcd members, comma-separated, as the cluster last
// published them: each mint (UploadCerts), each control plane's start, a
// reset's member removal, `stratum etcd member remove` (PublishEtcdMembers)
// and every operator pass write it. A join reads it
// with its grant (its bootstrap token may read the Secret), so a join
// command outlives the control planes that were the members at its mint.
// The list is neither secret nor authenticated, and needs to be neither: a
// join trusts an etcd endpoint only through the bundle's etcd CA, and takes
// the members it gates on and adds through from the member list an endpoint
// answers with.
const etcdClientURLsAnnotation = "stratum.dev/etcd-client-urls"

// maxPublishedEtcdURLs bounds what a join takes from the annotation.
const maxPublishedEtcdURLs = 16

// publishEtcdMembersWithin bounds a control plane start's publication: it
// is a courtesy to later joins, never a reason for `up` to wait.
const publishEtcdMembersWithin = 5 * time.Second

// publishedEtcdURLs are the https URLs with a host in an
// etcdClientURLsAnnotation value, at most maxPublishedEtcdURLs; anything
// else in it is skipped.
func publishedEtcdURLs(value string) []string {
	var out []string
	for _, raw := range strings.Split(value, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Scheme != "https" || u.Hostname() == "" || slices.Contains(out, u.String()) {
			continue
		}
		if out = append(out, u.String()); len(out) == maxPublishedEtcdURLs {
			break
		}
	}
	return out
}

// withPublishedEtcdURLs is the etcd endpoints a join asks for the member
// list: those the cluster published last, then the grant's own (the
// membership at the mint), each once. The freshest come first, so a join
// asks a member that is gone only when no current one answers.
func withPublishedEtcdURLs(published, granted []string) []string {
	out := slices.Clone(published)
	for _, u := range granted {
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// clientURLsOf are the client URLs of members, sorted, each once.
func clientURLsOf(ms []*etcdserverpb.Member) []string {
	var out []string
	for _, m := range ms {
		for _, u := range m.ClientURLs {
			if !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	slices.Sort(out)
	return out
}

// publishEtcdMembers writes the client URLs of the etcd members ms (a member
// list) to stratum-certs' etcdClientURLsAnnotation when they differ from what
// it holds. A cluster that has no stratum-certs yet (nothing was minted) has
// nothing to write to. It reports whether it wrote.
func (n *Node) publishEtcdMembers(ctx context.Context, cs kubernetes.Interface, ms []*etcdserverpb.Member) (bool, error) {
	urls := clientURLsOf(ms)
	if len(urls) == 0 {
		return false, fmt.Errorf("publish the etcd members: the member list names no member with a client URL")
	}
	value := strings.Join(urls, ",")
	s, err := cs.CoreV1().Secrets(certsNamespace).Get(ctx, certsSecret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("publish the etcd members: read Secret %s/%s: %w", certsNamespace, certsSecret, err)
	case s.Annotations[etcdClientURLsAnnotation] == value:
		return false, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{etcdClientURLsAnnotation: value}}})
	if err != nil {
		return false, err
	}
	_, err = cs.CoreV1().Secrets(certsNamespace).Patch(ctx, certsSecret, types.MergePatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("publish the etcd members: annotate Secret %s/%s: %w", certsNamespace, certsSecret, err)
	}
	n.log.Info("published the etcd members for later joins", "clientURLs", value)
	return true, nil
}

// publishEtcdMembersVia publishes the etcd members, as the members at ips
// list them, through the first of the kube-apiservers at the same ips that
// answers, with this node's admin credential: what a control plane whose
// own apiserver may be stopped (a reset) or just started (`up`) can reach
// without the VIP, which may not be held yet.
func (n *Node) publishEtcdMembersVia(ctx context.Context, ips []string) error {
	kc, err := n.env.Host.ReadFile(version.Kubeconfig(kubeconfig.Admin))
	if err != nil {
		return fmt.Errorf("publish the etcd members: read admin kubeconfig: %w", err)
	}
	ms, err := n.members(ctx, ips, "publish the etcd members")
	if err != nil {
		return err
	}
	base, err := n.restConfig(kc)
	if err != nil {
		return fmt.Errorf("publish the etcd members: %w", err)
	}
	var errs []string
	for _, ip := range ips {
		cfg := rest.CopyConfig(base)
		cfg.Host = apiServerURL(ip)
		cfg.Timeout = publishEtcdMembersWithin
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("publish the etcd members: %w", err)
		}
		if _, err := n.publishEtcdMembers(ctx, cs, ms); err != nil {
			errs = append(errs, fmt.Sprintf("through %s: %v", cfg.Host, err))
			continue
		}
		return nil
	}
	return fmt.Errorf("publish the etcd members: %s", strings.Join(errs, "; "))
}

// PublishEtcdMembers publishes the etcd members, as this control plane's
// member lists them, for later joins (etcdClientURLsAnnotation on
// stratum-certs), through this node's own apiserver, within a few seconds.
// `stratum etcd member remove` runs it after a removal; a control plane's
// start runs it last (publishOwnView).
func (n *Node) PublishEtcdMembers(ctx context.Context) error {
	st, err := nodestate.Load(n.env.Host)
	if err != nil {
		return fmt.Errorf("publish the etcd members: %w", err)
	}
	own := nodestate.FirstIP(st.NodeIP)
	if own == "" {
		return fmt.Errorf("publish the etcd members: node state %s names no node IP", nodestate.Path)
	}
	pctx, cancel := context.WithTimeout(ctx, publishEtcdMembersWithin)
	defer cancel()
	return n.publishEtcdMembersVia(pctx, []string{own})
}

// publishOwnView is a control plane start's last step, PublishEtcdMembers,
// so a join command minted before this node joined finds it. A failure is
// logged, never `up`'s: the next start or operator pass publishes again.
func (n *Node) publishOwnView(ctx context.Context, _ *nodestate.NodeState) error {
	if err := n.PublishEtcdMembers(ctx); err != nil {
		n.log.Warn("the etcd members were not published for later joins (the next start or operator pass does it)", "err", err)
	}
	return nil
}

// readPublishedEtcdURLsWithin bounds readPublishedEtcdURLs: the apiserver
// it reads through may be this node's own, stopped with its etcd, and a
// VIP this node held takes a lease's time to move to another control plane.
const readPublishedEtcdURLsWithin = 5 * time.Second

// readPublishedEtcdURLs reads the etcd members' client URLs the cluster last
// published for joiners (etcdClientURLsAnnotation on stratum-certs), through
// server (this node's apiserver endpoint: the VIP, or its own address; ""
// for the admin kubeconfig's) with this node's admin credential, retrying
// within readPublishedEtcdURLsWithin. A reset on a node that knows no other
// member (a cluster's first control plane, a restore's seed) finds the
// members it removes itself through this way. It changes nothing.
func (n *Node) readPublishedEtcdURLs(ctx context.Context, server string) ([]string, error) {
	cfg, err := n.adminRESTConfig()
	if err != nil {
		return nil, err
	}
	if server != "" {
		cfg.Host = server
	}
	rctx, cancel := context.WithTimeout(ctx, readPublishedEtcdURLsWithin)
	defer cancel()
	cfg.Timeout = readPublishedEtcdURLsWithin / 2
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	for {
		s, err := cs.CoreV1().Secrets(certsNamespace).Get(rctx, certsSecret, metav1.GetOptions{})
		switch {
		case err == nil:
			urls := publishedEtcdURLs(s.Annotations[etcdClientURLsAnnotation])
			if len(urls) == 0 {
				return nil, fmt.Errorf("the Secret %s/%s read through %s names no etcd member", certsNamespace, certsSecret, cfg.Host)
			}
			return urls, nil
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("the Secret %s/%s does not exist (no join command was minted)", certsNamespace, certsSecret)
		case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
			return nil, fmt.Errorf("read Secret %s/%s through %s: %w", certsNamespace, certsSecret, cfg.Host, err)
		}
		select {
		case <-rctx.Done():
			return nil, fmt.Errorf("read Secret %s/%s through %s: %w", certsNamespace, certsSecret, cfg.Host, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
