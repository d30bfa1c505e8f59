package remote

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	var body bytes.Buffer
	if err := v.snapshot().writeBody(&body); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body.Bytes())
	return append([]byte(hex.EncodeToString(sum[:])+"\n"), body.Bytes()...), nil
}

// Save writes the view to path atomically (mode 0600), as Encode returns
// it, streamed: a placeholder checksum line first, the body through a
// hash, then the checksum written over the placeholder before the file is
// synced and renamed into place. The view's file is several MB; building
// it whole, and again with its checksum in front, was most of a standby
// spoke's garbage.
func (v *View) Save(path string) error {
	s := v.snapshot()
	return atomicfile.WriteFunc(path, 0o600, func(f *os.File) error {
		if _, err := f.Write(checksumPlaceholder[:]); err != nil {
			return err
		}
		h := sha256.New()
		w := bufio.NewWriterSize(io.MultiWriter(f, h), 64<<10)
		if err := s.writeBody(w); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		_, err := f.WriteAt([]byte(hex.EncodeToString(h.Sum(nil))), 0)
		return err
	})
}

// checksumPlaceholder is the checksum line's room while the body is
// written: a SHA-256 in hex and the newline.
var checksumPlaceholder = func() (b [2*sha256.Size + 1]byte) {
	for i := range b {
		b[i] = '0'
	}
	b[len(b)-1] = '\n'
	return b
}()

// snapshot copies what the file holds out of the view: the resources
// sorted by type URL, then by their bytes, so that a view saves to the
// same file whatever order it was filled in. The resources' bytes are
// shared, not copied: the view replaces them, never changes them.
func (v *View) snapshot() *saved {
	v.mu.Lock()
	s := &saved{Format: fileFormat, Mesh: v.mesh, Cluster: v.cluster, SavedAt: time.Now().UTC()}
	n := 0
	for _, byName := range v.resources {
		n += len(byName)
	}
	if n > 0 {
		s.Resources = make([]savedEntry, 0, n)
	}
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
	return s
}

// writeBody writes s to w as json.Marshal would, one resource at a time
// (through one buffer): the body is never held whole.
func (s *saved) writeBody(w io.Writer) error {
	ew := &errWriter{w: w}
	head, err := json.Marshal(struct {
		Format  string    `json:"format"`
		Mesh    string    `json:"mesh"`
		Cluster string    `json:"cluster"`
		SavedAt time.Time `json:"savedAt"`
	}{s.Format, s.Mesh, s.Cluster, s.SavedAt})
	if err != nil {
		return err
	}
	ew.Write(head[:len(head)-1]) // the header's fields, without its closing brace
	if s.Resources == nil {
		ew.WriteString(`,"resources":null}`)
		return ew.err
	}
	ew.WriteString(`,"resources":[`)
	typeURL := ""
	var quotedType, data []byte
	for i, e := range s.Resources {
		if i > 0 {
			ew.WriteString(",")
		}
		if quotedType == nil || e.TypeURL != typeURL {
			if quotedType, err = json.Marshal(e.TypeURL); err != nil {
				return err
			}
			typeURL = e.TypeURL
		}
		ew.WriteString(`{"typeUrl":`)
		ew.Write(quotedType)
		ew.WriteString(`,"data":`)
		if e.Data == nil {
			ew.WriteString("null}")
			continue
		}
		data = base64.StdEncoding.AppendEncode(append(data[:0], '"'), e.Data)
		ew.Write(append(data, `"}`...))
	}
	ew.WriteString("]}")
	return ew.err
}

// errWriter keeps the first error of a sequence of writes, which then do
// nothing.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	var n int
	n, e.err = e.w.Write(b)
	return n, e.err
}

func (e *errWriter) WriteString(s string) {
	if e.err == nil {
		_, e.err = io.WriteString(e.w, s)
	}
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
