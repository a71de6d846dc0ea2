package ha

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/internal/apiretry"
	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/internal/version"
)

// Errors a download's caller branches on.
var (
	// ErrNoBundle: no stratum-certs Secret is published.
	ErrNoBundle = errors.New("no shared-certificate bundle is published")
	// ErrTokenRefused: the apiserver did not accept the bootstrap token, or
	// the token may not read the bundle (a worker token never can).
	ErrTokenRefused = errors.New("bootstrap token may not read the shared certificates")
	// ErrOverBudget: the Secret cannot hold the publication.
	ErrOverBudget = errors.New("stratum-certs cannot hold another grant")
)

// CheckpointBeforeCertsWrite is reached by every publication of stratum-certs
// (upload, re-upload, rekey) inside its conflict retry, after the new Secret is
// built and before the caller's fence recheck and the write: a stall here is
// the window the recheck exists for.
const CheckpointBeforeCertsWrite = "before-certs-write"

// mintHint tells an operator how to get a fresh grant.
const mintHint = "mint a join grant on a running control plane with `stratum token create --control-plane`"

// apiTimeout bounds one request of the certs operations' clients.
const apiTimeout = 30 * time.Second

// publishMode is what a publication does with the grant entries.
type publishMode int

const (
	// publishMint appends the owner's grant entry and drops expired ones.
	publishMint publishMode = iota
	// publishRetire drops every grant entry (rekey, re-upload).
	publishRetire
)

// publishOptions are a publication's tunables; the zero value is production's.
type publishOptions struct {
	// budget overrides grantSecretBudget when > 0 (tests).
	budget int
	// apiservers are probed for fence-policy enforcement besides the client's
	// own endpoint.
	apiservers []*rest.Config
}

// UploadCerts encrypts the shared control-plane certificates into the
// stratum-certs Secret, appending the grant entry of owner's token, and grants
// the control-plane bootstrap group read access (see the package docs).
func UploadCerts(certKeyHex string, owner *metav1.OwnerReference, confirm func(context.Context) error) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.UploadCerts(context.Background(), certKeyHex, owner, confirm)
}

// ReUploadCerts re-seals the current on-disk shared material under certKeyHex
// and removes every grant entry, keeping the owners. It holds the maintenance
// fence for the publication ((*Node).ReUploadCerts).
func ReUploadCerts(certKeyHex string) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.ReUploadCerts(context.Background(), certKeyHex)
}

// RekeySharedCerts replaces the shared bundle under certKeyHex and removes all
// per-token entries in one update; confirm is the maintenance fence's recheck.
func RekeySharedCerts(certKeyHex string, confirm func(context.Context) error) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.RekeySharedCerts(context.Background(), certKeyHex, confirm)
}

// bundleProfile and bundleGrant are the names the seed's DownloadCerts
// signature gives the bundle's profile and a download's grant; the codec that
// defines them moved to internal/certbundle (fuzzed there).
type (
	bundleProfile = certbundle.Profile
	bundleGrant   = certbundle.Grant
)

// DownloadCerts fetches and decrypts this grant's shared certificates with the
// bootstrap kubeconfig at the host path bootstrapKubeconfig and writes them.
// The grant's EtcdEndpoints lead with the etcd client URLs the cluster
// published last (etcdClientURLsAnnotation), then those of its mint.
func DownloadCerts(bootstrapKubeconfig, certKeyHex string, check func(bundleProfile) error) (bundleGrant, error) {
	n, err := local()
	if err != nil {
		return bundleGrant{}, err
	}
	return n.DownloadCerts(context.Background(), bootstrapKubeconfig, certKeyHex, check)
}

// DownloadCertsAdmin fetches and decrypts the legacy entry with this node's
// admin kubeconfig and writes the files.
func DownloadCertsAdmin(certKeyHex string) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.DownloadCertsAdmin(context.Background(), certKeyHex)
}

// PruneExpiredGrants drops the grant entries whose bootstrap token is gone or
// expired, writing nothing when none is.
func PruneExpiredGrants(ctx context.Context, cs kubernetes.Interface) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.PruneExpiredGrants(ctx, cs)
}

// PublishedBundleCarriesKey reports whether a bundle is published and whether
// its proof opens under this node's at-rest encryption config.
func PublishedBundleCarriesKey(cs kubernetes.Interface, encryptionConfig []byte) (published, carries bool, err error) {
	n, err := local()
	if err != nil {
		return false, false, err
	}
	return n.PublishedBundleCarriesKey(context.Background(), cs, encryptionConfig)
}

// SharedCertsKeySetAt reports when the certificate-key was last set.
func SharedCertsKeySetAt() (setAt time.Time, present bool, err error) {
	n, err := local()
	if err != nil {
		return time.Time{}, false, err
	}
	return n.SharedCertsKeySetAt(context.Background())
}

// UploadCerts is the package-level UploadCerts on this node, through its admin
// kubeconfig.
func (n *Node) UploadCerts(ctx context.Context, certKeyHex string, owner *metav1.OwnerReference, confirm func(context.Context) error) error {
	return n.publish(ctx, certKeyHex, owner, confirm, publishMint, publishOptions{})
}

// UploadCertsProbing is UploadCerts probing fence-policy enforcement on each
// of apiservers too (GrantCertsReaderProbing).
func (n *Node) UploadCertsProbing(ctx context.Context, certKeyHex string, owner *metav1.OwnerReference, confirm func(context.Context) error, apiservers []*rest.Config) error {
	return n.publish(ctx, certKeyHex, owner, confirm, publishMint, publishOptions{apiservers: apiservers})
}

// Fence holder operations: the fenced publications hold the fence as
// "<operation>@<node name>".
const (
	fenceOpUpload   = "token-create"
	fenceOpRekey    = "rekey"
	fenceOpReUpload = "reupload"
)

// UploadCertsFenced is UploadCerts holding the maintenance fence, as
// `stratum token create --control-plane` uploads: it takes the fence as
// "token-create@<node>" through this node's admin kubeconfig — refusing with
// ErrFenceHeld, naming the holder, before anything is written while another
// operation holds it — publishes with the fence's Confirm as the recheck
// before the Secret write, and releases the fence, also on failure.
// UploadCerts itself keeps the seed's contract: its confirm is the recheck of
// a fence its caller already holds, nil for none, and it takes no fence.
func (n *Node) UploadCertsFenced(ctx context.Context, certKeyHex string, owner *metav1.OwnerReference) error {
	return n.fenced(ctx, fenceOpUpload, "upload shared certificates", certKeyHex, func(ctx context.Context, confirm func(context.Context) error) error {
		return n.publish(ctx, certKeyHex, owner, confirm, publishMint, publishOptions{})
	})
}

// ReUploadCerts is the package-level ReUploadCerts on this node. It holds the
// maintenance fence as "reupload@<node>" for the publication (refusing with
// ErrFenceHeld while another operation holds it, before anything is written);
// a caller that already holds the fence — a CA rotation running under its own
// hold — uses ReUploadCertsUnder with that fence's Confirm instead.
func (n *Node) ReUploadCerts(ctx context.Context, certKeyHex string) error {
	return n.fenced(ctx, fenceOpReUpload, "re-seal shared certificates", certKeyHex, func(ctx context.Context, confirm func(context.Context) error) error {
		return n.publish(ctx, certKeyHex, nil, confirm, publishRetire, publishOptions{})
	})
}

// ReUploadCertsUnder is ReUploadCerts under a fence the caller already holds:
// confirm is that fence's recheck, run before the Secret write. A nil confirm
// is refused, nothing changed.
func (n *Node) ReUploadCertsUnder(ctx context.Context, certKeyHex string, confirm func(context.Context) error) error {
	if confirm == nil {
		return errors.New("re-seal shared certificates: no maintenance-fence recheck was handed in; use ReUploadCerts, which takes the fence, or pass the held fence's Confirm; nothing was changed")
	}
	return n.publish(ctx, certKeyHex, nil, confirm, publishRetire, publishOptions{})
}

// RekeySharedCerts is the package-level RekeySharedCerts on this node. A rekey
// with no confirm is refused: it must run under the maintenance fence
// (RekeySharedCertsFenced takes it).
func (n *Node) RekeySharedCerts(ctx context.Context, certKeyHex string, confirm func(context.Context) error) error {
	if confirm == nil {
		return errors.New("rekey shared certificates: no maintenance-fence recheck was handed in; use RekeySharedCertsFenced, or take the fence (TakeFence) and pass its Confirm; nothing was changed")
	}
	return n.publish(ctx, certKeyHex, nil, confirm, publishRetire, publishOptions{})
}

// RekeySharedCertsFenced is RekeySharedCerts holding the maintenance fence as
// "rekey@<node>" for the rekey: taken first (ErrFenceHeld, naming the holder,
// before anything is written, while another operation holds it), rechecked
// before the Secret write, released after, also on failure.
func (n *Node) RekeySharedCertsFenced(ctx context.Context, certKeyHex string) error {
	return n.fenced(ctx, fenceOpRekey, "rekey shared certificates", certKeyHex, func(ctx context.Context, confirm func(context.Context) error) error {
		return n.publish(ctx, certKeyHex, nil, confirm, publishRetire, publishOptions{})
	})
}

// fenced runs a publication under the maintenance fence held as op@<node>
// through this node's admin kubeconfig (withFence). The key is checked first:
// a malformed one is refused without touching the fence. The node's fence
// lock is held throughout: the holder name is the node's, so a second
// publication here at once (two `token create` runs, two MCP calls) would
// take the first's fence as its own; it is refused instead (nodelock.ErrBusy),
// before anything is written. A crashed one's lock dies with its process, and
// its fence, same name, is taken again at once.
func (n *Node) fenced(ctx context.Context, op, what, certKeyHex string, fn func(ctx context.Context, confirm func(context.Context) error) error) error {
	if _, err := certbundle.ParseCertKey(certKeyHex); err != nil {
		return Refusal(fmt.Errorf("%s: %w; nothing was changed", what, err))
	}
	release, err := nodelock.Acquire(n.env.Host, nodelock.Fence, what)
	if err != nil {
		return Refusal(fmt.Errorf("%s: %w", what, err))
	}
	defer func() { _ = release() }()
	cs, err := n.adminClient()
	if err != nil {
		return Refusal(fmt.Errorf("%s: %w; nothing was changed", what, err))
	}
	if err := n.withFence(ctx, cs, n.fenceHolder(op), fenceOpLease, fn); err != nil {
		if errors.Is(err, ErrFenceHeld) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return err
	}
	return nil
}

// publish seals this node's shared material into stratum-certs. Every
// failure before its first write (the reader RBAC's) is a refusal: publish
// changed nothing, whatever its caller did before (a caller with changes of
// its own behind it marks the error Midway).
func (n *Node) publish(ctx context.Context, certKeyHex string, owner *metav1.OwnerReference, confirm func(context.Context) error, mode publishMode, o publishOptions) error {
	op := "upload shared certificates"
	if mode == publishRetire {
		op = "re-seal shared certificates"
	}
	key, err := certbundle.ParseCertKey(certKeyHex)
	if err != nil {
		return Refusal(fmt.Errorf("%s: %w; nothing was uploaded", op, err))
	}
	tokenID, err := ownerTokenID(owner)
	if err != nil {
		return Refusal(fmt.Errorf("%s: %w", op, err))
	}
	if mode == publishRetire && owner != nil {
		return Refusal(fmt.Errorf("%s: a retiring publication takes no owner; nothing was uploaded", op))
	}
	b, err := n.localBundle(ctx)
	if err != nil {
		return Refusal(fmt.Errorf("%s: %w; nothing was uploaded", op, err))
	}
	cs, err := n.adminClient()
	if err != nil {
		return Refusal(fmt.Errorf("%s: %w; nothing was uploaded", op, err))
	}
	budget := grantSecretBudget
	if o.budget > 0 {
		budget = o.budget
	}
	secrets := cs.CoreV1().Secrets(certsNamespace)
	// next reads the Secret and builds the publication on it: the Secret to
	// write, whether it exists, or the refusal.
	next := func() (*corev1.Secret, bool, error) {
		cur, err := secrets.Get(ctx, certsSecret, metav1.GetOptions{})
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("read Secret %s/%s: %w", certsNamespace, certsSecret, err)
		}
		if !exists {
			cur = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: certsSecret, Namespace: certsNamespace}, Type: corev1.SecretTypeOpaque}
		}
		out, err := n.nextCertsSecret(ctx, cs, cur, key, b, tokenID, owner, mode, budget)
		return out, exists, err
	}
	// Refusals first: a publication the Secret cannot hold is refused before
	// anything is written, the grant's RBAC and policy included. The retry
	// below builds it again on the state it writes over.
	if _, _, err := next(); err != nil {
		return Refusal(fmt.Errorf("%s: %w", op, err))
	}
	if confirm != nil {
		if err := confirm(ctx); err != nil {
			return Refusal(fmt.Errorf("%s: maintenance fence recheck refused the publication: %w; nothing was written", op, err))
		}
	}
	if o.apiservers == nil {
		o.apiservers = n.servingAPIServers(ctx)
	}
	if err := n.GrantCertsReaderProbing(ctx, cs, o.apiservers); err != nil {
		return fmt.Errorf("%s: %w; the Secret was not written", op, err)
	}
	err = apiretry.Ensure(ctx, func() error {
		s, exists, err := next()
		if err != nil {
			return err
		}
		if err := n.checkpoint(ctx, CheckpointBeforeCertsWrite); err != nil {
			return fmt.Errorf("%s: %w; nothing was written", CheckpointBeforeCertsWrite, err)
		}
		if confirm != nil {
			if err := confirm(ctx); err != nil {
				return fmt.Errorf("maintenance fence recheck refused the publication: %w; nothing was written", err)
			}
		}
		if exists {
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
			return deletionAsConflict(err)
		}
		// Someone may create it meanwhile: retry from its state.
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		return raceAsConflict(err)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	n.log.Info("published shared certificates", "grant", tokenID, "retired", mode == publishRetire)
	return nil
}

// nextCertsSecret is cur (as read, carrying its resourceVersion) with the
// publication applied: grant entries dropped (the expired ones for a mint,
// all of them for a retiring publication), the owner's grant entry appended,
// the legacy entry and the proof re-sealed, the owner merged and the
// annotations stamped. A result over budget is ErrOverBudget.
func (n *Node) nextCertsSecret(ctx context.Context, cs kubernetes.Interface, cur *corev1.Secret, key []byte, b certbundle.Bundle, tokenID string, owner *metav1.OwnerReference, mode publishMode, budget int) (*corev1.Secret, error) {
	out := cur.DeepCopy()
	now := n.env.Host.Now()
	data := maps.Clone(out.Data)
	if data == nil {
		data = map[string][]byte{}
	}
	drop := grantEntries(data)
	if mode == publishMint {
		var err error
		if drop, err = expiredGrantEntries(ctx, cs, data, now); err != nil {
			return nil, err
		}
	}
	for _, e := range drop {
		delete(data, e)
	}
	b.Meta.Generation = secretGeneration(cur) + 1
	var err error
	if tokenID != "" {
		if data[grantEntry(tokenID)], err = certbundle.SealV1(key, certsSecret, grantEntry(tokenID), b); err != nil {
			return nil, err
		}
	}
	if data[certbundle.LegacyEntry], err = certbundle.SealLegacy(key, certsSecret, b); err != nil {
		return nil, err
	}
	if enc, ok := b.Files[certbundle.EncryptionConfigFile]; ok {
		if data[certbundle.ProofEntry], err = certbundle.SealProof(certsSecret, enc); err != nil {
			return nil, err
		}
	} else {
		delete(data, certbundle.ProofEntry)
	}
	if size := dataSize(data); size > budget {
		return nil, fmt.Errorf("%w: the publication needs %d bytes of the %d-byte budget (%d live grants); nothing was written: wait for pending joins to finish or their tokens to expire, or delete unused tokens (`stratum token list`, `stratum token delete ID`) and prune their grants (`stratum grants prune`)", ErrOverBudget, size, budget, len(grantEntries(data)))
	}
	out.Data, out.StringData = data, nil
	if tokenID != "" {
		out.OwnerReferences = mergeOwner(out.OwnerReferences, owner)
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[keySetAtAnnotation] = now.UTC().Format(time.RFC3339)
	out.Annotations[generationAnnotation] = strconv.FormatInt(b.Meta.Generation, 10)
	out.Annotations[etcdClientURLsAnnotation] = strings.Join(b.Meta.EtcdEndpoints, ",")
	return out, nil
}

// localBundle reads what this node publishes: the shared files, the at-rest
// encryption config when it has one, and the cluster facts of its node state
// and etcd membership.
func (n *Node) localBundle(ctx context.Context) (certbundle.Bundle, error) {
	h := n.env.Host
	files := map[string][]byte{}
	for _, name := range pki.SharedFileNames() {
		b, err := h.ReadFile(version.PKIFile(name))
		if err != nil {
			return certbundle.Bundle{}, fmt.Errorf("read shared file %s: %w", version.PKIFile(name), err)
		}
		files[name] = b
	}
	if _, err := pki.LoadShared(files); err != nil {
		return certbundle.Bundle{}, err
	}
	enc, err := h.ReadFile(certbundle.EncryptionConfigPath)
	switch {
	case err == nil:
		files[certbundle.EncryptionConfigFile] = enc
	case !errors.Is(err, fs.ErrNotExist):
		return certbundle.Bundle{}, fmt.Errorf("read at-rest encryption config %s: %w", certbundle.EncryptionConfigPath, err)
	}
	st, err := nodestate.Load(h)
	if err != nil {
		return certbundle.Bundle{}, err
	}
	eps, err := n.etcdClientURLs(ctx, st)
	if err != nil {
		return certbundle.Bundle{}, err
	}
	prof := certbundle.Profile{
		PodCIDR: st.PodCIDR, ServiceCIDR: st.ServiceCIDR, ClusterDomain: st.ClusterDomain,
		Cilium: st.Cilium, VIP: st.VIP.Address, EtcdEndpoints: eps,
	}
	_, carries := files[certbundle.EncryptionConfigFile]
	return certbundle.Bundle{
		Meta:  certbundle.Meta{CarriesAtRestKey: carries, VIP: st.VIP.Address, EtcdEndpoints: eps, Profile: prof},
		Files: files,
	}, nil
}

// etcdClientURLs are the client URLs of every started etcd member, read from
// this node's own member.
func (n *Node) etcdClientURLs(ctx context.Context, st *nodestate.NodeState) ([]string, error) {
	ep := st.Etcd.ClientURL
	if ep == "" {
		ep = EtcdEndpoint(st.NodeIP)
	}
	cli, err := n.etcdClient(ep)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	defer cancel()
	resp, err := cli.MemberList(rctx)
	if err != nil {
		return nil, fmt.Errorf("list etcd members through %s: %w", ep, err)
	}
	out := clientURLsOf(resp.Members)
	if len(out) == 0 {
		return nil, fmt.Errorf("etcd at %s lists no member with a client URL", ep)
	}
	return out, nil
}

// restConfig is the client config of kubeconfig bytes, dialing through the
// host so simulated partitions apply.
func (n *Node) restConfig(kc []byte) (*rest.Config, error) {
	cfg, err := kubeconfig.RESTConfig(kc)
	if err != nil {
		return nil, err
	}
	cfg.Dial = n.env.Host.DialContext
	cfg.Timeout = apiTimeout
	// A join's bootstrap token meets an API server that just started (a
	// control plane restarting under the join): refused until its
	// informers have synced, not for good.
	var mu sync.Mutex
	report := waitReporter{n: n}
	cfg.Wrap(apiretry.RetryRefusedWhileUnready(func(why string) {
		mu.Lock()
		defer mu.Unlock()
		report.waiting("%s", why)
	}))
	return cfg, nil
}

// servingAPIServers are admin client configs of the kube-apiservers the
// cluster's control planes serve now: one at each started etcd member's
// address (a control plane's etcd and apiserver share it) whose /readyz
// answers. A publication probes each of them for the fence policy's
// enforcement, not only the one its client reaches (the VIP holder's or
// this node's): every apiserver syncs its admission cache on its own. One
// that does not answer now serves nobody, and one that starts later syncs
// its policies before it serves. A node without etcd membership in its
// state, or whose members cannot be listed, has none to add.
func (n *Node) servingAPIServers(ctx context.Context) []*rest.Config {
	st, err := nodestate.Load(n.env.Host)
	if err != nil || st.Etcd.ClientURL == "" {
		return nil
	}
	ips, err := n.MemberClientIPsVia(ctx, []string{urlHostOf(st.Etcd.ClientURL)})
	if err != nil {
		n.log.Warn("the serving apiservers could not be listed: the fence policy is probed through the admin kubeconfig's server only", "err", err)
		return nil
	}
	kc, err := n.env.Host.ReadFile(version.Kubeconfig(kubeconfig.Admin))
	if err != nil {
		return nil
	}
	base, err := n.restConfig(kc)
	if err != nil {
		return nil
	}
	var mu sync.Mutex
	var out []*rest.Config
	var wg sync.WaitGroup
	for _, ip := range ips {
		cfg := rest.CopyConfig(base)
		cfg.Host = apiServerURL(ip)
		wg.Go(func() {
			probe := rest.CopyConfig(cfg)
			probe.Timeout = time.Second
			cs, err := kubernetes.NewForConfig(probe)
			if err != nil {
				return
			}
			if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
				n.log.Info("an apiserver does not answer: not probed for the fence policy", "apiserver", cfg.Host, "err", err)
				return
			}
			mu.Lock()
			out = append(out, cfg)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// adminClient is a clientset from this node's admin kubeconfig.
func (n *Node) adminClient() (kubernetes.Interface, error) {
	cfg, err := n.adminRESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// ownAdminClient is a clientset of ownAdminRESTConfig.
func (n *Node) ownAdminClient(nodeIP string) (kubernetes.Interface, error) {
	cfg, err := n.ownAdminRESTConfig(nodeIP)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// ownAdminRESTConfig is adminRESTConfig aimed at the kube-apiserver on
// nodeIP (its first address): this node's own, where the admin kubeconfig
// names the VIP. A start that just started its VIP candidate reaches its
// own apiserver at once, where a connection to the VIP begun before the
// candidate took it waits out the address's neighbour resolution (about
// 3 s) and fails.
func (n *Node) ownAdminRESTConfig(nodeIP string) (*rest.Config, error) {
	cfg, err := n.adminRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.Host = apiServerURL(nodestate.FirstIP(nodeIP))
	return cfg, nil
}

// adminRESTConfig is the client configuration of this node's admin
// kubeconfig.
func (n *Node) adminRESTConfig() (*rest.Config, error) {
	kc, err := n.env.Host.ReadFile(version.Kubeconfig(kubeconfig.Admin))
	if err != nil {
		return nil, fmt.Errorf("read admin kubeconfig: %w", err)
	}
	return n.restConfig(kc)
}

// DownloadCerts is the package-level DownloadCerts on this node.
// bootstrapKubeconfig is a path on this node's host.
func (n *Node) DownloadCerts(ctx context.Context, bootstrapKubeconfig, certKeyHex string, check func(certbundle.Profile) error) (certbundle.Grant, error) {
	const op = "download shared certificates"
	key, err := certbundle.ParseCertKey(certKeyHex)
	if err != nil {
		return certbundle.Grant{}, fmt.Errorf("%s: %w; nothing was written", op, err)
	}
	kc, err := n.env.Host.ReadFile(bootstrapKubeconfig)
	if err != nil {
		return certbundle.Grant{}, fmt.Errorf("%s: read bootstrap kubeconfig: %w; nothing was written", op, err)
	}
	tok, err := kubeconfig.TokenOf(kc)
	if err != nil {
		return certbundle.Grant{}, fmt.Errorf("%s: %w; nothing was written", op, err)
	}
	id, _, err := token.ParseToken(tok)
	if err != nil {
		return certbundle.Grant{}, fmt.Errorf("%s: %w; nothing was written", op, err)
	}
	cfg, err := n.restConfig(kc)
	if err != nil {
		return certbundle.Grant{}, fmt.Errorf("%s: %w; nothing was written", op, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return certbundle.Grant{}, fmt.Errorf("%s: %w; nothing was written", op, err)
	}
	s, err := readBundleSecret(ctx, cs, "bootstrap token "+id)
	if err != nil {
		return certbundle.Grant{}, fmt.Errorf("%s: %w", op, err)
	}
	entry, _ := bundleEntry(s, id)
	g, err := n.openAndWrite(ctx, s, entry, key, check)
	if err != nil {
		return g, err
	}
	g.EtcdEndpoints = withPublishedEtcdURLs(publishedEtcdURLs(s.Annotations[etcdClientURLsAnnotation]), g.EtcdEndpoints)
	return g, nil
}

// DownloadCertsAdmin is the package-level DownloadCertsAdmin on this node.
func (n *Node) DownloadCertsAdmin(ctx context.Context, certKeyHex string) error {
	const op = "download shared certificates (admin)"
	key, err := certbundle.ParseCertKey(certKeyHex)
	if err != nil {
		return fmt.Errorf("%s: %w; nothing was written", op, err)
	}
	// Under the node's maintenance lock: it rewrites, file by file, the
	// cluster CAs this node's services run on, which a renewal, a repoint
	// or a restore must not meet half written.
	release, err := nodelock.Acquire(n.env.Host, nodelock.Maintenance, "stratum download shared certificates (admin)", n.lockOptions(ctx)...)
	if err != nil {
		return fmt.Errorf("%s: %w; nothing was written", op, err)
	}
	defer release()
	cs, err := n.adminClient()
	if err != nil {
		return fmt.Errorf("%s: %w; nothing was written", op, err)
	}
	s, err := readBundleSecret(ctx, cs, "the admin kubeconfig")
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	_, err = n.openAndWrite(ctx, s, certbundle.LegacyEntry, key, nil)
	return err
}

// bundleEntry is the entry of s a join with token id opens: its grant's own
// (own), else the legacy entry, which a grant minted by an older stratum
// (or a join command older than its grant entry) opens.
func bundleEntry(s *corev1.Secret, id string) (entry string, own bool) {
	if _, ok := s.Data[grantEntry(id)]; ok {
		return grantEntry(id), true
	}
	return certbundle.LegacyEntry, false
}

// readBundleSecret reads stratum-certs, turning the refusals into errors that
// say what to do.
func readBundleSecret(ctx context.Context, cs kubernetes.Interface, who string) (*corev1.Secret, error) {
	s, err := cs.CoreV1().Secrets(certsNamespace).Get(ctx, certsSecret, metav1.GetOptions{})
	switch {
	case err == nil:
		return s, nil
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w (Secret %s/%s does not exist): %s; nothing was written", ErrNoBundle, certsNamespace, certsSecret, mintHint)
	case apierrors.IsUnauthorized(err):
		return nil, fmt.Errorf("%w: the apiserver does not accept %s (expired, deleted or mistyped, or an API server that did not become ready within %s): %s; nothing was written", ErrTokenRefused, who, apiretry.LostWait, mintHint)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("%w: %s may not read Secret %s/%s (only control-plane join tokens can; a worker token never can): %s; nothing was written", ErrTokenRefused, who, certsNamespace, certsSecret, mintHint)
	default:
		return nil, fmt.Errorf("read Secret %s/%s: %w; nothing was written", certsNamespace, certsSecret, err)
	}
}

// openAndWrite opens entry of s, runs check on its profile, checks the
// material is one consistent set, and only then writes the files.
func (n *Node) openAndWrite(ctx context.Context, s *corev1.Secret, entry string, key []byte, check func(certbundle.Profile) error) (certbundle.Grant, error) {
	files, g, err := certbundle.Open(key, certsSecret, entry, s.Data[entry])
	if errors.Is(err, certbundle.ErrUnknownContent) {
		// Not the key's fault: a control plane on a newer stratum minted
		// it, as in the middle of a rolling upgrade.
		return certbundle.Grant{}, fmt.Errorf("open shared-certificate bundle: %w; nothing was written: the grant was most likely minted by a newer stratum than this one: join with a stratum at least as new as the control plane that minted it (`stratum version` on each), or mint the grant on a control plane running this release (if every control plane runs this release, the entry is damaged: mint a new grant)", err)
	}
	if err != nil {
		hint := ""
		if entry == certbundle.LegacyEntry && errors.Is(err, ErrBundleOpen) {
			hint = " (this grant's own entry is gone: rekeyed, re-uploaded after a CA rotation, or pruned)"
		}
		return certbundle.Grant{}, fmt.Errorf("open shared-certificate bundle%s: %w; nothing was written: check the --certificate-key, or %s", hint, err, mintHint)
	}
	if check != nil {
		if err := check(g.Profile); err != nil {
			return certbundle.Grant{}, fmt.Errorf("the cluster's bundle does not fit this node: %w; nothing was written", err)
		}
	}
	if _, err := pki.LoadShared(files); err != nil {
		return certbundle.Grant{}, fmt.Errorf("shared-certificate bundle: %w; nothing was written", err)
	}
	for i, name := range certbundle.SortedNames(files) {
		if err := ctx.Err(); err != nil {
			return certbundle.Grant{}, fmt.Errorf("download shared certificates: %w; %d of %d files were written, a re-run rewrites them all", err, i, len(files))
		}
		if err := n.env.Host.WriteFile(certbundle.FilePath(name), files[name], fs.FileMode(certbundle.FileMode(name))); err != nil {
			return certbundle.Grant{}, fmt.Errorf("write %s: %w; a re-run rewrites every file", certbundle.FilePath(name), err)
		}
	}
	if !g.CarriesAtRestKey {
		// A key an earlier download left (a join that failed after it,
		// before the cluster dropped at-rest encryption) would survive a
		// keyless bundle, and this node's apiserver, started with it,
		// would write Secrets no other apiserver can read.
		if err := n.env.Host.Remove(certbundle.EncryptionConfigPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return certbundle.Grant{}, fmt.Errorf("remove the at-rest encryption config %s an earlier download left (this cluster's bundle carries none): %w; a re-run removes it", certbundle.EncryptionConfigPath, err)
		}
	}
	return g, nil
}

// PruneExpiredGrants is the package-level PruneExpiredGrants on this node.
func (n *Node) PruneExpiredGrants(ctx context.Context, cs kubernetes.Interface) error {
	_, err := n.PruneGrants(ctx, cs)
	return err
}

// PruneGrants is PruneExpiredGrants that also says which grants it
// dropped: the token IDs of the entries its write removed (none when
// nothing expired), so a report never credits it with entries another
// writer (a rekey) removed.
func (n *Node) PruneGrants(ctx context.Context, cs kubernetes.Interface) (dropped []string, err error) {
	err = apiretry.Ensure(ctx, func() error {
		dropped = nil
		cur, err := cs.CoreV1().Secrets(certsNamespace).Get(ctx, certsSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		expired, err := expiredGrantEntries(ctx, cs, cur.Data, n.env.Host.Now())
		if err != nil {
			return err
		}
		if len(expired) == 0 {
			return nil
		}
		for _, e := range expired {
			delete(cur.Data, e)
		}
		_, err = cs.CoreV1().Secrets(certsNamespace).Update(ctx, cur, metav1.UpdateOptions{})
		err = deletionAsConflict(err) // collected meanwhile: the re-read finds it gone
		if err == nil {
			n.log.Info("pruned expired grants", "entries", expired)
			for _, e := range expired {
				dropped = append(dropped, grantTokenID(e))
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("prune expired grants of Secret %s/%s: %w", certsNamespace, certsSecret, err)
	}
	return dropped, nil
}

// PublishedBundleCarriesKey is the package-level PublishedBundleCarriesKey.
func (n *Node) PublishedBundleCarriesKey(ctx context.Context, cs kubernetes.Interface, encryptionConfig []byte) (published, carries bool, err error) {
	s, err := cs.CoreV1().Secrets(certsNamespace).Get(ctx, certsSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("read Secret %s/%s: %w", certsNamespace, certsSecret, err)
	}
	if encryptionConfig == nil {
		return true, false, nil
	}
	proof, ok := s.Data[certbundle.ProofEntry]
	return true, ok && certbundle.ProofOpens(certsSecret, encryptionConfig, proof), nil
}

// SharedCertsKeySetAt is the package-level SharedCertsKeySetAt.
func (n *Node) SharedCertsKeySetAt(ctx context.Context) (time.Time, bool, error) {
	cs, err := n.adminClient()
	if err != nil {
		return time.Time{}, false, err
	}
	s, err := cs.CoreV1().Secrets(certsNamespace).Get(ctx, certsSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read Secret %s/%s: %w", certsNamespace, certsSecret, err)
	}
	if v, ok := s.Annotations[keySetAtAnnotation]; ok {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return time.Time{}, true, fmt.Errorf("Secret %s/%s: annotation %s=%q: %w", certsNamespace, certsSecret, keySetAtAnnotation, v, err)
		}
		return t, true, nil
	}
	return s.CreationTimestamp.Time, true, nil
}
