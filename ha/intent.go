package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"time"

	"stratum.dev/stratum/internal/version"
)

// joinIntentPath is the intent journal's path inside the host. It is derived
// from version.K8sConfDir's sibling state directory and never reassigned:
// each host resolves it under its own root, so tests need no redirect.
var joinIntentPath = path.Join(version.StateDir, "join-intent.json")

// joinIntent is the durable record a join writes, fsync'd, before its live
// member-add: who is being added, where, into which cluster. It bridges the
// window between etcd accepting the member and the node state that records
// it; a crash anywhere in that window leaves it behind as the recovery
// record.
type joinIntent struct {
	Version int `json:"version"`
	// Name and PeerURL identify the member this join adds.
	Name    string `json:"name"`
	PeerURL string `json:"peerURL"`
	// ClusterID is the etcd cluster (hex) the member is added to.
	ClusterID string `json:"clusterID"`
	// Endpoints are the published etcd client URLs the add (and a rollback)
	// goes through — never the VIP.
	Endpoints []string  `json:"endpoints"`
	Started   time.Time `json:"started"`
	// MemberID is the added member's ID (hex), recorded once etcd answered.
	MemberID string `json:"memberID,omitempty"`
}

const joinIntentVersion = 1

// JoinIntentPath is the durable pre-add intent journal's path in this node's
// state directory, derived from version.K8sConfDir at call time — the path
// the caller-facing gate (JoinIntentSurvives) and the refusals that name the
// file report. The join's own reads, writes, and clear go through the package
// var joinIntentPath instead; the two name the same file.
func JoinIntentPath() string { return joinIntentPath }

// JoinIntentSurvives reports whether a join intent file survives in this
// node's state directory, whatever its contents. A join that added its member
// but never persisted the node state leaves the file there as the recovery
// record, so a bare `stratum up` that treated it as absent would bootstrap a
// separate single-member cluster over the recorded membership. An unreadable
// file is an error, never "absent" — readJoinIntent's rule.
func JoinIntentSurvives() (bool, error) {
	n, err := local()
	if err != nil {
		return false, err
	}
	return n.JoinIntentSurvives(context.Background())
}

// ClearJoinIntent ends a join's intent journal once its work is done: the
// node's local etcd data is confirmed on a later start, so the state between
// the join's state save and etcd's first WAL no longer needs a recovery
// record. A missing file is fine; any other error is returned to the caller.
func ClearJoinIntent() error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.ClearJoinIntent(context.Background())
}

// JoinIntentSurvives is the package function's method.
func (n *Node) JoinIntentSurvives(ctx context.Context) (bool, error) {
	_, err := n.env.Host.Stat(joinIntentPath)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check the join intent journal %s: %w", joinIntentPath, err)
	}
	return true, nil
}

// ClearJoinIntent is the package function's method.
func (n *Node) ClearJoinIntent(ctx context.Context) error {
	if err := n.env.Host.Remove(joinIntentPath); err != nil {
		return fmt.Errorf("clear the join intent journal %s: %w", joinIntentPath, err)
	}
	return nil
}

// writeJoinIntent records the intent durably (atomic, fsync'd).
func (n *Node) writeJoinIntent(in joinIntent) error {
	in.Version = joinIntentVersion
	data, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	if err := n.env.Host.WriteFile(joinIntentPath, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the join intent journal %s: %w", joinIntentPath, err)
	}
	return nil
}

// errNoIntent matches readJoinIntent on a node with no journal.
var errNoIntent = errors.New("no join intent")

// errIntentDamaged matches readJoinIntent on a journal that is not one
// (unparsable, or naming no peer URL): no command can reconcile with it, and
// a forced reset may wipe the node, naming the member to look for.
var errIntentDamaged = errors.New("join intent journal damaged")

// intentDamagedHint is what to do about a damaged journal: its member, if
// the add landed, is found by this node's peer URL.
const intentDamagedHint = "it was left as it is: on a running control plane, `stratum etcd members` shows whether this node's address has a member (remove it with `stratum etcd member remove NAME`); then `stratum reset --force` clears this node, and the join command joins it again"

// readJoinIntent reads the journal. Absent is errNoIntent; unreadable or
// malformed is any other error, never "absent": treating a damaged recovery
// record as no record is how a node would bootstrap over its membership.
func (n *Node) readJoinIntent() (joinIntent, error) {
	var in joinIntent
	data, err := n.env.Host.ReadFile(joinIntentPath)
	if errors.Is(err, fs.ErrNotExist) {
		return in, errNoIntent
	}
	if err != nil {
		return in, fmt.Errorf("read the join intent journal %s: %w", joinIntentPath, err)
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return in, fmt.Errorf("%w: %s cannot be parsed (%v); %s", errIntentDamaged, joinIntentPath, err, intentDamagedHint)
	}
	if in.Version > joinIntentVersion {
		return in, fmt.Errorf("the join intent journal %s has format %d, newer than this stratum's %d; upgrade stratum", joinIntentPath, in.Version, joinIntentVersion)
	}
	if in.PeerURL == "" {
		return in, fmt.Errorf("%w: %s names no peer URL; %s", errIntentDamaged, joinIntentPath, intentDamagedHint)
	}
	return in, nil
}
