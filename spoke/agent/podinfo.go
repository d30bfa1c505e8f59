package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// maxPodInfoBytes bounds a downward API file (Kubernetes allows 256 KiB
// of annotations).
const maxPodInfoBytes = 1 << 20

// ParsePodInfo parses a downward API file of labels or annotations: one
// key="value" per line, the value quoted as Go quotes strings. The error
// names the line and why it is not one.
func ParsePodInfo(data []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		key, quoted, ok := strings.Cut(string(line), "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("line %d: want key=\"value\"", i+1)
		}
		value, err := strconv.Unquote(quoted)
		if err != nil {
			return nil, fmt.Errorf("line %d (%s): the value is not a quoted string", i+1, key)
		}
		out[key] = value
	}
	return out, nil
}

// readPodInfo reads and parses a downward API file; a missing file is no
// entries.
func readPodInfo(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxPodInfoBytes+1)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if buf.Len() > maxPodInfoBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxPodInfoBytes)
	}
	m, err := ParsePodInfo(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
