// Package settings loads a binary's typed configuration from, in order of precedence, command
// line flags, environment variables, a YAML file and the defaults written in struct tags, and
// renders the reference of every key for --help and for docs/config.md.
//
// A config struct tags each exported field:
//
//	type Ingest struct {
//		StaleGracePeriod time.Duration `key:"staleGracePeriod" default:"10m" help:"how long ..."`
//	}
//	type Config struct {
//		Ingest Ingest `key:"ingest" help:"ingestion of spoke state"`
//	}
//
// Nested structs form dotted keys ("ingest.staleGracePeriod"). From a key come its flag
// (--ingest.stale-grace-period), its environment variable (NAVE_INGEST_STALE_GRACE_PERIOD)
// and its place in the YAML file (ingest: {staleGracePeriod: 5m}). Field types: string, bool,
// int, int64, uint32, float64, time.Duration and []string (comma separated in flags and env).
// A field tagged required:"true" must not be empty, and any struct in the tree may have a
// Validate() error method, which returns errors built with Invalid.
//
// The package holds no state: every function may be called from many goroutines at once.
package settings

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// configEnv names the config file when --config is not given.
const configEnv = envPrefix + "CONFIG"

// Load fills cfg, a pointer to a tagged config struct, for the binary named program. It first
// sets every field to its default (whatever cfg held is overwritten), then applies the YAML file
// named by --config (or NAVE_CONFIG), then environment variables, then the flags in args (the
// command line without the program name, os.Args[1:]). It then checks required fields and
// calls the Validate methods of nested structs before their parents'.
//
// On -h or --help it writes the usage text to out and returns ErrHelp. A bad value returns a
// *KeyError naming the full key (several are joined with errors.Join); an unknown key in the
// file, a file that does not parse, an unknown flag or a stray argument return an error saying
// so. A cfg that is not a pointer to a well-tagged struct is a programming error, also returned.
func Load(program string, cfg any, args []string, out io.Writer) error {
	rv := reflect.ValueOf(cfg)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("settings: config of %s must be a non-nil pointer to a struct, not %T", program, cfg)
	}
	s, err := newSchema(rv.Type())
	if err != nil {
		return fmt.Errorf("settings: config of %s: %w", program, err)
	}
	l := &loader{schema: s, root: rv.Elem(), v: viper.New()}
	l.applyDefaults()

	l.flags = pflag.NewFlagSet(program, pflag.ContinueOnError)
	l.flags.SetOutput(io.Discard)
	l.flags.Usage = func() {}
	configFile := l.flags.String("config", "", "")
	help := l.flags.BoolP("help", "h", false, "")
	for _, f := range s.fields {
		// Every flag holds text; applySources parses it by the field's kind, so a bad value
		// gets the same message whichever source it came from.
		l.flags.String(f.flag, f.def, f.help)
		fl := l.flags.Lookup(f.flag)
		if f.kind == kindBool {
			fl.NoOptDefVal = "true"
		}
		if err := l.v.BindPFlag(f.key, fl); err != nil {
			return fmt.Errorf("settings: binding flag --%s: %w", f.flag, err)
		}
		if err := l.v.BindEnv(f.key, f.env); err != nil {
			return fmt.Errorf("settings: binding env %s: %w", f.env, err)
		}
	}
	if err := l.flags.Parse(args); err != nil {
		return fmt.Errorf("command line: %w", err)
	}
	if *help {
		if err := writeUsage(out, program, s); err != nil {
			return fmt.Errorf("writing usage: %w", err)
		}
		return ErrHelp
	}
	if l.flags.NArg() > 0 {
		return fmt.Errorf("command line: unexpected argument %q (values are given as --key=value)", l.flags.Arg(0))
	}

	l.file = *configFile
	if l.file == "" {
		l.file = os.Getenv(configEnv)
	}
	if l.file != "" {
		if err := l.readFile(); err != nil {
			return err
		}
	}
	if err := l.applySources(); err != nil {
		return err
	}
	if err := l.checkRequired(); err != nil {
		return err
	}
	return l.validate()
}

// loader holds the state of one Load call.
type loader struct {
	schema *schema
	root   reflect.Value // the config struct
	v      *viper.Viper
	flags  *pflag.FlagSet
	file   string // config file path, "" for none
}

func (l *loader) applyDefaults() {
	for _, f := range l.schema.fields {
		value, _ := parse(f.kind, f.def) // newSchema checked every default
		set(l.root.FieldByIndex(f.index), f.kind, value)
	}
}

func (l *loader) readFile() error {
	data, err := os.ReadFile(l.file)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	if err := checkFileKeys(l.schema, data); err != nil {
		return fmt.Errorf("config file %s: %w", l.file, err)
	}
	l.v.SetConfigType("yaml")
	if err := l.v.ReadConfig(bytes.NewReader(data)); err != nil {
		return fmt.Errorf("config file %s: %w", l.file, err)
	}
	return nil
}

// applySources overwrites the defaults with whatever the file, env or flags set, viper
// choosing the value of highest precedence.
func (l *loader) applySources() error {
	var errs []error
	for _, f := range l.schema.fields {
		if !l.v.IsSet(f.key) {
			continue
		}
		value, err := fromRaw(f.kind, l.v.Get(f.key))
		if err != nil {
			errs = append(errs, &KeyError{Key: f.key, Reason: err.Error(), Source: l.source(f)})
			continue
		}
		set(l.root.FieldByIndex(f.index), f.kind, value)
	}
	return errors.Join(errs...)
}

func (l *loader) checkRequired() error {
	var errs []error
	for _, f := range l.schema.fields {
		if f.required && l.root.FieldByIndex(f.index).IsZero() {
			errs = append(errs, &KeyError{Key: f.key, Reason: "is required and must not be empty", Source: l.source(f)})
		}
	}
	return errors.Join(errs...)
}

// validate calls every Validate method, children before parents, and reports all failures.
func (l *loader) validate() error {
	var errs []error
	for i := len(l.schema.sections) - 1; i >= 0; i-- {
		sec := l.schema.sections[i]
		validator, ok := l.root.FieldByIndex(sec.index).Addr().Interface().(interface{ Validate() error })
		if !ok {
			continue
		}
		if err := validator.Validate(); err != nil {
			err = withPrefix(sec.key, err)
			eachKeyError(err, func(ke *KeyError) {
				if f := l.fieldOf(ke.Key); f != nil && ke.Source == "" {
					ke.Source = l.source(f)
				}
			})
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l *loader) fieldOf(key string) *field {
	for _, f := range l.schema.fields {
		if f.key == key {
			return f
		}
	}
	return nil
}

// source says where the value of f came from, "" for its default.
func (l *loader) source(f *field) string {
	if fl := l.flags.Lookup(f.flag); fl != nil && fl.Changed {
		return "flag --" + f.flag
	}
	if value, ok := os.LookupEnv(f.env); ok && value != "" {
		return "env " + f.env
	}
	if l.file != "" && l.v.InConfig(f.key) {
		return "config file " + l.file
	}
	return ""
}

// eachKeyError calls fn on every KeyError in err, looking inside errors.Join.
func eachKeyError(err error, fn func(*KeyError)) {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			eachKeyError(e, fn)
		}
		return
	}
	var ke *KeyError
	if errors.As(err, &ke) {
		fn(ke)
	}
}
