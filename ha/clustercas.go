package ha

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// casMakingPath marks the cluster CAs as being written by a first control
// plane's bootstrap, from before the first CA file is written until the last
// one is. A partial set of CA files with the marker beside it is an
// interrupted bootstrap's (a disk error, a crash): nothing was issued from
// it yet, so a re-run replaces it. A partial set without the marker is an
// operator's (CAs placed by hand) and is refused, not replaced.
var casMakingPath = path.Join(version.StateDir, "cluster-cas-making.json")

// loadOrMakeShared returns the cluster CAs on this node, making and writing
// them when there are none, or anew whenever an interrupted bootstrap's
// marker is there (casMakingPath), whatever files it left.
func (n *Node) loadOrMakeShared() (*pki.Shared, error) {
	h := n.env.Host
	files := map[string][]byte{}
	var missing []string
	for _, name := range pki.SharedFileNames() {
		b, err := h.ReadFile(version.PKIFile(name))
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, name)
			continue
		}
		if err != nil {
			return nil, Refusal(fmt.Errorf("stratum up: read the cluster CA file %s: %w; nothing was changed", version.PKIFile(name), err))
		}
		files[name] = b
	}
	_, err := h.Stat(casMakingPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, Refusal(fmt.Errorf("stratum up: check the marker %s: %w; nothing was changed", casMakingPath, err))
	}
	interrupted := err == nil
	switch {
	case interrupted:
		// Whatever is there (some files, or all of them but the marker not
		// yet removed, or a mix of two runs' files) was never used: leaves
		// are issued only once the marker is gone. Made anew.
		if len(files) > 0 {
			n.log.Info("an interrupted bootstrap left cluster CA files; they were never used, so the CAs are made anew", "present", len(files), "missing", len(missing))
		}
		return n.makeShared(true)
	case len(missing) == 0:
		return pki.LoadShared(files)
	case len(files) > 0:
		present := slices.Sorted(maps.Keys(files))
		return nil, Refusal(fmt.Errorf("stratum up refused: %s holds some of the cluster CA files (%s) but not %s, and no bootstrap of this node was writing them; nothing was changed: put back the missing ones, or remove them all to make new CAs",
			version.PKIDir, strings.Join(present, ", "), strings.Join(missing, ", ")))
	}
	return n.makeShared(false)
}

// makeShared makes the cluster CAs and writes them, the marker first
// (unless an interrupted run left it) and removed last. A write that fails
// is undone: the files written and the marker are removed, and the error
// says nothing was changed; one whose undo fails leaves the marker, so the
// re-run it names replaces what is left.
func (n *Node) makeShared(markerLeft bool) (*pki.Shared, error) {
	h := n.env.Host
	shared, err := pki.NewShared(h.Now())
	if err != nil {
		return nil, Refusal(fmt.Errorf("stratum up: make the cluster CAs: %w; nothing was changed", err))
	}
	if !markerLeft {
		data, _ := json.Marshal(struct {
			Started time.Time `json:"started"`
		}{h.Now().UTC()})
		if err := h.WriteFile(casMakingPath, data, 0o600); err != nil {
			_ = h.Remove(casMakingPath)
			return nil, Refusal(fmt.Errorf("stratum up: write the marker %s before the cluster CAs: %w; nothing was changed: re-run `stratum up` once the disk accepts writes", casMakingPath, err))
		}
	}
	for _, name := range pki.SharedFileNames() {
		mode := fs.FileMode(0o644)
		if strings.HasSuffix(name, ".key") {
			mode = 0o600
		}
		if err := h.WriteFile(version.PKIFile(name), shared.Files()[name], mode); err != nil {
			return nil, n.undoShared(markerLeft, fmt.Errorf("stratum up: write the cluster CA file %s: %w", version.PKIFile(name), err))
		}
	}
	if err := h.Remove(casMakingPath); err != nil {
		return nil, fmt.Errorf("stratum up: the cluster CAs are written, but the marker %s was not removed: %w; re-run `stratum up`", casMakingPath, err)
	}
	return shared, nil
}

// undoShared removes the cluster CA files and the marker after a failed
// write, and says what is left: nothing of this run (a refusal) when both
// went, and the partial CAs an interrupted run left (markerLeft) gone too.
func (n *Node) undoShared(markerLeft bool, cause error) error {
	h := n.env.Host
	for _, name := range pki.SharedFileNames() {
		if err := h.Remove(version.PKIFile(name)); err != nil {
			return fmt.Errorf("%w; part of the new CAs may be left in %s (undo: %v), with the marker %s: re-run `stratum up` once the disk accepts writes, which replaces them", cause, version.PKIDir, err, casMakingPath)
		}
	}
	if err := h.Remove(casMakingPath); err != nil {
		return fmt.Errorf("%w; the new CA files were removed, but the marker %s was not (%v): re-run `stratum up` once the disk accepts writes", cause, casMakingPath, err)
	}
	if markerLeft {
		return fmt.Errorf("%w; the partial CAs an interrupted run left are removed, and nothing else was changed: re-run `stratum up` once the disk accepts writes", cause)
	}
	return Refusal(fmt.Errorf("%w; nothing was changed: re-run `stratum up` once the disk accepts writes", cause))
}
