// Package hubconfig is the configuration of the nave-hub binary, loaded by settings.Load and
// documented in docs/config.md.
package hubconfig

import (
	"time"

	"github.com/navemesh/nave/shared/logging"
	"github.com/navemesh/nave/shared/settings"
)

// Program is the hub binary's name, as its usage text and the config reference show it.
const Program = "nave-hub"

// minMessageBytes is the least message size limit accepted for gRPC streams.
const minMessageBytes = 1024

// Config is the whole configuration of the hub. Like its sections it is a plain value, filled
// once at start-up: copy it freely; do not change one that goroutines share.
type Config struct {
	Log    logging.Config `key:"log" help:"logging"`
	Admin  Admin          `key:"admin" help:"the admin HTTP server: health probes, metrics and debug views"`
	Spokes Spokes         `key:"spokes" help:"the gRPC sync service that spokes dial to push their clusters' state"`
	XDS    XDS            `key:"xds" help:"the aggregated discovery service (ADS) that proxies dial"`
	Ingest Ingest         `key:"ingest" help:"how the hub keeps the state spokes push"`
	Push   Push           `key:"push" help:"how changes are batched before proxies are pushed"`
}

// Admin configures the admin HTTP server.
type Admin struct {
	Listen string `key:"listen" default:"127.0.0.1:15014" help:"host:port the admin HTTP server (metrics, health, debug) listens on"`
}

// Validate checks the listen address.
func (a *Admin) Validate() error { return settings.CheckHostPort("listen", a.Listen) }

// Spokes configures the gRPC sync service.
type Spokes struct {
	Listen          string `key:"listen" default:"127.0.0.1:15012" help:"host:port the gRPC sync service that spokes dial listens on"`
	MaxMessageBytes int    `key:"maxMessageBytes" default:"16777216" help:"largest gRPC message accepted from or sent to a spoke, in bytes"`
}

// Validate checks the listen address and the message size limit.
func (s *Spokes) Validate() error {
	if err := settings.CheckHostPort("listen", s.Listen); err != nil {
		return err
	}
	if s.MaxMessageBytes < minMessageBytes {
		return settings.Invalid("maxMessageBytes", "must be at least %d, got %d", minMessageBytes, s.MaxMessageBytes)
	}
	return nil
}

// XDS configures the discovery service proxies dial.
type XDS struct {
	Listen           string        `key:"listen" default:"127.0.0.1:15010" help:"host:port the ADS server that proxies dial listens on"`
	DefaultMesh      string        `key:"defaultMesh" default:"default" required:"true" help:"mesh of a proxy whose node metadata names none"`
	SendTimeout      time.Duration `key:"sendTimeout" default:"30s" help:"a proxy that does not read a response for this long (it stopped reading; flow control blocks) is disconnected, with a logged reason"`
	AdmissionRate    float64       `key:"admissionRate" default:"500" help:"new proxy streams served per second (0: unlimited); a connection storm is admitted in arrival order at this rate"`
	AdmissionBurst   int           `key:"admissionBurst" default:"100" help:"new proxy streams that may be admitted at once before admissionRate applies"`
	MaxInflightBytes int64         `key:"maxInflightBytes" default:"67108864" help:"bytes of responses of 64 KiB or more being sent at once across all proxies (gRPC holds a marshalled copy of each until written): bounds memory in connection storms; a larger response waits for room; -1 means unbounded"`
}

// Validate checks the listen address, the timeout and the admission limits.
func (x *XDS) Validate() error {
	if err := settings.CheckHostPort("listen", x.Listen); err != nil {
		return err
	}
	if x.SendTimeout <= 0 {
		return settings.Invalid("sendTimeout", "must be greater than 0, got %s", x.SendTimeout)
	}
	if x.AdmissionRate < 0 {
		return settings.Invalid("admissionRate", "must be 0 (unlimited) or more, got %g", x.AdmissionRate)
	}
	if x.MaxInflightBytes == 0 || x.MaxInflightBytes < -1 {
		return settings.Invalid("maxInflightBytes", "must be positive, or -1 for unbounded, got %d", x.MaxInflightBytes)
	}
	if x.AdmissionBurst < 1 {
		return settings.Invalid("admissionBurst", "must be at least 1, got %d", x.AdmissionBurst)
	}
	return nil
}

// Ingest configures how spoke state is kept.
type Ingest struct {
	StaleGracePeriod time.Duration `key:"staleGracePeriod" default:"10m" help:"how long a disconnected cluster's resources stay (marked stale) before they are withdrawn"`
}

// Validate checks the grace period is positive.
func (i *Ingest) Validate() error {
	if i.StaleGracePeriod <= 0 {
		return settings.Invalid("staleGracePeriod", "must be greater than 0, got %s", i.StaleGracePeriod)
	}
	return nil
}

// Push configures the debounce of config changes before pushes.
type Push struct {
	DebounceQuiet time.Duration `key:"debounceQuiet" default:"100ms" help:"push once no config change has arrived for this long"`
	DebounceMax   time.Duration `key:"debounceMax" default:"1s" help:"push at the latest this long after the first change of a batch, even if changes keep arriving"`
	Adaptive      bool          `key:"adaptive" default:"false" help:"do not rebuild a mesh no proxy is connected to (its debug views then lag); build it when one connects. Generation is lazy either way"`
	// VerifyIncremental is a test mode (invariant 6): see pushctx.Options.Verify.
	VerifyIncremental        bool `key:"verifyIncremental" default:"false" help:"test mode: also generate from scratch whatever is generated incrementally and log and count any difference (doubles generation cost)"`
	MaxConcurrentGenerations int  `key:"maxConcurrentGenerations" default:"0" help:"proxy generations run at once across all meshes (a connection storm or a mesh-wide change is generated in turns); 0 means one per CPU"`
}

// Validate checks quiet > 0 and max >= quiet.
func (p *Push) Validate() error {
	if p.DebounceQuiet <= 0 {
		return settings.Invalid("debounceQuiet", "must be greater than 0, got %s", p.DebounceQuiet)
	}
	if p.MaxConcurrentGenerations < 0 {
		return settings.Invalid("maxConcurrentGenerations", "must be 0 (one per CPU) or more, got %d", p.MaxConcurrentGenerations)
	}
	if p.DebounceMax < p.DebounceQuiet {
		return settings.Invalid("debounceMax", "must be at least debounceQuiet (%s), got %s", p.DebounceQuiet, p.DebounceMax)
	}
	return nil
}
