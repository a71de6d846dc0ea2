// Package discovery is how a joining node comes to trust a cluster it has
// never seen: the cluster publishes its CA in the kube-public/cluster-info
// ConfigMap, readable without credentials, and the joiner accepts that CA
// only if its public key hashes to the --ca-hash the operator passed out of
// band (kubeadm's --discovery-token-ca-cert-hash). The fetch sends no
// credential, so a joiner pointed at the wrong server, or at a
// man-in-the-middle, refuses before its bootstrap token leaves the machine.
package discovery

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"

	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/pki"
)

// Where the cluster publishes its CA, as kubeadm does.
const (
	Namespace     = "kube-public"
	ConfigMap     = "cluster-info"
	KubeconfigKey = "kubeconfig"
	readerRole    = "stratum:cluster-info-reader"
)

// Publish writes (or refreshes) the cluster-info ConfigMap with a kubeconfig
// naming server and carrying caPEM, and lets unauthenticated clients get
// exactly that object; it returns once the apiserver cs reaches lets them
// (waitAnonymousReads).
func Publish(ctx context.Context, cs kubernetes.Interface, server string, caPEM []byte) error {
	kc, err := kubeconfig.ForCA(server, caPEM)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMap, Namespace: Namespace},
		Data:       map[string]string{KubeconfigKey: string(kc)},
	}
	if _, err := cs.CoreV1().ConfigMaps(Namespace).Create(ctx, cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = cs.CoreV1().ConfigMaps(Namespace).Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("refresh %s/%s: %w", Namespace, ConfigMap, err)
		}
	} else if err != nil {
		return fmt.Errorf("publish %s/%s: %w", Namespace, ConfigMap, err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: readerRole, Namespace: Namespace},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{ConfigMap}, Verbs: []string{"get"},
		}},
	}
	if _, err := cs.RbacV1().Roles(Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create role %s: %w", readerRole, err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: readerRole, Namespace: Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: readerRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "system:anonymous"}},
	}
	if _, err := cs.RbacV1().RoleBindings(Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create role binding %s: %w", readerRole, err)
	}
	return waitAnonymousReads(ctx, cs)
}

// Bounds of waitAnonymousReads: how long, and how often it asks.
const (
	anonymousReadsWithin = 10 * time.Second
	anonymousReadsPoll   = 50 * time.Millisecond
)

// waitAnonymousReads waits until the apiserver cs reaches lets an anonymous
// client get cluster-info: a binding just written reaches the RBAC
// authorizer through its informer, and a joiner that fetched meanwhile (a
// script joining right after the first node's bring-up; the simulator's
// tests, which did) was refused 403, "cluster-info not published".
func waitAnonymousReads(ctx context.Context, cs kubernetes.Interface) error {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "system:anonymous", Groups: []string{"system:unauthenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: Namespace, Verb: "get", Resource: "configmaps", Name: ConfigMap},
	}}
	deadline := time.Now().Add(anonymousReadsWithin)
	for {
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("denied: %s", got.Status.Reason)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s/%s is published, but anonymous reads of it are still refused after %s: %w", Namespace, ConfigMap, anonymousReadsWithin, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for anonymous reads of %s/%s: %w (last answer: %v)", Namespace, ConfigMap, ctx.Err(), err)
		case <-time.After(anonymousReadsPoll):
		}
	}
}

// ErrNotPublished matches a server that publishes no cluster-info.
var ErrNotPublished = errors.New("cluster-info not published")

// ErrUnreachable matches a fetch that got no answer from the server: the
// connection failed or broke, or the server said it is not ready (HTTP
// 503, or a refusal while its /readyz says it is not ready). A VIP between
// holders answers so for a moment, and an apiserver that just started for a
// few seconds; a caller may ask again.
var ErrUnreachable = errors.New("the server is unreachable or not ready")

// Dialer dials from the joining host.
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// FetchCA reads cluster-info from server anonymously and returns the CA in it
// whose public key matches caHash, that certificate alone (pinnedCA), and the server's clock as its answer's
// Date header says (zero when it has none; one-second resolution), which a
// joiner compares with its own before it issues certificates. Until the hash
// check passes nothing from the server is trusted, and no credential is sent
// at any point.
func FetchCA(ctx context.Context, server, caHash string, dial Dialer) (caPEM []byte, serverTime time.Time, err error) {
	if _, err := pki.CheckCAHashFormat(caHash); err != nil {
		return nil, time.Time{}, err
	}
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, time.Time{}, fmt.Errorf("--server %q is not an https URL", server)
	}
	tr := &http.Transport{
		// Unverified on purpose: this connection only fetches a public
		// object, which is then checked against the out-of-band hash.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec
	}
	if dial != nil {
		tr.DialContext = dial
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	endpoint := strings.TrimSuffix(server, "/") + "/api/v1/namespaces/" + Namespace + "/configmaps/" + ConfigMap
	var resp *http.Response
	var body []byte
	for readyBefore := false; ; readyBefore = true {
		if resp, body, err = get(ctx, client, endpoint); err != nil {
			return nil, time.Time{}, fmt.Errorf("fetch cluster-info from %s: %w: %w; nothing was changed: check --server and that this machine reaches it", server, ErrUnreachable, err)
		}
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusForbidden, http.StatusUnauthorized:
			// An apiserver that just started serves before its RBAC
			// authorizer's informers have synced, and refuses every
			// anonymous read until then: its refusal is not yet its
			// answer. One that stays so refuses anonymous reads for good
			// (the error matches ErrNotPublished too, for when the
			// caller stops asking).
			if why := notReady(ctx, client, server); why != "" {
				return nil, time.Time{}, fmt.Errorf("fetch cluster-info from %s: %w: it answered HTTP %d, and %s, as an API server that just started does until it is ready (if it stays so, %w to anonymous clients: is this the cluster's address, and was it brought up by stratum?)", server, ErrUnreachable, resp.StatusCode, why, ErrNotPublished)
			}
			if !readyBefore {
				continue // ready now, but maybe only since its answer: once more
			}
			return nil, time.Time{}, fmt.Errorf("%w at %s (HTTP %d): is this the cluster's address, and was it brought up by stratum?", ErrNotPublished, server, resp.StatusCode)
		case http.StatusServiceUnavailable:
			return nil, time.Time{}, fmt.Errorf("fetch cluster-info from %s: %w: HTTP %d", server, ErrUnreachable, resp.StatusCode)
		case http.StatusOK:
		default:
			return nil, time.Time{}, fmt.Errorf("fetch cluster-info from %s: HTTP %d", server, resp.StatusCode)
		}
		break
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(body, &cm); err != nil {
		return nil, time.Time{}, fmt.Errorf("cluster-info from %s is not a ConfigMap: %w", server, err)
	}
	caPEM, err = kubeconfig.CAOf([]byte(cm.Data[KubeconfigKey]))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("cluster-info from %s: %w", server, err)
	}
	if caPEM, err = pinnedCA(caPEM, caHash); err != nil {
		return nil, time.Time{}, fmt.Errorf("the CA %s serves does not match --ca-hash; nothing was sent to it and nothing was changed: check the join command, or whether %s is the cluster you meant: %w", server, server, err)
	}
	// A missing or malformed Date leaves serverTime zero: not judged.
	serverTime, _ = http.ParseTime(resp.Header.Get("Date"))
	return caPEM, serverTime, nil
}

// get is client's GET of url, its body read whole (up to 1 MiB) and
// closed, so the connection serves the next request.
func get(ctx context.Context, client *http.Client, url string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("read the answer: %w", err)
	}
	return resp, body, nil
}

// readyzTimeout bounds notReady's question.
const readyzTimeout = 5 * time.Second

// notReady asks server's /readyz, without credentials, and says why the
// server is not ready: its answer other than 200, or that it gave none.
// Anyone may ask a kube-apiserver that (RBAC's system:public-info-viewer),
// once its authorizer has synced: until then it is refused 403 too, which
// is so taken as not ready. "" is a server ready, or one that refuses the
// question for good (401: no anonymous requests at all; 404: no
// apiserver), whose refusal of cluster-info is then its answer.
func notReady(ctx context.Context, client *http.Client, server string) string {
	ctx, cancel := context.WithTimeout(ctx, readyzTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(server, "/")+"/readyz", nil)
	if err != nil {
		return ""
	}
	resp, err := client.Do(req)
	if err != nil {
		return "its /readyz did not answer: " + err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	switch resp.StatusCode {
	case http.StatusOK, http.StatusUnauthorized, http.StatusNotFound:
		return ""
	}
	return "its /readyz answered " + resp.Status
}

// pinnedCA is the certificates of bundle (PEM) whose public key has the hash
// pin, alone. The joiner's bootstrap kubeconfig trusts what this returns: a
// bundle's other certificates are not pinned, and one appended beside the
// cluster's (public) CA by whoever answers for the server would otherwise
// be trusted with the bootstrap token. A bundle of old and new CA, as a CA
// rotation publishes, is answered with the pinned one; an expired and a
// renewed certificate of the pinned key, with both (the key is what is
// pinned).
func pinnedCA(bundle []byte, pin string) ([]byte, error) {
	certs, err := certutil.ParseCertsPEM(bundle)
	if err != nil {
		return nil, fmt.Errorf("parse the CA: %w", err)
	}
	var pinned []byte
	var first error
	for _, c := range certs {
		one := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
		err := pki.CheckCAHash(one, pin)
		switch {
		case err == nil:
			pinned = append(pinned, one...)
		case errors.Is(err, pki.ErrCAHashMalformed):
			return nil, err
		case first == nil:
			first = err
		}
	}
	if pinned != nil {
		return pinned, nil
	}
	if len(certs) > 1 {
		return nil, fmt.Errorf("none of its %d certificates: %w", len(certs), first)
	}
	return nil, first
}
