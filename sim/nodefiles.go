package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/keyutil"
	"sigs.k8s.io/yaml"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// CheckNodeFiles is the disk invariant of a host after a fault or a crash:
// every file stratum writes under version.K8sConfDir and version.StateDir
// (etcd's data directory aside) parses with the parser its kind has, or is
// absent, and no temporary file of an atomic write is left. The node state
// is read with nodestate.Load. The first damaged file is the error.
func CheckNodeFiles(files host.Files) error {
	if _, err := nodestate.Load(files); err != nil && !errors.Is(err, nodestate.ErrNoState) {
		return fmt.Errorf("the node state does not load: %w", err)
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		entries, err := files.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := path.Join(dir, e.Name())
			switch {
			case p == version.EtcdDataDir:
				continue // etcd's own
			case e.IsDir():
				if err := walk(p); err != nil {
					return err
				}
				continue
			case strings.Contains(e.Name(), ".tmp-"):
				return fmt.Errorf("temporary file %s left", p)
			case p == nodestate.Path:
				continue // loaded above
			}
			data, err := files.ReadFile(p)
			if err != nil {
				return err
			}
			if err := parseNodeFile(p, data); err != nil {
				return fmt.Errorf("%s is damaged (%d bytes): %w", p, len(data), err)
			}
		}
		return nil
	}
	if err := walk(version.K8sConfDir); err != nil {
		return err
	}
	return walk(version.StateDir)
}

// parseNodeFile parses a file stratum writes with the parser its kind has.
func parseNodeFile(p string, data []byte) error {
	switch path.Ext(p) {
	case ".crt":
		_, err := pki.ParseCert(data)
		return err
	case ".key":
		_, err := pki.ParseKey(data)
		return err
	case ".pub":
		_, err := keyutil.ParsePublicKeysPEM(data)
		return err
	case ".conf":
		cfg, err := clientcmd.Load(data)
		if err != nil {
			return err
		}
		return clientcmd.Validate(*cfg)
	case ".yaml":
		var m map[string]any
		if err := yaml.Unmarshal(data, &m); err != nil {
			return err
		}
		if len(m) == 0 {
			return errors.New("empty")
		}
		return nil
	case ".json":
		var m map[string]any
		return json.Unmarshal(data, &m)
	}
	return fmt.Errorf("no parser for %s: add one to sim's parseNodeFile", p)
}

// Kubeconfigs are the host's kubeconfigs (every *.conf in
// version.K8sConfDir), by file name: what a repoint rewrites.
func (h *Host) Kubeconfigs() (map[string][]byte, error) {
	entries, err := h.files.ReadDir(version.K8sConfDir)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".conf") {
			b, err := h.files.ReadFile(path.Join(version.K8sConfDir, e.Name()))
			if err != nil {
				return nil, err
			}
			out[e.Name()] = b
		}
	}
	return out, nil
}
