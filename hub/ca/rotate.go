package ca

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Blobs of a root rotation, kept beside the mesh's CA in its Store. A
// rotation follows Istio's multi-root procedure in three steps, each an
// Authority method that navectl runs on the Store (docs/operate.md,
// decision 031):
//
//  1. AddRoot stores a new CA under the names of the current one prefixed
//     with NextPrefix (next-root-cert.pem and next-root-key.pem for a
//     generated root; next-ca-cert.pem, next-ca-key.pem,
//     next-cert-chain.pem and next-root-cert.pem for plugged-in cacerts)
//     and FileRotationAdded. The mesh's bundle is then old + new roots;
//     the old CA still signs.
//  2. SwitchRoot makes the new CA the signing one (its blobs lose the
//     prefix) and keeps the old roots trusted in FilePrevRootCert, with
//     FileRotationSwitched. New certificates chain to the new root; old
//     ones still verify against the bundle.
//  3. DropRoot removes FilePrevRootCert once no certificate of the old
//     root can still be valid: the bundle is the new root alone.
//
// Every hub replica reads the Store again every ca.refreshInterval
// (Refresh), so all of them take each step without a restart.
const (
	NextPrefix           = "next-"
	FilePrevRootCert     = "prev-root-cert.pem"
	FileRotationAdded    = "rotation-added-at"
	FileRotationSwitched = "rotation-switched-at"
)

// Phases of a rotation (RotationStatus.Phase, the nave_hub_ca_rotation_phase
// metric).
const (
	PhaseNone     = "none"     // one root
	PhaseAdded    = "added"    // step 1 done: a new root is trusted, the old one signs
	PhaseSwitched = "switched" // step 2 done: the new root signs, the old one is still trusted
)

// caBlobNames are the names of a mesh's signing CA (plugged-in or
// generated).
var caBlobNames = []string{FileCACert, FileCAKey, FileCertChain, FileRootCert, FileRootKey}

// rotation is the state of a mesh's root rotation, read from its blobs.
type rotation struct {
	next       *meshCA // the CA AddRoot stored (PhaseAdded)
	prevRoots  []*x509.Certificate
	addedAt    time.Time
	switchedAt time.Time
}

func (r rotation) phase() string {
	switch {
	case r.next != nil:
		return PhaseAdded
	case len(r.prevRoots) > 0:
		return PhaseSwitched
	}
	return PhaseNone
}

// blobsSum hashes a set of blobs (names and contents).
func blobsSum(blobs map[string][]byte) [32]byte {
	h := sha256.New()
	for _, n := range slices.Sorted(maps.Keys(blobs)) {
		fmt.Fprintf(h, "%d:%s%d:", len(n), n, len(blobs[n]))
		h.Write(blobs[n])
	}
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// signingCA builds the signing CA of blobs (plugged-in or generated).
func (a *Authority) signingCA(m Mesh, blobs map[string][]byte, source string) (*meshCA, error) {
	if _, ok := blobs[FileCACert]; ok {
		return a.pluggedCA(m, blobs)
	}
	certPEM, hasCert := blobs[FileRootCert]
	keyPEM, hasKey := blobs[FileRootKey]
	if !hasCert || !hasKey {
		return nil, fmt.Errorf("neither %s (a plugged-in CA) nor %s and %s (a generated root) exist", FileCACert, FileRootCert, FileRootKey)
	}
	return a.generatedCA(m, certPEM, keyPEM, source)
}

// buildCA builds m's CA from its blobs: the signing CA, and the roots a
// rotation adds to its bundle. Any refusal names the blob and why.
func (a *Authority) buildCA(m Mesh, blobs map[string][]byte) (*meshCA, error) {
	c, err := a.signingCA(m, blobs, sourceGenerated)
	if err != nil {
		return nil, err
	}
	if _, ok := blobs[FileCACert]; ok {
		c.source = sourcePlugged
	}
	rot, err := a.readRotation(m, blobs)
	if err != nil {
		return nil, err
	}
	trusted := slices.Clone(c.rootCerts)
	if rot.next != nil {
		trusted = append(trusted, rot.next.rootCerts...)
	}
	trusted = append(trusted, rot.prevRoots...)
	c.setTrusted(trusted)
	c.rotation = rot
	c.blobsSum = blobsSum(blobs)
	return c, nil
}

// nextBlobs returns the blobs of the CA AddRoot stored, without their
// prefix (nil if there is none).
func nextBlobs(blobs map[string][]byte) map[string][]byte {
	var next map[string][]byte
	for n, b := range blobs {
		if base, ok := strings.CutPrefix(n, NextPrefix); ok {
			if next == nil {
				next = map[string][]byte{}
			}
			next[base] = b
		}
	}
	return next
}

// readRotation reads the rotation blobs. It refuses a state no step
// leaves: a new CA and previous roots at once, a new CA that does not
// load, a bad time.
func (a *Authority) readRotation(m Mesh, blobs map[string][]byte) (rotation, error) {
	var r rotation
	var err error
	if r.addedAt, err = readTime(blobs, FileRotationAdded); err != nil {
		return r, err
	}
	if r.switchedAt, err = readTime(blobs, FileRotationSwitched); err != nil {
		return r, err
	}
	if next := nextBlobs(blobs); next != nil {
		if r.next, err = a.signingCA(m, next, sourceGenerated); err != nil {
			return r, fmt.Errorf("the new CA of a rotation (%s*): %w", NextPrefix, err)
		}
	}
	if b, ok := blobs[FilePrevRootCert]; ok {
		if r.prevRoots, err = parseCertsPEM(b); err != nil {
			return r, fmt.Errorf("%s: %w", FilePrevRootCert, err)
		}
		for i, c := range r.prevRoots {
			if err := checkCACert(c); err != nil {
				return r, fmt.Errorf("%s: certificate %d: %w", FilePrevRootCert, i+1, err)
			}
		}
	}
	if r.next != nil && r.prevRoots != nil {
		return r, fmt.Errorf("both a new CA (%s*) and %s exist: a rotation adds a root only once the previous one was dropped", NextPrefix, FilePrevRootCert)
	}
	return r, nil
}

// maxTimeBlob bounds a rotation time blob (an RFC 3339 time).
const maxTimeBlob = 64

func readTime(blobs map[string][]byte, name string) (time.Time, error) {
	b, ok := blobs[name]
	if !ok {
		return time.Time{}, nil
	}
	if len(b) > maxTimeBlob {
		return time.Time{}, fmt.Errorf("%s: %d bytes, want an RFC 3339 time", name, len(b))
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: want an RFC 3339 time: %w", name, err)
	}
	return t, nil
}

func timeBlob(t time.Time) []byte { return []byte(t.UTC().Format(time.RFC3339) + "\n") }

// Refresh reads every loaded mesh's blobs again and replaces the CA of
// each whose blobs changed (a rotation step, from navectl or another
// replica). It returns the meshes whose CA changed. A mesh whose new
// blobs do not load keeps its CA; the error names it (and is counted in
// nave_hub_ca_refresh_failures_total).
func (a *Authority) Refresh(ctx context.Context) ([]string, error) {
	var changed []string
	var errs []error
	for _, m := range a.Meshes() {
		ok, err := a.refreshMesh(ctx, m.Name)
		if err != nil {
			a.metrics.refreshFailures.Inc()
			errs = append(errs, err)
		}
		if ok {
			changed = append(changed, m.Name)
		}
	}
	return changed, errors.Join(errs...)
}

// RefreshEvery calls Refresh every interval until ctx ends, and changed
// for each mesh whose CA changed (a root rotation step), so that its new
// bundle reaches spokes and proxies. A store that cannot be read, or a CA
// that does not load, keeps the CA in use (logged, counted). It returns
// nil when ctx ends.
func (a *Authority) RefreshEvery(ctx context.Context, interval time.Duration, changed func(mesh string)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		meshes, err := a.Refresh(ctx)
		if err != nil && ctx.Err() == nil {
			a.log.Error("reading the mesh CAs again failed; the CAs in use stay", "error", err)
		}
		for _, m := range meshes {
			changed(m)
		}
	}
}

func (a *Authority) refreshMesh(ctx context.Context, mesh string) (bool, error) {
	a.loadMu.Lock()
	defer a.loadMu.Unlock()
	cur, err := a.ca(mesh)
	if err != nil {
		return false, err
	}
	blobs, err := a.store.Get(ctx, mesh)
	if err != nil {
		return false, fmt.Errorf("ca: mesh %q: %w", mesh, err)
	}
	if blobsSum(blobs) == cur.blobsSum {
		return false, nil
	}
	c, err := a.buildCA(cur.mesh, blobs)
	if err != nil {
		return false, fmt.Errorf("ca: mesh %q: the store changed but does not load (the CA in use stays): %w", mesh, err)
	}
	a.mu.Lock()
	a.meshes[mesh] = c
	a.mu.Unlock()
	a.metrics.setCA(c, a.opts.MaxTTL)
	a.log.Info("ca changed", "mesh", mesh, "source", c.source, "signer", c.path[0].Subject.String(),
		"root_sha256", fingerprint(c.path[len(c.path)-1]), "roots", len(c.rootCerts), "rotation", c.rotation.phase())
	return true, nil
}

// RootInfo describes one root of a mesh's bundle.
type RootInfo struct {
	// Role is "signing" (the current CA's root), "next" (added, not yet
	// signing) or "previous" (signed before the switch, still trusted).
	Role     string    `json:"role"`
	SHA256   string    `json:"sha256"`
	Subject  string    `json:"subject"`
	NotAfter time.Time `json:"notAfter"`
}

// RotationStatus is where a mesh's root rotation stands.
type RotationStatus struct {
	Mesh  string `json:"mesh"`
	Phase string `json:"phase"`
	// Signer is the subject of the certificate that signs workload
	// certificates.
	Signer     string     `json:"signer"`
	Roots      []RootInfo `json:"roots"`
	AddedAt    time.Time  `json:"addedAt,omitzero"`
	SwitchedAt time.Time  `json:"switchedAt,omitzero"`
	// PreviousValidUntil is, after a switch, when the last certificate the
	// previous root signed expires at the latest (SwitchedAt + MaxTTL):
	// DropRoot refuses before it.
	PreviousValidUntil time.Time `json:"previousValidUntil,omitzero"`
	// Next says what the next step is.
	Next string `json:"next"`
}

// Rotation returns where mesh's root rotation stands, as loaded (Refresh
// reads the store again).
func (a *Authority) Rotation(mesh string) (RotationStatus, error) {
	c, err := a.ca(mesh)
	if err != nil {
		return RotationStatus{}, err
	}
	return c.status(a.opts.MaxTTL), nil
}

func (c *meshCA) status(maxTTL time.Duration) RotationStatus {
	r := c.rotation
	s := RotationStatus{Mesh: c.mesh.Name, Phase: r.phase(), Signer: c.path[0].Subject.String(), AddedAt: r.addedAt, SwitchedAt: r.switchedAt}
	signing := c.path[len(c.path)-1]
	for _, root := range c.rootCerts {
		role := "signing"
		switch {
		case root.Equal(signing):
		case slices.ContainsFunc(r.prevRoots, root.Equal):
			role = "previous"
		case r.next != nil && slices.ContainsFunc(r.next.rootCerts, root.Equal):
			role = "next"
		}
		s.Roots = append(s.Roots, RootInfo{Role: role, SHA256: fingerprint(root), Subject: root.Subject.String(), NotAfter: root.NotAfter})
	}
	switch s.Phase {
	case PhaseNone:
		s.Next = "nothing to do; to rotate: navectl roots add"
	case PhaseAdded:
		s.Next = "wait until every agent and spoke has the new bundle (ra.rootsRefresh), then: navectl roots switch"
	case PhaseSwitched:
		if !r.switchedAt.IsZero() {
			s.PreviousValidUntil = r.switchedAt.Add(maxTTL)
		}
		s.Next = "after previousValidUntil: navectl roots drop"
	}
	return s
}

// rotate runs one rotation step on mesh: step computes the blobs to store
// from those read (nil: nothing to do, with what to say), and they are
// stored if nobody changed the CA meanwhile (else read again). The result
// must load before it is stored. The Authority then uses it (Refresh).
func (a *Authority) rotate(ctx context.Context, mesh string, step func(m Mesh, blobs map[string][]byte) (map[string][]byte, string, error)) (string, error) {
	c, err := a.ca(mesh)
	if err != nil {
		return "", err
	}
	rep, ok := a.store.(Replacer)
	if !ok {
		return "", fmt.Errorf("ca: mesh %q: the CA store cannot change a CA", mesh)
	}
	for range 3 {
		blobs, err := a.store.Get(ctx, mesh)
		if err != nil {
			return "", fmt.Errorf("ca: mesh %q: %w", mesh, err)
		}
		next, msg, err := step(c.mesh, blobs)
		if err != nil {
			return "", fmt.Errorf("ca: mesh %q: %w", mesh, err)
		}
		if next != nil {
			if _, err := a.buildCA(c.mesh, next); err != nil {
				return "", fmt.Errorf("ca: mesh %q: the result would not load, nothing changed: %w", mesh, err)
			}
			err = rep.Replace(ctx, mesh, blobs, next)
			if errors.Is(err, ErrConflict) {
				continue
			}
			if err != nil {
				return "", fmt.Errorf("ca: mesh %q: %w", mesh, err)
			}
		}
		if _, err := a.refreshMesh(ctx, mesh); err != nil {
			return "", err
		}
		return msg, nil
	}
	return "", fmt.Errorf("ca: mesh %q: the CA kept changing while this step ran: try again", mesh)
}

// AddRoot is rotation step 1: it stores a new CA beside mesh's current
// one, whose roots join the mesh's bundle; the current CA keeps signing.
// cacerts is a plugged-in CA (Istio's cacerts: ca-cert.pem, ca-key.pem,
// cert-chain.pem, root-cert.pem); nil generates a root. Running it again
// with the same material (or again without, after generating) does
// nothing. It refuses while a previous root is still trusted (DropRoot
// first) and when another new CA was already added.
func (a *Authority) AddRoot(ctx context.Context, mesh string, cacerts map[string][]byte) (string, error) {
	for n := range cacerts {
		if !slices.Contains([]string{FileCACert, FileCAKey, FileCertChain, FileRootCert}, n) {
			return "", fmt.Errorf("ca: plugged-in CA: %s is not one of %s, %s, %s, %s", n, FileCACert, FileCAKey, FileCertChain, FileRootCert)
		}
	}
	return a.rotate(ctx, mesh, func(m Mesh, blobs map[string][]byte) (map[string][]byte, string, error) {
		if _, ok := blobs[FilePrevRootCert]; ok {
			return nil, "", fmt.Errorf("the previous root of the last rotation is still trusted (%s): drop it first (navectl roots drop)", FilePrevRootCert)
		}
		if cur := nextBlobs(blobs); cur != nil {
			_, generated := cur[FileRootKey]
			if (cacerts == nil && generated) || (cacerts != nil && sameBlobs(cur, cacerts)) {
				return nil, "the new root is already added; the next step is switch", nil
			}
			return nil, "", fmt.Errorf("another new CA is already added (%s*): switch to it, or remove those blobs to abandon it", NextPrefix)
		}
		add := cacerts
		if add == nil {
			certPEM, keyPEM, err := a.newRoot(m)
			if err != nil {
				return nil, "", fmt.Errorf("generate root: %w", err)
			}
			add = map[string][]byte{FileRootCert: certPEM, FileRootKey: keyPEM}
		} else if _, ok := add[FileCACert]; !ok {
			return nil, "", fmt.Errorf("plugged-in CA: %s is missing", FileCACert)
		}
		next := maps.Clone(blobs)
		for n, b := range add {
			next[NextPrefix+n] = b
		}
		next[FileRotationAdded] = timeBlob(a.opts.Now())
		delete(next, FileRotationSwitched)
		return next, "added a new root: the bundle holds the old and the new roots; the old CA still signs", nil
	})
}

// SwitchOptions configure SwitchRoot.
type SwitchOptions struct {
	// MinDistribution is how long after AddRoot the switch is allowed:
	// the time every agent and spoke needs to fetch the new bundle.
	MinDistribution time.Duration
	// Force switches earlier.
	Force bool
}

// SwitchRoot is rotation step 2: the CA AddRoot stored signs from now on,
// and the old roots stay in the bundle (FilePrevRootCert) so that the
// certificates they signed still verify. The old CA's key is discarded.
// Running it again does nothing. It refuses without a new CA, and before
// MinDistribution has passed since AddRoot unless forced.
func (a *Authority) SwitchRoot(ctx context.Context, mesh string, o SwitchOptions) (string, error) {
	return a.rotate(ctx, mesh, func(m Mesh, blobs map[string][]byte) (map[string][]byte, string, error) {
		add := nextBlobs(blobs)
		if add == nil {
			if _, ok := blobs[FilePrevRootCert]; ok {
				return nil, "already switched; the next step is drop", nil
			}
			return nil, "", errors.New("no new root was added: run navectl roots add first")
		}
		now := a.opts.Now()
		added, err := readTime(blobs, FileRotationAdded)
		if err != nil {
			return nil, "", err
		}
		if ready := added.Add(o.MinDistribution); !o.Force && now.Before(ready) {
			return nil, "", fmt.Errorf("the new root was added at %s: agents and spokes may not all hold it before %s (they fetch the bundle every ra.rootsRefresh); switch then, or force it",
				added.UTC().Format(time.RFC3339), ready.UTC().Format(time.RFC3339))
		}
		old, err := a.signingCA(m, blobs, sourceGenerated)
		if err != nil {
			return nil, "", err
		}
		next := map[string][]byte{}
		for n, b := range blobs {
			if !slices.Contains(caBlobNames, n) && !strings.HasPrefix(n, NextPrefix) {
				next[n] = b
			}
		}
		maps.Copy(next, add)
		next[FilePrevRootCert] = old.rootsPEM
		next[FileRotationSwitched] = timeBlob(now)
		return next, "switched: the new CA signs; the old roots stay trusted until drop", nil
	})
}

// DropRoot is rotation step 3: the previous roots leave the bundle. It
// refuses while a certificate they signed may still be valid (until the
// switch plus the longest lifetime the CA issues, MaxTTL) unless forced,
// and before the switch. A previous root that is also a root of the
// signing CA (a new intermediate under the same root) stays. Running it
// again does nothing.
func (a *Authority) DropRoot(ctx context.Context, mesh string, force bool) (string, error) {
	return a.rotate(ctx, mesh, func(m Mesh, blobs map[string][]byte) (map[string][]byte, string, error) {
		if _, ok := blobs[FilePrevRootCert]; !ok {
			if nextBlobs(blobs) != nil {
				return nil, "", errors.New("the new root does not sign yet: run navectl roots switch first (dropping now would strand every certificate in use)")
			}
			return nil, "no previous root to drop", nil
		}
		switched, err := readTime(blobs, FileRotationSwitched)
		if err != nil {
			return nil, "", err
		}
		if until := switched.Add(a.opts.MaxTTL); !force && a.opts.Now().Before(until) {
			return nil, "", fmt.Errorf("certificates the previous root signed may be valid until %s (switched at %s, certificates live up to %s): drop then, or force it",
				until.UTC().Format(time.RFC3339), switched.UTC().Format(time.RFC3339), a.opts.MaxTTL)
		}
		next := maps.Clone(blobs)
		delete(next, FilePrevRootCert)
		delete(next, FileRotationAdded)
		delete(next, FileRotationSwitched)
		return next, "dropped the previous root: the bundle holds the signing CA's roots only", nil
	})
}
