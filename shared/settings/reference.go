package settings

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Entry describes one configuration key for a reference.
type Entry struct {
	Key      string // dotted camelCase key, "ingest.staleGracePeriod"
	Flag     string // "--ingest.stale-grace-period"
	Env      string // "NAVE_INGEST_STALE_GRACE_PERIOD"
	Type     string // string, bool, int, int64, uint32, float64, duration or []string
	Default  string // as written in the default tag
	Help     string
	Required bool
}

// Reference lists every key of cfg (a tagged config struct or a pointer to one), in
// declaration order. The defaults come from the tags, not from the values in cfg. It panics if
// cfg is not a well-tagged struct, naming program: that is a programming error that Load also
// reports.
func Reference(program string, cfg any) []Entry {
	s := mustSchema(program, cfg)
	out := make([]Entry, 0, len(s.fields))
	for _, f := range s.fields {
		out = append(out, Entry{
			Key:      f.key,
			Flag:     "--" + f.flag,
			Env:      f.env,
			Type:     f.kind.String(),
			Default:  f.def,
			Help:     f.help,
			Required: f.required,
		})
	}
	return out
}

// Markdown renders the reference of cfg as a Markdown section headed title: a table of the
// keys of each config section (key, type, default, flag, env var, description), then the whole
// default configuration as a commented YAML file. It panics like Reference.
func Markdown(title string, cfg any) string {
	s := mustSchema(title, cfg)
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n", title)
	for _, sec := range s.sections {
		if len(sec.fields) == 0 {
			continue
		}
		if sec.key == "" {
			b.WriteString("\n### Top-level keys\n\n")
		} else {
			fmt.Fprintf(&b, "\n### `%s`\n\n", sec.key)
			if sec.help != "" {
				fmt.Fprintf(&b, "%s.\n\n", upperFirst(mdCell(sec.help)))
			}
		}
		b.WriteString("| Key | Type | Default | Flag | Env | Description |\n")
		b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
		for _, f := range sec.fields {
			def := "*(empty)*"
			if f.def != "" {
				def = "`" + mdCell(f.def) + "`"
			}
			help := mdCell(f.help)
			if f.required {
				help += " (required)"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | `--%s` | `%s` | %s |\n",
				f.key, mdCell(f.kind.String()), def, f.flag, f.env, help)
		}
	}
	fmt.Fprintf(&b, "\n### Default configuration file\n\n```yaml\n%s```\n", defaultYAML(s))
	return b.String()
}

// defaultYAML renders every key at its default as a YAML document, each key under a comment
// holding its help.
func defaultYAML(s *schema) string {
	var b strings.Builder
	var walk func(sec *section, depth int)
	walk = func(sec *section, depth int) {
		indent := strings.Repeat("  ", depth)
		comment := func(help string) {
			if help != "" {
				fmt.Fprintf(&b, "%s# %s\n", indent, help)
			}
		}
		for _, e := range sec.entries {
			if e.field != nil {
				comment(e.field.help)
				fmt.Fprintf(&b, "%s%s: %s\n", indent, e.name, yamlValue(e.field))
				continue
			}
			comment(e.child.help)
			fmt.Fprintf(&b, "%s%s:\n", indent, e.name)
			walk(e.child, depth+1)
		}
	}
	walk(s.sections[0], 0)
	return b.String()
}

func yamlValue(f *field) string {
	switch f.kind {
	case kindString:
		return strconv.Quote(f.def)
	case kindStrings:
		items := splitList(f.def)
		for i, item := range items {
			items[i] = strconv.Quote(item)
		}
		return "[" + strings.Join(items, ", ") + "]"
	case kindDuration:
		if f.def == "" {
			return "0s"
		}
		return f.def
	case kindBool:
		if f.def == "" {
			return "false"
		}
		return f.def
	default:
		if f.def == "" {
			return "0"
		}
		return f.def
	}
}

// mdCell escapes text for a Markdown table cell.
func mdCell(text string) string {
	return strings.ReplaceAll(text, "|", `\|`)
}

func upperFirst(text string) string {
	if text == "" {
		return text
	}
	return strings.ToUpper(text[:1]) + text[1:]
}

func mustSchema(program string, cfg any) *schema {
	s, err := newSchema(reflect.TypeOf(cfg))
	if err != nil {
		panic(fmt.Sprintf("settings: config of %s: %v", program, err))
	}
	return s
}
