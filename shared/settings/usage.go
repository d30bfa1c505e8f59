package settings

import (
	"fmt"
	"io"
	"strings"
)

// writeUsage writes the --help text: how sources combine, then every key with its flag, type,
// environment variable, default and help, grouped by section.
func writeUsage(w io.Writer, program string, s *schema) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s [--config FILE] [--KEY=VALUE ...]\n\n", program)
	b.WriteString("Each key is read from, in order of precedence: its flag, its environment variable,\n")
	b.WriteString("the YAML config file, its default. Lists are comma separated in flags and env vars.\n\n")
	fmt.Fprintf(&b, "  --config FILE\n      YAML config file, keys nested by section (env %s)\n", configEnv)
	b.WriteString("  -h, --help\n      print this help and exit\n")
	for _, sec := range s.sections {
		if len(sec.fields) == 0 {
			continue
		}
		if sec.key != "" {
			fmt.Fprintf(&b, "\n%s:", sec.key)
			if sec.help != "" {
				fmt.Fprintf(&b, " %s", sec.help)
			}
			b.WriteString("\n")
		} else {
			b.WriteString("\n")
		}
		for _, f := range sec.fields {
			fmt.Fprintf(&b, "  --%s %s\n", f.flag, f.kind)
			if f.help != "" {
				fmt.Fprintf(&b, "      %s\n", f.help)
			}
			fmt.Fprintf(&b, "      key %s, env %s, default %s", f.key, f.env, usageDefault(f))
			if f.required {
				b.WriteString(", required")
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func usageDefault(f *field) string {
	if f.def == "" {
		return `""`
	}
	if f.kind == kindString || f.kind == kindStrings {
		return fmt.Sprintf("%q", f.def)
	}
	return f.def
}
