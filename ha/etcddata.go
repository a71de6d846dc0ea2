package ha

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// lostFound is the directory a file system keeps at its root (ext4's). A
// dedicated etcd disk mounted on the data directory has one from its mkfs:
// it is the disk's, not etcd data.
const lostFound = "lost+found"

// writeProbe is the file checkWritable writes and removes at once in each
// directory it checks, the etcd data directory among them: one a crash left
// there is not etcd data either.
const writeProbe = ".stratum-write-probe"

// isLostFound reports whether e is a file system's lost+found.
func isLostFound(e fs.DirEntry) bool { return e.Name() == lostFound && e.IsDir() }

// etcdDataEntries lists what the etcd data directory holds, a file system's
// lost+found and a write probe left out: the probe itself, or the temporary
// file of its atomic write (host.Files.WriteFile) that a crash mid-write
// left, which is no etcd data either. An absent directory holds nothing.
func etcdDataEntries(h host.Files) ([]fs.DirEntry, error) {
	entries, err := h.ReadDir(version.EtcdDataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	held := entries[:0:0]
	for _, e := range entries {
		if isLostFound(e) || e.Name() == writeProbe || strings.HasPrefix(e.Name(), "."+writeProbe+".tmp-") {
			continue
		}
		held = append(held, e)
	}
	return held, nil
}

// wipeEtcdData removes the local etcd member's data: everything in the data
// directory but a lost+found, then the directory itself, unless it is a
// symbolic link or a mount point (a dedicated disk, as etcd's tuning guide
// advises), which stays, empty. Removing the whole path instead fails on a
// mount point on every run (EBUSY), and on a link removes only the link,
// leaving the old data (every Secret) on the disk and the next member's data
// off it. It is idempotent: a re-run after a crash goes on where it stopped.
func wipeEtcdData(h host.Files) error {
	entries, err := h.ReadDir(version.EtcdDataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", version.EtcdDataDir, err)
	}
	for _, e := range entries {
		if isLostFound(e) {
			continue
		}
		if err := h.RemoveAll(path.Join(version.EtcdDataDir, e.Name())); err != nil {
			return err
		}
	}
	link, err := isSymlink(h, version.EtcdDataDir)
	if err != nil || link {
		return err
	}
	err = h.Remove(version.EtcdDataDir)
	switch {
	case errors.Is(err, syscall.EBUSY):
		return nil // a mount point: it stays, empty
	case errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST):
		// Only a lost+found may be left; anything else appeared meanwhile.
		left, lerr := h.ReadDir(version.EtcdDataDir)
		if lerr != nil {
			return fmt.Errorf("read %s: %w", version.EtcdDataDir, lerr)
		}
		for _, e := range left {
			if !isLostFound(e) {
				return fmt.Errorf("%s holds %s again after it was emptied: is an etcd still running on it?", version.EtcdDataDir, e.Name())
			}
		}
		return nil
	}
	return err
}

// ErrEtcdDataMissing: this node's etcd member has served before, and its
// data directory holds no etcd data now.
var ErrEtcdDataMissing = errors.New("etcd data missing")

// RefuseMissingEtcdData refuses to start a member that has served before
// (st.Etcd.Started) on a data directory without etcd's member directory.
// Every start through ha checks it, and the supervisor before each launch
// of etcd, its relaunches after a crash included. The causes: a
// dedicated disk not mounted at boot (an fstab nofail mount that failed), or
// data removed by hand. etcd would start there as a new member: on the first
// control plane, a new, empty cluster under the same cluster and member IDs
// (both derive from the peer URL and the cluster token), whose apiserver
// serves an empty store and whose VIP candidate contends for the VIP; on a
// joined one, a member whose log the leader takes for lost.
func RefuseMissingEtcdData(h host.Files, st *nodestate.NodeState) error {
	if !st.Etcd.Started {
		return nil
	}
	member := path.Join(version.EtcdDataDir, "member")
	_, err := h.Stat(member)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return Refusal(fmt.Errorf("%w: this node's etcd member %s has served on data in %s, which holds none now (%s is missing: a disk of its own not mounted?); etcd was not started, as it would start a new, empty member there (on the first control plane, a new cluster); nothing was changed: mount the disk, or put the data back, and run the same command again; if the data is lost, `stratum etcd rejoin --server <a running control plane's IP>` makes this node a member again, and on the only control plane `stratum snapshot restore FILE` brings a snapshot back",
			ErrEtcdDataMissing, st.Etcd.Name, version.EtcdDataDir, member))
	default:
		return Refusal(fmt.Errorf("%w? this node's etcd member %s has served on data in %s, and %s cannot be read (%v); etcd was not started; nothing was changed: make it readable, then run the same command again", ErrEtcdDataMissing, st.Etcd.Name, version.EtcdDataDir, member, err))
	}
}

// isSymlink reports whether p is a symbolic link, read from its directory's
// listing (which does not follow it). An absent p is not one.
func isSymlink(h host.Files, p string) (bool, error) {
	entries, err := h.ReadDir(path.Dir(p))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path.Dir(p), err)
	}
	for _, e := range entries {
		if e.Name() == path.Base(p) {
			return e.Type()&fs.ModeSymlink != 0, nil
		}
	}
	return false, nil
}
