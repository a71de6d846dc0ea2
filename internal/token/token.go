// Package token mints stratum's bootstrap tokens: a control-plane join grant
// (a token in the control-plane bootstrap group, a fresh certificate-key and
// the shared certificates uploaded under it) or a worker token (the worker
// group, nothing uploaded).
//
// The package does not import ha: the upload and the reader-binding repair
// are handed in as functions (ControlPlaneOptions), and run as the effects of
// one tokenSteps value, so the order of a mint — refusals first, then the
// token, then the upload, with the token removed again when the upload
// refuses — is one function a test can drive with recording effects.
package token

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	bootstrapsecrets "k8s.io/cluster-bootstrap/util/secrets"

	"stratum.dev/stratum/internal/apiretry"
	"stratum.dev/stratum/internal/interrupt"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/pki"
)

// Bootstrap groups stratum's tokens authenticate in. Only the control-plane
// group may read the shared certificates; a worker token never can.
const (
	ControlPlaneGroup = "system:bootstrappers:stratum:control-plane"
	WorkerGroup       = "system:bootstrappers:stratum:worker"
)

// DefaultTTL is how long a minted token lives when the caller gives no TTL.
const DefaultTTL = 2 * time.Hour

// Namespace is where bootstrap-token Secrets live.
const Namespace = "kube-system"

// SecretPrefix prefixes a bootstrap-token Secret's name; the token ID follows.
const SecretPrefix = bootstrapapi.BootstrapTokenSecretPrefix

// Bootstrap-token Secret fields, as the apiserver's bootstrap-token
// authenticator reads them.
const (
	keyTokenID     = bootstrapapi.BootstrapTokenIDKey
	keyTokenSecret = bootstrapapi.BootstrapTokenSecretKey
	keyExpiration  = bootstrapapi.BootstrapTokenExpirationKey
	keyUsageAuthn  = bootstrapapi.BootstrapTokenUsageAuthentication
	keyUsageSign   = bootstrapapi.BootstrapTokenUsageSigningKey
	keyExtraGroups = bootstrapapi.BootstrapTokenExtraGroupsKey
	keyDescription = bootstrapapi.BootstrapTokenDescriptionKey
)

// ParseToken splits "<id>.<secret>" and checks its form. It is stratum's one
// check of a token's form, and the check is k8s.io/cluster-bootstrap's (the
// secret half compared in constant time), so what stratum accepts is what
// the apiserver's authenticator accepts.
func ParseToken(tok string) (id, secret string, err error) {
	if !bootstraputil.IsValidBootstrapToken(tok) {
		return "", "", errors.New("bootstrap token is not <6 [a-z0-9]>.<16 [a-z0-9]>")
	}
	id, secret, _ = strings.Cut(tok, ".")
	return id, secret, nil
}

// ValidID reports whether id has a token ID's form (6 of [a-z0-9]), by
// k8s.io/cluster-bootstrap's check.
func ValidID(id string) bool { return bootstraputil.IsValidBootstrapTokenID(id) }

// IDFromSecretName is the token ID a bootstrap-token Secret's name carries,
// "" when the name is not one.
func IDFromSecretName(name string) string {
	id, _ := bootstrapsecrets.ParseName(name)
	return id
}

// NewSecret is the bootstrap-token Secret of tok ("<id>.<secret>"): usable
// for authentication and signing, in the given extra groups (none: the
// apiserver's default bootstrap group only), expiring at expires, and
// carrying description when it is not "". A malformed tok is refused.
func NewSecret(tok string, groups []string, expires time.Time, description string) (*corev1.Secret, error) {
	id, secret, err := ParseToken(tok)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(id), Namespace: Namespace},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			keyTokenID:     id,
			keyTokenSecret: secret,
			keyExpiration:  expires.UTC().Format(time.RFC3339),
			keyUsageAuthn:  "true",
			keyUsageSign:   "true",
		},
	}
	if len(groups) > 0 {
		s.StringData[keyExtraGroups] = strings.Join(groups, ",")
	}
	if description != "" {
		s.StringData[keyDescription] = description
	}
	return s, nil
}

// BootstrapUser is the user name in a worker token's bootstrap kubeconfig.
const BootstrapUser = "tls-bootstrap-token-user"

// The files JoinCommandSecretFiles writes in the joiner's working directory.
const (
	SecretTokenFile   = "stratum-join-token"
	SecretCertKeyFile = "stratum-join-certificate-key"
)

// Minted is the result of a mint.
type Minted struct {
	// Token is "<id>.<secret>"; ID its first half.
	Token, ID string
	// Expires is when the token stops authenticating.
	Expires time.Time
	// CertKey is the certificate-key the shared certificates were uploaded
	// under ("" for a worker token).
	CertKey string
	// CAHash pins the cluster CA ("sha256:<spki>").
	CAHash string
	// JoinCommand is the command the operator runs on the joining node (""
	// for a worker token).
	JoinCommand string
	// BootstrapKubeconfig is, for a worker token, the kubeconfig it
	// authorises: the server, the cluster CA and the token, as a kubelet's
	// --bootstrap-kubeconfig.
	BootstrapKubeconfig []byte
	// JoinCommandSecretFiles is the same join with the token and the
	// certificate-key read from files the first of its two lines writes
	// (umask 077, shell builtins), so neither is in the process list while
	// the joined control plane runs ("" for a worker token).
	JoinCommandSecretFiles string
	// Owner references the bootstrap-token Secret (the upload's owner).
	Owner metav1.OwnerReference
}

// ControlPlaneOptions are a control-plane mint's inputs and effects.
type ControlPlaneOptions struct {
	// Server is the URL a joiner dials: https://<VIP>:6443.
	Server string
	// CACertPEM is the cluster CA certificate, pinned by the join command.
	CACertPEM []byte
	// TTL is the token's life; 0 is DefaultTTL.
	TTL time.Duration
	// Now is stratum's clock (the host's); nil is time.Now.
	Now func() time.Time
	// NewCertKey makes the certificate-key (ha.NewCertKey).
	NewCertKey func() (string, error)
	// Upload publishes the shared certificates under certKey with owner as
	// an owner of the Secret (ha's UploadCerts). Required.
	Upload func(ctx context.Context, certKey string, owner *metav1.OwnerReference) error
	// NarrowReaders repairs the certs-reader binding
	// (ha.NarrowCertsReaderBinding); nil skips it.
	NarrowReaders func(ctx context.Context) error
	// Description is written into the token Secret.
	Description string
}

// WorkerOptions are a worker mint's inputs.
type WorkerOptions struct {
	Server        string
	CACertPEM     []byte
	TTL           time.Duration
	Now           func() time.Time
	NarrowReaders func(ctx context.Context) error
	Description   string
}

// tokenSteps are a mint's effects, in the order mint runs them.
type tokenSteps struct {
	narrow      func(ctx context.Context) error
	createToken func(ctx context.Context, group string, expires time.Time) (tok string, owner metav1.OwnerReference, err error)
	deleteToken func(ctx context.Context, id string) error
	newCertKey  func() (string, error)
	upload      func(ctx context.Context, certKey string, owner *metav1.OwnerReference) error
}

// MintControlPlane mints a control-plane join grant through cs: it repairs the
// certs-reader binding, creates a token in ControlPlaneGroup, makes a
// certificate-key and uploads the shared certificates under it owned by the
// token, and returns the join command. An upload that refuses removes the
// token again, so a refused mint leaves nothing behind.
func MintControlPlane(ctx context.Context, cs kubernetes.Interface, o ControlPlaneOptions) (*Minted, error) {
	if o.Upload == nil || o.NewCertKey == nil {
		return nil, errors.New("mint control-plane token: no upload or certificate-key step; nothing was created")
	}
	steps := clientSteps(cs, o.Description)
	steps.narrow, steps.newCertKey, steps.upload = o.NarrowReaders, o.NewCertKey, o.Upload
	return mint(ctx, steps, ControlPlaneGroup, o.Server, o.CACertPEM, o.TTL, o.Now)
}

// MintWorker mints a worker token: the worker group, nothing uploaded.
func MintWorker(ctx context.Context, cs kubernetes.Interface, o WorkerOptions) (*Minted, error) {
	steps := clientSteps(cs, o.Description)
	steps.narrow = o.NarrowReaders
	return mint(ctx, steps, WorkerGroup, o.Server, o.CACertPEM, o.TTL, o.Now)
}

func mint(ctx context.Context, s tokenSteps, group, server string, caPEM []byte, ttl time.Duration, now func() time.Time) (*Minted, error) {
	// Refusals first: nothing is created for a bad server or CA.
	if err := checkServer(server); err != nil {
		return nil, fmt.Errorf("mint token: %w; nothing was created", err)
	}
	caHash, err := pki.CAHash(caPEM)
	if err != nil {
		return nil, fmt.Errorf("mint token: %w; nothing was created", err)
	}
	if ttl < 0 {
		return nil, fmt.Errorf("mint token: negative TTL %s; nothing was created", ttl)
	}
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	if s.narrow != nil {
		if err := s.narrow(ctx); err != nil {
			return nil, fmt.Errorf("mint token: narrow the certs-reader binding: %w; no token was created", err)
		}
	}
	var certKey string
	if s.upload != nil {
		if certKey, err = s.newCertKey(); err != nil {
			return nil, fmt.Errorf("mint token: certificate-key: %w; no token was created", err)
		}
	}
	expires := now().Add(ttl).UTC().Truncate(time.Second)
	tok, owner, err := s.createToken(ctx, group, expires)
	if err != nil {
		return nil, fmt.Errorf("mint token: %w", err)
	}
	id, _, _ := ParseToken(tok)
	m := &Minted{Token: tok, ID: id, Expires: expires, CAHash: caHash, Owner: owner}
	if s.upload == nil {
		// A worker token: what a kubelet's TLS bootstrap uses. stratum has
		// no worker join command of its own, so none is printed.
		kc, err := kubeconfig.ForToken(server, caPEM, tok, BootstrapUser)
		if err != nil {
			return nil, fmt.Errorf("mint token: the bootstrap kubeconfig for token %s: %w; the token exists: delete Secret %s/%s%s", id, err, Namespace, SecretPrefix, id)
		}
		m.BootstrapKubeconfig = kc
		return m, nil
	}
	if err := s.upload(ctx, certKey, &owner); err != nil {
		// Not cut short by a second Ctrl-C: a token left would grant
		// nothing, but it is a credential never printed.
		end := interrupt.Hold()
		derr := s.deleteToken(context.WithoutCancel(ctx), id)
		end()
		if derr != nil {
			// Not wrapped: the upload's refusal no longer describes the
			// outcome, since the token it would have granted is left.
			return nil, fmt.Errorf("mint control-plane token: upload the shared certificates: %v; removing the token %s it would have granted also failed (%w): delete Secret %s/%s%s", err, id, derr, Namespace, SecretPrefix, id)
		}
		return nil, fmt.Errorf("mint control-plane token: upload the shared certificates: %w; the token was removed again, nothing was granted", err)
	}
	m.CertKey = certKey
	m.JoinCommand = fmt.Sprintf("stratum server --server %s --token %s --ca-hash %s --certificate-key %s", server, tok, caHash, certKey)
	m.JoinCommandSecretFiles = fmt.Sprintf("(umask 077; echo %s > %s; echo %s > %s)\n"+
		"stratum server --server %s --token-file %s --ca-hash %s --certificate-key-file %s",
		tok, SecretTokenFile, certKey, SecretCertKeyFile, server, SecretTokenFile, caHash, SecretCertKeyFile)
	return m, nil
}

// clientSteps are the token effects over cs.
func clientSteps(cs kubernetes.Interface, description string) tokenSteps {
	return tokenSteps{
		createToken: func(ctx context.Context, group string, expires time.Time) (string, metav1.OwnerReference, error) {
			for try := 0; ; try++ {
				tok, err := bootstraputil.GenerateBootstrapToken()
				if err != nil {
					return "", metav1.OwnerReference{}, fmt.Errorf("random token: %w", err)
				}
				s, err := NewSecret(tok, []string{group}, expires, description)
				if err != nil {
					return "", metav1.OwnerReference{}, err
				}
				got, err := createOnce(ctx, cs, s, secret(tok))
				if apierrors.IsAlreadyExists(err) && try < 3 {
					continue
				}
				if err != nil {
					return "", metav1.OwnerReference{}, fmt.Errorf("create bootstrap token Secret %s/%s: %w", Namespace, s.Name, err)
				}
				return tok, metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: got.Name, UID: got.UID}, nil
			}
		},
		deleteToken: func(ctx context.Context, id string) error {
			// A delete whose answer was lost is sent again; gone is done.
			err := apiretry.Ensure(ctx, func() error {
				return cs.CoreV1().Secrets(Namespace).Delete(ctx, SecretPrefix+id, metav1.DeleteOptions{})
			})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		},
	}
}

// createOnce creates the token Secret s, whose token secret is tokSecret,
// exactly once: a create whose answer was lost is sent again, and the
// AlreadyExists it may then meet is judged by the Secret there — ours (the
// same token secret, which no other minter draws) is the create's own
// success, anything else stays AlreadyExists. So a lost answer never leaves a
// token behind that the mint does not know it made.
func createOnce(ctx context.Context, cs kubernetes.Interface, s *corev1.Secret, tokSecret string) (*corev1.Secret, error) {
	secrets := cs.CoreV1().Secrets(Namespace)
	sent := false
	var got *corev1.Secret
	err := apiretry.Ensure(ctx, func() error {
		var err error
		got, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) && sent {
			cur, gerr := secrets.Get(ctx, s.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			if string(cur.Data[keyTokenSecret]) == tokSecret {
				got, err = cur, nil
			}
		}
		sent = sent || apiretry.LostConnection(err)
		return err
	})
	return got, err
}

// secret is a well-formed token's secret half.
func secret(tok string) string {
	_, s, _ := ParseToken(tok)
	return s
}

// ExpiredOrGone reports whether a bootstrap-token Secret no longer grants
// anything at now: nil (deleted), not a bootstrap token, not usable for
// authentication, or expired by k8s.io/cluster-bootstrap's reading, which is
// the apiserver authenticator's: no (or an empty) expiration lives until
// deleted, an unparsable one counts as expired.
func ExpiredOrGone(s *corev1.Secret, now time.Time) bool {
	if s == nil || s.Type != bootstrapapi.SecretTypeBootstrapToken || s.DeletionTimestamp != nil {
		return true
	}
	if bootstrapsecrets.GetData(s, keyUsageAuthn) != "true" {
		return true
	}
	return bootstrapsecrets.HasExpired(s, now)
}

func checkServer(server string) error {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("server %q is not an https://host:port URL", server)
	}
	return nil
}

// Info is one bootstrap token as `stratum token list` shows it. The secret
// half is never part of it.
type Info struct {
	ID string `json:"id"`
	// Kind is "control-plane", "worker", or "other" (a token stratum did
	// not mint).
	Kind string `json:"kind"`
	// Expires is when it stops authenticating; nil for a token that lives
	// until deleted.
	Expires *time.Time `json:"expires,omitempty"`
	// Live is false once it is expired or unusable for authentication.
	Live        bool     `json:"live"`
	Description string   `json:"description,omitempty"`
	Groups      []string `json:"groups,omitempty"`
}

// ErrNoToken matches a Delete of a token that does not exist.
var ErrNoToken = errors.New("no such bootstrap token")

// Secrets is every bootstrap-token Secret in the cluster, in one request
// whatever their number.
func Secrets(ctx context.Context, cs kubernetes.Interface) ([]corev1.Secret, error) {
	list, err := cs.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(bootstrapapi.SecretTypeBootstrapToken)})
	if err != nil {
		return nil, fmt.Errorf("list bootstrap tokens: %w", err)
	}
	return list.Items, nil
}

// List is every bootstrap token in the cluster, by ID, as seen at now.
func List(ctx context.Context, cs kubernetes.Interface, now time.Time) ([]Info, error) {
	secrets, err := Secrets(ctx, cs)
	if err != nil {
		return nil, err
	}
	var out []Info
	for i := range secrets {
		s := &secrets[i]
		id := IDFromSecretName(s.Name)
		if id == "" {
			continue
		}
		info := Info{ID: id, Kind: kindOf(s), Live: !ExpiredOrGone(s, now), Description: string(s.Data[keyDescription]), Groups: groupsOf(s)}
		if exp, err := time.Parse(time.RFC3339, string(s.Data[keyExpiration])); err == nil {
			info.Expires = &exp
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// groupsOf is the bootstrap groups a token's Secret names.
func groupsOf(s *corev1.Secret) []string {
	var out []string
	for _, g := range strings.Split(string(s.Data[keyExtraGroups]), ",") {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	return out
}

// kindOf is a token's Info.Kind, read from its groups.
func kindOf(s *corev1.Secret) string {
	groups := groupsOf(s)
	switch {
	case slices.Contains(groups, ControlPlaneGroup):
		return "control-plane"
	case slices.Contains(groups, WorkerGroup):
		return "worker"
	}
	return "other"
}

// StratumExpired reports whether s is a bootstrap token stratum minted (one
// in its control-plane or worker group) whose expiry has passed at now: what
// DeleteExpired deletes. A token stratum did not mint, one without an expiry
// and one whose expiry does not parse are never reported: their lifetime is
// someone else's to end.
func StratumExpired(s *corev1.Secret, now time.Time) bool {
	if s.Type != bootstrapapi.SecretTypeBootstrapToken || IDFromSecretName(s.Name) == "" || kindOf(s) == "other" {
		return false
	}
	exp, err := time.Parse(time.RFC3339, string(s.Data[keyExpiration]))
	return err == nil && !now.Before(exp)
}

// DeleteExpired deletes every bootstrap token StratumExpired at now, as
// kube-controller-manager's token cleaner does where it runs (it does not
// by default, and stratum's real hosts run no controller manager), so
// expired tokens do not pile up in kube-system for the cluster's life. Each
// deletion is conditioned on the Secret as listed (its UID and
// resourceVersion): a token re-created or extended meanwhile is left as it
// is. It returns the IDs it deleted, sorted, also when a deletion failed.
func DeleteExpired(ctx context.Context, cs kubernetes.Interface, now time.Time) ([]string, error) {
	secrets, err := Secrets(ctx, cs)
	if err != nil {
		return nil, err
	}
	var deleted []string
	var errs []error
	for i := range secrets {
		s := &secrets[i]
		if !StratumExpired(s, now) {
			continue
		}
		uid, rv := s.UID, s.ResourceVersion
		err := cs.CoreV1().Secrets(Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		switch {
		case err == nil:
			deleted = append(deleted, IDFromSecretName(s.Name))
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Deleted, re-created or extended since the list: not ours to judge now.
		default:
			errs = append(errs, fmt.Errorf("delete expired token %s: %w", IDFromSecretName(s.Name), err))
		}
	}
	slices.Sort(deleted)
	return deleted, errors.Join(errs...)
}

// Delete deletes the bootstrap token id, so it no longer authenticates. A
// malformed id is refused and an unknown one matches ErrNoToken; neither
// changes anything.
func Delete(ctx context.Context, cs kubernetes.Interface, id string) error {
	if !ValidID(id) {
		return fmt.Errorf("%q is not a token ID (6 characters of [a-z0-9], the part before the dot); nothing was deleted", id)
	}
	err := cs.CoreV1().Secrets(Namespace).Delete(ctx, SecretPrefix+id, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w %s (no Secret %s/%s%s); nothing was deleted: `stratum token list` shows the tokens", ErrNoToken, id, Namespace, SecretPrefix, id)
	}
	if err != nil {
		return fmt.Errorf("delete token %s: %w", id, err)
	}
	return nil
}
