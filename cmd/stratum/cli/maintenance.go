package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/ha"
)

// certsRekeyCmd is `stratum certs rekey`: the shared certificates re-sealed
// under a fresh certificate-key, every pending join grant retired.
func (a *app) certsRekeyCmd() *cobra.Command {
	return a.republishCmd("rekey",
		"Re-seal the shared certificates under a fresh certificate-key, retiring every pending join grant",
		`Replace the encrypted shared-certificate bundle (Secret kube-system/stratum-certs) with
one sealed under a fresh certificate-key and remove every per-grant entry in the same
update, so no certificate-key printed before can decrypt anything: every join command
minted before the rekey fails at decryption, changing nothing, and a new one is minted
with "stratum token create --control-plane". It holds the cluster's maintenance fence
for the publication and refuses, changing nothing, while another operation holds it.
Run it when a certificate-key may have leaked or "stratum certs check" says it is old.`,
		`  stratum certs rekey
  stratum token create --control-plane`,
		(*ha.Node).RekeySharedCertsFenced,
		"shared certificates re-sealed under a fresh certificate-key")
}

// certsReuploadCmd is `stratum certs reupload`: the shared certificates as
// they are on this node's disk now (after a CA rotation) published again.
func (a *app) certsReuploadCmd() *cobra.Command {
	return a.republishCmd("reupload",
		"Publish this node's current shared certificates again (after a CA rotation), retiring pending grants",
		`Re-encrypt the shared certificates as they are on this control plane's disk now (the
cluster, front-proxy and etcd CAs with their keys, the service-account key pair, and the
at-rest encryption config) into the stratum-certs Secret under a fresh certificate-key, so
a control plane joining after the CA files were replaced receives the new material. Every pending grant is removed in the same update: it
was sealed with the pre-rotation material and cannot be re-sealed, so join commands minted
before fail at decryption and new ones are minted. It holds the maintenance fence and
refuses, changing nothing, while another operation holds it.`,
		`  stratum certs reupload`,
		(*ha.Node).ReUploadCerts,
		"this node's shared certificates are published again")
}

// republishCmd is a `certs` subcommand that publishes the shared
// certificates under a fresh certificate-key with publish, retiring every
// pending grant, and says so; --dry-run prints what it would do.
func (a *app) republishCmd(use, short, long, example string, publish func(*ha.Node, context.Context, string) error, done string) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: long + `

--dry-run prints what it would do (the fence it would take, the publication it would
replace, the grants it would retire) and changes nothing; it exits 3 when the fence is
held, as the command would.`,
		Example: example + "\n\n  # What it would retire, changing nothing\n  stratum certs " + use + " --dry-run",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// It publishes this control plane's certificates through its
			// admin kubeconfig: off a control plane, say so.
			n, _, _, err := a.controlPlaneNode()
			if err != nil {
				return err
			}
			if dryRun {
				return n.RepublishPlan(cmd.Context(), a.stdout, use)
			}
			key, err := ha.NewCertKey()
			if err != nil {
				return refused(err)
			}
			if err := publish(n, cmd.Context(), key); err != nil {
				return fmt.Errorf("certs %s: %w", use, err)
			}
			fmt.Fprintf(a.stdout, "%s; every pending join grant is retired: mint a new one with `stratum token create --control-plane`\n", done)
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what it would do, change nothing")
	return cmd
}

// operatorCmd is `stratum operator pass`: one pass of the stratum-operator
// now, beside the periodic leader-elected one.
func (a *app) operatorCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "operator",
		Short:   "Run the stratum-operator's work by hand",
		Example: `  stratum operator pass`,
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRun,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "pass",
		Short: "Promote started etcd learners, delete expired join tokens and their grants, publish the etcd members, once, now",
		Long: `Run one pass of the stratum-operator from this control plane: promote every etcd
learner that has started and caught up (a joiner whose own start was interrupted
between its start and its promotion); delete the join tokens stratum minted that have
expired (by this node's clock; tokens stratum did not mint are left alone); drop the
grant entries of expired or deleted bootstrap tokens from the shared-certificate Secret
(kube-system/stratum-certs); drop that Secret's owner references to deleted tokens, and
delete the Secret once none is left, as kube-controller-manager's garbage collector
would (the next control-plane token create uploads it again); and publish the cluster's
current etcd members (their client URLs, in the stratum.dev/etcd-client-urls annotation
of that Secret) when they changed, so a later join finds them; and delete the release
records (kube-system/stratum-release-<name>, which "stratum upgrade plan" reads) of
control planes that are no etcd member, once not renewed for 30 minutes (a reset or
member removal that could not reach the cluster left them). The supervisor runs the
same pass every 30 s on the elected operator; this runs it now. A learner still
catching up is reported and left for the next pass (exit 1).`,
		Example: `  stratum operator pass`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, _, cs, err := a.adminNode()
			if err != nil {
				return err
			}
			rep, err := n.OperatorPass(cmd.Context(), cs)
			if len(rep.Promoted) > 0 {
				fmt.Fprintf(a.stdout, "promoted etcd learners: %s\n", strings.Join(rep.Promoted, ", "))
			}
			if len(rep.TokensDeleted) > 0 {
				fmt.Fprintln(a.stdout, tokensDeletedLine(rep.TokensDeleted))
			}
			if len(rep.Pruned) > 0 {
				fmt.Fprintln(a.stdout, prunedLine(rep.Pruned))
			}
			if line := collectedLine(rep); line != "" {
				fmt.Fprintln(a.stdout, line)
			}
			if len(rep.ReleasesForgotten) > 0 {
				fmt.Fprintf(a.stdout, "deleted the release records of control planes that are no etcd member (not renewed for 30 minutes): %s\n", strings.Join(rep.ReleasesForgotten, ", "))
			}
			if err != nil {
				return err
			}
			if len(rep.Promoted) == 0 {
				fmt.Fprintln(a.stdout, "no started learner to promote")
			}
			if len(rep.TokensDeleted) == 0 {
				fmt.Fprintln(a.stdout, tokensDeletedLine(nil))
			}
			if len(rep.Pruned) == 0 {
				fmt.Fprintln(a.stdout, prunedLine(nil))
			}
			return nil
		},
	})
	return cmd
}

// tokensDeletedLine is what an operator pass says of the expired join
// tokens it deleted.
func tokensDeletedLine(ids []string) string {
	if len(ids) == 0 {
		return "no expired join token to delete"
	}
	return "deleted expired join tokens: " + strings.Join(ids, ", ")
}

// collectedLine is what an operator pass says of the shared certificates'
// collection: nothing when it changed nothing.
func collectedLine(rep ha.OperatorReport) string {
	switch {
	case rep.CertsDeleted:
		return "deleted the shared certificates (Secret kube-system/stratum-certs): every join token they were uploaded for is gone; the next `stratum token create --control-plane` uploads them again"
	case len(rep.OwnersDropped) > 0:
		return "dropped the shared certificates' references to deleted tokens: " + strings.Join(rep.OwnersDropped, ", ")
	}
	return ""
}

// certsRenewCmd is `stratum certs renew`: this node's leaves and kubeconfigs
// reissued from the cluster's CAs, its running services restarted onto them.
func (a *app) certsRenewCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "renew",
		Short: "Reissue this control plane's leaf certificates and kubeconfigs, and restart its services onto them",
		Long: `Reissue this control plane's leaf certificates (apiserver serving, apiserver etcd and
kubelet client, etcd server, peer and client, front-proxy client) and its kubeconfigs from the cluster's CAs on this node, each
valid for a year from now with the same names and addresses (the VIP included), then
restart the services that run here (etcd, kube-apiserver, the VIP, the operator) through
the supervisor so they use them. The CAs are not touched, and each leaf keeps its private
key (as kubeadm's renewal does; a key that is missing is made anew), so a renewal stopped
part-way never leaves a certificate beside another key. It holds the node's
maintenance lock. "stratum certs check" shows what expires when; run this on each
control plane in turn, one at a time, before they expire. Since etcd restarts, it
refuses (exit 3, nothing written or restarted) while this node's etcd runs in a
cluster of more than one member that is not healthy (a member down, cut off or
alarmed, NOSPACE aside, or a learner or unstarted member: a join under way):
with another member down this one's restart could cost the quorum. Heal the cluster,
or remove a member gone for good, first. A node whose own etcd or apiserver
certificates have expired renews without that check: once every control plane's
certificates have expired (all issued the same day), a renewed etcd finds no quorum
with the expired others: renew the next control plane at once, without waiting for
the first to finish; quorum returns with the second.`,
		Example: `  stratum certs check
  stratum certs renew`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, _, err := a.localNode()
			if err != nil {
				return err
			}
			written, restarted, err := n.RenewCerts(cmd.Context())
			// What was done is said even when a later step failed (a
			// restart): the error then says what is left.
			if len(written) > 0 {
				fmt.Fprintf(a.stdout, "renewed %d files:\n", len(written))
				for _, f := range written {
					fmt.Fprintf(a.stdout, "  %s\n", f)
				}
			}
			if len(restarted) > 0 {
				fmt.Fprintf(a.stdout, "restarted onto them: %s\n", strings.Join(restarted, ", "))
			}
			if err != nil {
				return explainHost(err)
			}
			if len(restarted) == 0 {
				fmt.Fprintln(a.stdout, "no service runs here now: each reads its renewed files when it starts (`stratum up`)")
			}
			return nil
		},
	}
}
