package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/token"
)

// tokenListCmd is `stratum token list`: every bootstrap token, without its
// secret half.
func (a *app) tokenListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the cluster's bootstrap tokens (ID, kind, expiry; never the secret)",
		Long: `List the cluster's bootstrap tokens through this control plane's admin kubeconfig:
each token's ID, its kind (control-plane join grant, worker, or other: one stratum did not
mint), when it expires, whether it still authenticates, and its description. The secret
half is never shown. -o json (or yaml) prints an array of {id, kind, expires, live,
description, groups}.`,
		Example: `  stratum token list
  stratum token list -o json`,
		Args: usageArgs(cobra.NoArgs),
	}
	cmd.RunE = adminReport(a, addOutput(cmd, "table"), func(ctx context.Context, h host.Host, cs kubernetes.Interface) ([]token.Info, error) {
		list, err := token.List(ctx, cs, h.Now())
		if list == nil {
			list = []token.Info{}
		}
		return list, err
	}, writeTokenTable)
	return cmd
}

// writeTokenTable is `token list`'s table.
func writeTokenTable(w io.Writer, list []token.Info) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tEXPIRES\tLIVE\tDESCRIPTION")
	for _, i := range list {
		exp := "never"
		if i.Expires != nil {
			exp = i.Expires.UTC().Format(time.RFC3339)
		}
		live := "yes"
		if !i.Live {
			live = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", i.ID, i.Kind, exp, live, i.Description)
	}
	return tw.Flush()
}

// tokenDeleteCmd is `stratum token delete ID...`: revoke tokens, and with
// them the grant entries of control-plane join grants.
func (a *app) tokenDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID...",
		Short: "Revoke bootstrap tokens, and the shared-certificate grants of control-plane ones",
		Long: `Delete bootstrap tokens by ID (the part before the dot), so they no longer
authenticate, then drop the grant entries of deleted and expired tokens from the
encrypted shared-certificate Secret (as "stratum grants prune" does). A printed join
command is a root credential of the cluster until its token expires: delete it when
it is no longer needed. Malformed IDs are bad usage (exit 2) before anything is
deleted; an ID that does not exist, or a delete the cluster refused, is reported and the
others are still deleted (exit 1).`,
		Example: `  stratum token list
  stratum token delete abcdef`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, ids []string) error {
			for _, id := range ids {
				if !token.ValidID(id) {
					return usagef("%q is not a token ID (6 characters of [a-z0-9], the part before the dot); nothing was deleted", id)
				}
			}
			// An ID given twice is deleted once: its second delete found
			// it gone and reported a failure for a token that was deleted.
			var unique []string
			for _, id := range ids {
				if !slices.Contains(unique, id) {
					unique = append(unique, id)
				}
			}
			ids = unique
			n, _, cs, err := a.adminNode()
			if err != nil {
				return err
			}
			var failed []string
			var errs []error
			for _, id := range ids {
				if err := token.Delete(cmd.Context(), cs, id); err != nil {
					if !errors.Is(err, token.ErrNoToken) {
						failed = append(failed, id) // it may still authenticate
					}
					errs = append(errs, err)
					continue
				}
				fmt.Fprintf(a.stdout, "deleted token %s\n", id)
			}
			if len(failed) > 0 {
				// First, so that no later line reads as if every token went.
				errs = append([]error{fmt.Errorf("NOT deleted, still valid until it expires: %s (re-run `stratum token delete %s`)", strings.Join(failed, ", "), strings.Join(failed, " "))}, errs...)
			}
			if dropped, err := n.PruneGrants(cmd.Context(), cs); err != nil {
				errs = append(errs, fmt.Errorf("the grant entries of deleted and expired tokens were not dropped: %w; run `stratum grants prune`", err))
			} else {
				fmt.Fprintln(a.stdout, prunedLine(dropped))
			}
			return errors.Join(errs...)
		},
	}
}
