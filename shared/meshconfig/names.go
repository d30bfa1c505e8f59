package meshconfig

import (
	"fmt"
	"net/netip"
	"strings"
)

const (
	maxLabelLen    = 63
	maxSubdomain   = 253
	maxHostnameLen = 253
)

// isAlnumLower reports whether c is a lowercase letter or a digit.
func isAlnumLower(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

func isAlnum(c byte) bool { return isAlnumLower(c) || c >= 'A' && c <= 'Z' }

// dns1123Label checks a Kubernetes DNS-1123 label (a namespace, a subset
// name): lowercase letters, digits and '-', alphanumeric at both ends, at
// most 63 characters. It returns the reason s fails, or "".
func dns1123Label(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > maxLabelLen {
		return fmt.Sprintf("%q is %d characters, longer than %d", s, len(s), maxLabelLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnumLower(c) && c != '-' {
			return fmt.Sprintf("%q is not a DNS-1123 label: only lowercase letters, digits and '-' are allowed", s)
		}
	}
	if s[0] == '-' || s[len(s)-1] == '-' {
		return fmt.Sprintf("%q is not a DNS-1123 label: it must start and end with a letter or digit", s)
	}
	return ""
}

// dns1123Subdomain checks a Kubernetes DNS-1123 subdomain (an object
// name): labels as dns1123Label joined by '.', at most 253 characters.
func dns1123Subdomain(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > maxSubdomain {
		return fmt.Sprintf("%q is %d characters, longer than %d", s, len(s), maxSubdomain)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnumLower(c) && c != '-' && c != '.' {
			return fmt.Sprintf("%q is not a DNS-1123 subdomain: only lowercase letters, digits, '-' and '.' are allowed", s)
		}
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" || part[0] == '-' || part[len(part)-1] == '-' {
			return fmt.Sprintf("%q is not a DNS-1123 subdomain: each '.'-separated part must start and end with a letter or digit", s)
		}
	}
	return ""
}

// hostRules says where a host name is checked.
type hostRules struct {
	star bool // "*" alone is allowed
}

// checkHost checks a host name as Istio uses them: an FQDN or a short
// name, optionally prefixed "*.", or an IP address. No scheme, port or
// path. It returns the reason h fails, or "".
func checkHost(h string, rules hostRules) string {
	switch {
	case h == "":
		return "host must not be empty"
	case h == "*":
		if rules.star {
			return ""
		}
		return `the wildcard host "*" is not allowed here`
	case strings.ContainsAny(h, " \t\r\n"):
		return fmt.Sprintf("host %q must not contain spaces", h)
	case strings.Contains(h, "://"):
		return fmt.Sprintf("host %q must not contain a scheme", h)
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return ""
	}
	name := strings.TrimPrefix(h, "*.")
	switch {
	case strings.Contains(name, "*"):
		return fmt.Sprintf("host %q: a wildcard is only allowed as a whole first label (\"*.example.com\")", h)
	case strings.Contains(name, ":"):
		return fmt.Sprintf("host %q must not contain a port", h)
	case strings.Contains(name, "/"):
		return fmt.Sprintf("host %q must not contain a path or a namespace", h)
	case len(h) > maxHostnameLen:
		return fmt.Sprintf("host %q is %d characters, longer than %d", h, len(h), maxHostnameLen)
	}
	name = strings.TrimSuffix(name, ".")
	for _, label := range strings.Split(name, ".") {
		if reason := hostLabel(label); reason != "" {
			return fmt.Sprintf("host %q: %s", h, reason)
		}
	}
	return ""
}

func hostLabel(l string) string {
	if l == "" {
		return "empty label"
	}
	if len(l) > maxLabelLen {
		return fmt.Sprintf("label %q is %d characters, longer than %d", l, len(l), maxLabelLen)
	}
	for i := 0; i < len(l); i++ {
		if c := l[i]; !isAlnum(c) && c != '-' {
			return fmt.Sprintf("label %q: only letters, digits and '-' are allowed", l)
		}
	}
	if l[0] == '-' || l[len(l)-1] == '-' {
		return fmt.Sprintf("label %q must start and end with a letter or digit", l)
	}
	return ""
}

// checkNamespacedHost checks "namespace/host" as Sidecar egress and
// Gateway servers use it. The namespace part may be "*", "." or "~" (for
// Sidecar), or a namespace; the host part may be "*".
func checkNamespacedHost(h string, requireNamespace, allowTilde bool) string {
	ns, host, ok := strings.Cut(h, "/")
	if !ok {
		if requireNamespace {
			return fmt.Sprintf("host %q must have the form namespace/host (\"*/\", \"./\" or \"~/\" for any, this or no namespace)", h)
		}
		return checkHost(h, hostRules{star: true})
	}
	switch {
	case ns == "*" || ns == ".":
	case ns == "~" && allowTilde:
	default:
		if reason := dns1123Label(ns); reason != "" {
			return fmt.Sprintf("host %q: namespace %s", h, reason)
		}
	}
	return checkHost(host, hostRules{star: true})
}

// qualifiedName checks a Kubernetes label key: an optional DNS subdomain
// prefix and '/', then a name as labelValue but not empty.
func qualifiedName(k string) string {
	name := k
	if prefix, n, ok := strings.Cut(k, "/"); ok {
		if reason := dns1123Subdomain(prefix); reason != "" {
			return fmt.Sprintf("key %q: prefix %s", k, reason)
		}
		name = n
	}
	if name == "" {
		return fmt.Sprintf("key %q: name must not be empty", k)
	}
	if reason := labelChars(name); reason != "" {
		return fmt.Sprintf("key %q %s", k, reason)
	}
	return ""
}

// labelValue checks a Kubernetes label value: empty, or at most 63
// letters, digits, '-', '_' and '.', alphanumeric at both ends.
func labelValue(v string) string {
	if v == "" {
		return ""
	}
	if reason := labelChars(v); reason != "" {
		return fmt.Sprintf("%q %s", v, reason)
	}
	return ""
}

func labelChars(v string) string {
	if len(v) > maxLabelLen {
		return fmt.Sprintf("is %d characters, longer than %d", len(v), maxLabelLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return "may hold only letters, digits, '-', '_' and '.'"
		}
	}
	if !isAlnum(v[0]) || !isAlnum(v[len(v)-1]) {
		return "must start and end with a letter or digit"
	}
	return ""
}
