package ca

import (
	"crypto/x509"
	"strings"
)

// generatedRootCN is the common name of every root an Authority generates.
const generatedRootCN = "nave mesh root CA"

// GeneratedRootMesh returns the mesh and trust domain a root was generated
// for, read from its subject, when an Authority generated it (Load, with
// no CA in the Store): "CN=nave mesh root CA, OU=mesh <mesh>,
// O=<trust domain>". For any other certificate, such as a plugged-in CA's
// root, it returns false: those name no trust domain nave can rely on.
//
// Load refuses a generated root for another trust domain than the one it
// was made for.
func GeneratedRootMesh(root *x509.Certificate) (mesh, trustDomain string, ok bool) {
	s := root.Subject
	if s.CommonName != generatedRootCN || len(s.Organization) != 1 || len(s.OrganizationalUnit) != 1 {
		return "", "", false
	}
	mesh, ok = strings.CutPrefix(s.OrganizationalUnit[0], "mesh ")
	if !ok || mesh == "" || !root.IsCA {
		return "", "", false
	}
	return mesh, s.Organization[0], true
}
