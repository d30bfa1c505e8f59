package replica

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/memberlist"
)

// LoadKeyring reads the gossip keyring from path (a mounted Secret): one
// base64-encoded AES key of 16, 24 or 32 bytes per line, the first the
// one used to encrypt (the others still decrypt, for key rotation); blank
// lines and lines starting with # are skipped. A member without one of
// these keys can neither read the gossip nor join.
func LoadKeyring(path string) (*memberlist.Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip keyring: %w", err)
	}
	return ParseKeyring(b, path)
}

// ParseKeyring parses LoadKeyring's format; name says where it came from
// in errors.
func ParseKeyring(b []byte, name string) (*memberlist.Keyring, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("gossip keyring %s line %d: not base64: %v", name, line, err)
		}
		switch len(k) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("gossip keyring %s line %d: key of %d bytes, want 16, 24 or 32 (AES-128, -192, -256)", name, line, len(k))
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("gossip keyring %s: %w", name, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("gossip keyring %s: holds no key (one base64 key per line; make one with: head -c 32 /dev/urandom | base64)", name)
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("gossip keyring %s: %w", name, err)
	}
	return kr, nil
}
