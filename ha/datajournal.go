package ha

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"time"

	"stratum.dev/stratum/internal/version"
)

// ErrEtcdDataReplacing matches `stratum up` refused because a snapshot
// restore or an etcd rejoin began replacing this node's etcd data directory
// and has not recorded the new membership yet.
//
// Between the wipe of the old data and the node state that records the new
// membership, the node state still names the old one: an etcd started from
// it on an empty or half-written data directory bootstraps an empty cluster
// (a state "new", as the first control plane's) or joins the old one with
// no data, and the apiserver and the VIP would serve that to every client.
// A reboot in that window runs `stratum up` at boot; the journal makes it
// refuse instead, naming the command that finishes the replacement.
var ErrEtcdDataReplacing = errors.New("this node's etcd data is being replaced")

// dataReplacePath records a replacement of the etcd data directory from
// before its wipe until the node state records the new membership.
var dataReplacePath = path.Join(version.StateDir, "etcd-data-replacing.json")

// dataReplaceJournal says which operation replaces the data, and the
// command that finishes it.
type dataReplaceJournal struct {
	Op      string    `json:"op"`
	Finish  string    `json:"finish"`
	Started time.Time `json:"started"`
}

// beginDataReplace writes the journal, fsync'd, before the data directory is
// touched: op is the operation, finish the command a re-run finishes it with.
// A write that fails is undone: the error then says nothing was changed, or
// that the journal may be left (a re-run of the same command clears it). A
// journal an earlier run left (earlier: the caller's dataReplaceUnderWay,
// which also counts one that could not be looked at) is never undone: that
// run may have begun replacing the data, which the journal keeps `stratum
// up` from starting on.
func (n *Node) beginDataReplace(op, finish string, earlier bool) error {
	data, err := json.Marshal(dataReplaceJournal{Op: op, Finish: finish, Started: n.env.Host.Now().UTC()})
	if err != nil {
		return Refusal(err)
	}
	if err := n.env.Host.MkdirAll(version.StateDir, 0o700); err != nil {
		return Refusal(fmt.Errorf("record the etcd data replacement: %w; nothing was changed", err))
	}
	werr := n.env.Host.WriteFile(dataReplacePath, data, 0o600)
	switch {
	case werr == nil:
		return nil
	case earlier:
		return Refusal(fmt.Errorf("record the etcd data replacement in %s: %w; nothing was changed: the journal found there before (an earlier run's, or one that could not be looked at) is left as it is, keeping `stratum up` from starting etcd on data that run may have half replaced: mend the disk, then run %s", dataReplacePath, werr, finish))
	}
	// A write whose last step (the directory's fsync) failed left the file.
	if err := n.endDataReplace(); err != nil {
		return fmt.Errorf("record the etcd data replacement in %s: %w; the journal may be left, which keeps `stratum up` from starting this node: run %s", dataReplacePath, werr, finish)
	}
	return Refusal(fmt.Errorf("record the etcd data replacement in %s: %w; nothing was changed", dataReplacePath, werr))
}

// dataReplaceUnderWay reports whether the journal is there (an earlier run
// left it: the data may be half replaced). A journal that cannot be looked
// at (EIO, EACCES) counts as there: taken for absent, a restore or rejoin
// whose stop then failed would remove an earlier run's journal, and
// `stratum up` would start etcd on data half replaced.
func (n *Node) dataReplaceUnderWay() bool {
	_, err := n.env.Host.Stat(dataReplacePath)
	return !errors.Is(err, fs.ErrNotExist)
}

// endDataReplace removes the journal once the node state records the new
// membership; it is idempotent.
func (n *Node) endDataReplace() error {
	if err := n.env.Host.Remove(dataReplacePath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the etcd data replacement journal %s: %w", dataReplacePath, err)
	}
	return nil
}

// refuseDataReplaceUnderWay refuses, naming the operation and the command
// that finishes it, a start of this node's control plane while its etcd
// data is being replaced.
func (n *Node) refuseDataReplaceUnderWay(op string) error {
	data, err := n.env.Host.ReadFile(dataReplacePath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return Refusal(fmt.Errorf("%s: read the etcd data replacement journal %s: %w; nothing was changed", op, dataReplacePath, err))
	}
	var j dataReplaceJournal
	if err := json.Unmarshal(data, &j); err != nil || j.Op == "" {
		j = dataReplaceJournal{Op: "a snapshot restore or etcd rejoin", Finish: "the restore or rejoin that was interrupted"}
	}
	return Refusal(fmt.Errorf("%s refused: %w: %s began replacing %s at %s and did not record the new membership (%s); nothing was started, since etcd would start an empty or stale member from the old node state: run %s to finish it",
		op, ErrEtcdDataReplacing, j.Op, version.EtcdDataDir, j.Started.Format(time.RFC3339), dataReplacePath, j.Finish))
}
