package ha

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/apiretry"
	"stratum.dev/stratum/internal/token"
)

// DeleteExpiredTokens deletes every bootstrap token stratum minted whose
// expiry has passed by this node's clock (token.DeleteExpired), as
// kube-controller-manager's token cleaner does where it runs: it is off in a
// controller manager's defaults, and stratum's real hosts run none, so
// without this every join's token stayed in kube-system for the cluster's
// life. An expired token no longer authenticates, so deleting it changes no
// verdict; the operator runs it on every pass. It returns the IDs deleted.
func (n *Node) DeleteExpiredTokens(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	deleted, err := token.DeleteExpired(ctx, cs, n.env.Host.Now())
	if len(deleted) > 0 {
		n.log.Info("deleted expired join tokens", "tokens", deleted)
	}
	if err != nil {
		return deleted, fmt.Errorf("delete expired join tokens: %w", err)
	}
	return deleted, nil
}

// CollectSharedCerts does for the shared-certificate Secret what
// kube-controller-manager's garbage collector does where it runs: it drops
// the owner references whose bootstrap token is gone (its Secret deleted, or
// re-created under another UID), and deletes the Secret once it had owners
// and none is left. Each mint adds its token as an owner, so without a
// collector the references grew with every mint, and the cluster's CA keys,
// sealed under the last mint's certificate-key, outlived every grant: a
// certificate-key that leaks later (a join command kept in a shell history
// or a CI log) would open them for anyone who can read Secrets in
// kube-system. An owner of another kind, which this cannot judge, is kept and
// keeps the Secret. Both writes carry the resourceVersion read, so a mint
// landing meanwhile conflicts and the retry judges the fresh Secret. It
// returns the IDs of the tokens whose references it dropped, and whether it
// deleted the Secret; an absent Secret is left absent.
func (n *Node) CollectSharedCerts(ctx context.Context, cs kubernetes.Interface) (dropped []string, deleted bool, err error) {
	secrets := cs.CoreV1().Secrets(certsNamespace)
	err = apiretry.Ensure(ctx, func() error {
		dropped, deleted = nil, false
		cur, err := secrets.Get(ctx, certsSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(cur.OwnerReferences) == 0 {
			return nil // never owned: no collector would delete it
		}
		var live []metav1.OwnerReference
		var gone []string
		for _, o := range cur.OwnerReferences {
			isGone, err := tokenOwnerGone(ctx, cs, o)
			if err != nil {
				return err
			}
			if isGone {
				gone = append(gone, token.IDFromSecretName(o.Name))
			} else {
				live = append(live, o)
			}
		}
		if len(gone) == 0 {
			return nil
		}
		if len(live) == 0 {
			uid, rv := cur.UID, cur.ResourceVersion
			err := secrets.Delete(ctx, certsSecret, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err == nil {
				dropped, deleted = gone, true
				n.log.Info("deleted the shared certificates: every join token they were uploaded for is gone", "secret", certsNamespace+"/"+certsSecret, "tokens", gone)
			}
			return err
		}
		cur.OwnerReferences = live
		if _, err := secrets.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return err
		}
		dropped = gone
		n.log.Info("dropped the shared certificates' references to deleted join tokens", "tokens", gone)
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("collect Secret %s/%s: %w", certsNamespace, certsSecret, err)
	}
	return dropped, deleted, nil
}

// tokenOwnerGone reports whether an owner reference of the shared
// certificates names a bootstrap-token Secret that no longer exists under
// its UID. A reference to anything else is never gone: it is not ours to
// judge.
func tokenOwnerGone(ctx context.Context, cs kubernetes.Interface, o metav1.OwnerReference) (bool, error) {
	if o.APIVersion != "v1" || o.Kind != "Secret" || token.IDFromSecretName(o.Name) == "" {
		return false, nil
	}
	s, err := cs.CoreV1().Secrets(token.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read owner %s: %w", o.Name, err)
	}
	return s.UID != o.UID, nil
}
