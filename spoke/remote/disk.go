package remote

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/navemesh/nave/shared/atomicfile"
	"github.com/navemesh/nave/shared/meshconfig"
)

// File is the name of the saved view in the spoke's state dir.
const File = "remote-view.json"

// fileFormat names the layout of the saved view.
const fileFormat = "nave-remote-view/1"

// saved is the file's body. The file is the body's SHA-256 (hex), a
// newline, then the body: a view cut short or edited does not verify.
type saved struct {
	Format    string       `json:"format"`
	Mesh      string       `json:"mesh"`
	Cluster   string       `json:"cluster"`
	SavedAt   time.Time    `json:"savedAt"`
	Resources []savedEntry `json:"resources"`
}

type savedEntry struct {
	TypeURL string `json:"typeUrl"`
	// Data is the discovery Resource as the hub sent it (protobuf).
	Data []byte `json:"data"`
}

// Encode returns the view as the file Save writes. Only a complete view
// is worth saving; Encode does not check.
func (v *View) Encode() ([]byte, error) {
	v.mu.Lock()
	s := saved{Format: fileFormat, Mesh: v.mesh, Cluster: v.cluster, SavedAt: time.Now().UTC()}
	for t, byName := range v.resources {
		for _, h := range byName {
			s.Resources = append(s.Resources, savedEntry{TypeURL: t, Data: h.wire})
		}
	}
	v.mu.Unlock()
	sort.Slice(s.Resources, func(i, j int) bool {
		return s.Resources[i].TypeURL < s.Resources[j].TypeURL ||
			s.Resources[i].TypeURL == s.Resources[j].TypeURL && bytes.Compare(s.Resources[i].Data, s.Resources[j].Data) < 0
	})
	body, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	return append([]byte(hex.EncodeToString(sum[:])+"\n"), body...), nil
}

// Save writes the view to path atomically (mode 0600).
func (v *View) Save(path string) error {
	b, err := v.Encode()
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600)
}

// ErrNoView is Load's error (wrapped) when there is no saved view.
var ErrNoView = errors.New("no saved remote view")

// Load reads a view Save wrote into an empty View. Everything is verified
// before anything is taken: the checksum, the format, the mesh and
// cluster, and every resource as if it came from the hub. On any error the
// view stays empty; the error names the file and what is wrong.
func (v *View) Load(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", path, ErrNoView)
	}
	if err != nil {
		return err
	}
	return v.decodeFile(path, b)
}

func (v *View) decodeFile(path string, b []byte) error {
	sumHex, body, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return fmt.Errorf("%s: no checksum line", path)
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != string(sumHex) {
		return fmt.Errorf("%s: checksum does not match its content (corrupted or cut short)", path)
	}
	var s saved
	if err := json.Unmarshal(body, &s); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if s.Format != fileFormat {
		return fmt.Errorf("%s: format %q, want %q", path, s.Format, fileFormat)
	}
	if s.Mesh != v.mesh || s.Cluster != v.cluster {
		return fmt.Errorf("%s: a view of %s/%s, and this spoke is %s/%s", path, s.Mesh, s.Cluster, v.mesh, v.cluster)
	}
	type entry struct {
		typeURL string
		name    string
		h       held
		d       decodedItem
	}
	var entries []entry
	for i, e := range s.Resources {
		var res discoveryv3.Resource
		if err := proto.Unmarshal(e.Data, &res); err != nil {
			return fmt.Errorf("%s: resource %d: %w", path, i, err)
		}
		kind, _ := meshconfig.KindByTypeURL(e.TypeURL)
		if kind == nil && !isWatchMessage(e.TypeURL) {
			return fmt.Errorf("%s: resource %q: type %s is not served on Watch", path, res.GetName(), e.TypeURL)
		}
		d, err := v.decode(e.TypeURL, kind, &res)
		if err != nil {
			return fmt.Errorf("%s: resource %q: %w", path, res.GetName(), err)
		}
		entries = append(entries, entry{e.TypeURL, res.GetName(), held{version: res.GetVersion(), wire: e.Data}, d})
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range entries {
		v.put(e.typeURL, e.name, e.h, e.d)
	}
	v.complete = true
	v.bump()
	v.updated = s.SavedAt
	return nil
}
