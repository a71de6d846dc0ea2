package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// certExpiryWarn is how close to its expiry `certs check` warns about a
// certificate.
const certExpiryWarn = 30 * 24 * time.Hour

// certInfo is one certificate `certs check` reports. The JSON names are
// stable (docs/cli.md).
type certInfo struct {
	// Name is the file under the PKI directory ("apiserver.crt",
	// "etcd/ca.crt") or the kubeconfig ("admin.conf").
	Name      string    `json:"name"`
	Kind      string    `json:"kind"` // "ca", "leaf" or "client" (a kubeconfig's)
	Subject   string    `json:"subject"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
	// DaysLeft is the whole days until NotAfter, rounded down: negative
	// once it has expired, so an expired certificate never reads 0.
	DaysLeft int  `json:"daysLeft"`
	Expired  bool `json:"expired"`
	// NotYetValid: NotBefore is still ahead by this node's clock (the
	// clock is behind the one that issued it, by more than the issue's
	// backdating), so this node's TLS refuses it as it would an expired one.
	NotYetValid bool `json:"notYetValid,omitempty"`
}

// certsReport is `certs check -o json`.
type certsReport struct {
	Certificates []certInfo `json:"certificates"`
	// CertificateKeySetAt is when the shared certificates' key was last set,
	// absent when nothing is published or it could not be read.
	CertificateKeySetAt *time.Time `json:"certificateKeySetAt,omitempty"`
	// CertificateKeyError says why the key's age is unknown.
	CertificateKeyError string `json:"certificateKeyError,omitempty"`
	// Problems are what `certs check` exits 1 for: an expired certificate,
	// a key age that could not be read. Empty when it exits 0.
	Problems []string `json:"problems"`
}

// nodeCertificates reads every certificate in the node's PKI directory and
// every kubeconfig's client certificate, sorted by name.
func nodeCertificates(h host.Host, now time.Time) ([]certInfo, error) {
	var out []certInfo
	add := func(name, kind string, pemData []byte) error {
		crt, err := pki.ParseCert(pemData)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if kind == "" {
			kind = "leaf"
			if crt.IsCA {
				kind = "ca"
			}
		}
		out = append(out, certInfo{Name: name, Kind: kind, Subject: crt.Subject.String(), NotBefore: crt.NotBefore.UTC(), NotAfter: crt.NotAfter.UTC(),
			DaysLeft: int(math.Floor(crt.NotAfter.Sub(now).Hours() / 24)), Expired: !now.Before(crt.NotAfter), NotYetValid: now.Before(crt.NotBefore)})
		return nil
	}
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		entries, err := h.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			p, r := path.Join(dir, e.Name()), path.Join(rel, e.Name())
			switch {
			case e.IsDir():
				if err := walk(p, r); err != nil {
					return err
				}
			case strings.HasSuffix(e.Name(), ".crt"):
				data, err := h.ReadFile(p)
				if err != nil {
					return err
				}
				if err := add(r, "", data); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(version.PKIDir, ""); err != nil {
		return nil, fmt.Errorf("read the certificates under %s: %w", version.PKIDir, err)
	}
	for _, name := range kubeconfig.Names() {
		data, err := h.ReadFile(version.Kubeconfig(name))
		if err != nil {
			continue // a node without that kubeconfig
		}
		if crt, err := kubeconfig.ClientCertOf(data); err == nil {
			if err := add(name+".conf", "client", crt); err != nil {
				return nil, err
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// certsDue are the certificates (of nodeCertificates at now) that expire
// within certExpiryWarn of now (soon), have expired, or are not valid yet
// (notYet), each as a line naming it and its date. A year after a cluster's
// bring-up every leaf of it expires within minutes; `status` and the
// supervisor say so ahead, where only `certs check`, run by hand, did: the
// first sign was the VIP held nowhere. A certificate not valid yet is as
// unusable as an expired one, for a clock, not the certificate, to mend.
func certsDue(certs []certInfo, now time.Time) (soon, expired, notYet []string) {
	for _, c := range certs {
		switch {
		case c.Expired:
			expired = append(expired, fmt.Sprintf("%s expired on %s", c.Name, c.NotAfter.Format(time.RFC3339)))
		case c.NotYetValid:
			notYet = append(notYet, fmt.Sprintf("%s is not valid until %s (%s from now)", c.Name, c.NotBefore.Format(time.RFC3339), c.NotBefore.Sub(now).Round(time.Second)))
		case c.NotAfter.Sub(now) < certExpiryWarn:
			soon = append(soon, fmt.Sprintf("%s expires on %s (in %d days)", c.Name, c.NotAfter.Format(time.RFC3339), c.DaysLeft))
		}
	}
	return soon, expired, notYet
}

// nodeCertsDue is certsDue of this node's certificates now.
func nodeCertsDue(h host.Host) (soon, expired, notYet []string, err error) {
	now := h.Now()
	certs, err := nodeCertificates(h, now)
	if err != nil {
		return nil, nil, nil, err
	}
	soon, expired, notYet = certsDue(certs, now)
	return soon, expired, notYet, nil
}

// certsRenewAdvice is what to do about certificates certsDue names.
const certsRenewAdvice = "run `stratum certs renew` on each control plane in turn (`stratum certs check` lists them all)"

// certsClockAdvice is what to do about certificates certsDue says are not
// valid yet: renewing them by a clock that is behind would not help.
const certsClockAdvice = "this machine's clock is behind the one that issued them: set the time (e.g. `timedatectl set-ntp true`); nothing needs renewing for it"

// buildCertsReport is what `certs check -o json` and the MCP tool report:
// this node's certificates, the shared certificates' key age (or why it is
// unknown), and the problems `certs check` exits 1 for.
func buildCertsReport(ctx context.Context, n *ha.Node, h host.Host) (certsReport, error) {
	now := h.Now()
	certs, err := nodeCertificates(h, now)
	if err != nil {
		return certsReport{}, err
	}
	rep := certsReport{Certificates: certs, Problems: []string{}}
	at, present, kerr := n.SharedCertsKeySetAt(ctx)
	switch {
	case kerr != nil:
		rep.CertificateKeyError = kerr.Error()
	case present:
		at = at.UTC()
		rep.CertificateKeySetAt = &at
	}
	_, expired, notYet := certsDue(certs, now)
	rep.Problems = append(rep.Problems, expired...)
	for _, line := range notYet {
		rep.Problems = append(rep.Problems, line+": "+certsClockAdvice)
	}
	if rep.CertificateKeyError != "" {
		rep.Problems = append(rep.Problems, "the shared certificates' key age is unknown: "+rep.CertificateKeyError)
	}
	return rep, nil
}

// certsCheck is `stratum certs check`: every certificate's expiry on this
// node, and the shared certificates' key age through the apiserver.
func (a *app) certsCheck(ctx context.Context, n *ha.Node, h host.Host, out *output) error {
	if _, err := loadState(h); err != nil {
		return err
	}
	now := h.Now()
	rep, err := buildCertsReport(ctx, n, h)
	if err != nil {
		return fmt.Errorf("certs check: %w", err)
	}
	certs := rep.Certificates
	if err := a.write(out, rep, func() error {
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CERTIFICATE\tKIND\tEXPIRES\tLEFT\tSUBJECT")
		for _, c := range certs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%dd\t%s\n", c.Name, c.Kind, c.NotAfter.Format(time.RFC3339), c.DaysLeft, c.Subject)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, c := range certs {
			if left := c.NotAfter.Sub(now); left > 0 && left < certExpiryWarn {
				fmt.Fprintf(a.stdout, "warning: %s expires in %d days\n", c.Name, c.DaysLeft)
			}
		}
		fmt.Fprintln(a.stdout)
		switch at := rep.CertificateKeySetAt; {
		case rep.CertificateKeyError != "":
		case at == nil:
			fmt.Fprintln(a.stdout, "no shared certificates are published: `stratum token create --control-plane` uploads them")
		default:
			age := now.Sub(*at)
			fmt.Fprintf(a.stdout, "certificate-key set at %s (%d days ago)\n", at.Format(time.RFC3339), int(age.Hours()/24))
			if age > certKeyMaxAge {
				fmt.Fprintf(a.stdout, "warning: the certificate-key is older than %d days; rotate it with `stratum certs rekey`\n", int(certKeyMaxAge.Hours()/24))
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return errors.New("certs check: " + strings.Join(rep.Problems, "; "))
	}
	return nil
}
