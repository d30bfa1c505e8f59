package settings

import (
	"strings"
	"unicode"
)

// envPrefix starts every environment variable name.
const envPrefix = "NAVE_"

// words splits one camelCase key segment into lowercase words: "maxMessageBytes" gives
// [max message bytes], "hubURLPath" gives [hub url path].
func words(segment string) []string {
	runes := []rune(segment)
	var out []string
	start := 0
	for i := 1; i < len(runes); i++ {
		prev, cur := runes[i-1], runes[i]
		if !unicode.IsUpper(cur) {
			continue
		}
		nextLower := i+1 < len(runes) && unicode.IsLower(runes[i+1])
		if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
			out = append(out, strings.ToLower(string(runes[start:i])))
			start = i
		}
	}
	return append(out, strings.ToLower(string(runes[start:])))
}

// flagName turns a dotted key into its flag name without dashes in front:
// "ingest.staleGracePeriod" gives "ingest.stale-grace-period".
func flagName(key string) string {
	segments := strings.Split(key, ".")
	for i, s := range segments {
		segments[i] = strings.Join(words(s), "-")
	}
	return strings.Join(segments, ".")
}

// EnvName is the environment variable of a dotted key:
// "ingest.staleGracePeriod" gives "NAVE_INGEST_STALE_GRACE_PERIOD". Programs
// that set another program's configuration by environment (the sidecar
// injector configuring nave-agent) name the variables with it.
func EnvName(key string) string { return envName(key) }

// envName turns a dotted key into its environment variable:
// "ingest.staleGracePeriod" gives "NAVE_INGEST_STALE_GRACE_PERIOD".
func envName(key string) string {
	var all []string
	for _, s := range strings.Split(key, ".") {
		all = append(all, words(s)...)
	}
	return envPrefix + strings.ToUpper(strings.Join(all, "_"))
}
