package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/noderelease"
)

// removalPlan is what `etcd member remove` would do, decided from the member
// table before anything changes.
type removalPlan struct {
	Target memberRow
	// VotersAfter, HealthyAfter and QuorumAfter describe the cluster
	// without the target.
	VotersAfter, HealthyAfter, QuorumAfter int
	// Risks are refusals --force lifts: the remaining cluster would lose
	// quorum, the target is a healthy voter (a control plane that is not
	// gone), or it is this node's own member.
	Risks []string
}

// planRemoval finds target (a member name or peer URL) in rows and weighs
// its removal. Removing the last voter is an error --force does not lift:
// etcd cannot run without one.
func planRemoval(rows []memberRow, target, selfPeerURL string) (removalPlan, error) {
	var p removalPlan
	found := false
	voters, healthy := 0, 0
	for _, r := range rows {
		if r.Name == target || r.PeerURL == target || strings.Contains(","+r.PeerURL+",", ","+target+",") {
			if found {
				return p, fmt.Errorf("%q names more than one member; give the peer URL", target)
			}
			p.Target, found = r, true
			continue
		}
		if !r.Learner {
			voters++
			if r.Health == "healthy" {
				healthy++
			}
		}
	}
	if !found {
		names := make([]string, 0, len(rows))
		for _, r := range rows {
			names = append(names, r.Name+" ("+r.PeerURL+")")
		}
		return p, fmt.Errorf("no etcd member named %q or with that peer URL (members: %s); nothing was removed", target, strings.Join(names, ", "))
	}
	p.VotersAfter, p.HealthyAfter = voters, healthy
	p.QuorumAfter = ha.QuorumOf(voters)
	if p.Target.Learner {
		return p, nil // a learner does not count toward quorum
	}
	if voters == 0 {
		return p, fmt.Errorf("%s is the cluster's last voter; etcd cannot run without one: nothing was removed", p.Target.Name)
	}
	if healthy < p.QuorumAfter {
		p.Risks = append(p.Risks, fmt.Sprintf("without it %d of the %d remaining voters are healthy, under the quorum of %d: the cluster would stop accepting writes", healthy, voters, p.QuorumAfter))
	}
	self := p.Target.PeerURL == selfPeerURL
	if p.Target.Health == "healthy" && !self {
		p.Risks = append(p.Risks, fmt.Sprintf("%s is healthy and serving (it answers its status with a leader), not a control plane gone for good: removing it stops its etcd and its apiserver, and that machine must then be reset and joined again; "+
			"to retire it, run `stratum reset` on it (the clean way: it stops its services first and removes its member through the others); if you meant another member, `stratum etcd members` lists them", p.Target.Name))
	}
	if self {
		p.Risks = append(p.Risks, "it is this node's own member: its etcd stops and the supervisor cannot bring it back; to take this node out of the cluster, run `stratum reset` here (it stops the services first and removes the member through the others)")
	}
	return p, nil
}

func (p removalPlan) String() string {
	role := "voter"
	if p.Target.Learner {
		role = "learner"
	}
	return fmt.Sprintf("remove etcd member %s (%s, %s, %s); %d voters remain, %d healthy, quorum %d",
		p.Target.Name, p.Target.PeerURL, role, p.Target.Health, p.VotersAfter, p.HealthyAfter, p.QuorumAfter)
}

func (a *app) etcdMemberCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "member",
		Short:   "Change the etcd membership",
		Example: `  stratum etcd member remove cp3`,
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRun,
	}
	var force, dryRun bool
	remove := &cobra.Command{
		Use:   "remove NAME|PEER-URL",
		Short: "Remove an etcd member (a control plane that is gone for good), refusing a healthy one or a loss of quorum",
		Long: `Remove an etcd member by name or peer URL, through this control plane's member, for a
control plane that is gone for good. It first weighs the removal against the member
table (each member asked for its own health) and refuses, changing nothing, when the
remaining voters' healthy members would be under quorum, when the member is a healthy
voter (it answers with a leader: that control plane is not gone; to retire it, run
"stratum reset" on it), or when the member is this node's own; --force lifts those three
refusals. Removing the last voter is always refused. --dry-run prints the plan and
changes nothing. Exits 3 when refused (nothing removed; with --dry-run, when the removal
would be), 1 when the removal was asked of etcd and failed.`,
		Example: `  stratum etcd member remove cp3 --dry-run
  stratum etcd member remove https://10.0.0.13:2380

  # cp3's machine was re-imaged and its join refused on its old member:
  # remove that member here, then run the same join command on cp3 again
  stratum etcd member remove cp3`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, h, st, err := a.controlPlaneNode()
			if err != nil {
				return err
			}
			rows, err := etcdMembers(cmd.Context(), n, st.Etcd.ClientURL)
			if err != nil {
				return refusedf("etcd member remove: %w; nothing was removed: run it on a control plane whose etcd runs", err)
			}
			plan, err := planRemoval(rows, args[0], st.Etcd.PeerURL)
			if err != nil {
				return refusedf("etcd member remove: %w", err)
			}
			if dryRun {
				fmt.Fprintf(a.stdout, "would %s\n", plan)
				for _, r := range plan.Risks {
					fmt.Fprintf(a.stdout, "refused without --force: %s\n", r)
				}
			}
			if len(plan.Risks) > 0 && !force {
				return refusedf("etcd member remove refused: %s; nothing was removed (--force removes it anyway)", strings.Join(plan.Risks, "; "))
			}
			if dryRun {
				return nil
			}
			peer, _, _ := strings.Cut(plan.Target.PeerURL, ",")
			if err := n.MemberRemove(cmd.Context(), []string{urlHost(st.Etcd.ClientURL)}, peer); err != nil {
				return fmt.Errorf("etcd member remove: %w", err)
			}
			fmt.Fprintf(a.stdout, "removed: %s\n", strings.TrimPrefix(plan.String(), "remove "))
			a.forgetRemovedRelease(cmd.Context(), h, plan.Target)
			if err := n.PublishEtcdMembers(cmd.Context()); err != nil {
				a.log.Warn("the remaining etcd members were not published for later joins (the operator's next pass does it)", "err", err)
			}
			return nil
		},
	}
	remove.Flags().BoolVar(&force, "force", false, "remove even when the remaining cluster would be under quorum, the member is healthy, or it is this node's own")
	remove.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan, change nothing")
	cmd.AddCommand(remove)
	return cmd
}

// forgetRemovedRelease deletes the release record (internal/noderelease) of
// the member m just removed, through this node's own apiserver, when the
// record is that member's: a control plane gone for good runs no release,
// and `stratum upgrade plan` would list its record as stale. A failure is
// said, not an error: the member is removed.
func (a *app) forgetRemovedRelease(ctx context.Context, h host.Host, m memberRow) {
	if m.Name == "" {
		return // a learner that never started: it recorded nothing
	}
	lease := noderelease.Namespace + "/" + noderelease.LeaseName(m.Name)
	deleted := false
	cs, err := localAdminClient(h, 10*time.Second, a.waitNotice())
	if err == nil {
		deleted, err = noderelease.ForgetMember(ctx, cs, m.Name, m.id)
	}
	switch {
	case err != nil:
		fmt.Fprintf(a.stdout, "its release record (Lease %s) was not deleted: %v; `stratum upgrade plan` lists it as stale while no member is named %s: delete it then (kubectl -n %s delete lease %s)\n", lease, err, m.Name, noderelease.Namespace, noderelease.LeaseName(m.Name))
	case deleted:
		fmt.Fprintf(a.stdout, "its release record (Lease %s) deleted\n", lease)
	}
}

// etcdDowngradeCmd is `stratum etcd downgrade MAJOR.MINOR`.
func (a *app) etcdDowngradeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "downgrade MAJOR.MINOR",
		Short: "Downgrade the etcd cluster to the previous minor version (etcd's own downgrade)",
		Long: `Ask the etcd cluster, through this control plane's member, to downgrade to MAJOR.MINOR
(the previous minor version, e.g. 3.6): the cluster must be healthy and etcd must
validate the target, or nothing is asked of it. etcd then lowers the cluster version
and migrates every member's storage down, so the older etcd can open the data. The
command waits (printing what it waits for every 5 s) until every member runs the
target (swap each member's etcd binary to the older one and restart it meanwhile) and
etcd has ended the downgrade, which it does once it sees every member on the target.
Interrupted, the downgrade stays enabled: run it again, or cancel it with etcdctl.
Exits 2 for a malformed target, 3 when refused (an unhealthy cluster, a target etcd
does not validate, another downgrade under way: nothing was asked of etcd), 1 when it
failed after the downgrade was enabled (run it again).`,
		Example: `  stratum etcd downgrade 3.6`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !majorMinorArg(args[0]) {
				return usagef("%q is not a major.minor version such as 3.6", args[0])
			}
			n, _, st, err := a.controlPlaneNode()
			if err != nil {
				return err
			}
			if err := n.DowngradeEtcd(cmd.Context(), urlHost(st.Etcd.ClientURL), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "etcd downgraded: every member runs %s\n", strings.TrimPrefix(args[0], "v"))
			return nil
		},
	}
}

// majorMinorArg reports whether v looks like "3.6" or "v3.6".
func majorMinorArg(v string) bool {
	v = strings.TrimPrefix(v, "v")
	major, minor, ok := strings.Cut(v, ".")
	if !ok || major == "" || minor == "" {
		return false
	}
	for _, r := range major + minor {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
