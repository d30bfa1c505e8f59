package settings

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// kind is one of the field types a config struct may use.
type kind int

const (
	kindString kind = iota
	kindBool
	kindInt
	kindInt64
	kindUint32
	kindFloat64
	kindDuration
	kindStrings
)

// String names the kind as the usage text and the reference show it.
func (k kind) String() string {
	switch k {
	case kindBool:
		return "bool"
	case kindInt:
		return "int"
	case kindInt64:
		return "int64"
	case kindUint32:
		return "uint32"
	case kindFloat64:
		return "float64"
	case kindDuration:
		return "duration"
	case kindStrings:
		return "[]string"
	default:
		return "string"
	}
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	keySegment   = regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
)

// field is one leaf key of a config struct.
type field struct {
	key      string // dotted camelCase key, "ingest.staleGracePeriod"
	flag     string // flag name without dashes, "ingest.stale-grace-period"
	env      string // "NAVE_INGEST_STALE_GRACE_PERIOD"
	kind     kind
	def      string // the default tag, as written
	help     string
	required bool
	index    []int // path from the root struct, for reflect.Value.FieldByIndex
}

// section is a nested struct; the root struct is a section with an empty key.
type section struct {
	key    string
	help   string
	index  []int
	fields []*field // the leaves directly in this struct
	// entries are the leaves and nested sections of this struct in declaration order; each
	// entry sets exactly one of its two fields.
	entries []entry
}

type entry struct {
	name  string // the key segment within this section
	field *field
	child *section
}

// schema is the parsed shape of a config struct type.
type schema struct {
	fields   []*field   // every leaf, in declaration order
	sections []*section // the root first, then nested sections in pre-order
}

// newSchema reads the tags of struct type t. Errors are mistakes in the program, not in user input.
func newSchema(t reflect.Type) (*schema, error) {
	if t == nil {
		return nil, fmt.Errorf("config must be a struct or a pointer to one, not nil")
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("config must be a struct or a pointer to one, not %s", t)
	}
	s := &schema{}
	if err := s.addSection(t, &section{}); err != nil {
		return nil, err
	}
	seen := map[string]string{}
	for _, f := range s.fields {
		for _, name := range []string{"key " + strings.ToLower(f.key), "flag " + f.flag, "env " + f.env} {
			if other, dup := seen[name]; dup {
				return nil, fmt.Errorf("keys %s and %s clash (%s)", other, f.key, name)
			}
			seen[name] = f.key
		}
		if f.flag == "config" || f.flag == "help" {
			return nil, fmt.Errorf("key %s: the name is reserved", f.key)
		}
	}
	return s, nil
}

func (s *schema) addSection(t reflect.Type, sec *section) error {
	s.sections = append(s.sections, sec)
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, tagged := sf.Tag.Lookup("key")
		if name == "-" {
			continue
		}
		if !tagged || !keySegment.MatchString(name) {
			return fmt.Errorf("field %s.%s: needs a camelCase `key` tag (or key:\"-\")", t, sf.Name)
		}
		key := joinKey(sec.key, name)
		index := append(append([]int(nil), sec.index...), i)
		if sf.Type.Kind() == reflect.Struct && sf.Type != durationType {
			child := &section{key: key, help: sf.Tag.Get("help"), index: index}
			sec.entries = append(sec.entries, entry{name: name, child: child})
			if err := s.addSection(sf.Type, child); err != nil {
				return err
			}
			continue
		}
		k, err := kindOf(sf.Type)
		if err != nil {
			return fmt.Errorf("key %s: %w", key, err)
		}
		f := &field{
			key:      key,
			flag:     flagName(key),
			env:      envName(key),
			kind:     k,
			def:      sf.Tag.Get("default"),
			help:     sf.Tag.Get("help"),
			required: sf.Tag.Get("required") == "true",
			index:    index,
		}
		if _, err := parse(k, f.def); err != nil {
			return fmt.Errorf("key %s: default tag: %w", key, err)
		}
		s.fields = append(s.fields, f)
		sec.fields = append(sec.fields, f)
		sec.entries = append(sec.entries, entry{name: name, field: f})
	}
	return nil
}

func kindOf(t reflect.Type) (kind, error) {
	if t == durationType {
		return kindDuration, nil
	}
	switch t.Kind() {
	case reflect.String:
		return kindString, nil
	case reflect.Bool:
		return kindBool, nil
	case reflect.Int:
		return kindInt, nil
	case reflect.Int64:
		return kindInt64, nil
	case reflect.Uint32:
		return kindUint32, nil
	case reflect.Float64:
		return kindFloat64, nil
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return kindStrings, nil
		}
	}
	return 0, fmt.Errorf("unsupported type %s", t)
}
