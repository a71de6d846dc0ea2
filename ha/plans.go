package ha

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/version"
)

// The dry runs of the operations that change the cluster or the node: each
// makes the operation's own refusals and observations, writes what the
// operation would do, changes nothing, and returns the refusal the operation
// would meet (ErrRefused), so a dry run exits as the operation would.

// FenceHolder reads the maintenance fence: who holds it and until when by
// stratum's clock, "" when nobody does (never taken, released, or run out).
func (n *Node) FenceHolder(ctx context.Context) (string, time.Time, error) {
	cs, err := n.adminClient()
	if err != nil {
		return "", time.Time{}, err
	}
	l, err := cs.CoordinationV1().Leases(certsNamespace).Get(ctx, fenceLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read the maintenance fence %s/%s: %w", certsNamespace, fenceLease, err)
	}
	holder := leaseHolder(l)
	if holder == "" || leaseRanOut(l, n.env.Host.Now()) {
		return "", time.Time{}, nil
	}
	return holder, leaseEnd(l), nil
}

// runningServices are those of names that run on h, for a plan's "would
// stop" or "would restart"; one whose state cannot be read is listed with
// why, and one h does not run is left out.
func runningServices(ctx context.Context, h host.Host, names []string) []string {
	var out []string
	for _, s := range names {
		if ss, err := h.ServiceStatus(ctx, s); err == nil && ss.Running {
			out = append(out, s)
		} else if err != nil && !host.NotRunHere(err) {
			out = append(out, s+" (status unknown: "+err.Error()+")")
		}
	}
	return out
}

// RepublishPlan is the dry run of RekeySharedCertsFenced (op "rekey") and
// ReUploadCerts (op "reupload"): the fence it would take, the publication it
// would replace, and every pending grant it would retire.
func (n *Node) RepublishPlan(ctx context.Context, w io.Writer, op string) error {
	if op != fenceOpRekey && op != fenceOpReUpload {
		return fmt.Errorf("republish plan: unknown operation %q (want %q or %q)", op, fenceOpRekey, fenceOpReUpload)
	}
	cs, err := n.adminClient()
	if err != nil {
		return Refusal(fmt.Errorf("certs %s: %w; nothing was changed", op, err))
	}
	if _, err := n.loadSharedCAs(); err != nil {
		return Refusal(fmt.Errorf("certs %s would be refused: %w; nothing was changed", op, err))
	}
	holder, until, err := n.FenceHolder(ctx)
	if err != nil {
		return Refusal(err)
	}
	if holder != "" {
		err := fmt.Errorf("certs %s would be refused: %w by %s until %s; nothing was changed: wait for it, then retry", op, ErrFenceHeld, holder, until.UTC().Format(time.RFC3339))
		fmt.Fprintln(w, err)
		return Refusal(err)
	}
	fmt.Fprintf(w, "would take the maintenance fence as %s (it is free)\n", n.fenceHolder(op))
	rep, err := ListGrants(ctx, cs, n.env.Host.Now())
	if err != nil {
		return Refusal(fmt.Errorf("certs %s: %w; nothing was changed", op, err))
	}
	what := "this node's shared certificates (" + version.PKIDir + ")"
	if !rep.Published {
		fmt.Fprintf(w, "would publish %s to Secret %s/%s (none is published yet) under a fresh certificate-key\n", what, certsNamespace, certsSecret)
	} else {
		fmt.Fprintf(w, "would replace Secret %s/%s (generation %d, %d bytes) with %s sealed under a fresh certificate-key (generation %d)\n",
			certsNamespace, certsSecret, rep.Generation, rep.Bytes, what, rep.Generation+1)
	}
	var live, dead []string
	for _, g := range rep.Grants {
		if g.Live {
			live = append(live, g.TokenID)
		} else {
			dead = append(dead, g.TokenID)
		}
	}
	switch {
	case len(live) > 0:
		fmt.Fprintf(w, "would retire %d pending join grants (their join commands then fail at decryption, changing nothing): %s\n", len(live), strings.Join(live, ", "))
	default:
		fmt.Fprintln(w, "no pending join grant to retire")
	}
	if len(dead) > 0 {
		fmt.Fprintf(w, "would drop the entries of %d expired or deleted grants: %s\n", len(dead), strings.Join(dead, ", "))
	}
	fmt.Fprintf(w, "the %s entry every older joiner reads would be re-sealed under the fresh key\n", certbundle.LegacyEntry)
	return nil
}

// SnapshotRestorePlan is the dry run of SnapshotRestore: the node state and
// the snapshot are checked as the restore checks them, the snapshot is
// restored into a scratch directory (etcd's restore, which verifies its
// hash) that is removed again, and the steps the restore would run are
// written. It takes no node lock and changes nothing of the node; like a
// restore, it removes the scratch directories earlier restores abandoned
// (sweepRestoreScratch).
func (n *Node) SnapshotRestorePlan(ctx context.Context, w io.Writer, dbPath string) error {
	h := n.env.Host
	if err := n.refuseResetUnderWay("snapshot restore"); err != nil {
		return err
	}
	rs, err := n.prepareRestore(ctx, dbPath)
	if err != nil {
		return Refusal(err)
	}
	rs.cleanup()
	st, ss := rs.state, rs.status
	fmt.Fprintf(w, "the snapshot %s restores (revision %d, %d keys, %d bytes; its hash verified)\n", dbPath, ss.Revision, ss.TotalKeys, ss.TotalSize)
	fmt.Fprintln(w, rs.revisionLine())
	if running := runningServices(ctx, h, controlPlaneServices); len(running) > 0 {
		fmt.Fprintf(w, "would stop %s\n", strings.Join(running, ", "))
	}
	fmt.Fprintf(w, "would replace %s with the restored data (the current data is removed; the snapshot file is the backup)\n", version.EtcdDataDir)
	fmt.Fprintf(w, "would record a new single-member etcd cluster %s=%s in the node state (its old cluster ID %s dropped)\n", st.Etcd.Name, st.Etcd.PeerURL, st.Etcd.ClusterID)
	fmt.Fprintln(w, "would start the control plane again, then record the new cluster ID")
	fmt.Fprintf(w, "afterwards, on every other control plane: stratum etcd rejoin --server %s\n", urlHostOf(st.Etcd.ClientURL))
	return nil
}
