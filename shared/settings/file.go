package settings

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// checkFileKeys reports every key of the YAML document data that the schema does not know,
// spelled as the user wrote it, and every known section given a value that is not a mapping.
// Keys match case-insensitively, as viper reads them.
func checkFileKeys(s *schema, data []byte) error {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc == nil {
		return nil
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return errors.New("must be a YAML mapping of keys")
	}
	leaves := map[string]bool{}
	for _, f := range s.fields {
		leaves[strings.ToLower(f.key)] = true
	}
	sections := map[string]bool{}
	for _, sec := range s.sections {
		sections[strings.ToLower(sec.key)] = true
	}
	var problems []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			path := joinKey(prefix, k)
			lower := strings.ToLower(path)
			switch {
			case leaves[lower]:
			case sections[lower]:
				switch child := m[k].(type) {
				case map[string]any:
					walk(path, child)
				case nil:
				default:
					problems = append(problems, fmt.Sprintf("%q must be a mapping of keys", path))
				}
			default:
				problems = append(problems, unknownKey(s, path))
			}
		}
	}
	walk("", top)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// unknownKey words the error for an unknown key, suggesting a known key that shares its section.
func unknownKey(s *schema, path string) string {
	msg := fmt.Sprintf("unknown key %q", path)
	lower := strings.ToLower(path)
	parent := ""
	if i := strings.LastIndex(lower, "."); i >= 0 {
		parent = lower[:i]
	}
	var siblings []string
	for _, f := range s.fields {
		fl := strings.ToLower(f.key)
		fp := ""
		if i := strings.LastIndex(fl, "."); i >= 0 {
			fp = fl[:i]
		}
		if fp == parent && (strings.HasPrefix(fl, lower) || strings.HasPrefix(lower, fl)) {
			siblings = append(siblings, f.key)
		}
	}
	if len(siblings) == 1 {
		msg += fmt.Sprintf(" (did you mean %q?)", siblings[0])
	}
	return msg
}
