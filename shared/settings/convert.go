package settings

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// parse converts the text form of a value (a flag, an env var, a default tag, a scalar from the
// config file) to the Go value of kind k. The error text is the reason shown after the key.
func parse(k kind, text string) (any, error) {
	switch k {
	case kindString:
		return text, nil
	case kindBool:
		if text == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(text)
		if err != nil {
			return nil, fmt.Errorf("%q is not a boolean (true or false)", text)
		}
		return b, nil
	case kindInt, kindInt64:
		if text == "" {
			return int64(0), nil
		}
		bits := 64
		if k == kindInt {
			bits = strconv.IntSize
		}
		n, err := strconv.ParseInt(text, 10, bits)
		if err != nil {
			return nil, numberError(text, err, "an integer")
		}
		return n, nil
	case kindUint32:
		if text == "" {
			return uint64(0), nil
		}
		n, err := strconv.ParseUint(text, 10, 32)
		if err != nil {
			return nil, numberError(text, err, "a non-negative integer")
		}
		return n, nil
	case kindFloat64:
		if text == "" {
			return float64(0), nil
		}
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, numberError(text, err, "a number")
		}
		return f, nil
	case kindDuration:
		if text == "" {
			return time.Duration(0), nil
		}
		d, err := time.ParseDuration(text)
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration", text)
		}
		return d, nil
	case kindStrings:
		return splitList(text), nil
	}
	return nil, fmt.Errorf("unsupported kind %d", k)
}

func numberError(text string, err error, want string) error {
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("%q is out of range", text)
	}
	return fmt.Errorf("%q is not %s", text, want)
}

// splitList splits a comma separated list, trimming spaces and dropping empty items.
func splitList(text string) []string {
	out := []string{}
	for item := range strings.SplitSeq(text, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// fromRaw converts a value as viper holds it (a string from a flag or env var; a string,
// number, bool, list or mapping from the YAML file) to the Go value of kind k.
func fromRaw(k kind, raw any) (any, error) {
	if list, ok := raw.([]any); ok {
		if k != kindStrings {
			return nil, fmt.Errorf("must be a single %s, not a list", k)
		}
		out := make([]string, 0, len(list))
		for i, item := range list {
			text, err := scalarText(item)
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i, err)
			}
			out = append(out, text)
		}
		return out, nil
	}
	text, err := scalarText(raw)
	if err != nil {
		return nil, err
	}
	return parse(k, text)
}

// scalarText renders one scalar from the config file (or a flag or env var) as text.
func scalarText(raw any) (string, error) {
	switch v := raw.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case float32:
		return strconv.FormatFloat(float64(v), 'f', -1, 32), nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(v), nil
	case time.Time:
		return v.Format(time.RFC3339Nano), nil
	case map[string]any:
		return "", errors.New("must be a single value, not a mapping")
	default:
		return "", fmt.Errorf("unsupported value %v", raw)
	}
}

// set stores a value returned by parse or fromRaw into the struct field dst.
func set(dst reflect.Value, k kind, value any) {
	switch k {
	case kindString:
		dst.SetString(value.(string))
	case kindBool:
		dst.SetBool(value.(bool))
	case kindInt, kindInt64:
		dst.SetInt(value.(int64))
	case kindUint32:
		dst.SetUint(value.(uint64))
	case kindFloat64:
		dst.SetFloat(value.(float64))
	case kindDuration:
		dst.SetInt(int64(value.(time.Duration)))
	case kindStrings:
		dst.Set(reflect.ValueOf(value).Convert(dst.Type()))
	}
}
